package query

import "testing"

// TestPosCacheForget: after a forget no entry answers, by position or as
// Seen counts it, and a value read before it is not remembered.
func TestPosCacheForget(t *testing.T) {
	seen := NewInboxesSeen()
	gen := seen.Started(0, 0)
	seen.Delivered(gen, "inbox", 1, 1, true)
	c := newPosCache[int](8, seen)

	c.put("k", 1, 10, seenAs{gen: gen, exactTo: 1}, c.epoch())
	if v, ok := c.get("k", 1, gen); !ok || v != 10 {
		t.Fatalf("get before forget = %d, %v; want 10, true", v, ok)
	}
	if v, _, ok := c.current("k", "inbox"); !ok || v != 10 {
		t.Fatalf("current before forget = %d, %v; want 10, true", v, ok)
	}

	before := c.epoch() // a read under way as the redrive commits
	c.forget()
	if _, ok := c.get("k", 1, gen); ok {
		t.Error("get answers after forget")
	}
	if _, _, ok := c.current("k", "inbox"); ok {
		t.Error("current answers after forget")
	}
	c.put("k", 1, 10, seenAs{gen: gen, exactTo: 1}, before)
	if _, ok := c.get("k", 1, gen); ok {
		t.Error("a value read before the forget was remembered")
	}
	c.put("k", 1, 11, seenAs{gen: gen, exactTo: 1}, c.epoch())
	if v, ok := c.get("k", 1, gen); !ok || v != 11 {
		t.Errorf("get of a value read after forget = %d, %v; want 11, true", v, ok)
	}
}
