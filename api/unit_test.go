package api

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"astro/commands"
	"astro/events"
	"astro/query"
)

func TestNormalIDs(t *testing.T) {
	const id = "0192f1c2-7a6b-7c3d-8e9f-0a1b2c3d4e5f"
	for _, c := range []struct{ in, want string }{
		{"/api/data/holidays/0192F1C2-7A6B-7C3D-8E9F-0A1B2C3D4E5F/history", "/api/data/holidays/" + id + "/history"},
		{"/api/data/notifications/0192F1C2-7A6B-7C3D-8E9F-0A1B2C3D4E5F/markread", "/api/data/notifications/" + id + "/markread"},
		{"/api/data/holidays/" + id, "/api/data/holidays/" + id},
		{"/api/data/resources/0192F1C2-7A6B-7C3D-8E9F-0A1B2C3D4E5F", "/api/data/resources/" + id},
		{"/api/data/holidays/Not-A-UUID", "/api/data/holidays/Not-A-UUID"},
	} {
		if got := normalIDs(c.in); got != c.want {
			t.Errorf("normalIDs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestPositionSeal: a sealed position opens as itself for the workspace
// and the stream it was sealed for, and for no other, under no other key;
// nothing else opens, and a sealed position shows nothing of the number.
func TestPositionSeal(t *testing.T) {
	seal, err := NewPositionSeal([]byte("a key of at least thirty-two bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewPositionSeal([]byte("another key of thirty-two bytes.."))
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{0, 1, 747, 784, 1<<64 - 1} {
		tok := seal.Seal("w1", InboxPositions, seq)
		if got, ok := seal.Open("w1", InboxPositions, tok); !ok || got != seq {
			t.Errorf("Open(Seal(%d)) = %d, %v", seq, got, ok)
		}
		if seal.Seal("w1", InboxPositions, seq) != tok {
			t.Errorf("position %d sealed twice looks different", seq)
		}
		if strings.Contains(tok, strconv.FormatUint(seq, 10)) && seq > 9 {
			t.Errorf("%d sealed as %q shows the number", seq, tok)
		}
		if _, ok := seal.Open("w2", InboxPositions, tok); ok {
			t.Errorf("position %d of w1 opened for w2", seq)
		}
		if _, ok := seal.Open("w1", HistoryPositions, tok); ok {
			t.Errorf("position %d of the inboxes opened as one of the history", seq)
		}
		if _, ok := other.Open("w1", InboxPositions, tok); ok {
			t.Errorf("position %d opened under another key", seq)
		}
	}
	// A position sealed before positions named their stream (given out
	// before a deploy, or by an older instance during one) opens as
	// either stream's, in its workspace only.
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], 747)
	copy(b[8:], seal.tag("w1", anyPositions))
	seal.block.Encrypt(b[:], b[:])
	legacy := base64.RawURLEncoding.EncodeToString(b[:])
	for _, stream := range []PositionStream{InboxPositions, HistoryPositions} {
		if got, ok := seal.Open("w1", stream, legacy); !ok || got != 747 {
			t.Errorf("an older seal's position as stream %d: %d, %v", stream, got, ok)
		}
		if _, ok := seal.Open("w2", stream, legacy); ok {
			t.Errorf("an older seal's position of w1 opened for w2")
		}
	}
	if _, stream, ok := seal.open("w1", legacy, InboxPositions, HistoryPositions); !ok || stream != anyPositions {
		t.Errorf("an older seal's position opened as stream %d, %v; want its stream untold", stream, ok)
	}
	for _, tok := range []string{"", "42", "-1", " ", "AAAAAAAAAAAAAAAAAAAAAA", seal.Seal("w1", InboxPositions, 5) + "=", "!!!!!!!!!!!!!!!!!!!!!!"} {
		if got, ok := seal.Open("w1", InboxPositions, tok); ok {
			t.Errorf("Open(%q) = %d, true", tok, got)
		}
	}
}

// TestSameContent: a retry under a used key matches the stored
// notification when it asks for the same content, however its data is
// spelled.
func TestSameContent(t *testing.T) {
	stored := query.NotificationDto{SenderID: "bob", NotificationType: "t", Subject: "s", Message: "m",
		Data: json.RawMessage(`{"projectName": "P", "taskName": "T"}`)}
	sent := events.NotificationSent{SenderID: "bob", NotificationType: "t", Subject: "s", Message: "m",
		Data: json.RawMessage(`{"taskName":"T","projectName":"P"}`)}
	if !sameContent(stored, sent) {
		t.Error("the same content, keys reordered, compared different")
	}
	empty := stored
	empty.Data = json.RawMessage(`{}`) // as served when nothing was sent
	none := sent
	none.Data = nil
	if !sameContent(empty, none) {
		t.Error("a send without data did not match its stored {}")
	}
	for name, change := range map[string]func(*events.NotificationSent){
		"sender":  func(e *events.NotificationSent) { e.SenderID = "eve" },
		"type":    func(e *events.NotificationSent) { e.NotificationType = "u" },
		"subject": func(e *events.NotificationSent) { e.Subject = "S" },
		"message": func(e *events.NotificationSent) { e.Message = "" },
		"data":    func(e *events.NotificationSent) { e.Data = json.RawMessage(`{"taskName":"T"}`) },
		"no data": func(e *events.NotificationSent) { e.Data = nil },
	} {
		other := sent
		change(&other)
		if sameContent(stored, other) {
			t.Errorf("another %s compared the same", name)
		}
	}
}

// TestDecodeObjectTakesAByteOrderMark: RFC 8259 lets a parser ignore one,
// and some clients send it; it was answered "The body must be a JSON
// object".
func TestDecodeObjectTakesAByteOrderMark(t *testing.T) {
	var dst struct{ Reason string }
	if err := decodeObject([]byte("\ufeff{\"reason\":\"Offsite\"}"), &dst); err != nil || dst.Reason != "Offsite" {
		t.Fatalf("a body after a BOM: %v, %+v", err, dst)
	}
	if err := decodeObject([]byte("\ufeff"), &dst); err == nil {
		t.Fatal("a BOM alone is no body")
	}
}

// TestDecodeObjectNamesEveryWronglyTypedField: encoding/json reports the
// first type error only, and the envelope's validationErrors is per field.
func TestDecodeObjectNamesEveryWronglyTypedField(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       map[string]string
	}{
		{"one", `{"subject":1,"message":"m"}`, map[string]string{"subject": "Expected a string."}},
		{"three", `{"recipientId":["a"],"subject":1,"message":true,"senderId":"s"}`,
			map[string]string{"recipientId": "Expected a string.", "subject": "Expected a string.", "message": "Expected a string."}},
		{"a key twice, the first wrong", `{"subject":1,"subject":"s"}`, map[string]string{"subject": "Expected a string."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req SendRequest
			var e *commands.Error
			if err := decodeObject([]byte(tc.body), &req); !errors.As(err, &e) || e.Code != commands.EInvalid {
				t.Fatalf("%s: %v, want a validation error", tc.body, err)
			}
			got := map[string]string{}
			for field, msgs := range e.Fields {
				got[field] = strings.Join(msgs, " ")
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("%s: validationErrors %v, want %v", tc.body, got, tc.want)
			}
		})
	}
}

// TestMergeSlashes: literal slashes in a run are one; an encoded one is a
// character of an id.
func TestMergeSlashes(t *testing.T) {
	for raw, want := range map[string]string{
		"//api/data/notifications":  "/api/data/notifications",
		"/api///data//holidays/":    "/api/data/holidays/",
		"/api/data/resources/%2F0":  "/api/data/resources/%2F0",
		"/api/data/resources//%2F0": "/api/data/resources/%2F0",
		"/":                         "/",
	} {
		u, err := url.Parse("http://h" + raw)
		if err != nil {
			t.Fatal(err)
		}
		if mergeSlashes(u); u.EscapedPath() != want {
			t.Errorf("%s: %s, want %s", raw, u.EscapedPath(), want)
		}
	}
}

// TestHeaderError: a singleton header given twice with values that differ
// is refused under its name; one header holding a comma list is one value,
// and the same value repeated is that value.
func TestHeaderError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		header  http.Header
		refused []string
	}{
		{"one each", http.Header{"Authorization": {"Bearer a"}, "Content-Type": {"application/json"}, "Idempotency-Key": {"k"}, HeaderMinPosition: {"3"}}, nil},
		{"a list is one header", http.Header{"Accept": {"a", "b"}, "Content-Type": {"application/json; charset=utf-8"}}, nil},
		{"the same twice", http.Header{"Authorization": {"Bearer a", "Bearer a"}}, nil},
		{"two tokens", http.Header{"Authorization": {"Bearer a", "Bearer b"}}, []string{"Authorization"}},
		{"two keys", http.Header{"Idempotency-Key": {"k1", "k2"}}, []string{"Idempotency-Key"}},
		{"two types", http.Header{"Content-Type": {"application/json", "text/plain"}}, []string{"Content-Type"}},
		{"two positions", http.Header{HeaderMinPosition: {"1", "99"}}, []string{HeaderMinPosition}},
		{"two spellings", http.Header{"Authorization": {"Bearer a"}, "authorization": {"Bearer b"}}, []string{"Authorization"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := headerError(tc.header)
			var got []string
			if err != nil {
				var e *commands.Error
				if !errors.As(err, &e) || e.Code != commands.EInvalid {
					t.Fatalf("%v, want a validation error", err)
				}
				got = slices.Sorted(maps.Keys(e.Fields))
			}
			if !slices.Equal(got, tc.refused) {
				t.Errorf("refused %v, want %v", got, tc.refused)
			}
		})
	}
}

// timeoutBody fails as a connection read does past the server's
// ReadTimeout.
type timeoutBody struct{}

func (timeoutBody) Read([]byte) (int, error) {
	return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
}

// TestBodyReadPastTheDeadline: a body still coming at the server's
// ReadTimeout (the request's deadline) answered 400 "The body could not be
// read", telling the client its request was bad; it is 503, to retry.
func TestBodyReadPastTheDeadline(t *testing.T) {
	s := &Server{cfg: Config{MaxBodyBytes: 1 << 10}}
	for name, tc := range map[string]struct {
		body   io.Reader
		status int
	}{
		"timed out": {timeoutBody{}, http.StatusServiceUnavailable},
		"broken":    {iotest.ErrReader(errors.New("connection reset")), http.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/api/data/holidays", tc.body)
			_, err := s.readBody(httptest.NewRecorder(), r)
			if status, _ := ErrorEnvelope(err, "r"); status != tc.status {
				t.Errorf("%v: HTTP %d, want %d", err, status, tc.status)
			}
		})
	}
}

// TestCodedBodyIsUnsupported: a gzip body was read as JSON and answered
// 400 "The body must be a JSON object"; RFC 9110 makes an unsupported
// content coding 415, naming the codings taken in Accept-Encoding.
func TestCodedBodyIsUnsupported(t *testing.T) {
	s := &Server{cfg: Config{MaxBodyBytes: 1 << 10}}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"reason":"Offsite"}`))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		encoding string
		body     []byte
		refused  bool
	}{
		{"gzip", gz.Bytes(), true},
		{"identity, gzip", gz.Bytes(), true},
		{"br", []byte(`{"reason":"Offsite"}`), true},
		{"identity", []byte(`{"reason":"Offsite"}`), false},
		{"", []byte(`{"reason":"Offsite"}`), false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/api/data/holidays", bytes.NewReader(tc.body))
		r.Header.Set("Content-Type", "application/json")
		if tc.encoding != "" {
			r.Header.Set("Content-Encoding", tc.encoding)
		}
		w := httptest.NewRecorder()
		var dst struct{ Reason string }
		err := s.decode(w, r, &dst)
		if !tc.refused {
			if err != nil || dst.Reason != "Offsite" {
				t.Errorf("%q: %v, %+v", tc.encoding, err, dst)
			}
			continue
		}
		var e *commands.Error
		if !errors.As(err, &e) || e.Code != commands.EMediaType || !strings.Contains(e.Message, strings.TrimPrefix(tc.encoding, "identity, ")) {
			t.Errorf("%q: %v, want 415 naming the coding", tc.encoding, err)
		}
		if got := w.Header().Get("Accept-Encoding"); got != "identity" {
			t.Errorf("%q: Accept-Encoding %q, want identity", tc.encoding, got)
		}
	}
}

func TestIntegrationName(t *testing.T) {
	long := strings.Repeat("a", 99) + "é" + "tail" // é's two bytes straddle byte 100
	for _, c := range []struct{ name, in, want string }{
		{"kept", "  Zapier  ", "Zapier"},
		{"control characters dropped", "Za\x1b[31mpier\u009b", "Za[31mpier"},
		{"bidirectional controls dropped", "exe\u202e.png\u2066", "exe.png"},
		{"implicit marks kept", "a\u200eb", "a\u200eb"},
		{"cut at 100 bytes, never inside a character", long, strings.Repeat("a", 99)},
		{"cut at 100 bytes exactly", strings.Repeat("b", 120), strings.Repeat("b", 100)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := IntegrationName(c.in)
			if got != c.want {
				t.Errorf("IntegrationName(%q) = %q, want %q", c.in, got, c.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("IntegrationName(%q) = %q: not valid UTF-8", c.in, got)
			}
		})
	}
}

// TestErasureFailed: an erasure the log or the database failed answers 503
// to retry, not 500; a refusal keeps its code, and an event no build can
// read stays a 500.
func TestErasureFailed(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"log unreachable", errors.New("append to astro.events.w1.workspace.w1: nats: timeout"), http.StatusServiceUnavailable},
		{"refused", commands.Errorf(commands.EForbidden, "no"), http.StatusForbidden},
		{"unreadable event", fmt.Errorf("read: %w", events.ErrMalformed), http.StatusInternalServerError},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, _ := ErrorEnvelope(erasureFailed(c.err), "r1"); got != c.want {
				t.Errorf("HTTP %d, want %d", got, c.want)
			}
		})
	}
}
