package natslog

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
)

// Headers a parked event carries beside its own.
const (
	HeaderParkedReason  = "Astro-Parked-Reason"
	HeaderParkedSeq     = "Astro-Parked-Seq"     // its sequence in the event stream
	HeaderParkedSubject = "Astro-Parked-Subject" // its subject in the event stream
)

// parkedPrefix roots the parked stream's subjects, one per projector.
const parkedPrefix = "astro.parked."

// ParkedSubject is where a projector's parked events go.
func ParkedSubject(projector string) string { return parkedPrefix + projector }

// Parked is an event a projector could not apply, kept for a redrive.
type Parked struct {
	ParkSeq   uint64 // sequence in the parked stream
	Projector string
	Seq       uint64 // sequence in the event stream
	Subject   string
	Reason    string
	ParkedAt  time.Time
	Header    nats.Header
	Data      []byte
}

// Event decodes the parked event.
func (p Parked) Event() (events.Event, error) { return Decode(p.Subject, p.Header, p.Data, p.Seq) }

// Park keeps a message of the event stream that projector could not apply.
// Parking the same event twice keeps it once within the duplicate window
// (a redrive applies one copy of any kept twice). It returns once the park is
// as durable as an append (Config.Sync): the projector's checkpoint then
// moves past the event, and a park lost in a power loss would lose it.
func (l *Log) Park(ctx context.Context, projector, subject string, h nats.Header, data []byte, seq uint64, reason string) error {
	m := nats.NewMsg(ParkedSubject(projector))
	for k, v := range h {
		// The server's own headers stay behind: the stored event keeps what
		// its append expected of the event stream (AppendAt's
		// Nats-Expected-Last-Sequence), which the parked stream would check
		// against itself and refuse, and the runner would retry the park
		// forever with the projector stopped.
		if len(k) < 5 || !strings.EqualFold(k[:5], "Nats-") {
			m.Header[k] = v
		}
	}
	if len(reason) > 1000 {
		reason = reason[:1000]
	}
	m.Header.Set(HeaderParkedReason, reason)
	m.Header.Set(HeaderParkedSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(HeaderParkedSubject, subject)
	m.Header.Set(nats.MsgIdHdr, projector+":"+strconv.FormatUint(seq, 10))
	m.Data = data
	if _, err := l.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("park seq %d for %s: %w", seq, projector, err)
	}
	// A duplicate too: the attempt that parked it may not have been synced.
	if err := l.sync(ctx); err != nil {
		return fmt.Errorf("park seq %d for %s: %w", seq, projector, err)
	}
	return nil
}

// ListParked calls fn for each parked event of projector ("" for every
// projector), oldest first.
func (l *Log) ListParked(ctx context.Context, projector string, fn func(Parked) error) error {
	filter := parkedPrefix + ">"
	if projector != "" {
		filter = ParkedSubject(projector)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}
	var stopped error // fn's, passed on as it is
	err := each(ctx, l.parked, cfg, false, func(m jetstream.Msg, parkSeq uint64) error {
		h := m.Headers()
		seq, _ := strconv.ParseUint(h.Get(HeaderParkedSeq), 10, 64)
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		stopped = fn(Parked{ParkSeq: parkSeq, Projector: strings.TrimPrefix(m.Subject(), parkedPrefix), Seq: seq,
			Subject: h.Get(HeaderParkedSubject), Reason: h.Get(HeaderParkedReason), ParkedAt: meta.Timestamp, Header: h, Data: m.Data()})
		return stopped
	})
	switch {
	case stopped != nil:
		return stopped
	case err != nil && ctx.Err() == nil:
		return fmt.Errorf("read parked: %w", err)
	}
	return err
}

// Unpark removes a parked event once it has been applied, overwriting
// it: a plain delete leaves its content in the block, where a later
// erasure, which lists only what is still parked, cannot find it.
func (l *Log) Unpark(ctx context.Context, parkSeq uint64) error {
	if err := remove(ctx, l.parked, parkSeq, true); err != nil {
		return fmt.Errorf("unpark %d: %w", parkSeq, err)
	}
	return nil
}
