// Package projections owns the read models in PostgreSQL and the only code
// that writes them: a Runner per projector consumes the event log through a
// durable JetStream consumer and applies events in batches, one transaction
// per batch, with the projector's checkpoint (the last applied stream
// sequence) stored in the same transaction. A restart resumes from the
// checkpoint; an event at or below it is skipped, so applying the log twice
// changes nothing.
//
// The schema is embedded SQL, applied in order by Migrate at start.
package projections
