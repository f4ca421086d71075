package projections

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// delivery is a delivered message as contiguous sees it: its metadata.
type delivery struct {
	jetstream.Msg // nil: only Metadata is called
	dseq, sseq    uint64
	count         uint64
}

func (d delivery) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Consumer: d.dseq, Stream: d.sseq}, NumDelivered: d.count}, nil
}

func TestContiguousCutsAtALostDelivery(t *testing.T) {
	for _, c := range []struct {
		name      string
		after     uint64 // delivered before the batch
		batch     []delivery
		keep      int
		delivered uint64
		gap       bool
	}{
		{"in order", 4, []delivery{{dseq: 5, sseq: 10, count: 1}, {dseq: 6, sseq: 12, count: 1}}, 2, 6, false},
		{"first of a new consumer", 0, []delivery{{dseq: 1, sseq: 554, count: 1}}, 1, 1, false},
		{"lost before the batch", 4, []delivery{{dseq: 6, sseq: 555, count: 1}}, 0, 4, true},
		{"lost inside the batch", 4, []delivery{{dseq: 5, sseq: 553, count: 1}, {dseq: 7, sseq: 555, count: 1}, {dseq: 8, sseq: 556, count: 1}}, 1, 5, true},
		{"a redelivery", 6, []delivery{{dseq: 3, sseq: 550, count: 2}, {dseq: 7, sseq: 556, count: 1}}, 2, 7, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			batch := make([]jetstream.Msg, len(c.batch))
			for i, d := range c.batch {
				batch[i] = d
			}
			kept, delivered, err := contiguous(batch, c.after)
			if len(kept) != c.keep || delivered != c.delivered || (err != nil) != c.gap {
				t.Fatalf("kept %d, delivered %d, err %v; want %d, %d, gap %v", len(kept), delivered, err, c.keep, c.delivered, c.gap)
			}
		})
	}
}
