-- Each user's counts, kept by the notifications projector in the same
-- transaction as the rows they count: a count is one lookup, whatever the
-- number of notifications.
CREATE TABLE notification_counts (
    workspace_id text   NOT NULL,
    recipient_id text   NOT NULL,
    total        int    NOT NULL, -- pending
    unread       int    NOT NULL,
    seq          bigint NOT NULL, -- log position of the last inbox event applied
    PRIMARY KEY (workspace_id, recipient_id)
);

INSERT INTO notification_counts (workspace_id, recipient_id, total, unread, seq)
SELECT workspace_id, recipient_id, count(*), count(*) FILTER (WHERE read_date IS NULL), max(seq)
FROM notifications GROUP BY workspace_id, recipient_id;

-- Counts no longer scan: this index only cost writes.
DROP INDEX notifications_unread;
