package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"astro/commands"
	"astro/commands/holidays"
	"astro/commands/notifications"
	"astro/events"
	"astro/projections"
	"astro/projections/pgtest"
)

// TestEveryEventTypeIsHandled applies one event of every registered type to
// the aggregate it belongs to and to each projector that consumes its kind,
// on the real PostgreSQL: a type added to the registry and forgotten by an
// aggregate or a projector fails here instead of being parked at run time.
// A projector that has no use for a type must still name it (a no-op case).
func TestEveryEventTypeIsHandled(t *testing.T) {
	ws, user := "ws1", "u1"
	note := events.NewID(time.Now())
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	inbox := events.Aggregate{Kind: events.KindInbox, ID: user}
	holiday := events.Aggregate{Kind: events.KindHoliday, ID: events.NewID(time.Now())}
	resource := events.Aggregate{Kind: events.KindResource, ID: "r1"}
	newInbox := func() commands.Aggregate { return notifications.NewInbox() }
	newHoliday := func() commands.Aggregate { return holidays.NewHoliday() }
	newResource := func() commands.Aggregate { return holidays.NewResource() }
	// In an order each aggregate accepts: a history.
	cases := []struct {
		agg     events.Aggregate
		fresh   func() commands.Aggregate
		payload events.Payload
	}{
		{inbox, newInbox, events.NotificationSent{NotificationID: note, RecipientID: user, SenderID: "u2", NotificationType: "info", Subject: "s", Message: "m", CreateDate: at}},
		{inbox, newInbox, events.NotificationRead{NotificationID: note, RecipientID: user, ReadDate: at}},
		{inbox, newInbox, events.NotificationUnread{NotificationID: note, RecipientID: user}},
		{inbox, newInbox, events.AllNotificationsRead{RecipientID: user, NotificationIDs: []string{note}, ReadDate: at}},
		{inbox, newInbox, events.NotificationDeleted{NotificationID: note, RecipientID: user, Reason: events.ReasonUser}},
		{inbox, newInbox, events.AllNotificationsDeleted{RecipientID: user, NotificationIDs: []string{note}, Reason: events.ReasonBulk}},
		{holiday, newHoliday, events.HolidayCreated{HolidayID: holiday.ID, Reason: "r", Type: events.HolidayGlobal, DateFrom: "2026-01-01", DateTo: "2026-01-02", CountryIDs: []string{}, ResourceIDs: []string{}}},
		{holiday, newHoliday, events.HolidayRenamed{HolidayID: holiday.ID, OldReason: "r", NewReason: "s"}},
		{resource, newResource, events.ResourceUpserted{ResourceID: resource.ID, Name: "n", CountryCode: "DE", IsActive: true}},
		{inbox, newInbox, events.InboxCompacted{RecipientID: user, CompactionID: events.NewID(time.Now()), Part: 1, Parts: 1, NotificationIDs: []string{note},
			Notifications: []events.CompactedNotification{{NotificationID: note, SenderID: "u2", NotificationType: "info", Subject: "s", Message: "m", CreateDate: at, ReadDate: &at, Seq: 1}}}},
		{inbox, newInbox, events.InboxErased{ErasureID: events.NewID(time.Now()), Notifications: 1}},
		// A workspace has no aggregate: its erasure is appended as it is.
		{events.Aggregate{Kind: events.KindWorkspace, ID: ws}, nil, events.WorkspaceErased{ErasureID: events.NewID(time.Now()), Holidays: 1, Resources: 1, Inboxes: 1}},
	}
	var covered []string
	for _, c := range cases {
		covered = append(covered, c.payload.EventType())
	}
	for _, typ := range events.Types() {
		if !slices.Contains(covered, typ) {
			t.Errorf("event type %s has no case here: add one, and handle it in its aggregate and projector", typ)
		}
	}

	ctx := context.Background()
	db := pgtest.Open(t)
	if err := projections.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	projectors := map[string]projections.Projector{}
	for _, reg := range projections.Registered() {
		p, err := reg.New(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != reg.Name {
			t.Errorf("registered as %s, named %s", reg.Name, p.Name())
		}
		var want []string
		for _, k := range reg.Kinds {
			want = append(want, events.KindSubjects(k))
		}
		if !slices.Equal(p.Subjects(), want) {
			t.Errorf("%s: subjects %v, but registered for kinds %v", reg.Name, p.Subjects(), reg.Kinds)
		}
		projectors[reg.Name] = p
	}

	aggs := map[events.Aggregate]commands.Aggregate{}
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() // nothing of this stays
	for i, c := range cases {
		typ := c.payload.EventType()
		e, err := events.New(events.NewID(time.Now()), events.Meta{WorkspaceID: ws, ActorID: user, Time: at}, c.agg, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		e.Seq = uint64(i + 1)
		a := aggs[c.agg]
		if a == nil && c.fresh != nil {
			a = c.fresh()
			aggs[c.agg] = a
		}
		if a != nil {
			if err := a.Apply(e); err != nil {
				t.Errorf("%s: its aggregate (%s) does not apply it: %v", typ, c.agg.Kind, err)
			}
		}
		consumers := projections.Consumers(c.agg.Kind)
		if len(consumers) == 0 {
			t.Errorf("%s: no registered projector consumes kind %s", typ, c.agg.Kind)
		}
		for _, name := range consumers {
			err := projectors[name].Apply(ctx, tx, []events.Event{e})
			if errors.Is(err, projections.ErrUnappliable) {
				t.Errorf("%s: projector %s does not handle it: %v", typ, name, err)
			} else if err != nil {
				t.Fatalf("%s: projector %s: %v", typ, name, err)
			}
		}
	}
}
