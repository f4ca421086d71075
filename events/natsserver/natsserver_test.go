package natsserver

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// messages returns how many messages stream EVENTS holds, creating it first
// when create is set.
func messages(t *testing.T, nc *nats.Conn, create bool) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var stream jetstream.Stream
	if create {
		stream, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}})
	} else {
		stream, err = js.Stream(t.Context(), "EVENTS")
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func publish(t *testing.T, nc *nats.Conn) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "events.x", []byte("hello")); err != nil {
		t.Fatal(err)
	}
}

func TestListen(t *testing.T) {
	cases := []struct {
		listen  string
		wantTCP bool
	}{
		{"", false},
		{"off", false},
		{"127.0.0.1:0", true},
		{":0", true},
	}
	for _, c := range cases {
		t.Run("listen="+c.listen, func(t *testing.T) {
			s := start(t, Config{StoreDir: t.TempDir(), Listen: c.listen})
			url := s.ClientURL()
			if gotTCP := url != ""; gotTCP != c.wantTCP {
				t.Fatalf("ClientURL() = %q, want TCP %v", url, c.wantTCP)
			}
			nc, err := s.Connect()
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			messages(t, nc, true)
			publish(t, nc)
			if !c.wantTCP {
				return
			}
			if strings.HasSuffix(url, ":0") || strings.Contains(url, "0.0.0.0") {
				t.Errorf("ClientURL() = %q, want a dialable address", url)
			}
			tcp, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer tcp.Close()
			if n := messages(t, tcp, false); n != 1 {
				t.Errorf("over TCP: %d messages, want 1", n)
			}
		})
	}
}

func TestStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := start(t, Config{StoreDir: dir})
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	messages(t, nc, true)
	publish(t, nc)
	nc.Close()
	s.Shutdown()

	nc, err = start(t, Config{StoreDir: dir}).Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if n := messages(t, nc, false); n != 1 {
		t.Errorf("after restart: %d messages, want 1", n)
	}
}

func TestStartErrors(t *testing.T) {
	cases := map[string]Config{
		"no store dir": {},
		"bad listen":   {StoreDir: t.TempDir(), Listen: "nonsense"},
		"bad port":     {StoreDir: t.TempDir(), Listen: "127.0.0.1:x"},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			if s, err := Start(context.Background(), cfg); err == nil {
				s.Shutdown()
				t.Fatal("Start succeeded")
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	pw := Passwords{Astro: "astro-pw", Consumer: "consumer-pw", Service: "service-pw"}
	s := start(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Passwords: pw})
	// In-process, the program is Astro, with every right.
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	messages(t, nc, true)
	publish(t, nc)

	url := s.ClientURL()
	cases := []struct {
		name string
		opts []nats.Option
		ok   bool
	}{
		{"anonymous", nil, false},
		{"unknown user", []nats.Option{nats.UserInfo("root", "astro-pw")}, false},
		{"wrong password", []nats.Option{nats.UserInfo(UserAstro, "consumer-pw")}, false},
		{"astro", []nats.Option{nats.UserInfo(UserAstro, "astro-pw")}, true},
		{"consumer", []nats.Option{nats.UserInfo(UserConsumer, "consumer-pw")}, true},
		{"service", []nats.Option{nats.UserInfo(UserService, "service-pw")}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nc, err := nats.Connect(url, c.opts...)
			if err == nil {
				nc.Close()
			}
			if c.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.ok && !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("got %v, want an authorization violation", err)
			}
		})
	}
	t.Run("in-process without Astro's password", func(t *testing.T) {
		if nc, err := nats.Connect("", nats.InProcessServer(s.ns)); err == nil {
			nc.Close()
			t.Fatal("connected")
		}
	})
}

func TestPasswordsNeedAstros(t *testing.T) {
	if s, err := Start(t.Context(), Config{StoreDir: t.TempDir(), Passwords: Passwords{Consumer: "x"}}); err == nil {
		s.Shutdown()
		t.Fatal("started with users but none for Astro itself")
	}
}

// TestStartOnAPortInUse: the server tells a port in use only in its log
// and is then never ready, so Start said "not ready" after its 10 s wait.
// It says what is wrong, at once.
func TestStartOnAPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second) // far inside the readiness wait
	defer cancel()
	s, err := Start(ctx, Config{StoreDir: t.TempDir(), Listen: l.Addr().String()})
	if err == nil {
		s.Shutdown()
		t.Fatal("Start succeeded on a port in use")
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Start on a port in use: %v, want the address in use", err)
	}
}

// publishOnce publishes under id until the stream takes it, within 15 s:
// a publish that meets a restart's close of the connection is lost or
// sent again after the reconnect, so it is tried again, as Astro's
// appends are, and the id keeps it once.
func publishOnce(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := js.Publish(ctx, "events.x", []byte(id), jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish %s not taken in 15 s: %v", id, err)
		}
	}
}
