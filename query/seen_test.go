package query

import (
	"testing"
	"time"

	"astro/events"
)

func TestSeen(t *testing.T) {
	subject := func(ws, kind, id string) string { return events.Subject(ws, events.Aggregate{Kind: kind, ID: id}) }
	tests := []struct {
		name string
		// run delivers to s and returns the generation and position a
		// scope of w1 was read at
		run    func(s *Seen, other string) (gen, pos uint64)
		want   bool
		wantAt uint64
	}{
		{"nothing delivered yet", func(s *Seen, _ string) (uint64, uint64) { return s.Mark(), 0 }, false, 0},
		{"started", func(s *Seen, _ string) (uint64, uint64) { return s.Started(10, 4), 5 }, true, 10},
		{"a holiday's event went past", func(s *Seen, _ string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Delivered(g, subject("w1", events.KindHoliday, "h1"), 12, 5, true)
			return g, 5
		}, true, 12},
		{"another workspace's resource went past", func(s *Seen, other string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Delivered(g, subject(other, events.KindResource, "r1"), 12, 5, true)
			return g, 5
		}, true, 12},
		{"its resource went past after the scope was read", func(s *Seen, _ string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Delivered(g, subject("w1", events.KindResource, "r1"), 12, 5, true)
			return g, 11
		}, false, 0},
		{"its resource went past before the scope was read", func(s *Seen, _ string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Delivered(g, subject("w1", events.KindResource, "r1"), 12, 5, true)
			return g, 12
		}, true, 12},
		{"its erasure went past", func(s *Seen, _ string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Delivered(g, subject("w1", events.KindWorkspace, "w1"), 12, 5, true)
			return g, 11
		}, false, 0},
		{"a delivery was lost", func(s *Seen, _ string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Delivered(g, subject("w1", events.KindHoliday, "h1"), 12, 6, true)
			return g, 5
		}, false, 0},
		{"a redelivery is no loss", func(s *Seen, _ string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Delivered(g, subject("w1", events.KindHoliday, "h1"), 11, 5, true)
			s.Delivered(g, subject("w1", events.KindHoliday, "h1"), 11, 6, false)
			s.Delivered(g, subject("w1", events.KindHoliday, "h1"), 12, 6, true)
			return g, 5
		}, true, 12},
		{"deliveries stopped", func(s *Seen, _ string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Stopped()
			return g, 5
		}, false, 0},
		{"a scope of deliveries that stopped", func(s *Seen, _ string) (uint64, uint64) {
			g := s.Started(10, 4)
			s.Stopped()
			s.Started(10, 4)
			return g, 5
		}, false, 0},
		{"a late delivery of deliveries that stopped", func(s *Seen, _ string) (uint64, uint64) {
			old := s.Started(10, 4)
			s.Stopped()
			g := s.Started(10, 4)
			s.Delivered(old, subject("w1", events.KindResource, "r1"), 12, 5, true)
			return g, 5
		}, true, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewScopesSeen()
			other := "w2"
			for i := 3; s.slot(other) == s.slot("w1"); i++ {
				other = "w" + string(rune('0'+i))
			}
			gen, pos := tc.run(s, other)
			at, ok := s.unchanged("w1", gen, pos)
			if ok != tc.want || at != tc.wantAt {
				t.Fatalf("unchanged: %d %v, want %d %v", at, ok, tc.wantAt, tc.want)
			}
		})
	}
}

func TestSeenReach(t *testing.T) {
	s := NewScopesSeen()
	if s.reach(0, time.Second) {
		t.Fatal("reached a position before any delivery started")
	}
	g := s.Started(10, 0)
	if !s.reach(10, 0) {
		t.Fatal("did not reach where deliveries start")
	}
	go func() {
		for i := range uint64(2) {
			time.Sleep(time.Millisecond)
			s.Delivered(g, "astro.events.w1.holiday.h1", 11+i, 1+i, true)
		}
	}()
	if !s.reach(12, 10*time.Second) {
		t.Fatal("did not reach a position delivered while it waited")
	}
	if s.reach(13, 5*time.Millisecond) {
		t.Fatal("reached a position never delivered")
	}
	// Deliveries lag: until they get to 13, a reach does not wait.
	answered := make(chan bool)
	go func() { answered <- s.reach(14, time.Hour) }()
	select {
	case ok := <-answered:
		if ok {
			t.Fatal("reached a position never delivered")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a reach waited while deliveries lag behind one that gave up")
	}
	s.Delivered(g, "astro.events.w1.holiday.h1", 13, 3, true)
	go func() {
		time.Sleep(time.Millisecond)
		s.Delivered(g, "astro.events.w1.holiday.h1", 14, 4, true)
	}()
	if !s.reach(14, 10*time.Second) {
		t.Fatal("caught up, a reach did not wait for a position delivered while it waited")
	}
	s.Stopped()
	if s.reach(13, time.Minute) { // and at once: nothing will come
		t.Fatal("reached a position after deliveries stopped")
	}
}
