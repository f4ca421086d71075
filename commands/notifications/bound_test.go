//go:build !race

// The proof of a bounded log needs an embedded JetStream server to take
// 200,000 appends and 199 compactions: 13 s, and over two minutes with
// the race detector instrumenting the server, for nothing the race
// detector would see that the other compaction tests do not (it is one
// goroutine's history). So it is left out of race builds; .ci/run runs it
// on its own, without.

package notifications

import (
	"reflect"
	"testing"
)

// The proof of a bounded log: 100,000 notifications sent to one user, who
// keeps at most MaxPending, compacted on the default schedule (every
// 1,000 events), on a busy log (other users' notifications fill two of
// its blocks first). The bytes the log holds for the user never pass the
// size of 1,000 pending notifications plus the events since the last
// compaction, where the uncompacted log would hold every send. A busy log
// closes its blocks within minutes, so compaction leaves what it removes
// to their turnover instead of overwriting each message (see
// natslog.Turnover); TestErasureLeavesOneEventAndNoContent is the quiet
// log, which overwrites.
func TestAHundredThousandSendsStayBounded(t *testing.T) {
	const sends, every = 100_000, 1000
	f := newLogFixture(t, 0)
	ctx := t.Context()
	bytesHeld := func() uint64 { return f.inboxBytes(t) }
	p := newPublisher(t, f)
	p.fillOthers(t, f)
	others := bytesHeld()

	// The history, as the inbox decides it: each send past MaxPending
	// deletes the oldest first. It goes to the log without waiting for
	// each append, as many senders would.
	in := NewInbox()
	var sentBytes, worst uint64
	since, compactions, overwrote := 0, 0, 0
	for i := range sends {
		for range p.send(t, in, "alice", i) {
			if sentBytes == 0 {
				<-p.js.PublishAsyncComplete()
				sentBytes = bytesHeld() - others // one stored NotificationSent
			}
			since++
		}
		if since >= every {
			<-p.js.PublishAsyncComplete()
			worst = max(worst, bytesHeld()-others)
			res, err := f.compactor.Compact(ctx, "w1", "alice")
			if err != nil {
				t.Fatal(err)
			}
			if res.Overwrote {
				overwrote++
			}
			since = 0
			compactions++
		}
	}
	<-p.js.PublishAsyncComplete()
	worst = max(worst, bytesHeld()-others)
	bound := (MaxPending + every + 2) * sentBytes
	t.Logf("%d sends, %d compactions (%d overwriting): the log held at most %d bytes for the user, %.2f of the bound %d (%d pending + %d events of %d bytes); uncompacted it would hold about %d",
		sends, compactions, overwrote, worst, float64(worst)/float64(bound), bound, MaxPending, every, sentBytes, uint64(2*sends)*sentBytes)
	if worst > bound {
		t.Fatalf("the log held %d bytes for one user, over the bound of %d", worst, bound)
	}
	if overwrote > 0 {
		t.Fatalf("%d compactions overwrote on a busy log: they would not keep up", overwrote)
	}
	if got := f.state(t, "alice"); len(got) != MaxPending {
		t.Fatalf("%d pending, want %d", len(got), MaxPending)
	}
	if got := fold(t, f.history(t, "alice")); !reflect.DeepEqual(got, in.items) {
		t.Fatal("the compacted log does not rebuild the inbox")
	}
}
