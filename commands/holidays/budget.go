package holidays

import (
	"context"
	"fmt"
	"time"

	"astro/commands"
	"astro/events"
)

// DefaultWorkspaceResourceDays bounds the people holidays of a workspace,
// counted in resource-days (each resource of a holiday, each day). The
// lists expand holidays into one row per resource and day, so this bounds
// what any list of a workspace can expand from them. A million holds a
// thousand people with forty days off a year for twenty-five years, while
// one member alone can no longer make a workspace's lists expand 7.3
// million rows (twenty holidays of 1,000 resources for 366 days).
const DefaultWorkspaceResourceDays = 1_000_000

// DefaultWorkspaceHolidayDays bounds the global and country holidays of a
// workspace, counted in days (a country holiday's once per country): the
// global and country lists are a row per such day, and the resource list a
// row per day and resource in scope. Twenty thousand holds twenty public
// holidays a year in each of fifty countries for twenty years; without a
// bound, a member could create holidays of 366 days until every list of
// the workspace ran into its statement timeout.
const DefaultWorkspaceHolidayDays = 20_000

// WorkspaceBudget reads what a workspace's holidays hold (the read model
// does).
type WorkspaceBudget interface {
	PeopleResourceDays(ctx context.Context, workspaceID string) (int64, error)
	HolidayDays(ctx context.Context, workspaceID string) (int64, error)
}

// LimitWorkspaces makes Create refuse (422) a holiday that would take its
// workspace over maxResourceDays of people holidays, or maxHolidayDays of
// global and country ones. The counts are read from the read model, which
// the API brings up to the workspace's last holiday event before a create,
// so every create answered before is counted; the create is appended only
// while that event is still the last (Create.BudgetAt), so creates on
// several instances at once cannot pass a bound together.
func (h *Handlers) LimitWorkspaces(b WorkspaceBudget, maxResourceDays, maxHolidayDays int64) {
	h.Create.budget, h.Create.maxResourceDays, h.Create.maxHolidayDays = b, maxResourceDays, maxHolidayDays
}

// withinBudget refuses created when it would take its workspace over the
// budget.
func (h CreateHandler) withinBudget(ctx context.Context, workspaceID string, created events.HolidayCreated) error {
	if h.budget == nil {
		return nil
	}
	from, err1 := time.Parse(time.DateOnly, created.DateFrom)
	to, err2 := time.Parse(time.DateOnly, created.DateTo)
	if err1 != nil || err2 != nil {
		return nil // validated before: a holiday without dates expands to nothing
	}
	days := int64(to.Sub(from).Hours()/24) + 1
	var (
		held, adds, max int64
		unit            string
		err             error
	)
	switch created.Type {
	case events.HolidayPeople:
		adds, max, unit = int64(len(created.ResourceIDs))*days, h.maxResourceDays, "resource-days (each resource, each day)"
		held, err = h.budget.PeopleResourceDays(ctx, workspaceID)
	case events.HolidayCountry:
		adds, max, unit = int64(len(created.CountryIDs))*days, h.maxHolidayDays, "days of global and country holidays (each country, each day)"
		held, err = h.budget.HolidayDays(ctx, workspaceID)
	default:
		adds, max, unit = days, h.maxHolidayDays, "days of global and country holidays (each country, each day)"
		held, err = h.budget.HolidayDays(ctx, workspaceID)
	}
	if err != nil {
		return &commands.Error{Code: commands.EUnavailable, Message: "The service is temporarily unavailable; try again.",
			Err: fmt.Errorf("read the workspace's holiday budget: %w", err)}
	}
	if held+adds > max {
		return commands.Errorf(commands.EUnprocessable,
			"The workspace's holidays would exceed %d %s: it holds %d, this one adds %d.", max, unit, held, adds)
	}
	return nil
}
