// Package natslog is Astro's event log on NATS JetStream. It owns:
//   - the two event streams: ASTRO_HISTORY (holidays, resources,
//     workspaces; kept for good, purges denied) and ASTRO_INBOXES
//     (notifications; compacted and erased), each with its own sequence;
//   - the parked stream (ASTRO_PARKED), where projectors keep the events
//     they could not apply until a redrive;
//   - the KV buckets of aggregate snapshots (ASTRO_SNAPSHOTS) and of
//     erasures begun and not finished (ASTRO_ERASURES);
//   - the encoding of events as CloudEvents in binary mode (ce-* headers,
//     JSON data), appends with optimistic concurrency and de-duplication,
//     reads of an aggregate's events, scans and follows for consumers, and
//     the removal of events for good (erase.go).
//
// Contracts:
//   - Append takes one event: commands append a decision's events one at
//     a time (commands.Decide says why), so the log has no batch path.
//   - A retried append never appends twice and never reports a false
//     conflict: every event carries Nats-Msg-Id, and when the server answers
//     "wrong last sequence" Append looks for its own first event right after
//     the expected sequence before calling it a conflict. This matters
//     because a single-replica stream checks the expected sequence before it
//     checks the duplicate window.
//   - Reads see every acknowledged append: on a replicated stream they go to
//     the stream leader; direct gets, which any replica may answer, are used
//     only with a single replica.
//   - A removed event is gone from the files by the time EraseBefore says
//     so when it overwrites, or once JetStream drops its block otherwise
//     (erase.go says when that is soon enough).
package natslog
