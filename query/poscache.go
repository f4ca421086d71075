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
type posCache[V any] struct {
	mu    sync.Mutex
	size  int
	items map[string]*clist.Element
	lru   clist.List // of *posEntry[V], most recent first
}

type posEntry[V any] struct {
	key string
	pos uint64
	val V
}

func newPosCache[V any](size int) *posCache[V] {
	return &posCache[V]{size: size, items: map[string]*clist.Element{}}
}

// get returns the value for key if it is exact as of position pos.
func (c *posCache[V]) get(key string, pos uint64) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		if e := el.Value.(*posEntry[V]); e.pos == pos {
			c.lru.MoveToFront(el)
			return e.val, true
		}
	}
	var zero V
	return zero, false
}

// latest returns the value for key, whatever its position.
func (c *posCache[V]) latest(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*posEntry[V]).val, true
	}
	var zero V
	return zero, false
}

// put remembers val as exact at pos, unless a newer one is remembered.
func (c *posCache[V]) put(key string, pos uint64, val V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		if e := el.Value.(*posEntry[V]); e.pos <= pos {
			e.pos, e.val = pos, val
		}
		c.lru.MoveToFront(el)
		return
	}
	c.items[key] = c.lru.PushFront(&posEntry[V]{key: key, pos: pos, val: val})
	for c.lru.Len() > c.size {
		old := c.lru.Remove(c.lru.Back()).(*posEntry[V])
		delete(c.items, old.key)
	}
}
