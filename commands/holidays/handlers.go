package holidays

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"astro/commands"
	"astro/events"
)

// MaxReasonLen bounds a holiday's reason. A reason is a label shown in
// calendars and lists ("Christmas Day", "Company offsite"); 200 characters
// holds any real one with room to spare and keeps rows and events small.
const MaxReasonLen = 200

// MaxNameLen bounds a resource's name, a person's as a list shows it.
const MaxNameLen = 200

// ScopeResourcesWrite is the privilege upstream services need to change
// resources.
const ScopeResourcesWrite = "resources:write"

// Stores are the aggregate stores the handlers decide against.
type (
	HolidayStore  = commands.Store[*Holiday]
	ResourceStore = commands.Store[*Resource]
)

// Handlers runs the holiday and resource commands.
type Handlers struct {
	Create         CreateHandler
	Rename         RenameHandler
	UpsertResource UpsertResourceHandler
}

// NewHandlers wires the handlers to their stores, the clock, and the list
// of country codes (validCountry reports whether an ISO 3166-1 alpha-2 code
// is assigned).
func NewHandlers(holidays *HolidayStore, resources *ResourceStore, validCountry func(string) bool, now func() time.Time) (*Handlers, error) {
	if holidays == nil || resources == nil || validCountry == nil || now == nil {
		return nil, errors.New("holidays: NewHandlers needs both stores, a country check and a clock")
	}
	return &Handlers{
		Create:         CreateHandler{holidays: holidays, validCountry: validCountry, now: now},
		Rename:         RenameHandler{holidays: holidays, now: now},
		UpsertResource: UpsertResourceHandler{resources: resources, validCountry: validCountry, now: now},
	}, nil
}

func holidayAggregate(id string) events.Aggregate {
	return events.Aggregate{Kind: events.KindHoliday, ID: id}
}

// cleanReason trims a reason and checks it; field is where errors go.
func cleanReason(v commands.Validation, reason *string) string {
	if reason == nil {
		v.Add("reason", "The reason is required.")
		return ""
	}
	r := strings.TrimSpace(*reason)
	switch n := utf8.RuneCountInString(r); {
	case !utf8.ValidString(r):
		v.Add("reason", "The reason is not valid UTF-8.")
	case n == 0 || !strings.ContainsFunc(r, visible):
		v.Add("reason", "The reason must not be empty.") // nor made of invisible marks alone (U+200B)
	case n > MaxReasonLen:
		v.Add("reason", fmt.Sprintf("The reason is too long: at most %d characters.", MaxReasonLen))
	case strings.ContainsFunc(r, unicode.IsControl): // C0, DEL and C1 (U+009B is a terminal's CSI)
		v.Add("reason", "The reason must not contain control characters.")
	case strings.ContainsFunc(r, bidiControl):
		v.Add("reason", "The reason must not contain bidirectional control characters (U+202A to U+202E, U+2066 to U+2069).")
	}
	return r
}

// visible reports a character that shows: a letter, digit, punctuation or
// symbol. A name of white space, zero-width spaces and joiners alone
// shows as nothing in a calendar.
func visible(c rune) bool { return unicode.In(c, unicode.L, unicode.N, unicode.P, unicode.S) }

// bidiControl reports the embedding, override and isolate controls of
// Unicode's bidirectional algorithm: in a calendar label they make the text
// shown differ from the text stored (U+202E shows "gnp.exe" as
// "exe.png"). The implicit marks (U+200E, U+200F) change no order of
// letters and stay allowed.
func bidiControl(c rune) bool {
	return c >= 0x202a && c <= 0x202e || c >= 0x2066 && c <= 0x2069
}

// Rename changes a holiday's reason, and nothing else.
type Rename struct {
	Caller    commands.Caller
	HolidayID string
	// Reason is nil when the body had none (left out, or null): the
	// rename then changes nothing and answers the holiday as it is, as
	// one to the current name does, since the public document makes the
	// field optional.
	Reason *string
	// LogAt, when not 0, is the position up to which the caller has seen
	// the history stream: the rename appends only if the stream is still
	// there, and answers events.ErrLogMoved otherwise (commands.RunAt).
	LogAt uint64
}

// RenameHandler handles Rename.
type RenameHandler struct {
	holidays *HolidayStore
	now      func() time.Time
}

// Handle renames, and returns the holiday as renamed; a lost race with
// another rename is decided again on the newer state, so a valid rename
// never fails because another one won.
func (h RenameHandler) Handle(ctx context.Context, cmd Rename) (Holiday, commands.Result, error) {
	v := commands.Validation{}
	if !events.ValidUUID(cmd.HolidayID) {
		v.Add("id", "The id must be a UUID.")
	}
	var reason string
	if cmd.Reason != nil {
		reason = cleanReason(v, cmd.Reason)
	}
	if err := v.Err(); err != nil {
		return Holiday{}, commands.Result{}, err
	}
	id := strings.ToLower(cmd.HolidayID)
	var renamed Holiday
	res, err := commands.RunAt(ctx, h.holidays, cmd.Caller, holidayAggregate(id), cmd.LogAt, h.now().UTC(), func(hol *Holiday) ([]events.Payload, error) {
		reason := reason
		if cmd.Reason == nil {
			reason = hol.Reason
		}
		ps, err := hol.Rename(id, reason)
		renamed = *hol
		renamed.Reason = reason
		return ps, err
	})
	return renamed, res, err
}
