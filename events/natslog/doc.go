// Package natslog is Astro's event log on NATS JetStream: it creates the
// streams, encodes events as CloudEvents in binary mode (ce-* headers, JSON
// data), appends them with optimistic concurrency and de-duplication, reads
// an aggregate's events back, and keeps aggregate snapshots in a KV bucket.
//
// Contracts:
//   - Append takes one event, or several as one atomic batch (all or
//     none). Commands append one event at a time (commands.Decide says
//     why); the batch is there for a caller that needs several events to
//     land together, and is tested as such.
//   - A retried append never appends twice and never reports a false
//     conflict: every event carries Nats-Msg-Id, and when the server answers
//     "wrong last sequence" Append looks for its own first event right after
//     the expected sequence before calling it a conflict. This matters
//     because a single-replica stream checks the expected sequence before it
//     checks the duplicate window.
//   - Reads see every acknowledged append: on a replicated stream they go to
//     the stream leader; direct gets, which any replica may answer, are used
//     only with a single replica.
package natslog
