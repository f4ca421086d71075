package natslog

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
)

// ScanFrom places a scan in the log.
type ScanFrom struct {
	Seq  uint64    // first stream sequence to read; 0 with zero Time: from the start
	Time time.Time // first event stored at or after this time, when Seq is 0
}

// Scan calls fn for every event on subjects matching filter (wildcards
// allowed), in log order, from the given position up to the end of the log
// as it was when the scan began. It uses an ordered consumer: no state is
// left on the server.
func (l *Log) Scan(ctx context.Context, filter string, from ScanFrom, fn func(events.Event) error) error {
	return l.scan(ctx, filter, from, false, fn)
}

// Follow is Scan that does not stop at the end: it waits for new events
// until ctx ends.
func (l *Log) Follow(ctx context.Context, filter string, from ScanFrom, fn func(events.Event) error) error {
	return l.scan(ctx, filter, from, true, fn)
}

func (l *Log) scan(ctx context.Context, filter string, from ScanFrom, follow bool, fn func(events.Event) error) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case from.Seq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.Seq
	case !from.Time.IsZero():
		t := from.Time
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	cons, err := l.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("scan %s: %w", filter, err)
	}
	if !follow && cons.CachedInfo().NumPending == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("scan %s: %w", filter, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("scan %s: %w", filter, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("scan %s: %w", filter, err)
		}
		e, err := Decode(m.Subject(), m.Headers(), m.Data(), meta.Sequence.Stream)
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
		if !follow && meta.NumPending == 0 {
			return nil
		}
	}
}
