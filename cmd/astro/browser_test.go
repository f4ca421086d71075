//go:build browser

// The browser suite: run with `go test -tags browser -run Browser
// ./cmd/astro/`. It needs Chromium (Debian's chromium package), which
// .ci/run installs; `go test ./...` leaves it out.

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// badgePage is what a web app does for a live badge: with the bearer token
// it holds, it gets a stream ticket, opens an EventSource with it, and
// writes the unread count of every event into the page.
const badgePage = `<!doctype html>
<html><head><meta charset="utf-8"><title>badge</title></head>
<body>
<span id="badge">?</span> unread, <span id="state">starting</span>
<script>
const token = decodeURIComponent(location.hash.slice(1));
const badge = document.getElementById('badge');
const state = document.getElementById('state');
function show(ev) {
  badge.textContent = JSON.parse(ev.data).unreadCount;
  badge.dataset.position = ev.lastEventId;
}
fetch('/api/data/notifications/stream/ticket', {method: 'POST', headers: {Authorization: 'Bearer ' + token}})
  .then(r => r.json())
  .then(env => {
    const es = new EventSource('/api/data/notifications/stream?ticket=' + encodeURIComponent(env.data.ticket));
    es.onopen = () => { state.textContent = 'open'; };
    es.addEventListener('snapshot', show);
    es.addEventListener('notification', show);
    es.addEventListener('end', () => { state.textContent = 'ended'; es.close(); });
    es.onerror = () => { state.textContent = 'error'; };
  })
  .catch(e => { state.textContent = 'failed: ' + e; });
</script>
</body></html>`

// TestBrowserBadge opens the page in headless Chromium, changes the inbox
// through the API, and reads the badge from the page's DOM after each
// change: it shows what unreadcount answers, as of the write's position.
func TestBrowserBadge(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the browser suite needs Chromium (apt-get install chromium): %v", err)
	}
	s := startService(t)
	svc, alice := sender(t, "w1"), token(t, "alice", "w1")

	// The page and the API on one origin, as a web app serves them: the
	// page here, everything else passed on to Astro, each event at once.
	target, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	mux := http.NewServeMux()
	mux.HandleFunc("GET /badge.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, badgePage)
	})
	mux.Handle("/", proxy)
	app := httptest.NewServer(mux)
	t.Cleanup(app.Close)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	started := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(app.URL+"/badge.html#"+url.PathEscape(alice))); err != nil {
		t.Fatalf("open the page in Chromium: %v", err)
	}
	t.Logf("Chromium started and loaded the page in %v", time.Since(started).Round(time.Millisecond))

	// waitBadge polls the DOM until the badge shows want at position pos,
	// as the write's X-Astro-Position gave it (the stream's event ids are
	// sealed alike).
	waitBadge := func(step string, want int, pos string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			// One evaluation reads the badge and its position together.
			dom, err := chromedp.Run(ctx, chromedp.Evaluate[[3]string](
				`[document.getElementById('badge').textContent, document.getElementById('badge').dataset.position || '', document.getElementById('state').textContent]`))
			text, position, state := dom[0], dom[1], dom[2]
			if err != nil {
				t.Fatalf("%s: read the DOM: %v", step, err)
			}
			if text == strconv.Itoa(want) && position == pos {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the badge shows %q at position %q (stream %s), want %d at %q", step, text, position, state, want, pos)
			}
			time.Sleep(20 * time.Millisecond) // polling the page, bounded by the deadline
		}
	}
	check := func(step string, write envelope) {
		t.Helper()
		unread, _ := s.counts(alice)
		waitBadge(step, unread, write.Header.Get("X-Astro-Position"))
	}

	first := s.call("POST", sendPath, svc, sendBody("alice")).want(t, 200)
	var n notificationDto
	first.decode(t, &n)
	check("first notification", first)
	for i := range 3 {
		check(fmt.Sprint("notification ", i+2), s.call("POST", sendPath, svc, sendBody("alice")).want(t, 200))
		s.call("POST", sendPath, svc, sendBody("bob")).want(t, 200) // not alice's: no change
	}
	check("mark read", s.call("POST", "/api/data/notifications/"+n.ID+"/markread", alice, nil).want(t, 200))
	check("mark unread", s.call("POST", "/api/data/notifications/"+n.ID+"/markunread", alice, nil).want(t, 200))
	check("mark all read", s.call("POST", "/api/data/notifications/markallread", alice, nil).want(t, 200))
	check("a new one", s.call("POST", sendPath, svc, sendBody("alice")).want(t, 200))
	check("delete all", s.call("DELETE", "/api/data/notifications/deleteall", alice, nil).want(t, 200))
}
