package query

import (
	clist "container/list"
	"sync"
)

// posCache remembers read-model answers together with the log position
// they are exact for. A reader that knows the log's position for the same
// data (the last sequence of the aggregate's subject) can use an entry
// with that very position and skip the database: nothing in the log
// after it touches the data. It never decides freshness by time.
//
// With a Seen, an entry also says what it is exact for as Seen counts it
// (seenAs), so that a reader can use it without knowing the log's
// position for the data at all (current).
type posCache[V any] struct {
	seen *Seen // nil: current knows nothing

	mu        sync.Mutex
	size      int
	items     map[string]*clist.Element
	lru       clist.List // of *posEntry[V], most recent first
	forgotten uint64     // how often forget emptied it
}

type posEntry[V any] struct {
	key string
	pos uint64
	val V
	as  seenAs
}

// seenAs is what an entry is exact for, as Seen counts it: every event of
// its data up to position exactTo, and those after it that go past Seen in
// generation gen.
type seenAs struct{ gen, exactTo uint64 }

func newPosCache[V any](size int, seen *Seen) *posCache[V] {
	return &posCache[V]{seen: seen, size: size, items: map[string]*clist.Element{}}
}

// mark is to be taken before the read of the log position a value is then
// looked up (get) or read (put) at: see Seen.Mark.
func (c *posCache[V]) mark() uint64 {
	if c.seen == nil {
		return 0
	}
	return c.seen.Mark()
}

// get returns the value for key if it is exact as of position pos, which
// was read after mark: then it is exact up to pos in mark's generation.
func (c *posCache[V]) get(key string, pos, mark uint64) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		if e := el.Value.(*posEntry[V]); e.pos == pos {
			if e.as.gen != mark || e.as.exactTo < pos {
				e.as = seenAs{gen: mark, exactTo: pos}
			}
			c.lru.MoveToFront(el)
			return e.val, true
		}
	}
	var zero V
	return zero, false
}

// current returns the value for key without knowing the log's position for
// it, if it is exact as of the position up to which Seen has seen the
// stream, and that position: nothing of seenKey (what Seen calls the
// data) went past after the value's exactTo, in its generation.
func (c *posCache[V]) current(key, seenKey string) (V, uint64, bool) {
	var zero V
	if c.seen == nil {
		return zero, 0, false
	}
	c.mu.Lock()
	el, ok := c.items[key]
	if !ok {
		c.mu.Unlock()
		return zero, 0, false
	}
	c.lru.MoveToFront(el)
	e := el.Value.(*posEntry[V])
	val, as := e.val, e.as
	c.mu.Unlock()
	at, ok := c.seen.unchanged(seenKey, as.gen, as.exactTo)
	return val, at, ok
}

// epoch is to be taken before the read of a value that is then put: put
// drops a value read before a forget.
func (c *posCache[V]) epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgotten
}

// forget drops every entry: the read model changed where the log did not
// move (a redrive applied parked events), so no position tells any more
// what an entry is exact for.
func (c *posCache[V]) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgotten++
	clear(c.items)
	c.lru.Init()
}

// put remembers val, read after epoch, as exact at pos and as as, unless a
// newer one is remembered.
func (c *posCache[V]) put(key string, pos uint64, val V, as seenAs, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.forgotten {
		return
	}
	if el, ok := c.items[key]; ok {
		if e := el.Value.(*posEntry[V]); e.pos <= pos {
			e.pos, e.val, e.as = pos, val, as
		}
		c.lru.MoveToFront(el)
		return
	}
	c.items[key] = c.lru.PushFront(&posEntry[V]{key: key, pos: pos, val: val, as: as})
	for c.lru.Len() > c.size {
		old := c.lru.Remove(c.lru.Back()).(*posEntry[V])
		delete(c.items, old.key)
	}
}
