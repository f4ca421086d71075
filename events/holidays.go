package events

// Holiday types.
const (
	HolidayGlobal  = "global"
	HolidayPeople  = "people"
	HolidayCountry = "country"
)

// HolidayCreated: a holiday exists, with everything fixed at creation.
// Version 2 made the country a list (countryIds); version 1 had a single
// countryId and is upcast on read.
type HolidayCreated struct {
	HolidayID   string   `json:"holidayId"`
	Reason      string   `json:"reason"`
	Type        string   `json:"type"`
	DateFrom    string   `json:"dateFrom"` // YYYY-MM-DD
	DateTo      string   `json:"dateTo"`   // YYYY-MM-DD
	CountryIDs  []string `json:"countryIds"`
	ResourceIDs []string `json:"resourceIds"`
}

// HolidayRenamed: the holiday's display name (reason) changed. Both names
// are kept so an audit reads the history without replaying it.
type HolidayRenamed struct {
	HolidayID string `json:"holidayId"`
	OldReason string `json:"oldReason"`
	NewReason string `json:"newReason"`
}

// ResourceUpserted: an upstream service created or changed a resource
// (a person holidays apply to). It carries the whole resource.
type ResourceUpserted struct {
	ResourceID  string `json:"resourceId"`
	Name        string `json:"name"`
	CountryCode string `json:"countryCode"`
	IsActive    bool   `json:"isActive"`
	IsGuest     bool   `json:"isGuest"`
}

func (HolidayCreated) EventType() string   { return "HolidayCreated" }
func (HolidayRenamed) EventType() string   { return "HolidayRenamed" }
func (ResourceUpserted) EventType() string { return "ResourceUpserted" }

func (HolidayCreated) EventVersion() int   { return 2 }
func (HolidayRenamed) EventVersion() int   { return 1 }
func (ResourceUpserted) EventVersion() int { return 1 }

// WorkspaceErased: a workspace's data was erased on request (tenant
// offboarding). Every holiday and resource event of the workspace was
// removed from the log, and every inbox erased; this event, on the
// workspace's own subject, is what its audit history keeps. Who asked is
// the event's actor.
type WorkspaceErased struct {
	ErasureID string `json:"erasureId"`
	Holidays  int    `json:"holidays"` // aggregates whose history was removed
	Resources int    `json:"resources"`
	Inboxes   int    `json:"inboxes"`
}

func (WorkspaceErased) EventType() string { return "WorkspaceErased" }
func (WorkspaceErased) EventVersion() int { return 1 }
