package holidays

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"astro/commands"
	"astro/events"
)

// Limits on a created holiday. Lists expand a holiday into one row per day
// (and per country or resource), so its span is bounded.
const (
	maxSpanDays  = 366
	maxCountries = 50
	maxResources = 1000
)

// Create makes a holiday. Everything but the reason is fixed from then on.
type Create struct {
	Caller      commands.Caller
	Reason      *string
	Type        string
	DateFrom    string // YYYY-MM-DD; a date-time is cut to its date
	DateTo      string
	CountryIDs  []string // ISO 3166-1 alpha-2, for country holidays
	ResourceIDs []string // for people holidays
	// BudgetAt, with a budget (LimitWorkspaces), is the last position of
	// the workspace's holiday events (0: none) that the read model the
	// budget is read from has applied: the holiday is appended only while
	// it is still their last, so that creates on two instances at once do
	// not both pass it (events.ErrLogMoved: read the budget again).
	BudgetAt uint64
}

// CreateHandler handles Create.
type CreateHandler struct {
	holidays     *HolidayStore
	validCountry func(string) bool
	now          func() time.Time
	// budget, when set, bounds a workspace's holidays (see
	// LimitWorkspaces).
	budget                          WorkspaceBudget
	maxResourceDays, maxHolidayDays int64
}

// Handle validates and creates the holiday; it returns the new id and the
// holiday as created.
func (h CreateHandler) Handle(ctx context.Context, cmd Create) (string, Holiday, commands.Result, error) {
	created, err := cmd.validate(h.validCountry)
	if err != nil {
		return "", Holiday{}, commands.Result{}, err
	}
	now := h.now().UTC()
	created.HolidayID = events.NewID(now)
	if cmd.Caller.IdempotencyKey != "" {
		created.HolidayID = events.NameID(cmd.Caller.WorkspaceID, cmd.Caller.UserID, cmd.Caller.IdempotencyKey, "holiday")
	}
	var state Holiday
	run := commands.Run[*Holiday]
	if h.budget != nil {
		holidays := events.Subject(cmd.Caller.WorkspaceID, events.Aggregate{Kind: events.KindHoliday, ID: "*"})
		run = func(ctx context.Context, s *HolidayStore, c commands.Caller, a events.Aggregate, now time.Time, decide func(*Holiday) ([]events.Payload, error)) (commands.Result, error) {
			return commands.RunAfter(ctx, s, c, a, holidays, cmd.BudgetAt, now, decide)
		}
	}
	res, err := run(ctx, h.holidays, cmd.Caller, holidayAggregate(created.HolidayID), now, func(hol *Holiday) ([]events.Payload, error) {
		if hol.Created {
			// An earlier request under the same key: done, if it was this
			// one. Its key's record has gone (expired, or given up), or
			// the record would have answered.
			if !hol.CreatedAs(created) {
				return nil, commands.Errorf(commands.EUnprocessable, "This Idempotency-Key was already used with a different request.")
			}
			state = *hol
			return nil, nil
		}
		if err := h.withinBudget(ctx, cmd.Caller.WorkspaceID, created); err != nil {
			return nil, err
		}
		state = Holiday{Created: true, Reason: created.Reason, Type: created.Type, DateFrom: created.DateFrom, DateTo: created.DateTo,
			CountryIDs: created.CountryIDs, ResourceIDs: created.ResourceIDs}
		return []events.Payload{created}, nil
	})
	return created.HolidayID, state, res, err
}

func (cmd Create) validate(validCountry func(string) bool) (events.HolidayCreated, error) {
	v := commands.Validation{}
	out := events.HolidayCreated{Reason: cleanReason(v, cmd.Reason), Type: strings.ToLower(strings.TrimSpace(cmd.Type)),
		CountryIDs: []string{}, ResourceIDs: []string{}}
	switch out.Type {
	case events.HolidayGlobal, events.HolidayPeople, events.HolidayCountry:
	case "":
		v.Add("type", "The type is required: global, people or country.")
	default:
		v.Add("type", "The type must be global, people or country.")
	}
	from, okFrom := parseDate(v, "dateFrom", cmd.DateFrom)
	to, okTo := parseDate(v, "dateTo", cmd.DateTo)
	if okFrom && okTo {
		switch days := int(to.Sub(from).Hours()/24) + 1; {
		case to.Before(from):
			v.Add("dateTo", "dateTo must not be before dateFrom.")
		case days > maxSpanDays:
			v.Add("dateTo", fmt.Sprintf("A holiday spans at most %d days.", maxSpanDays))
		}
		out.DateFrom, out.DateTo = from.Format(time.DateOnly), to.Format(time.DateOnly)
	}

	switch {
	case out.Type == events.HolidayCountry && len(cmd.CountryIDs) == 0:
		v.Add("countryId", "A country holiday needs at least one country.")
	case out.Type != events.HolidayCountry && len(cmd.CountryIDs) > 0:
		v.Add("countryId", "Only country holidays have countries.")
	default:
		out.CountryIDs = distinct(v, "countryId", cmd.CountryIDs,
			func(c string) string { return strings.ToUpper(strings.TrimSpace(c)) }, validCountry,
			func(c string) string { return fmt.Sprintf("%q is not an ISO 3166-1 alpha-2 country code.", c) })
		if len(out.CountryIDs) > maxCountries {
			v.Add("countryId", fmt.Sprintf("At most %d countries.", maxCountries))
		}
	}

	switch n := len(cmd.ResourceIDs); {
	case out.Type == events.HolidayPeople && n == 0:
		v.Add("resources", "A people holiday needs at least one resource.")
	case out.Type != events.HolidayPeople && n > 0:
		v.Add("resources", "Only people holidays have assigned resources; global and country holidays apply to every resource in scope.")
	case n > maxResources:
		// Counted as sent, before any entry is read: a 256 KiB body holds
		// tens of thousands of names, and the 1–1000 of the API counts
		// entries, duplicates included.
		v.Add("resources", fmt.Sprintf("At most %d resources.", maxResources))
	default:
		out.ResourceIDs = distinct(v, "resources", cmd.ResourceIDs,
			func(r string) string { return strings.ToLower(strings.TrimSpace(r)) }, events.ValidUUID,
			// What the api could not name (events.UUIDFor).
			func(r string) string {
				return fmt.Sprintf("%q is not a resource id: a UUID, or another id (named by its name-based UUID) of %s.", r, events.NameRule)
			})
	}
	return out, v.Err()
}

// clip shortens an entry a message quotes: a message quoting ten entries
// of 25 KB each would be an answer, and an Idempotency-Key record, of
// hundreds of kilobytes.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// maxEntryMessages is how many invalid entries of one list are named each:
// naming every one of a body's thousands would make an answer of megabytes.
const maxEntryMessages = 10

// distinct returns the valid entries of list, normalised by norm, each
// once and in order; invalid entries are reported under field, the first
// maxEntryMessages by name and the rest counted in one message.
func distinct(v commands.Validation, field string, list []string, norm func(string) string, valid func(string) bool, invalid func(string) string) []string {
	out := []string{} // an empty list, never null, as events have always carried it
	seen := map[string]bool{}
	bad := 0
	for _, s := range list {
		s = norm(s)
		switch {
		case !valid(s):
			if bad++; bad <= maxEntryMessages {
				v.Add(field, invalid(clip(s)))
			}
		case !seen[s]:
			seen[s] = true
			out = append(out, s)
		}
	}
	if more := bad - maxEntryMessages; more > 0 {
		v.Add(field, fmt.Sprintf("Further invalid entries not listed: %d.", more))
	}
	return out
}

// parseDate reads an ISO date. Clients that only have date-times send
// midnight ("2027-12-25T00:00:00"), so a date-time is cut to its date.
func parseDate(v commands.Validation, field, s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		v.Add(field, "The date is required (YYYY-MM-DD).")
		return time.Time{}, false
	}
	if len(s) > 10 && s[10] == 'T' {
		if !dateTime(s) {
			v.Add(field, "The date must be YYYY-MM-DD, or a date-time (YYYY-MM-DDThh:mm:ss, a fraction and an offset optional) whose date is taken.")
			return time.Time{}, false
		}
		s = s[:10]
	}
	d, err := time.Parse(time.DateOnly, s)
	if err != nil || d.Year() < 1900 {
		v.Add(field, "The date must be a real date, YYYY-MM-DD, from 1900 on.")
		return time.Time{}, false
	}
	return d, true
}

// dateTime reports whether s is a date-time as clients send one for a
// date: its time part is cut off, but must be one, not any text after a T.
func dateTime(s string) bool {
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04:05Z07:00", "2006-01-02T15:04"} {
		// time.Parse takes a fraction after the seconds by itself.
		if _, err := time.Parse(layout, s); err == nil {
			return true
		}
	}
	return false
}
