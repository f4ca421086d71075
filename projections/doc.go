// Package projections owns the read models in PostgreSQL and the only code
// that writes them: a Runner per projector consumes the event log through a
// durable JetStream consumer and applies events in batches, one transaction
// per batch, with the projector's checkpoint (the last applied stream
// sequence) stored in the same transaction. A restart resumes from the
// checkpoint; an event at or below it is skipped, so applying the log twice
// changes nothing.
//
// Rebuild builds a new version of a read model beside the live one, in a
// schema of its own, compares the two at the same log position and switches
// them in one transaction. Beside each checkpoint are the projector's
// version and the log's identity: a runner rebuilds at start when its
// projector's version is newer, and when the log no longer holds the
// history the read model was made from (restored from an older backup, cut
// short, recreated), instead of skipping the events that reuse its sequence
// numbers.
//
// The schema is embedded SQL, applied in order by Migrate at start.
package projections
