package query

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"astro/events"
)

// Scope is a workspace's resources that holidays can apply to (active,
// not guests), sorted by id as bytes, as of Seq: the log position of the
// last resource event of the workspace the read model applied.
type Scope struct {
	Seq       uint64
	IDs       []string
	Countries []string // ISO alpha-2 of IDs[i]; '' when none
	// all is IDs as a global holiday's answer lists them, built once by
	// Resources.Scope, which makes every Scope: a rename's answer shares
	// it instead of building its own each time.
	all []HolidayResourceDto
}

// Resources reads the resources read model for the answers of holiday
// writes, which show the resources a holiday applies to.
type Resources struct {
	scope  *sqlx.Stmt
	cached *posCache[Scope] // with its Seen (nil: Current knows nothing)
}

// NewResources prepares the statement. seen, when not nil, is what the
// holidays projector of this instance receives, for Current.
func NewResources(ctx context.Context, db *sqlx.DB, seen *Seen) (*Resources, error) {
	q := Resources{cached: newPosCache[Scope](1024, seen)}
	if err := prepare(ctx, db, "resource queries", []statement{
		{&q.scope, `SELECT COALESCE((SELECT max(seq) FROM resources WHERE workspace_id = $1), 0),
			ARRAY(SELECT id FROM resources WHERE workspace_id = $1 AND is_active AND NOT is_guest ORDER BY id COLLATE "C"),
			ARRAY(SELECT country_code FROM resources WHERE workspace_id = $1 AND is_active AND NOT is_guest ORDER BY id COLLATE "C")`},
	}); err != nil {
		return nil, err
	}
	return &q, nil
}

// Mark is to be taken before the read of the last position of a
// workspace's resources that Cached or Scope is then given (see Seen.Mark).
func (q *Resources) Mark() uint64 { return q.cached.mark() }

// Cached returns the workspace's scope from memory if it is exact as of
// position at, the last sequence of the workspace's resource events in the
// log, read after mark.
func (q *Resources) Cached(workspaceID string, mark, at uint64) (Scope, bool) {
	return q.cached.get(workspaceID, at, mark)
}

// Scope reads the workspace's scope from the read model, which has applied
// position at, read after mark, and remembers it for Cached and Current.
func (q *Resources) Scope(ctx context.Context, workspaceID string, mark, at uint64) (Scope, error) {
	var s Scope
	epoch := q.cached.epoch()
	if err := q.scope.QueryRowxContext(ctx, workspaceID).Scan(&s.Seq, pq.Array(&s.IDs), pq.Array(&s.Countries)); err != nil {
		return Scope{}, fmt.Errorf("resources in scope: %w", err)
	}
	s.all = make([]HolidayResourceDto, len(s.IDs))
	for i, id := range s.IDs {
		s.all[i] = HolidayResourceDto{ID: id}
	}
	// The read model had applied every event up to at, and s.Seq's too.
	q.cached.put(workspaceID, s.Seq, s, seenAs{gen: mark, exactTo: max(at, s.Seq)}, epoch)
	return s, nil
}

// Forget drops every scope remembered: a redrive of the holidays
// projector's parked events changed the read model where the log did not
// move (projections.RedrivenSubject).
func (q *Resources) Forget() { q.cached.forget() }

// seenWait bounds how long Current waits for this instance's own last
// append to go past Seen: longer, and the long way is quicker.
const seenWait = 2 * time.Millisecond

// Current returns the workspace's scope from memory without asking the log
// where its resources are, if it is exact as of the position up to which
// this instance has seen the history stream, and that position, once it is
// at least last (this instance's last append, which it waits for): a write
// whose answer shows the scope expects the stream still there when it
// appends (commands.RunAt), so that the log refuses it if anything came
// after. Every event up to that position either was there when the scope
// was read or went past Seen since, which would have told.
func (q *Resources) Current(workspaceID string, last uint64) (Scope, uint64, bool) {
	if seen := q.cached.seen; seen == nil || !seen.reach(last, seenWait) {
		return Scope{}, 0, false
	}
	return q.cached.current(workspaceID, workspaceID)
}

// Applies lists the resources a holiday applies to, as the read model's
// holiday query does: a people holiday's own list, every resource for a
// global one, the resources of its countries for a country one. The list
// may be shared: the caller must not change it.
func (s Scope) Applies(typ string, countries, people []string) []HolidayResourceDto {
	out := []HolidayResourceDto{}
	switch typ {
	case events.HolidayGlobal:
		return s.all
	case events.HolidayPeople:
		for _, id := range people {
			out = append(out, HolidayResourceDto{ID: id})
		}
	case events.HolidayCountry:
		for i, id := range s.IDs {
			if slices.Contains(countries, s.Countries[i]) {
				out = append(out, HolidayResourceDto{ID: id})
			}
		}
	}
	return out
}
