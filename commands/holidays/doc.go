// Package holidays decides the commands on holidays and on the resources
// (people) they apply to. A holiday is its own aggregate: only its reason
// can change after creation, and each rename records the old and the new
// reason so the history reads as an audit without replaying state.
// Resources are reference data owned by upstream services; each upsert that
// changes one is an event.
package holidays
