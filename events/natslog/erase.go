package natslog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"astro/events"
)

// Erasing. JetStream removes a message in one of two ways. An erase (a
// secure delete) overwrites it in place, at once; but it rewrites the
// whole block file the message is in (8 MiB, so 7 to 16 ms each, about a
// hundred a second), so it cannot keep up with a busy log. A plain delete
// or purge only marks the message gone: its bytes stay in the block file
// until JetStream drops the block (when every message in it is gone) or
// rewrites it (when more than half is). Compaction makes the second as
// sure as the first on a busy log: every inbox is compacted once its
// oldest event is older than a set age, so every block written before
// that age holds only removed messages and is dropped. Only the block
// being written escapes that, and on a busy log it fills and is closed
// within minutes; on a quiet one it may stay open for days, and there the
// few erases needed are cheap. Turnover tells the two apart.
//
// Every removal returns once it is as durable as an append (Config.Sync),
// whatever it found to remove: what an earlier attempt removed before it
// stopped is made durable too. An erasure closes its entry in the ledger
// after its removals, and a removal lost in a power loss after that would
// bring erased content back with nothing left to erase it again.

// BlockBytes is the size of a block of an event stream: nats-server's
// block size for a file stream with no byte limit.
const BlockBytes = 8 << 20

// contentTypes are the event types that carry what a person wrote.
var contentTypes = map[string]bool{
	events.NotificationSent{}.EventType(): true,
	events.InboxCompacted{}.EventType():   true,
}

// EraseBefore removes every event on subject (wildcards allowed in the id
// token) with a sequence below before, or every event when before is 0.
// With overwrite, whatever carries content (and, on the history, every
// event) is erased, overwritten in place; without, it is purged, and gone
// from the files when its block is (see Turnover). It returns how many
// events it removed. An event already gone is no error, so an erasure cut
// short is finished by running it again.
func (l *Log) EraseBefore(ctx context.Context, subject string, before uint64, overwrite bool) (int, error) {
	return l.EraseBeforeKeeping(ctx, subject, before, overwrite, nil)
}

// EraseBeforeKeeping is EraseBefore that leaves the events whose type is
// one of keep where they are: a record that must outlive what it erased,
// such as an earlier erasure's.
func (l *Log) EraseBeforeKeeping(ctx context.Context, subject string, before uint64, overwrite bool, keep []string) (int, error) {
	st := l.streamOf(subject)
	// The history denies purges: every one of its events is erased.
	purge := st == l.inboxes
	var erase, plain []uint64
	kept := false
	err := l.headers(ctx, st, subject, before, func(seq uint64, typ string) {
		switch {
		case slices.Contains(keep, typ):
			kept = true
		case purge && (!overwrite || !contentTypes[typ]):
			plain = append(plain, seq)
		default:
			erase = append(erase, seq)
		}
	})
	if err != nil {
		return 0, fmt.Errorf("erase %s: %w", subject, err)
	}
	if err := l.eraseAll(ctx, st, erase); err != nil {
		return 0, fmt.Errorf("erase %s: %w", subject, err)
	}
	if kept {
		// A purge of the subject would take the kept events too: the
		// others are deleted one by one, which leaves their bytes as a
		// purge does.
		for _, seq := range plain {
			if err := remove(ctx, st, seq, false); err != nil {
				return len(erase), fmt.Errorf("erase %s: seq %d: %w", subject, seq, err)
			}
		}
	} else if len(plain) > 0 {
		opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(subject)}
		if before > 0 {
			opts = append(opts, jetstream.WithPurgeSequence(before))
		}
		if err := st.Purge(ctx, opts...); err != nil {
			return len(erase), fmt.Errorf("erase %s: purge: %w", subject, err)
		}
	}
	if err := l.sync(ctx); err != nil {
		return len(erase), fmt.Errorf("erase %s: %w", subject, err)
	}
	return len(erase) + len(plain), nil
}

// EraseSubjects erases every event of each of subjects, overwriting each,
// until they hold none, and returns how many it removed. A command decided
// on state read before the erasure expects its subject's last event and
// appends while it finds it, so events land while this runs, and it goes
// on until the subjects are empty: then only a command that expects no
// event at all can append. A subject's first event goes first: it is what
// makes an aggregate exist, and once it is gone a command that reloads
// the state finds none. Then its last: a command that expected it
// conflicts and reloads, where it would otherwise go on appending. The
// rest go from the last back, in rounds that take one event of every
// subject, so that a subject that still grows is met again soon.
func (l *Log) EraseSubjects(ctx context.Context, subjects []string) (int, error) {
	n := 0
	// erase erases the event at the end of s that at finds, and reports
	// whether there was one.
	erase := func(s string, at func(context.Context, string) (uint64, error)) (bool, error) {
		seq, err := at(ctx, s)
		if err != nil || seq == 0 {
			return false, err
		}
		st := l.streamOf(s)
		if err := st.SecureDeleteMsg(ctx, seq); err == nil {
			n++
		} else if !gone(ctx, st, seq, err) {
			return true, fmt.Errorf("seq %d: %w", seq, err)
		}
		return true, nil
	}
	left := slices.Clone(subjects)
	for first := true; len(left) > 0; first = false {
		kept := left[:0]
		for _, s := range left {
			held, err := true, error(nil)
			if first {
				held, err = erase(s, l.FirstSeq)
			}
			if held && err == nil {
				held, err = erase(s, l.lastSeq)
			}
			if err != nil {
				return n, fmt.Errorf("erase %s: %w", s, err)
			}
			if held {
				kept = append(kept, s)
			}
		}
		left = kept
	}
	if err := l.sync(ctx); err != nil {
		return n, fmt.Errorf("erase %d subjects: %w", len(subjects), err)
	}
	return n, nil
}

// headers calls fn with the sequence and event type of every message on
// subject below before (0: every message), reading headers only.
func (l *Log) headers(ctx context.Context, st jetstream.Stream, subject string, before uint64, fn func(seq uint64, typ string)) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true}
	err := each(ctx, st, cfg, false, func(m jetstream.Msg, seq uint64) error {
		if before > 0 && seq >= before {
			return errStop
		}
		fn(seq, m.Headers().Get(hType))
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// eraseAll erases the messages at seqs, one request at a time. The server
// serves stream and consumer infos from a queue it takes only when no
// other API request waits: erasures kept queued ahead (each rewrites a
// block) starved them, and through a compaction round /readyz and the
// projectors' set-up timed out. Between two requests of this loop, an
// info is answered.
func (l *Log) eraseAll(ctx context.Context, st jetstream.Stream, seqs []uint64) error {
	for _, seq := range seqs {
		if err := remove(ctx, st, seq, true); err != nil {
			return fmt.Errorf("seq %d: %w", seq, err)
		}
	}
	return nil
}

// remove deletes the message at seq of st, overwriting it when secure; one
// already gone (another instance erased it a moment before) is no error.
func remove(ctx context.Context, st jetstream.Stream, seq uint64, secure bool) error {
	del := st.DeleteMsg
	if secure {
		del = st.SecureDeleteMsg
	}
	if err := del(ctx, seq); err != nil && !gone(ctx, st, seq, err) {
		return err
	}
	return nil
}

// gone reports whether a delete of the message at seq of st failed with
// err because the message is not there. The server answers such a delete
// with codes of its own (10043 "sequence not found", 10057 "no message
// found") that the client's error carries only as text, so a failed
// delete asks whether the message is still there.
func gone(ctx context.Context, st jetstream.Stream, seq uint64, err error) bool {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true
	}
	_, getErr := st.GetMsg(ctx, seq)
	return errors.Is(getErr, jetstream.ErrMsgNotFound)
}

// Turnover estimates how long the stream that keeps subject takes to fill
// one block, at the rate it has been written over its life. It answers 0
// (unknown) until the stream has written two blocks: a young log's rate
// says nothing of how soon its block will close.
func (l *Log) Turnover(ctx context.Context, subject string) (time.Duration, error) {
	info, err := l.streamOf(subject).Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("turnover of %s: %w", subject, err)
	}
	st := info.State
	life := st.LastTime.Sub(info.Created)
	if st.Msgs == 0 || life <= 0 {
		return 0, nil
	}
	// Bytes a message, as the messages kept now weigh.
	written := float64(st.LastSeq) * float64(st.Bytes) / float64(st.Msgs)
	if written < 2*BlockBytes {
		return 0, nil
	}
	return time.Duration(float64(BlockBytes) / written * float64(life)), nil
}

// Subjects lists the subjects of the log that match filter (wildcards
// allowed; the kind token must be literal) and still hold events.
func (l *Log) Subjects(ctx context.Context, filter string) ([]string, error) {
	info, err := l.streamOf(filter).Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("subjects of %s: %w", filter, err)
	}
	out := make([]string, 0, len(info.State.Subjects))
	for s := range info.State.Subjects {
		out = append(out, s)
	}
	return out, nil
}

// EraseParked erases the parked copies of events on subjects matching
// filter that the log no longer holds. A copy lives as long as its event:
// an erasure or a compaction leaves none of what it removed behind, and
// none of what it kept (the events after its cut) goes with it, which no
// redrive could then apply.
func (l *Log) EraseParked(ctx context.Context, filter string) (int, error) {
	info, err := l.parked.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("parked stream: %w", err)
	}
	if info.State.Msgs == 0 {
		return 0, l.sync(ctx)
	}
	var parked []Parked
	err = l.ListParked(ctx, "", func(p Parked) error {
		if subjectMatches(filter, p.Subject) {
			parked = append(parked, p)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range parked {
		m, err := l.streamOf(p.Subject).GetMsg(ctx, p.Seq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return n, fmt.Errorf("erase parked %d: is its event in the log: %w", p.ParkSeq, err)
		case m.Subject == p.Subject:
			continue // still in the log
		}
		if err := remove(ctx, l.parked, p.ParkSeq, true); err != nil {
			return n, fmt.Errorf("erase parked %d: %w", p.ParkSeq, err)
		}
		n++
	}
	if err := l.sync(ctx); err != nil {
		return 0, fmt.Errorf("erase parked: %w", err)
	}
	return n, nil
}

// subjectMatches reports whether subject matches filter, whose tokens may
// be wildcards.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, t := range f {
		switch {
		case t == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case t != "*" && t != s[i]:
			return false
		}
	}
	return len(f) == len(s)
}

// Erase drops every snapshot, of every workspace. Erasing only a
// workspace's keys would not do: a save replaces a key's revision by
// removing the older one, and JetStream's removal only marks it gone in
// its block, where names and reasons stay and no delete can reach them.
// A purge drops the blocks' files. The bucket is a cache of the log, so
// the cost is one load from the events of each aggregate next used.
func (s Snapshots) Erase(ctx context.Context) error {
	if err := s.stream.Purge(ctx); err != nil {
		return fmt.Errorf("erase snapshots: %w", err)
	}
	if s.sync != nil {
		if err := s.sync(ctx); err != nil {
			return fmt.Errorf("erase snapshots: %w", err)
		}
	}
	return nil
}

// EraseSnapshots implements notifications.LogEraser: see Snapshots.Erase.
func (l *Log) EraseSnapshots(ctx context.Context) error { return l.Snapshots().Erase(ctx) }

// ErasureLedger is the ledger of erasures begun and not yet finished: a
// key is written before an erasure's first step and removed after its
// last, so the keys left after a crash name exactly the work to finish.
type ErasureLedger struct{ kv jetstream.KeyValue }

// ErasureLedger returns the ledger.
func (l *Log) ErasureLedger() ErasureLedger { return ErasureLedger{kv: l.pending} }

// Begin records that an erasure of key has begun.
func (p ErasureLedger) Begin(ctx context.Context, key string) error {
	if _, err := p.kv.Put(ctx, key, nil); err != nil {
		return fmt.Errorf("record erasure of %s: %w", key, err)
	}
	return nil
}

// Done records that the erasure of key has finished.
func (p ErasureLedger) Done(ctx context.Context, key string) error {
	if err := p.kv.Purge(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("record erasure of %s done: %w", key, err)
	}
	return nil
}

// Claim takes the unfinished erasure of key for its caller to finish, if
// it began before begunBefore (whenever, when that is zero): the entry is
// written again, with a check of its revision, so it is young again to
// every other instance's next look, and of two instances that look at once
// one gets it. An erasure that runs long renews its own entry (Begin).
func (p ErasureLedger) Claim(ctx context.Context, key string, begunBefore time.Time) (bool, error) {
	e, err := p.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil // finished meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("claim erasure of %s: %w", key, err)
	}
	if !begunBefore.IsZero() && !e.Created().Before(begunBefore) {
		return false, nil
	}
	if _, err := p.kv.Update(ctx, key, nil, e.Revision()); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // another instance claimed it first
		}
		return false, fmt.Errorf("claim erasure of %s: %w", key, err)
	}
	return true, nil
}

// Unfinished lists the erasures begun and not finished; Claim tells which
// of them a caller may finish.
func (p ErasureLedger) Unfinished(ctx context.Context) ([]string, error) {
	keys, err := p.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("unfinished erasures: %w", err)
	}
	var out []string
	for k := range keys.Keys() {
		out = append(out, k)
	}
	return out, nil
}
