package query

import (
	"context"
	"fmt"
	"slices"

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
	cached *posCache[Scope]
}

// NewResources prepares the statement.
func NewResources(ctx context.Context, db *sqlx.DB) (*Resources, error) {
	q := Resources{cached: newPosCache[Scope](1024)}
	if err := prepare(ctx, db, "resource queries", []statement{
		{&q.scope, `SELECT COALESCE((SELECT max(seq) FROM resources WHERE workspace_id = $1), 0),
			ARRAY(SELECT id FROM resources WHERE workspace_id = $1 AND is_active AND NOT is_guest ORDER BY id COLLATE "C"),
			ARRAY(SELECT country_code FROM resources WHERE workspace_id = $1 AND is_active AND NOT is_guest ORDER BY id COLLATE "C")`},
	}); err != nil {
		return nil, err
	}
	return &q, nil
}

// Cached returns the workspace's scope from memory if it is exact as of
// position at, the last sequence of the workspace's resource events in the
// log.
func (q *Resources) Cached(workspaceID string, at uint64) (Scope, bool) {
	return q.cached.get(workspaceID, at)
}

// Scope reads the workspace's scope from the read model, and remembers it
// for Cached.
func (q *Resources) Scope(ctx context.Context, workspaceID string) (Scope, error) {
	var s Scope
	if err := q.scope.QueryRowxContext(ctx, workspaceID).Scan(&s.Seq, pq.Array(&s.IDs), pq.Array(&s.Countries)); err != nil {
		return Scope{}, fmt.Errorf("resources in scope: %w", err)
	}
	s.all = make([]HolidayResourceDto, len(s.IDs))
	for i, id := range s.IDs {
		s.all[i] = HolidayResourceDto{ID: id}
	}
	q.cached.put(workspaceID, s.Seq, s)
	return s, nil
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
