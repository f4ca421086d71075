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
