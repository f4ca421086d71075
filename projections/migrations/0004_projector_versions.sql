-- Beside each checkpoint: the projector version that built the read model
-- (a projector whose code changed gets a new version, and its read model is
-- rebuilt beside the live one), and what identifies the log it follows (the
-- stream's creation time and the id of the event at the checkpoint), so that
-- a log restored from an older backup, cut short, or recreated is noticed
-- instead of its new events, which reuse the sequence numbers, being skipped.
ALTER TABLE projector_checkpoints
    ADD COLUMN version        int  NOT NULL DEFAULT 1,
    ADD COLUMN stream_created text NOT NULL DEFAULT '',
    ADD COLUMN event_id       text NOT NULL DEFAULT '';
