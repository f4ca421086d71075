package commands

import (
	"slices"
	"testing"
)

// TestValidationAddsAMessageOnce: a check run on each element of a list
// answers its message once, not once per element: a URL of 60 KB
// answered 900 KB of the same message.
func TestValidationAddsAMessageOnce(t *testing.T) {
	v := Validation{}
	for range 1000 {
		v.Add("notificationTypes", "notificationTypes must be text without control characters.")
	}
	v.Add("notificationTypes", "another message")
	v.Add("lastId", "lastId must be a UUID.")
	want := Validation{
		"notificationTypes": {"notificationTypes must be text without control characters.", "another message"},
		"lastId":            {"lastId must be a UUID."},
	}
	for field, msgs := range want {
		if !slices.Equal(v[field], msgs) {
			t.Errorf("%s: %q, want %q", field, v[field], msgs)
		}
	}
	if len(v) != len(want) {
		t.Errorf("fields %v, want %v", v, want)
	}
}
