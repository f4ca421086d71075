// Package api is Astro's HTTP layer: it authenticates callers, turns
// requests into commands and queries, and writes every answer, success or
// failure, in the public API's envelope. Application errors map to HTTP
// statuses in exactly one place (statusOf).
//
// httprouter v1 cannot hold a parameter segment beside static ones
// (/notifications/{id}/markread next to /notifications/markallread), so
// such paths share one route and dispatch on the segment's value.
package api
