package pgtest

import (
	"net"
	neturl "net/url"
	"sync"
	"testing"
)

// Freezer is a TCP proxy in front of a server (PostgreSQL; NATS too) that
// can go silent: frozen, it holds what it reads without forwarding or
// closing anything until thawed, which is a server whose host froze,
// whose process was stopped, or that a partition cut off, as its clients
// see it.
type Freezer struct {
	ln     net.Listener
	mu     sync.Mutex
	thawed chan struct{} // closed while forwarding
	conns  []net.Conn
}

// NewFreezer starts a proxy to the server at url, forwarding, and
// returns it with the URL that goes through it. It stops when t ends.
func NewFreezer(t testing.TB, url string) (*Freezer, string) {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Freezer{ln: ln, thawed: make(chan struct{})}
	close(f.thawed)
	go f.accept(u.Host)
	t.Cleanup(func() {
		ln.Close()
		f.Thaw()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
	u.Host = ln.Addr().String()
	return f, u.String()
}

func (f *Freezer) accept(addr string) {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("tcp", addr)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, d)
		f.mu.Unlock()
		go f.pipe(c, d)
		go f.pipe(d, c)
	}
}

// Freeze makes the database silent: nothing read is forwarded, nothing
// is closed.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
		f.thawed = make(chan struct{})
	default:
	}
}

// Thaw forwards again, what was held first.
func (f *Freezer) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
	default:
		close(f.thawed)
	}
}

func (f *Freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		// Frozen, a close is held as data is: behind a partition the
		// server never learns that its client gave up.
		f.mu.Lock()
		thawed := f.thawed
		f.mu.Unlock()
		<-thawed
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
