// Package natstest owns the NATS servers that tests use: a fresh in-process
// JetStream server per call, stored in the test's temp dir and shut down with
// the test.
package natstest

import (
	"testing"

	"astro/events/natsserver"

	"github.com/nats-io/nats.go"
)

// Server starts an in-process JetStream server (no TCP) with its store in
// t.TempDir, shut down when the test ends.
func Server(t testing.TB) *natsserver.Server {
	t.Helper()
	s, err := natsserver.Start(t.Context(), natsserver.Config{StoreDir: t.TempDir(), Listen: "off"})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Conn connects to a fresh Server; the connection is closed when the test
// ends, before the server shuts down.
func Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := Server(t).Connect()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
