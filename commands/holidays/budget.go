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

// WorkspaceBudget reads how many resource-days of people holidays a
// workspace holds (the read model does).
type WorkspaceBudget interface {
	PeopleResourceDays(ctx context.Context, workspaceID string) (int64, error)
}

// LimitWorkspaces makes Create refuse (422) a people holiday that would
// take its workspace over max resource-days. The count is read from the
// read model, which the API brings up to the workspace's last holiday
// event before a create, so every create answered before is counted;
// concurrent creates of one workspace may each pass, so
// the bound can be passed by what is in flight at once (at most 8 requests
// of a workspace run at a time, each at most 366,000 resource-days).
func (h *Handlers) LimitWorkspaces(b WorkspaceBudget, max int64) {
	h.Create.budget, h.Create.maxResourceDays = b, max
}

// withinBudget refuses created when it would take its workspace over the
// budget.
func (h CreateHandler) withinBudget(ctx context.Context, workspaceID string, created events.HolidayCreated) error {
	if h.budget == nil || created.Type != events.HolidayPeople {
		return nil
	}
	from, err1 := time.Parse(time.DateOnly, created.DateFrom)
	to, err2 := time.Parse(time.DateOnly, created.DateTo)
	if err1 != nil || err2 != nil {
		return nil // validated before: a people holiday without dates expands to nothing
	}
	adds := int64(len(created.ResourceIDs)) * (int64(to.Sub(from).Hours()/24) + 1)
	held, err := h.budget.PeopleResourceDays(ctx, workspaceID)
	if err != nil {
		return &commands.Error{Code: commands.EUnavailable, Message: "The service is temporarily unavailable; try again.",
			Err: fmt.Errorf("read the workspace's holiday budget: %w", err)}
	}
	if held+adds > h.maxResourceDays {
		return commands.Errorf(commands.EUnprocessable,
			"The workspace's people holidays would exceed %d resource-days (each resource, each day): it holds %d, this one adds %d.",
			h.maxResourceDays, held, adds)
	}
	return nil
}
