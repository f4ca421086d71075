package projections

import (
	"context"

	"github.com/jmoiron/sqlx"

	"astro/events"
)

// Registration is one projector Astro runs: its name (its checkpoint, its
// durable consumer "projector_"+Name, its redrive subject) and how to build
// it on a database.
type Registration struct {
	Name string
	// Kinds are the aggregate kinds whose events it consumes; its
	// Subjects are theirs (a test holds the two together). They are kept
	// in one stream, whose sequence is the projector's position.
	Kinds []string
	New   func(ctx context.Context, db *sqlx.DB) (Projector, error)
}

// The projectors' names: of their consumers, checkpoints and metrics, and
// how the service and its tools pick one.
const (
	NotificationsName = "notifications"
	HolidaysName      = "holidays"
)

// Registered lists every projector Astro runs, in the order they start. It
// is the one list: the service, its tools (redrive, status, protected
// consumers) and the tests enumerate projectors from it, so a new projector
// added here is run, measured and protected everywhere at once.
func Registered() []Registration {
	return []Registration{
		{Name: NotificationsName, Kinds: []string{events.KindInbox}, New: func(ctx context.Context, db *sqlx.DB) (Projector, error) { return NewNotifications(ctx, db) }},
		{Name: HolidaysName, Kinds: []string{events.KindHoliday, events.KindResource, events.KindWorkspace}, New: func(ctx context.Context, db *sqlx.DB) (Projector, error) { return NewHolidays(ctx, db) }},
	}
}

// Names are the names of the registered projectors.
func Names() []string {
	regs := Registered()
	out := make([]string, len(regs))
	for i, r := range regs {
		out[i] = r.Name
	}
	return out
}

// NewAll builds every registered projector on db.
func NewAll(ctx context.Context, db *sqlx.DB) ([]Projector, error) {
	var out []Projector
	for _, r := range Registered() {
		p, err := r.New(ctx, db)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Consumers names the registered projectors that consume events of an
// aggregate kind.
func Consumers(kind string) []string {
	var out []string
	for _, r := range Registered() {
		for _, k := range r.Kinds {
			if k == kind {
				out = append(out, r.Name)
				break
			}
		}
	}
	return out
}
