package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"astro/api/natscmd"
	"astro/events/natsserver"
	"astro/projections/pgtest"
)

// embeddedService is Astro on its defaults: the embedded NATS server with
// generated credentials, listening for TCP clients.
type embeddedService struct {
	*service
	url string // the embedded server's, without credentials
}

func startEmbedded(t *testing.T) *embeddedService {
	t.Helper()
	dir := t.TempDir()
	s := startWithEnv(t, map[string]string{
		"ASTRO_HTTP_ADDR":    "127.0.0.1:0",
		"ASTRO_DATA_DIR":     dir,
		"ASTRO_NATS_LISTEN":  "127.0.0.1:0",
		"ASTRO_DATABASE_URL": pgtest.URL(t),
		"ASTRO_JWT_SECRET":   testSecret,
		"ASTRO_RATE_LIMIT":   "off",
		"ASTRO_LOG_LEVEL":    "warn",
	})
	b, err := os.ReadFile(filepath.Join(dir, natsURLFile))
	if err != nil {
		t.Fatalf("the running service did not say where its NATS listens: %v", err)
	}
	return &embeddedService{service: s, url: strings.TrimSpace(string(b))}
}

// credentials runs `astro nats-credentials --role role --url`.
func (s *embeddedService) credentials(t *testing.T, role string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"nats-credentials", "--role", role, "--url"}, func(k string) string { return s.env[k] }, &out, &errOut)
	if err != nil {
		t.Fatalf("nats-credentials --role %s: %v\n%s", role, err, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// adminConn connects as Astro itself, with the password from the data
// directory, as only the service's owner can.
func (s *embeddedService) adminConn(t *testing.T) *nats.Conn {
	t.Helper()
	p, err := natsPasswords(s.env["ASTRO_DATA_DIR"])
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.url, nats.UserInfo(natsserver.UserAstro, p.Astro))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// probeConn is a client connection that records what the server refuses.
type probeConn struct {
	*nats.Conn
	errs chan error
}

func dialProbe(t *testing.T, url, user string) *probeConn {
	t.Helper()
	p := &probeConn{errs: make(chan error, 64)}
	opts := append(clientOptions(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case p.errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	p.Conn = nc
	return p
}

// refused runs probe and waits for the server's permissions violation
// naming subject. Anything the probe returns is ignored: the violation is
// the answer, and the callers check that nothing changed.
func (p *probeConn) refused(t *testing.T, subject string, probe func(context.Context)) {
	t.Helper()
	for len(p.errs) > 0 {
		<-p.errs
	}
	// The violation comes at once; an answer that never comes need not be
	// waited for long.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	probe(ctx)
	_ = p.Flush()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-p.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the server did not refuse it", subject)
		}
	}
}

// request publishes a request on subject and waits briefly for a reply that
// must not come.
func (p *probeConn) request(subject string, body []byte) {
	_, _ = p.Request(subject, body, 500*time.Millisecond)
}

// eventStream is one of Astro's event streams, as the security tests probe
// it: a kind of event it keeps, and how to make one.
type eventStream struct {
	name     string
	subjects string // a filter within the stream
	event    string // the ce-type of the first event on subjects
}

// eventStreams are the streams a consumer reads: the history (kept for
// good) and the inboxes (compacted and erased by Astro).
var eventStreams = []eventStream{
	{name: "ASTRO_HISTORY", subjects: "astro.events.*.holiday.*", event: "HolidayCreated"},
	{name: "ASTRO_INBOXES", subjects: "astro.events.*.inbox.*", event: "NotificationSent"},
}

func TestNATSSecurity(t *testing.T) {
	s := startEmbedded(t)
	admin := s.adminConn(t)
	adminJS, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	svcTok := token(t, "svc", "acme", "notifications:send")
	s.send(svcTok, "alice", "bob", "task")
	s.createHoliday(token(t, "alice", "acme"), map[string]any{"reason": "Founding Day", "type": "global", "dateFrom": "2027-03-01", "dateTo": "2027-03-01"})

	t.Run("anonymous and wrong passwords are refused", func(t *testing.T) {
		for _, u := range []string{s.url, strings.Replace(s.credentials(t, "consumer"), "consumer:", "consumer:x", 1), strings.Replace(s.url, "nats://", "nats://astro:guess@", 1)} {
			if nc, err := nats.Connect(u); err == nil {
				nc.Close()
				t.Fatalf("%s: connected", redactURL(u))
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("%s: %v, want an authorization violation", redactURL(u), err)
			}
		}
	})

	// streamMsgs counts the events of each event stream; it fails the test
	// if a stream is gone.
	streamMsgs := func(t *testing.T) map[string]uint64 {
		t.Helper()
		out := map[string]uint64{}
		for _, es := range eventStreams {
			st, err := adminJS.Stream(ctx, es.name)
			if err != nil {
				t.Fatalf("the event stream %s: %v", es.name, err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out[es.name] = info.State.Msgs
		}
		return out
	}
	// consumers names the durable consumers of each event stream.
	consumers := func(t *testing.T) map[string][]string {
		t.Helper()
		out := map[string][]string{}
		for _, es := range eventStreams {
			st, err := adminJS.Stream(ctx, es.name)
			if err != nil {
				t.Fatal(err)
			}
			lister := st.ConsumerNames(ctx)
			var names []string
			for n := range lister.Name() {
				names = append(names, n)
			}
			if err := lister.Err(); err != nil {
				t.Fatal(err)
			}
			slices.Sort(names)
			out[es.name] = names
		}
		return out
	}

	t.Run("consumer", func(t *testing.T) {
		url := s.credentials(t, "consumer")
		c := dialProbe(t, url, natsserver.UserConsumer)
		js, err := jetstream.New(c.Conn)
		if err != nil {
			t.Fatal(err)
		}
		// What it may, on each stream: its own durable consumer, from the
		// start, resumed.
		for _, es := range eventStreams {
			cons, err := js.CreateOrUpdateConsumer(ctx, es.name, jetstream.ConsumerConfig{
				Durable: "downstream", FilterSubject: es.subjects, AckPolicy: jetstream.AckExplicitPolicy,
			})
			if err != nil {
				t.Fatalf("create own durable consumer on %s: %v", es.name, err)
			}
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for m := range batch.Messages() {
				if m.Headers().Get("ce-type") != es.event {
					t.Fatalf("%s: event %s, want %s", es.name, m.Headers().Get("ce-type"), es.event)
				}
				if err := m.DoubleAck(ctx); err != nil {
					t.Fatalf("%s: ack: %v", es.name, err)
				}
				got++
			}
			if got != 1 {
				t.Fatalf("%s: read %d events, want 1 (%v)", es.name, got, batch.Error())
			}
			if _, err := js.Consumer(ctx, es.name, "downstream"); err != nil {
				t.Fatalf("resume own consumer on %s: %v", es.name, err)
			}
		}
		// Live events on the subjects, too.
		live, err := c.SubscribeSync("astro.events.>")
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Flush()
		s.send(svcTok, "alice", "bob", "task")
		if _, err := live.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("live event: %v", err)
		}

		before, beforeConsumers := streamMsgs(t), consumers(t)
		cmd := []byte(`{"workspaceId":"acme","recipientId":"alice","senderId":"00000000-0000-4000-8000-000000000007","notificationType":"t"}`)
		protected := protectedConsumers()
		for _, name := range protected {
			found := false
			for _, names := range beforeConsumers {
				found = found || slices.Contains(names, name)
			}
			if !found {
				t.Fatalf("projector consumer %s not found among %v: the protected names are stale", name, beforeConsumers)
			}
		}
		type probe struct {
			subject string
			probe   func(context.Context)
		}
		probes := []probe{
			{natscmd.SendSubject, func(ctx context.Context) { c.request(natscmd.SendSubject, cmd) }},
			{"astro.events.acme.inbox.alice", func(ctx context.Context) { c.request("astro.events.acme.inbox.alice", []byte(`{}`)) }},
			{"astro.events.acme.inbox.alice", func(ctx context.Context) { _ = c.Publish("astro.events.acme.inbox.alice", []byte(`{}`)) }},
			{"astro.events.acme.holiday.h1", func(ctx context.Context) { _ = c.Publish("astro.events.acme.holiday.h1", []byte(`{}`)) }},
			{"$JS.API.STREAM.DELETE.ASTRO_PARKED", func(ctx context.Context) { _ = js.DeleteStream(ctx, "ASTRO_PARKED") }},
			{"$JS.API.STREAM.INFO.ASTRO_PARKED", func(ctx context.Context) { _, _ = js.Stream(ctx, "ASTRO_PARKED") }},
			{"$JS.API.STREAM.CREATE.MINE", func(ctx context.Context) {
				_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "MINE", Subjects: []string{"astro.commands.>"}})
			}},
			{"$JS.API.STREAM.INFO.KV_ASTRO_SNAPSHOTS", func(ctx context.Context) { _, _ = js.KeyValue(ctx, "ASTRO_SNAPSHOTS") }},
			{"$JS.API.DIRECT.GET.KV_ASTRO_SNAPSHOTS", func(ctx context.Context) {
				c.request("$JS.API.DIRECT.GET.KV_ASTRO_SNAPSHOTS", []byte(`{"last_by_subj":"$KV.ASTRO_SNAPSHOTS.>"}`))
			}},
			{"$JS.API.DIRECT.GET.KV_ASTRO_IDEMPOTENCY.$KV.ASTRO_IDEMPOTENCY.x", func(ctx context.Context) {
				c.request("$JS.API.DIRECT.GET.KV_ASTRO_IDEMPOTENCY.$KV.ASTRO_IDEMPOTENCY.x", nil)
			}},
			{"$JS.API.STREAM.INFO.KV_ASTRO_ERASURES", func(ctx context.Context) { _, _ = js.KeyValue(ctx, "ASTRO_ERASURES") }},
			{"$JS.API.DIRECT.GET.KV_ASTRO_ERASURES", func(ctx context.Context) {
				c.request("$JS.API.DIRECT.GET.KV_ASTRO_ERASURES", []byte(`{"last_by_subj":"$KV.ASTRO_ERASURES.>"}`))
			}},
			{"$KV.ASTRO_SNAPSHOTS.>", func(ctx context.Context) { _, _ = c.SubscribeSync("$KV.ASTRO_SNAPSHOTS.>") }},
			{"$KV.ASTRO_ERASURES.>", func(ctx context.Context) { _, _ = c.SubscribeSync("$KV.ASTRO_ERASURES.>") }},
			{"_INBOX.>", func(ctx context.Context) { _, _ = c.SubscribeSync("_INBOX.>") }},
			{"astro.admin.redrive.notifications", func(ctx context.Context) { c.request("astro.admin.redrive.notifications", nil) }},
			{"astro.admin.redriven.notifications", func(ctx context.Context) { _ = c.Publish("astro.admin.redriven.notifications", nil) }},
		}
		// On each event stream: no administration of the stream, and
		// nothing on any of Astro's projector consumers (on the stream it
		// reads or not: nor may a consumer take a projector's name).
		for _, es := range eventStreams {
			st := es.name
			probes = append(probes,
				probe{"$JS.API.STREAM.DELETE." + st, func(ctx context.Context) { _ = js.DeleteStream(ctx, st) }},
				probe{"$JS.API.STREAM.PURGE." + st, func(ctx context.Context) { c.request("$JS.API.STREAM.PURGE."+st, nil) }},
				probe{"$JS.API.STREAM.MSG.DELETE." + st, func(ctx context.Context) {
					c.request("$JS.API.STREAM.MSG.DELETE."+st, []byte(`{"seq":1}`))
				}},
				probe{"$JS.API.STREAM.UPDATE." + st, func(ctx context.Context) {
					_, _ = js.UpdateStream(ctx, jetstream.StreamConfig{Name: st, Subjects: []string{es.subjects}})
				}},
			)
			for _, name := range protected {
				probes = append(probes,
					probe{"$JS.API.CONSUMER.DELETE." + st + "." + name, func(ctx context.Context) { _ = js.DeleteConsumer(ctx, st, name) }},
					probe{"$JS.API.CONSUMER.INFO." + st + "." + name, func(ctx context.Context) { _, _ = js.Consumer(ctx, st, name) }},
					probe{"$JS.API.CONSUMER.RESET." + st + "." + name, func(ctx context.Context) { _, _ = js.ResetConsumerToSequence(ctx, st, name, 1) }},
					probe{"$JS.API.CONSUMER.CREATE." + st + "." + name + "." + es.subjects, func(ctx context.Context) {
						_, _ = js.CreateOrUpdateConsumer(ctx, st, jetstream.ConsumerConfig{Durable: name, FilterSubject: es.subjects, AckPolicy: jetstream.AckExplicitPolicy})
					}},
					probe{"$JS.API.CONSUMER.MSG.NEXT." + st + "." + name, func(ctx context.Context) {
						c.request("$JS.API.CONSUMER.MSG.NEXT."+st+"."+name, []byte(`{"batch":1,"no_wait":true}`))
					}},
					probe{"$JS.ACK." + st + "." + name + ".1.1.1.0.0", func(ctx context.Context) { _ = c.Publish("$JS.ACK."+st+"."+name+".1.1.1.0.0", []byte("+ACK")) }},
				)
			}
		}
		for _, p := range probes {
			t.Run(p.subject, func(t *testing.T) { c.refused(t, p.subject, p.probe) })
		}
		if after := streamMsgs(t); !maps.Equal(after, before) {
			t.Fatalf("the consumer changed the log: %v events, then %v", before, after)
		}
		if after := consumers(t); !maps.EqualFunc(after, beforeConsumers, slices.Equal) {
			t.Fatalf("consumers were %v, now %v", beforeConsumers, after)
		}
		if n := s.unread(token(t, "alice", "acme")); n != 2 {
			t.Fatalf("alice has %d unread, want the 2 sent over HTTP", n)
		}

		// A push consumer delivers with the server's rights, not the
		// creator's: pointed at the API, it must not get to delete or
		// purge a stream.
		var sneaky []jetstream.PushConsumer
		for _, es := range eventStreams {
			for _, op := range []string{"DELETE", "PURGE"} {
				name := "sneaky_" + strings.ToLower(op)
				_, err = js.CreateOrUpdateConsumer(ctx, es.name, jetstream.ConsumerConfig{
					Durable: name, DeliverSubject: "$JS.API.STREAM." + op + "." + es.name, AckPolicy: jetstream.AckNonePolicy,
				})
				t.Logf("%s: push consumer delivering to the JetStream API (%s): create: %v", es.name, op, err)
				if err != nil {
					continue
				}
				st, err := adminJS.Stream(ctx, es.name)
				if err != nil {
					t.Fatalf("the event stream %s: %v", es.name, err)
				}
				pc, err := st.PushConsumer(ctx, name)
				if err != nil {
					t.Fatalf("%s: %s: %v", es.name, name, err)
				}
				sneaky = append(sneaky, pc)
			}
		}
		// Give them the time to deliver, all at once.
		deadline := time.Now().Add(5 * time.Second)
		for _, pc := range sneaky {
			for {
				info, err := pc.Info(ctx)
				if err != nil {
					t.Fatalf("push consumer: %v", err)
				}
				if info.Delivered.Stream > 0 || time.Now().After(deadline) {
					t.Logf("%s: %s delivered up to stream sequence %d", info.Stream, info.Name, info.Delivered.Stream)
					break
				}
				time.Sleep(20 * time.Millisecond) // polling the server's delivery, bounded by the deadline
			}
		}
		if after := streamMsgs(t); !maps.Equal(after, before) { // fails the test if a stream is gone
			t.Fatalf("a push consumer changed the log: %v events, then %v", before, after)
		}

		// Its own consumers it may delete.
		for _, es := range eventStreams {
			if err := js.DeleteConsumer(ctx, es.name, "downstream"); err != nil {
				t.Fatalf("delete own consumer on %s: %v", es.name, err)
			}
		}
	})

	t.Run("service", func(t *testing.T) {
		url := s.credentials(t, "service")
		c := dialProbe(t, url, natsserver.UserService)
		msg := nats.NewMsg(natscmd.SendSubject)
		msg.Data = []byte(`{"recipientId":"carol","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"task","subject":"s","message":"m"}`)
		msg.Header.Set("Authorization", "Bearer "+svcTok)
		resp, err := c.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Fatalf("send a command: %v", err)
		}
		var env envelope
		if err := json.Unmarshal(resp.Data, &env); err != nil || !env.Success {
			t.Fatalf("send a command: %s", resp.Data)
		}
		js, err := jetstream.New(c.Conn)
		if err != nil {
			t.Fatal(err)
		}
		before := streamMsgs(t)
		type probe struct {
			subject string
			probe   func(context.Context)
		}
		probes := []probe{
			{"astro.events.>", func(ctx context.Context) { _, _ = c.SubscribeSync("astro.events.>") }},
			{"astro.events.acme.inbox.carol", func(ctx context.Context) { _ = c.Publish("astro.events.acme.inbox.carol", []byte(`{}`)) }},
			{"astro.events.acme.holiday.h1", func(ctx context.Context) { _ = c.Publish("astro.events.acme.holiday.h1", []byte(`{}`)) }},
			{"$JS.API.DIRECT.GET.KV_ASTRO_SNAPSHOTS", func(ctx context.Context) { c.request("$JS.API.DIRECT.GET.KV_ASTRO_SNAPSHOTS", nil) }},
			{"_INBOX.>", func(ctx context.Context) { _, _ = c.SubscribeSync("_INBOX.>") }},
			{"astro.admin.redrive.notifications", func(ctx context.Context) { c.request("astro.admin.redrive.notifications", nil) }},
			{"astro.admin.redriven.notifications", func(ctx context.Context) { _ = c.Publish("astro.admin.redriven.notifications", nil) }},
		}
		for _, es := range eventStreams {
			st := es.name
			probes = append(probes,
				probe{"$JS.API.STREAM.INFO." + st, func(ctx context.Context) { _, _ = js.Stream(ctx, st) }},
				probe{"$JS.API.STREAM.DELETE." + st, func(ctx context.Context) { _ = js.DeleteStream(ctx, st) }},
				probe{"$JS.API.STREAM.PURGE." + st, func(ctx context.Context) { c.request("$JS.API.STREAM.PURGE."+st, nil) }},
			)
		}
		for _, p := range probes {
			t.Run(p.subject, func(t *testing.T) { c.refused(t, p.subject, p.probe) })
		}
		if after := streamMsgs(t); !maps.Equal(after, before) {
			t.Fatalf("the service changed the log: %v events, then %v", before, after)
		}
	})

	t.Run("tools use the consumer's credentials", func(t *testing.T) {
		var out, errOut bytes.Buffer
		err := run(ctx, []string{"events", "tail", "--type", "NotificationSent"}, func(k string) string { return s.env[k] }, &out, &errOut)
		if err != nil {
			t.Fatalf("events tail: %v\n%s", err, errOut.String())
		}
		if n := strings.Count(out.String(), "\n"); n != 3 {
			t.Fatalf("events tail printed %d events, want 3:\n%s", n, out.String())
		}
		h := s.createHoliday(token(t, "alice", "acme"), map[string]any{"reason": "New Year", "type": "global", "dateFrom": "2027-01-01", "dateTo": "2027-01-01"})
		// As a client elsewhere would: nothing from the environment.
		// The id in upper case, as HTTP takes it too, and after the flags.
		url := s.credentials(t, "consumer")
		for _, args := range [][]string{
			{"audit", "holiday", h.ID, "--workspace", "acme", "--nats-url", url},
			{"audit", "holiday", strings.ToUpper(h.ID), "--workspace", "acme", "--nats-url", url},
			{"audit", "holiday", "--workspace", "acme", h.ID, "--nats-url", url},
		} {
			out.Reset()
			err = run(ctx, args, func(string) string { return "" }, &out, &errOut)
			if err != nil || !strings.Contains(out.String(), "HolidayCreated") {
				t.Fatalf("%v as the consumer: %v\n%s%s", args, err, out.String(), errOut.String())
			}
		}
	})
}

// TestExternalNATSWithCredentials runs Astro against a NATS server that
// takes no anonymous clients, as deploy/ sets one up: Astro connects with
// the user and password it is given.
func TestExternalNATSWithCredentials(t *testing.T) {
	pw := natsserver.Passwords{Astro: newPassword(), Consumer: newPassword(), Service: newPassword()}
	ns, err := natsserver.Start(t.Context(), natsserver.Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Passwords: pw, ProtectedConsumers: protectedConsumers()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	s := startWithEnv(t, map[string]string{
		"ASTRO_HTTP_ADDR":     "127.0.0.1:0",
		"ASTRO_DATA_DIR":      t.TempDir(),
		"ASTRO_NATS_URL":      ns.ClientURL(),
		"ASTRO_NATS_USER":     natsserver.UserAstro,
		"ASTRO_NATS_PASSWORD": pw.Astro,
		"ASTRO_DATABASE_URL":  pgtest.URL(t),
		"ASTRO_JWT_SECRET":    testSecret,
		"ASTRO_RATE_LIMIT":    "off",
		"ASTRO_LOG_LEVEL":     "warn",
	})
	s.send(token(t, "svc", "acme", "notifications:send"), "alice", "bob", "task")
	if n := s.unread(token(t, "alice", "acme")); n != 1 {
		t.Fatalf("%d unread", n)
	}
	// Over NATS, as the service user of that server.
	c := dialProbe(t, strings.Replace(ns.ClientURL(), "nats://", "nats://service:"+pw.Service+"@", 1), natsserver.UserService)
	msg := nats.NewMsg(natscmd.SendSubject)
	msg.Data = []byte(`{"recipientId":"alice","senderId":"00005fc0-0000-4000-8000-000000000002","notificationType":"task","subject":"s","message":"m"}`)
	msg.Header.Set("Authorization", "Bearer "+token(t, "svc", "acme", "notifications:send"))
	if env := natsRequest(t, c.Conn, msg); !env.Success {
		t.Fatalf("send over NATS: %+v", env)
	}
}

// Astro started with a password the NATS server refuses says so, where it
// said only "stream ASTRO_EVENTS: nats: connection closed".
func TestExternalNATSRefusingThePasswordSaysSo(t *testing.T) {
	pw := natsserver.Passwords{Astro: newPassword(), Consumer: newPassword(), Service: newPassword()}
	ns, err := natsserver.Start(t.Context(), natsserver.Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Passwords: pw, ProtectedConsumers: protectedConsumers()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	env := map[string]string{
		"ASTRO_HTTP_ADDR":     "127.0.0.1:0",
		"ASTRO_DATA_DIR":      t.TempDir(),
		"ASTRO_NATS_URL":      ns.ClientURL(),
		"ASTRO_NATS_USER":     natsserver.UserAstro,
		"ASTRO_NATS_PASSWORD": "not-" + pw.Astro,
		"ASTRO_DATABASE_URL":  pgtest.URL(t),
		"ASTRO_JWT_SECRET":    testSecret,
		"ASTRO_LOG_LEVEL":     "error",
	}
	err = run(t.Context(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("run with a wrong NATS password: %v, want the server's authorization violation", err)
	}
	if strings.Contains(err.Error(), pw.Astro) {
		t.Fatalf("the error shows the password: %v", err)
	}
}
