package query

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"astro/commands"
	"astro/events"
	"astro/query/country"
	"astro/query/odata"
)

// Paging of the holiday lists: $top when absent, and the largest accepted.
// They are one: the public document names no default and the envelope no
// next page, so a client that asks without $top takes the answer for the
// whole list, and must get as much of it as any page holds.
const (
	HolidayListDefaultTop = HolidayListMaxTop
	HolidayListMaxTop     = 1000
)

// HolidayResourceDto is a resource a holiday affects.
type HolidayResourceDto struct {
	ID string `json:"id"`
}

// HolidayDetailDto is a holiday as the public API shows it.
type HolidayDetailDto struct {
	ID        string               `json:"id"`
	Reason    string               `json:"reason"`
	Type      string               `json:"type"`
	DateFrom  *string              `json:"dateFrom"` // YYYY-MM-DD
	DateTo    *string              `json:"dateTo"`   // YYYY-MM-DD
	CountryID []string             `json:"countryId"`
	Resources []HolidayResourceDto `json:"resources"`
}

// GlobalHolidayDto is one day of a global holiday.
type GlobalHolidayDto struct {
	ID   string `json:"id"`
	Date string `json:"date"`
}

// CountryHolidayDto is one day of a country holiday in one of its countries.
type CountryHolidayDto struct {
	ID          string `json:"id"`
	Date        string `json:"date"`
	CountryID   int    `json:"countryId"` // ISO 3166-1 numeric, e.g. 826
	CountryName string `json:"countryName"`
}

// ResourceHolidayDto is one day off of one resource, from a holiday of any
// type.
type ResourceHolidayDto struct {
	ID         string `json:"id"`
	Date       string `json:"date"`
	ResourceID string `json:"resourceId"`
}

// ListOptions carries the raw OData options from the URL.
type ListOptions struct{ Filter, OrderBy, Top, Skip string }

// Holidays reads the holidays and resources read models.
type Holidays struct {
	db                        *sqlx.DB
	get                       *sqlx.Stmt
	global, country, resource listQuery
	listTimeout               time.Duration
}

// HolidaysConfig tunes the holiday queries.
type HolidaysConfig struct {
	// ListTimeout is PostgreSQL's statement_timeout for one list; default
	// 10 s. A list whose $filter and $orderby make it expand and sort every
	// day of every holiday is stopped there, and answers 503, rather than
	// hold a connection for the whole request's time.
	ListTimeout time.Duration
}

// listQuery is one of the holiday lists: a subquery x with a row per day,
// which the OData options filter, order and page.
type listQuery struct {
	name    string // for error messages
	from    string // the subquery; $1 is the workspace
	columns string // the select list over x, in the DTO's field order
	order   string // the default order, which is also unique per row
	schema  odata.Schema
	// upTo, when set, is from cut to the first days that hold n rows (in
	// the default order, which starts with the day): a page without
	// $filter or $orderby then expands only the days it can reach, not
	// every day of every holiday.
	upTo func(n int) string
}

// days expands a holiday h into one row per day, date_from to date_to
// inclusive; a holiday missing either date has none. Counting days rather
// than stepping a timestamp keeps time zones out of it.
const days = `CROSS JOIN LATERAL generate_series(0, h.date_to - h.date_from) AS n`

// NewHolidays prepares the statements.
func NewHolidays(ctx context.Context, db *sqlx.DB, config ...HolidaysConfig) (*Holidays, error) {
	listTimeout := 10 * time.Second
	if len(config) > 0 && config[0].ListTimeout > 0 {
		listTimeout = config[0].ListTimeout
	}
	// The scope of global and country holidays is worked out at query time
	// from the resources as they are now, as the API promises. Resource ids
	// are opaque, so they sort as bytes (COLLATE "C"): the same order
	// whatever the server's locale, here and in the resource list.
	get, err := db.PreparexContext(ctx, `SELECT h.id, h.reason, h.type,
			to_char(h.date_from, 'YYYY-MM-DD'), to_char(h.date_to, 'YYYY-MM-DD'),
			CASE WHEN h.type = 'country' THEN h.country_ids ELSE '{}' END,
			CASE h.type
				WHEN 'people' THEN h.resource_ids
				WHEN 'global' THEN ARRAY(SELECT r.id FROM resources r
					WHERE r.workspace_id = h.workspace_id AND r.is_active AND NOT r.is_guest
					ORDER BY r.id COLLATE "C")
				WHEN 'country' THEN ARRAY(SELECT r.id FROM resources r
					WHERE r.workspace_id = h.workspace_id AND r.is_active AND NOT r.is_guest AND r.country_code = ANY(h.country_ids)
					ORDER BY r.id COLLATE "C")
				ELSE '{}'
			END
		FROM holidays h WHERE h.workspace_id = $1 AND h.id = $2`)
	if err != nil {
		return nil, fmt.Errorf("prepare holiday queries: %w", err)
	}
	day := odata.Schema{
		"id":   {Column: "x.id", Kind: odata.UUID},
		"date": {Column: "x.day", Kind: odata.Date},
	}
	with := func(extra odata.Schema) odata.Schema {
		s := odata.Schema{}
		for k, f := range day {
			s[k] = f
		}
		for k, f := range extra {
			s[k] = f
		}
		return s
	}
	return &Holidays{
		db:          db,
		get:         get,
		listTimeout: listTimeout,
		global: listQuery{
			name: "global holidays",
			from: `SELECT h.id, h.date_from + n AS day FROM holidays h ` + days + `
				WHERE h.workspace_id = $1 AND h.type = 'global'`,
			columns: `x.id, to_char(x.day, 'YYYY-MM-DD')`,
			order:   `x.day ASC, x.id ASC`,
			schema:  day,
		},
		country: listQuery{
			name: "country holidays",
			// DISTINCT keeps (id, day, country) unique, which paging relies
			// on. The log keeps alpha-2 codes; the public document's
			// countryId is the ISO 3166-1 numeric code. Numbers and names
			// are joined in SQL so that both can be filtered and sorted on.
			// Creates take only assigned codes, so every code has both; a
			// code without them would show as 0 and as itself. The default
			// order is by countryId, the number a client sees; the code
			// after it keeps rows unique even then.
			from: `SELECT h.id, h.date_from + n AS day, c.code AS country_code,
					COALESCE(names.num, 0) AS country_id, COALESCE(names.name, c.code) AS country_name
				FROM holidays h
				CROSS JOIN LATERAL (SELECT DISTINCT code FROM unnest(h.country_ids) AS code) AS c
				LEFT JOIN (` + countryValues() + `) AS names (code, num, name) ON names.code = c.code
				` + days + `
				WHERE h.workspace_id = $1 AND h.type = 'country'`,
			columns: `x.id, to_char(x.day, 'YYYY-MM-DD'), x.country_id, x.country_name`,
			order:   `x.day ASC, x.id ASC, x.country_id ASC, x.country_code ASC`,
			schema: with(odata.Schema{
				// 826 or, as before, 'GB'.
				"countryId": {Column: "x.country_id", Kind: odata.Int, Alias: func(code string) (int64, bool) {
					n, ok := country.Numeric(strings.ToUpper(code))
					return int64(n), ok
				}, AliasHint: "an ISO 3166-1 alpha-2 code such as 'GB'"},
				"countryName": {Column: "x.country_name", Kind: odata.String},
			}),
		},
		resource: listQuery{
			name: "resource holidays",
			// The same scope as the detail's resources, for every type at
			// once; UNION keeps (id, day, resource) unique.
			from: `SELECT h.id, h.date_from + n AS day, s.resource_id COLLATE "C" AS resource_id
				FROM holidays h
				CROSS JOIN LATERAL (` + resourceScope("h") + `) AS s (resource_id)
				` + days + `
				WHERE h.workspace_id = $1`,
			upTo:    resourcesUpTo,
			columns: `x.id, to_char(x.day, 'YYYY-MM-DD'), x.resource_id`,
			order:   `x.day ASC, x.id ASC, x.resource_id ASC`,
			schema: with(odata.Schema{
				// A resource its upstream service names otherwise
				// ('res-000') is stored as that name's UUID, also one an
				// older Astro logged as the name itself (the projector
				// names it: events.ResourceUpserted.Normal). 'res-000'
				// finds it, as does its UUID in any case; what a
				// resource's write refuses ('{…}', ' res-000') is refused
				// here too, rather than finding nothing.
				"resourceId": {Column: "x.resource_id", Kind: odata.String, Literal: events.UUIDFor,
					LiteralHint: "a resource id: a UUID, such as '123e4567-e89b-12d3-a456-426614174000', or another id of " + events.NameRule},
			}),
		},
	}, nil
}

// resourceScope selects the resources of holiday alias h: its own for a
// people holiday, the active non-guest ones of its workspace (and
// countries) for the others.
func resourceScope(h string) string {
	return strings.ReplaceAll(`SELECT u.id FROM unnest(h.resource_ids) AS u (id) WHERE h.type = 'people'
					UNION
					SELECT r.id FROM resources r
					WHERE r.workspace_id = h.workspace_id AND r.is_active AND NOT r.is_guest
					  AND (h.type = 'global' OR h.type = 'country' AND r.country_code = ANY(h.country_ids))`, "h.", h+".")
}

// resourcesUpTo is the resource list's rows of the days up to the first
// day by which n rows exist. Each holiday's scope is counted (its size,
// not its rows), the counts summed per day and then running by day; the
// expansion stops at the day where the running sum reaches n. Twenty
// holidays of 1,000 resources over 366 days are 7,320 day counts instead
// of 7.3 million rows; a page then expands the few days it shows. The
// counts are exact (the same scope), so the cut never drops a row the
// page needs; 'infinity' (fewer than n rows in all) cuts nothing. A
// holiday without an end (an older Astro stored some) has no days, as in
// days, where the bound of the series is NULL; LEAST would give it some.
func resourcesUpTo(n int) string {
	return `SELECT h.id, h.date_from + n AS day, s.resource_id COLLATE "C" AS resource_id
				FROM holidays h
				CROSS JOIN (
					SELECT COALESCE(min(day), 'infinity'::date) AS day FROM (
						SELECT day, sum(n) OVER (ORDER BY day) AS running FROM (
							SELECT h2.date_from + g AS day, sum(sz.n) AS n
							FROM holidays h2
							CROSS JOIN LATERAL (SELECT count(*) AS n FROM (` + resourceScope("h2") + `) AS sc) AS sz
							CROSS JOIN LATERAL generate_series(0, h2.date_to - h2.date_from) AS g
							WHERE h2.workspace_id = $1
							GROUP BY 1
						) AS per_day
					) AS r WHERE running >= ` + strconv.Itoa(n) + `
				) AS cutoff
				CROSS JOIN LATERAL (` + resourceScope("h") + `) AS s (resource_id)
				CROSS JOIN LATERAL generate_series(0, LEAST(h.date_to, cutoff.day) - h.date_from) AS n
				WHERE h.workspace_id = $1 AND h.date_from <= cutoff.day AND h.date_to IS NOT NULL`
}

// countryValues is a VALUES list of every country's alpha-2 code, numeric
// code and name. They are constants of this build, quoted as literals,
// never user input.
func countryValues() string {
	var b strings.Builder
	b.WriteString("VALUES ")
	first := true
	for c := range country.All() {
		if !first {
			b.WriteString(", ")
		}
		first = false
		b.WriteString("(" + pq.QuoteLiteral(c.Code) + ", " + strconv.Itoa(c.Numeric) + ", " + pq.QuoteLiteral(c.Name) + ")")
	}
	return b.String()
}

// Get returns one holiday of the workspace; an unknown id or another
// workspace's is commands.ENotFound.
func (q *Holidays) Get(ctx context.Context, workspaceID, id string) (HolidayDetailDto, error) {
	notFound := commands.Errorf(commands.ENotFound, "The holiday was not found.")
	// The column is a uuid: anything else cannot name a holiday, and
	// PostgreSQL would reject it as a malformed value rather than miss.
	if !events.ValidUUID(id) {
		return HolidayDetailDto{}, notFound
	}
	var h HolidayDetailDto
	var from, to sql.NullString
	var countries, resources pq.StringArray
	err := q.get.QueryRowxContext(ctx, workspaceID, id).Scan(&h.ID, &h.Reason, &h.Type, &from, &to, &countries, &resources)
	if errors.Is(err, sql.ErrNoRows) {
		return HolidayDetailDto{}, notFound
	}
	if err != nil {
		return HolidayDetailDto{}, fmt.Errorf("get holiday %s: %w", id, err)
	}
	if from.Valid {
		h.DateFrom = &from.String
	}
	if to.Valid {
		h.DateTo = &to.String
	}
	h.CountryID = make([]string, 0, len(countries))
	h.CountryID = append(h.CountryID, countries...)
	h.Resources = make([]HolidayResourceDto, 0, len(resources))
	for _, r := range resources {
		h.Resources = append(h.Resources, HolidayResourceDto{ID: r})
	}
	return h, nil
}

// PeopleResourceDays is how many resource-days the workspace's people
// holidays hold: each resource of each, each day (commands' workspace
// budget).
func (q *Holidays) PeopleResourceDays(ctx context.Context, workspaceID string) (int64, error) {
	var n int64
	err := q.db.QueryRowContext(ctx, `SELECT COALESCE(sum(cardinality(resource_ids)::bigint * (date_to - date_from + 1)), 0)
		FROM holidays WHERE workspace_id = $1 AND type = 'people' AND date_from IS NOT NULL AND date_to IS NOT NULL`, workspaceID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count resource-days of %s: %w", workspaceID, err)
	}
	return n, nil
}

// HolidayDays is how many days the workspace's global and country
// holidays hold, a country holiday's once per country (commands' workspace
// budget).
func (q *Holidays) HolidayDays(ctx context.Context, workspaceID string) (int64, error) {
	var n int64
	err := q.db.QueryRowContext(ctx, `SELECT COALESCE(sum(CASE type WHEN 'country' THEN cardinality(country_ids)::bigint ELSE 1 END * (date_to - date_from + 1)), 0)
		FROM holidays WHERE workspace_id = $1 AND type IN ('global', 'country') AND date_from IS NOT NULL AND date_to IS NOT NULL`, workspaceID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count holiday days of %s: %w", workspaceID, err)
	}
	return n, nil
}

// Global lists the days of the workspace's global holidays.
func (q *Holidays) Global(ctx context.Context, workspaceID string, o ListOptions) ([]GlobalHolidayDto, error) {
	return list(ctx, q, q.global, workspaceID, o, func(d *GlobalHolidayDto) []any {
		return []any{&d.ID, &d.Date}
	})
}

// Country lists the days of the workspace's country holidays, one row per
// day and country.
func (q *Holidays) Country(ctx context.Context, workspaceID string, o ListOptions) ([]CountryHolidayDto, error) {
	return list(ctx, q, q.country, workspaceID, o, func(d *CountryHolidayDto) []any {
		return []any{&d.ID, &d.Date, &d.CountryID, &d.CountryName}
	})
}

// Resource lists the days off of the workspace's resources, one row per day
// and resource in the scope of a holiday of any type.
func (q *Holidays) Resource(ctx context.Context, workspaceID string, o ListOptions) ([]ResourceHolidayDto, error) {
	return list(ctx, q, q.resource, workspaceID, o, func(d *ResourceHolidayDto) []any {
		return []any{&d.ID, &d.Date, &d.ResourceID}
	})
}

// list runs l with the options o. The WHERE and ORDER BY vary with the
// options, so it cannot be one prepared statement; the user's values still
// reach PostgreSQL only as bind parameters.
func list[T any](ctx context.Context, q *Holidays, l listQuery, workspaceID string, o ListOptions, dest func(*T) []any) ([]T, error) {
	query, args, err := l.build(workspaceID, o)
	if err != nil {
		return nil, err
	}
	// statement_timeout is set for this transaction only (SET LOCAL), so
	// the pool's connections keep the default for everything else.
	tx, err := q.db.BeginTxx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.name, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to undo
	if _, err := tx.ExecContext(ctx, "SET LOCAL statement_timeout = "+strconv.FormatInt(q.listTimeout.Milliseconds(), 10)); err != nil {
		return nil, fmt.Errorf("list %s: %w", l.name, err)
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, q.listError(ctx, l, err)
	}
	defer rows.Close()
	out := make([]T, 0, 16)
	for rows.Next() {
		var v T
		if err := rows.Scan(dest(&v)...); err != nil {
			return nil, fmt.Errorf("scan %s: %w", l.name, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, q.listError(ctx, l, err)
	}
	return out, nil
}

// listError tells a list stopped by its statement_timeout (a 503 the
// client can act on) from a failure.
func (q *Holidays) listError(ctx context.Context, l listQuery, err error) error {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "57014" && ctx.Err() == nil { // query_canceled, not by ctx
		return &commands.Error{Code: commands.EUnavailable, Err: err,
			Message: fmt.Sprintf("The list took longer than %v; narrow it with $filter, or try again later.", q.listTimeout)}
	}
	return fmt.Errorf("list %s: %w", l.name, err)
}

// build turns the options into SQL; a bad option is a commands.EInvalid
// whose field is the option.
func (l listQuery) build(workspaceID string, o ListOptions) (string, []any, error) {
	q, err := odata.Parse(o.Filter, o.OrderBy, o.Top, o.Skip, l.schema,
		odata.Options{DefaultTop: HolidayListDefaultTop, MaxTop: HolidayListMaxTop, ArgOffset: 1})
	if err != nil {
		var oe *odata.Error
		if errors.As(err, &oe) {
			return "", nil, &commands.Error{Code: commands.EInvalid, Message: oe.Error(), Fields: map[string][]string{oe.Option: {oe.Error()}}}
		}
		return "", nil, fmt.Errorf("list %s: %w", l.name, err)
	}
	from := l.from
	if l.upTo != nil && q.Where == "" && q.OrderBy == "" {
		from = l.upTo(q.Top + q.Skip)
	}
	var b strings.Builder
	b.WriteString("SELECT " + l.columns + " FROM (" + from + ") AS x")
	if q.Where != "" {
		b.WriteString(" WHERE " + q.Where)
	}
	// The default order ends every user order: it is unique per row, so
	// pages neither repeat nor skip rows whatever was asked for.
	b.WriteString(" ORDER BY ")
	if q.OrderBy != "" {
		b.WriteString(q.OrderBy + ", ")
	}
	b.WriteString(l.order)
	b.WriteString(" LIMIT " + strconv.Itoa(q.Top) + " OFFSET " + strconv.Itoa(q.Skip))
	return b.String(), append([]any{workspaceID}, q.Args...), nil
}
