package holidays

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"astro/commands"
	"astro/events"
)

// UpsertResource creates or replaces a resource, as upstream services keep
// it.
type UpsertResource struct {
	Caller      commands.Caller
	ResourceID  string
	Name        string
	CountryCode string
	IsActive    bool
	IsGuest     bool
}

// UpsertResourceHandler handles UpsertResource.
type UpsertResourceHandler struct {
	resources    *ResourceStore
	validCountry func(string) bool
	now          func() time.Time
}

// Handle records the resource, and returns it as recorded (trimmed, the
// country code upper-cased); an unchanged resource appends nothing.
func (h UpsertResourceHandler) Handle(ctx context.Context, cmd UpsertResource) (events.ResourceUpserted, commands.Result, error) {
	if !cmd.Caller.HasScope(ScopeResourcesWrite) {
		return events.ResourceUpserted{}, commands.Result{}, commands.Errorf(commands.EForbidden, "Changing resources needs the %s privilege.", ScopeResourcesWrite)
	}
	v := commands.Validation{}
	// The public document's ResourceHolidayDto.resourceId is a uuid, and
	// a strict client refuses anything else. The api named every other id
	// it could (events.UUIDFor); the message says what it takes.
	if !events.ValidUUID(cmd.ResourceID) {
		v.Add("id", "The id must be the resource's UUID, such as 123e4567-e89b-12d3-a456-426614174000, or another id, stored as its name-based UUID: "+events.NameRule+".")
	}
	cmd.ResourceID = strings.ToLower(cmd.ResourceID)
	name := strings.TrimSpace(cmd.Name)
	if n := utf8.RuneCountInString(name); !utf8.ValidString(name) || n > MaxNameLen || strings.ContainsFunc(name, unicode.IsControl) {
		v.Add("name", fmt.Sprintf("The name must be text of at most %d characters, without control characters.", MaxNameLen))
	}
	code := strings.ToUpper(strings.TrimSpace(cmd.CountryCode))
	if code != "" && !h.validCountry(code) {
		v.Add("countryCode", "The country code must be ISO 3166-1 alpha-2.")
	}
	if err := v.Err(); err != nil {
		return events.ResourceUpserted{}, commands.Result{}, err
	}
	want := Resource{Exists: true, Name: name, CountryCode: code, IsActive: cmd.IsActive, IsGuest: cmd.IsGuest}
	upserted := events.ResourceUpserted{ResourceID: cmd.ResourceID, Name: name, CountryCode: code, IsActive: cmd.IsActive, IsGuest: cmd.IsGuest}
	agg := events.Aggregate{Kind: events.KindResource, ID: cmd.ResourceID}
	res, err := commands.Run(ctx, h.resources, cmd.Caller, agg, h.now().UTC(), func(r *Resource) ([]events.Payload, error) {
		if *r == want {
			return nil, nil
		}
		return []events.Payload{upserted}, nil
	})
	return upserted, res, err
}
