-- Checkpoints: the last stream sequence each projector applied, written in
-- the same transaction as the projector's changes.
CREATE TABLE projector_checkpoints (
    name       text PRIMARY KEY,
    seq        bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Pending notifications. Deleted ones are gone: notifications are ephemeral,
-- and the log keeps their history.
CREATE TABLE notifications (
    workspace_id      text        NOT NULL,
    recipient_id      text        NOT NULL,
    id                uuid        NOT NULL,
    sender_id         text        NOT NULL,
    notification_type text        NOT NULL,
    subject           text        NOT NULL,
    message           text        NOT NULL,
    data              jsonb,
    create_date       timestamptz NOT NULL,
    read_date         timestamptz,
    seq               bigint      NOT NULL, -- log position: the delivery order
    PRIMARY KEY (workspace_id, recipient_id, id)
);

-- Newest first, and paging by the oldest of the previous page.
CREATE INDEX notifications_by_seq ON notifications (workspace_id, recipient_id, seq DESC);
-- The unread count reads only this small index.
CREATE INDEX notifications_unread ON notifications (workspace_id, recipient_id) WHERE read_date IS NULL;
