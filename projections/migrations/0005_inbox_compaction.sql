-- What compaction needs to know of each inbox, kept beside its counts by
-- the notifications projector: how many events the inbox has had since
-- its last compaction, and the time of the oldest event the log holds for
-- it (its last compaction, or its first event since). The compactor reads
-- these once a poll with a scan: an index on a column every batch changes
-- would cost every write more than the scan costs.
ALTER TABLE notification_counts
    ADD COLUMN events int NOT NULL DEFAULT 0,
    ADD COLUMN oldest timestamptz;
