package natslog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
)

// Scan calls fn for every event on subjects matching filter (wildcards
// allowed), in log order, from the given position up to the end of the log
// as it was when the scan began. It reads through an ordered consumer,
// which lives on the server while the scan runs and is deleted as it ends
// (see release).
func (l *Log) Scan(ctx context.Context, filter string, from events.ScanFrom, fn func(events.Event) error) error {
	return l.scan(ctx, filter, from, false, fn)
}

// ErrBothStreams is a filter that does not name an aggregate kind, and
// so spans both event streams, whose sequences are not one order.
var ErrBothStreams = errors.New("a position is in one stream: a filter that does not name an aggregate kind (inbox, holiday, resource, workspace) spans two streams, each with positions of its own")

// Follow is Scan that does not stop at the end: it waits for new events
// until ctx ends.
func (l *Log) Follow(ctx context.Context, filter string, from events.ScanFrom, fn func(events.Event) error) error {
	return l.scan(ctx, filter, from, true, fn)
}

// ReadAll calls fn for every event the log holds on subject, in order, up
// to the end of the log as it was when the read began. For a long history
// it is much faster than Read, which asks for one event at a time.
func (l *Log) ReadAll(ctx context.Context, subject string, fn func(events.Event) error) error {
	return scan(ctx, l.streamOf(subject), []string{subject}, events.ScanFrom{}, false, fn)
}

// ScanSubjects is Scan of several filters in one pass: their events in
// the one order of the stream that keeps them, so a reader can cut them
// all at one log position (a holiday's asOf). Each filter must name a kind
// and all of them kinds of one stream; they must not overlap.
func (l *Log) ScanSubjects(ctx context.Context, filters []string, from events.ScanFrom, fn func(events.Event) error) error {
	if len(filters) == 0 {
		return errors.New("scan: no filter")
	}
	st := l.streamOf(filters[0])
	for _, f := range filters {
		if subjectKind(f) == "" || l.streamOf(f) != st {
			return fmt.Errorf("scan %s: %w", strings.Join(filters, ", "), ErrBothStreams)
		}
	}
	return scan(ctx, st, filters, from, false, fn)
}

// ScanStream is Scan of every event of the stream that keeps events of
// kind, whatever their kind: the history stream's kinds in their one order.
func (l *Log) ScanStream(ctx context.Context, kind string, from events.ScanFrom, fn func(events.Event) error) error {
	st := l.history
	if kind == events.KindInbox {
		st = l.inboxes
	}
	return scan(ctx, st, []string{events.SubjectPrefix + ".>"}, from, false, fn)
}

func (l *Log) scan(ctx context.Context, filter string, from events.ScanFrom, follow bool, fn func(events.Event) error) error {
	return l.scanMessages(ctx, filter, from, follow, func(_ jetstream.Stream, m jetstream.Msg, seq uint64) error {
		return decodeTo(m, seq, fn)
	})
}

// Message is a stored message as a tail shows it: the stream that keeps
// it, and the event it holds, or Err (events.ErrMalformed) with the message as
// recorded when it holds none.
type Message struct {
	Stream  string
	Seq     uint64
	Subject string
	Header  nats.Header
	Data    []byte
	Event   events.Event // when Err is nil
	Err     error
}

// Tail is Scan, or Follow with follow, of every message on filter, events
// or not: a message that is no event is passed on with its Err, not ended
// on, so that one bad message does not hide the log after it from whoever
// looks at the log to find it. Readers that fold events keep to Scan,
// which stops there.
func (l *Log) Tail(ctx context.Context, filter string, from events.ScanFrom, follow bool, fn func(Message) error) error {
	return l.scanMessages(ctx, filter, from, follow, func(st jetstream.Stream, m jetstream.Msg, seq uint64) error {
		msg := Message{Stream: st.CachedInfo().Config.Name, Seq: seq, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		msg.Event, msg.Err = Decode(m.Subject(), m.Headers(), m.Data(), seq)
		return fn(msg)
	})
}

// scanMessages calls fn for every message on filter, from each stream the
// filter spans.
func (l *Log) scanMessages(ctx context.Context, filter string, from events.ScanFrom, follow bool, fn func(jetstream.Stream, jetstream.Msg, uint64) error) error {
	if subjectKind(filter) != "" {
		st := l.streamOf(filter)
		return scanMessages(ctx, st, []string{filter}, from, follow, func(m jetstream.Msg, seq uint64) error { return fn(st, m, seq) })
	}
	// A filter across both streams reads each in its own order: the
	// history's events, then the inboxes' (a scan), or both as they come
	// (a follow).
	if from.Seq > 0 {
		return fmt.Errorf("scan %s from sequence %d: %w", filter, from.Seq, ErrBothStreams)
	}
	if !follow {
		for _, st := range []jetstream.Stream{l.history, l.inboxes} {
			if err := scanMessages(ctx, st, []string{filter}, from, false, func(m jetstream.Msg, seq uint64) error { return fn(st, m, seq) }); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	errc := make(chan error, 2)
	for _, st := range []jetstream.Stream{l.history, l.inboxes} {
		go func() {
			err := scanMessages(ctx, st, []string{filter}, from, true, func(m jetstream.Msg, seq uint64) error {
				mu.Lock()
				defer mu.Unlock()
				return fn(st, m, seq)
			})
			cancel(err)
			errc <- err
		}()
	}
	<-errc
	<-errc
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

func scan(ctx context.Context, st jetstream.Stream, filters []string, from events.ScanFrom, follow bool, fn func(events.Event) error) error {
	return scanMessages(ctx, st, filters, from, follow, func(m jetstream.Msg, seq uint64) error { return decodeTo(m, seq, fn) })
}

// decodeTo passes the event m holds to fn, and fails on a message that is
// no event.
func decodeTo(m jetstream.Msg, seq uint64, fn func(events.Event) error) error {
	e, err := Decode(m.Subject(), m.Headers(), m.Data(), seq)
	if err != nil {
		return err
	}
	return fn(e)
}

func scanMessages(ctx context.Context, st jetstream.Stream, filters []string, from events.ScanFrom, follow bool, fn func(m jetstream.Msg, seq uint64) error) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case from.Seq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.Seq
	case !from.Time.IsZero():
		t := from.Time
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	err := each(ctx, st, cfg, follow, fn)
	if err != nil && !errors.Is(err, errStop) && ctx.Err() == nil {
		return fmt.Errorf("scan %s: %w", strings.Join(filters, ", "), err)
	}
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// errStop ends an each early, without error.
var errStop = errors.New("stop")

// each calls fn with every message an ordered consumer of cfg delivers, up
// to the end of the stream as it was when it began, or a little past (what
// was appended meanwhile may come too), or on, with follow.
func each(ctx context.Context, st jetstream.Stream, cfg jetstream.OrderedConsumerConfig, follow bool, fn func(m jetstream.Msg, seq uint64) error) error {
	cfg.InactiveThreshold = scanInactive
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	// Deferred first so it runs last, once the iterator has stopped
	// pulling from the consumer it deletes.
	defer release(st, cons)
	// The pending count is the server's, and a delete racing the
	// consumer's creation can leave it at none with a message still there
	// (see scanIdle): the stream says.
	if info := cons.CachedInfo(); !follow && info.NumPending == 0 {
		if more, err := remains(ctx, st, cfg.FilterSubjects, info.Delivered.Stream); !more || err != nil {
			return err
		}
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var opts []jetstream.NextOpt
	if !follow {
		opts = append(opts, jetstream.NextMaxWait(scanIdle))
	}
	// The stream sequence of the last message passed to fn; at first, the
	// one the consumer starts after (a scan from a time starts past
	// messages that remains would otherwise find).
	last := cons.CachedInfo().Delivered.Stream
	for {
		m, err := it.Next(opts...)
		if errors.Is(err, nats.ErrTimeout) {
			if more, err := remains(ctx, st, cfg.FilterSubjects, last); !more || err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		last = meta.Sequence.Stream
		if err := fn(m, last); err != nil {
			return err
		}
		if !follow && meta.NumPending == 0 {
			if more, err := remains(ctx, st, cfg.FilterSubjects, last); !more || err != nil {
				return err
			}
		}
	}
}

// The count of pending messages each delivery carries is kept by the
// server as it goes, and a delete racing the delivery can leave it one
// off either way: a scan that trusted it stopped one message short, or
// waited for a message that was never to come until its context ended (a
// read overlapping a compaction stalled 30 s). So a scan that is told it
// has everything checks with the stream, and one that waits longer than
// scanIdle for its next message checks whether one is still there.
const scanIdle = 250 * time.Millisecond

// remains reports whether st holds a message after last on one of filters
// (every subject when there are none).
func remains(ctx context.Context, st jetstream.Stream, filters []string, last uint64) (bool, error) {
	if len(filters) == 0 {
		filters = []string{">"}
	}
	for _, f := range filters {
		_, err := st.GetMsg(ctx, last+1, jetstream.WithGetMsgSubject(f))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, err
		}
	}
	return false, nil
}

// scanInactive is how long the server keeps a scan's consumer that no one
// pulls from: the backstop for a release that did not happen (connection
// lost, process gone). nats.go's default, 5 minutes, let reads that users
// drive pile consumers up on the server. The server counts a consumer
// with a pull request waiting as active, and the iterator keeps one
// waiting until its buffer (500 messages) is full, so only a callback
// that stalls this long on a full buffer loses the consumer; the ordered
// consumer then notices a missed heartbeat (10 s) and makes a new one
// after the last message it returned, so that scan is slower, still
// complete (checked with a 1 s threshold: 1,200 events, a 3 s stall,
// every event in order, 10 s late).
const scanInactive = 30 * time.Second

// releaseTimeout bounds the delete of a scan's consumer.
const releaseTimeout = 5 * time.Second

// release deletes the server-side consumer an ordered consumer reads
// through, which stopping its iterator does not. The name comes from the
// info, not the creation, since a reset replaces the consumer under a new
// name (nats.go deletes the replaced ones itself). The delete runs in the
// background because on a cluster it is a meta-leader commit the caller,
// often serving a request, need not wait for. It cannot outlive the
// connection for long: it is bounded by releaseTimeout, and on a closed
// or draining connection nats.go fails it at once, without panicking. A
// failure is left to scanInactive.
func release(st jetstream.Stream, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = st.DeleteConsumer(ctx, info.Name)
	}()
}
