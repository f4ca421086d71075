package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkStreams: how many notification streams one instance holds, what
// each costs in memory, and how soon after a write's answer its event is on
// the recipient's stream. The program runs as its own process, with its
// embedded JetStream server as `go run ./cmd/astro` runs it, so that the
// memory is the program's alone: the growth of its resident memory from
// before the streams to after, per stream. The delay is measured with every
// stream open, one send at a time to a different user, against the send's
// own round trip in the same run. It takes a minute, so run it alone:
//
//	go test -run '^$' -bench Streams -benchtime 1x ./cmd/astro
func BenchmarkStreams(b *testing.B) {
	const streams, workers, sends = 10_000, 32, 500
	p := startProgram(b, workers, "ASTRO_STREAMS_MAX="+strconv.Itoa(streams))
	base, client, logs := p.base, p.client, p.logs
	rss := func() float64 { return p.memoryKB(b, "VmRSS") }
	send := func(user int) (string, time.Duration) {
		body := fmt.Sprintf(`{"recipientId":"user-%d","senderId":"0000b0b0-0000-4000-8000-000000000001","notificationType":"task","subject":"Task","message":"A task"}`, user)
		req, _ := http.NewRequest("POST", base+sendPath, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+sender(b, "w1"))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != 200 {
			b.Fatalf("send: HTTP %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Astro-Position"), took
	}
	// Every user has a notification, so a stream starts from a real inbox.
	for u := range streams {
		send(u)
	}

	type arrival struct {
		id string // a position, sealed as the write's answer has it
		at time.Time
	}
	arrivals := make(chan arrival, 1024)
	streamClient := &http.Client{Transport: &http.Transport{}}
	open := func(u int) {
		req, _ := http.NewRequest("GET", base+streamPath, nil)
		req.Header.Set("Authorization", "Bearer "+token(b, fmt.Sprint("user-", u), "w1"))
		resp, err := streamClient.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		if resp.StatusCode != 200 {
			b.Errorf("stream %d: HTTP %d", u, resp.StatusCode)
			resp.Body.Close()
			return
		}
		rd := bufio.NewReaderSize(resp.Body, 1024)
		snapshot := make(chan struct{})
		var got atomic.Bool
		go func() {
			defer resp.Body.Close()
			defer func() {
				if !got.Load() {
					close(snapshot)
				}
			}()
			var id string
			var name string
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimRight(line, "\n")
				switch {
				case strings.HasPrefix(line, "id: "):
					id = line[4:]
				case strings.HasPrefix(line, "event: "):
					name = line[7:]
				case line == "" && name == "snapshot":
					got.Store(true)
					close(snapshot)
					name = ""
				case line == "" && name == "notification":
					arrivals <- arrival{id, time.Now()}
					name = ""
				}
			}
		}()
		select {
		case <-snapshot:
			if !got.Load() {
				b.Errorf("stream %d ended before its snapshot\n%s", u, logs.String())
			}
		case <-time.After(30 * time.Second):
			b.Errorf("stream %d: no snapshot within 30 s", u)
		}
	}

	before := rss()
	start := time.Now()
	parallel(b, workers, streams, open)
	if b.Failed() {
		b.FailNow()
	}
	opened := time.Since(start)
	held := rss()
	b.Logf("%d streams open in %v; RSS %.0f MB before, %.0f MB after", streams, opened.Round(time.Millisecond), before/1024, held/1024)

	var delays, fromStart, trips []time.Duration
	for i := range sends {
		pos, took := send(i * 7919 % streams)
		answered := time.Now()
		for {
			var a arrival
			select {
			case a = <-arrivals:
			case <-time.After(30 * time.Second):
				b.Fatalf("send %d (position %s): no event on its stream within 30 s\n%s", i, pos, logs.String())
			}
			if a.id == pos {
				// An event can beat the answer's last bytes: no delay then.
				delays = append(delays, max(0, a.at.Sub(answered)))
				fromStart = append(fromStart, a.at.Sub(answered.Add(-took)))
				break
			}
		}
		trips = append(trips, took)
	}
	slices.Sort(fromStart)
	slices.Sort(delays)
	slices.Sort(trips)
	pct := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	send50 := pct(trips, 0.5)
	b.ReportMetric(float64(streams), "streams")
	b.ReportMetric((held-before)/streams, "KB/stream")
	b.ReportMetric(float64(opened.Microseconds())/streams/1000, "ms-open/stream")
	b.ReportMetric(float64(pct(delays, 0.5).Microseconds())/1000, "delay-p50-ms")
	b.ReportMetric(float64(pct(delays, 0.99).Microseconds())/1000, "delay-p99-ms")
	b.ReportMetric(float64(pct(delays, 0.5))/float64(send50), "delay-p50-x-send")
	b.ReportMetric(float64(pct(delays, 0.99))/float64(send50), "delay-p99-x-send")
	b.ReportMetric(float64(send50.Microseconds())/1000, "send-p50-ms")
	// From the write's request instead: the whole path, as a share of the
	// write's own round trip.
	b.ReportMetric(float64(pct(fromStart, 0.5))/float64(send50), "from-request-p50-x-send")
	b.ReportMetric(float64(pct(fromStart, 0.99))/float64(send50), "from-request-p99-x-send")
}
