// Package events owns Astro's event vocabulary: the envelope every event
// travels in, the payload of each event type with its schema version, the
// aggregates events belong to, and the log subjects they are stored under.
//
// It is the contract shared by the write side (commands), the read side
// (projections), audits and downstream consumers, so it imports only the
// standard library and changes only in backward-compatible ways: a payload
// change is a new Version, and Decode upcasts older versions.
package events
