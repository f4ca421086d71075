package api

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"

	"astro/commands"
	"astro/events"
)

// PositionStream is the stream a position is of: the log numbers the
// inboxes' events and the rest (the history of holidays, resources and
// workspaces) each on its own, so the same number is two positions.
type PositionStream byte

const (
	InboxPositions   PositionStream = 1 // notification writes, the notification stream's ids
	HistoryPositions PositionStream = 2 // holiday and resource writes, a history's entries
	// anyPositions is a position sealed before positions named their
	// stream: still taken, as any stream's, so that tokens given out
	// before a deploy (and by an older instance during one) keep working.
	anyPositions PositionStream = 0
)

// kind is an event kind of the stream, for the log's calls.
func (ps PositionStream) kind() string {
	if ps == InboxPositions {
		return events.KindInbox
	}
	return events.KindHoliday
}

// PositionSeal seals the log positions a client is given (a write's
// X-Astro-Position, the notification stream's event ids) and opens the ones
// it sends back. A position is a count of every workspace's events in a
// stream they all share: handed out bare, it would tell any caller how
// busy the others are, and a position sent back, checked against the log's
// end, would let one probe it. Sealed, a position says nothing to a
// client, and opens only for the workspace and the stream it was given
// in, on the instances holding the key: a notification write's position
// pages no holiday's history, and a rename's resumes no notification
// stream. (Metrics count everything: they are for
// operators, off the public port.)
type PositionSeal struct {
	block cipher.Block
	tags  []byte // key of the workspace tags
}

// NewPositionSeal derives the seal's keys from key.
func NewPositionSeal(key []byte) (*PositionSeal, error) {
	if len(key) == 0 {
		return nil, errors.New("api: a position seal needs a key")
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(derive("astro log positions: cipher")[:16])
	if err != nil {
		return nil, err
	}
	return &PositionSeal{block: block, tags: derive("astro log positions: workspace")}, nil
}

// sealedLen is the length of a sealed position: one cipher block, in
// unpadded base64url.
const sealedLen = 22

func (p *PositionSeal) tag(workspaceID string, stream PositionStream) []byte {
	m := hmac.New(sha256.New, p.tags)
	if stream != anyPositions {
		m.Write([]byte{byte(stream)})
	}
	m.Write([]byte(workspaceID))
	return m.Sum(nil)[:8]
}

// Seal is position seq of stream as a client of workspaceID sees it. One
// block, the position beside the workspace's and the stream's tag,
// enciphered: the same position always looks the same, and nothing else
// shows.
func (p *PositionSeal) Seal(workspaceID string, stream PositionStream, seq uint64) string {
	var b [aes.BlockSize]byte
	binary.BigEndian.PutUint64(b[:8], seq)
	copy(b[8:], p.tag(workspaceID, stream))
	p.block.Encrypt(b[:], b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Open is the position token stands for, if Seal gave it for workspaceID
// and stream, or for workspaceID before positions named their stream.
func (p *PositionSeal) Open(workspaceID string, stream PositionStream, token string) (uint64, bool) {
	seq, of, ok := p.open(workspaceID, token, stream)
	return seq, ok && (of == stream || of == anyPositions)
}

// open is the position token stands for and the stream Seal gave it for,
// among streams and an older seal's (anyPositions), if any.
func (p *PositionSeal) open(workspaceID, token string, streams ...PositionStream) (uint64, PositionStream, bool) {
	if len(token) != sealedLen {
		return 0, 0, false
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) != aes.BlockSize {
		return 0, 0, false
	}
	p.block.Decrypt(b, b)
	for _, stream := range append(streams, anyPositions) {
		if hmac.Equal(b[8:], p.tag(workspaceID, stream)) {
			return binary.BigEndian.Uint64(b[:8]), stream, true
		}
	}
	return 0, 0, false
}

// minPositionKey keys the position a read was asked to reach, opened.
type minPositionKey struct{}

// position is an opened position: a sequence of its stream.
type position struct {
	stream PositionStream
	seq    uint64
}

// withMinPosition opens the position the client asked c's read to reach,
// if any, for minPosition: of either stream, since a read may follow any
// write.
func (s *Server) withMinPosition(r *http.Request, c commands.Caller) (*http.Request, error) {
	v := strings.TrimSpace(r.Header.Get(HeaderMinPosition))
	if v == "" {
		return r, nil
	}
	if seq, stream, ok := s.seal.open(c.WorkspaceID, v, InboxPositions, HistoryPositions); ok {
		return r.WithContext(context.WithValue(r.Context(), minPositionKey{}, position{stream, seq})), nil
	}
	return r, commands.Invalid(map[string][]string{HeaderMinPosition: {"The position must be one a write's " + HeaderPosition + " header gave, in this workspace."}})
}

// minPosition is the position the client asked to read at, if any.
func minPosition(r *http.Request) (position, bool) {
	p, ok := r.Context().Value(minPositionKey{}).(position)
	return p, ok
}

func (s *Server) setPosition(w http.ResponseWriter, c commands.Caller, stream PositionStream, seq uint64) {
	w.Header().Set(HeaderPosition, s.seal.Seal(c.WorkspaceID, stream, seq))
}
