package projections

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"astro/events"
)

// Holidays projects holiday and resource events into the holidays and
// resources tables.
type Holidays struct {
	create, rename, upsertResources, eraseHolidays, eraseResources *sqlx.Stmt
}

// NewHolidays prepares the projector's statements.
func NewHolidays(ctx context.Context, db *sqlx.DB) (*Holidays, error) {
	var p Holidays
	if err := prepare(ctx, db, "holidays projector", []statement{
		// A holiday is fixed at creation, so a second copy of the event
		// (a replay) has nothing to add.
		{&p.create, `INSERT INTO holidays (workspace_id, id, reason, type, date_from, date_to, country_ids, resource_ids, created_seq, seq)
			VALUES ($1, $2, $3, $4, NULLIF($5, '')::date, NULLIF($6, '')::date, $7, $8, $9, $9)
			ON CONFLICT DO NOTHING`},
		// A batch's renames are one statement, the newest per holiday. The
		// seq guard keeps a replayed older rename from undoing a newer one.
		{&p.rename, `UPDATE holidays h SET reason = v.reason, seq = v.seq
			FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bigint[]) AS v(workspace_id, id, reason, seq)
			WHERE h.workspace_id = v.workspace_id AND h.id = v.id AND h.seq < v.seq`},
		// Upstream syncs send resources in bulk: a batch's upserts are one
		// statement. The seq guard makes a replay of an older upsert a no-op.
		{&p.upsertResources, `INSERT INTO resources (workspace_id, id, name, country_code, is_active, is_guest, seq)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::boolean[], $6::boolean[], $7::bigint[])
			ON CONFLICT (workspace_id, id) DO UPDATE SET name = EXCLUDED.name, country_code = EXCLUDED.country_code,
				is_active = EXCLUDED.is_active, is_guest = EXCLUDED.is_guest, seq = EXCLUDED.seq
			WHERE resources.seq < EXCLUDED.seq`},
		{&p.eraseHolidays, `DELETE FROM holidays WHERE workspace_id = $1`},
		{&p.eraseResources, `DELETE FROM resources WHERE workspace_id = $1`},
	}); err != nil {
		return nil, err
	}
	return &p, nil
}

// Name implements Projector.
func (*Holidays) Name() string { return HolidaysName }

// Version implements Model. 2: resource ids an older Astro stored as
// names ("res-000") are stored as their name-based UUIDs.
func (*Holidays) Version() int { return 2 }

// Tables implements Model: a batch writes holidays first, resources last.
func (*Holidays) Tables() []string { return []string{"holidays", "resources"} }

// Subjects implements Projector.
func (*Holidays) Subjects() []string {
	return []string{events.KindSubjects(events.KindHoliday), events.KindSubjects(events.KindResource), events.KindSubjects(events.KindWorkspace)}
}

// resourceRows are the latest upserts of a batch, one per resource, as
// column arrays.
type resourceRows struct {
	at                    map[[2]string]int // (workspace, id) -> row
	ws, id, name, country []string
	active, guest         []bool
	seq                   []int64
}

// add keeps only the newest upsert of a resource: one INSERT ... ON CONFLICT
// may not touch the same row twice.
func (r *resourceRows) add(e events.Event, p *events.ResourceUpserted) {
	key := [2]string{e.WorkspaceID, p.ResourceID}
	seq := int64(e.Seq)
	if i, ok := r.at[key]; ok {
		if seq < r.seq[i] {
			return
		}
		r.name[i], r.country[i], r.active[i], r.guest[i], r.seq[i] = p.Name, p.CountryCode, p.IsActive, p.IsGuest, seq
		return
	}
	if r.at == nil {
		r.at = map[[2]string]int{}
	}
	r.at[key] = len(r.id)
	r.ws = append(r.ws, e.WorkspaceID)
	r.id = append(r.id, p.ResourceID)
	r.name = append(r.name, p.Name)
	r.country = append(r.country, p.CountryCode)
	r.active = append(r.active, p.IsActive)
	r.guest = append(r.guest, p.IsGuest)
	r.seq = append(r.seq, seq)
}

// renameRows are the latest renames of a batch, one per holiday, as
// column arrays.
type renameRows struct {
	at             map[[2]string]int // (workspace, id) -> row
	ws, id, reason []string
	seq            []int64
}

func (r *renameRows) add(e events.Event, p *events.HolidayRenamed) {
	key := [2]string{e.WorkspaceID, p.HolidayID}
	seq := int64(e.Seq)
	if i, ok := r.at[key]; ok {
		if seq > r.seq[i] {
			r.reason[i], r.seq[i] = p.NewReason, seq
		}
		return
	}
	if r.at == nil {
		r.at = map[[2]string]int{}
	}
	r.at[key] = len(r.id)
	r.ws = append(r.ws, e.WorkspaceID)
	r.id = append(r.id, p.HolidayID)
	r.reason = append(r.reason, p.NewReason)
	r.seq = append(r.seq, seq)
}

// Apply implements Projector.
func (p *Holidays) Apply(ctx context.Context, tx *sqlx.Tx, evs []events.Event) error {
	// Holiday rows never read resource rows (scope is resolved at query
	// time), so the batch's resource upserts can all go last, in one
	// statement, without changing the result. Renames go last too, the
	// newest of each holiday: its creation, earlier in the log, is then
	// in, and only the newest name is left in the row.
	var res resourceRows
	var renames renameRows
	for _, e := range evs {
		payload, err := events.Decode(e)
		if err != nil {
			return err
		}
		ws, seq := e.WorkspaceID, int64(e.Seq)
		// Resource ids are stored as today's Astro names them, whatever
		// an older one wrote (events.ResourceUpserted.Normal).
		switch v := payload.(type) {
		case *events.ResourceUpserted:
			if r, ok := v.Normal(); ok {
				res.add(e, &r)
			}
		case *events.HolidayCreated:
			h := v.Normal()
			_, err = tx.StmtxContext(ctx, p.create).ExecContext(ctx, ws, h.HolidayID, h.Reason, h.Type, h.DateFrom, h.DateTo,
				pq.Array(orEmpty(h.CountryIDs)), pq.Array(orEmpty(h.ResourceIDs)), seq)
		case *events.HolidayRenamed:
			renames.add(e, v)
		case *events.WorkspaceErased:
			// What was held back so far comes before the erasure, each
			// table's part before that table's erasure, holidays first.
			if err = p.flushRenames(ctx, tx, &renames); err == nil {
				if _, err = tx.StmtxContext(ctx, p.eraseHolidays).ExecContext(ctx, ws); err == nil {
					if err = p.flushResources(ctx, tx, &res); err == nil {
						_, err = tx.StmtxContext(ctx, p.eraseResources).ExecContext(ctx, ws)
					}
				}
			}
		default:
			err = fmt.Errorf("%w: unexpected event %s", ErrUnappliable, e.Type)
		}
		if err != nil {
			return fmt.Errorf("apply %s (seq %d): %w", e.Type, e.Seq, err)
		}
	}
	return p.flush(ctx, tx, &res, &renames)
}

// flush applies the renames and the resource upserts held back, one
// statement each, and empties them. Renames go first: a batch then writes
// holidays before resources whatever its events, the order of Tables, in
// which a rebuild's switch locks them.
func (p *Holidays) flush(ctx context.Context, tx *sqlx.Tx, res *resourceRows, renames *renameRows) error {
	if err := p.flushRenames(ctx, tx, renames); err != nil {
		return err
	}
	return p.flushResources(ctx, tx, res)
}

func (p *Holidays) flushRenames(ctx context.Context, tx *sqlx.Tx, renames *renameRows) error {
	if len(renames.id) > 0 {
		if _, err := tx.StmtxContext(ctx, p.rename).ExecContext(ctx, pq.Array(renames.ws), pq.Array(renames.id),
			pq.Array(renames.reason), pq.Array(renames.seq)); err != nil {
			return fmt.Errorf("apply %d renames: %w", len(renames.id), err)
		}
		*renames = renameRows{}
	}
	return nil
}

func (p *Holidays) flushResources(ctx context.Context, tx *sqlx.Tx, res *resourceRows) error {
	if len(res.id) > 0 {
		if _, err := tx.StmtxContext(ctx, p.upsertResources).ExecContext(ctx, pq.Array(res.ws), pq.Array(res.id), pq.Array(res.name),
			pq.Array(res.country), pq.Array(res.active), pq.Array(res.guest), pq.Array(res.seq)); err != nil {
			return fmt.Errorf("apply %d resource upserts: %w", len(res.id), err)
		}
		*res = resourceRows{}
	}
	return nil
}

// orEmpty turns a missing list into an empty one: pq sends a nil slice as
// NULL, which the NOT NULL array columns refuse.
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
