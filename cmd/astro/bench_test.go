package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"
)

// baselines measures, in the same run, a raw JetStream publish and a raw
// PostgreSQL round trip against the servers the service uses.
func baselines(b *testing.B, s *service, n int) (publish, roundTrip time.Duration) {
	b.Helper()
	nc, err := nats.Connect(s.env["ASTRO_NATS_URL"])
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	if _, err := js.AddStream(&nats.StreamConfig{Name: "BASELINE", Subjects: []string{"baseline.>"}}); err != nil {
		b.Fatal(err)
	}
	db, err := sqlx.Open("postgres", s.env["ASTRO_DATABASE_URL"])
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	for range n {
		if _, err := js.Publish("baseline.x", []byte(`{"notificationId":"x"}`)); err != nil {
			b.Fatal(err)
		}
	}
	publish = time.Since(start) / time.Duration(n)
	start = time.Now()
	for range n {
		var one int
		if err := db.GetContext(context.Background(), &one, `SELECT 1`); err != nil {
			b.Fatal(err)
		}
	}
	return publish, time.Since(start) / time.Duration(n)
}

func do(b *testing.B, s *service, method, path, tok, body string) {
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s %s: HTTP %d", method, path, resp.StatusCode)
	}
}

// BenchmarkHTTP: whole requests through the service (authentication,
// command, append, projection and read-your-writes for writes), as ratios
// to a raw JetStream publish and a raw PostgreSQL round trip.
func BenchmarkHTTP(b *testing.B) {
	s := startService(b)
	svc := sender(b, "w1")
	alice := token(b, "alice", "w1")
	send := `{"recipientId":"alice","senderId":"bob","notificationType":"task","subject":"s","message":"m"}`
	for range 50 {
		do(b, s, "POST", sendPath, svc, send)
	}
	cases := []struct{ name, method, path, tok, body string }{
		{"send", "POST", sendPath, svc, send},
		{"unreadcount", "GET", "/api/data/notifications/unreadcount", alice, ""},
		{"list", "GET", "/api/data/notifications?asFlatList=true", alice, ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			publish, roundTrip := baselines(b, s, max(b.N, 100))
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				do(b, s, c.method, c.path, c.tok, c.body)
			}
			per := time.Since(start) / time.Duration(b.N)
			b.ReportMetric(float64(per)/float64(publish), "x-raw-publish")
			b.ReportMetric(float64(per)/float64(roundTrip), "x-pg-roundtrip")
		})
	}
}
