package notifications

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"astro/commands"
)

// The public document's NotificationDataDto is what data may hold: a send
// with anything else is refused under the field, so nothing is stored that
// a generated client cannot decode. The api names an upstream service's
// other ids (42, "42") by their UUID before the command sees them
// (api.TestSendNamesUpstreamIDs); what reaches the command must be a UUID.
func TestSendDataFollowsNotificationDataDto(t *testing.T) {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	for _, tc := range []struct {
		name, data string
		fields     []string // refused, none for accepted
	}{
		{"absent", ``, nil},
		{"null", `null`, nil},
		{"empty object", `{}`, nil},
		{"every field", `{"taskId":"` + id + `","projectId":"` + id + `","assigneeId":"` + id + `","taskShortId":"T-1","projectShortId":"P-1",` +
			`"projectName":"p","taskName":"t","senderFirstName":"Bob","view":"board","shareId":"s1","fileName":"a.txt"}`, nil},
		{"nulls", `{"taskId":null,"taskName":null}`, nil},
		{"upper-case uuid", `{"projectId":"123E4567-E89B-12D3-A456-426614174000"}`, nil},
		{"taskId a number", `{"taskId":42}`, []string{"data.taskId"}},
		{"taskId not a uuid", `{"taskId":"42"}`, []string{"data.taskId"}},
		{"assigneeId braces", `{"assigneeId":"{` + id + `}"}`, []string{"data.assigneeId"}},
		{"name a number", `{"taskName":7}`, []string{"data.taskName"}},
		{"name an object", `{"fileName":{"a":"b"}}`, []string{"data.fileName"}},
		{"unknown field", `{"marker":"x"}`, []string{"data.marker"}},
		{"field names are case-sensitive", `{"TaskId":"` + id + `"}`, []string{"data.TaskId"}},
		{"several", `{"taskId":1,"projectId":"` + id + `","x":true}`, []string{"data.taskId", "data.x"}},
		{"one field spelt twice", `{"taskName":"a","TaskName":"b"}`, []string{"data.TaskName"}},
		{"not an object", `[1]`, []string{"data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := Send{RecipientID: "alice", SenderID: id, NotificationType: "t", Data: json.RawMessage(tc.data)}
			err := cmd.validate()
			var e *commands.Error
			if len(tc.fields) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.As(err, &e) || e.Code != commands.EInvalid {
				t.Fatalf("err = %v, want %s", err, commands.EInvalid)
			}
			var got []string
			for f := range e.Fields {
				got = append(got, f)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.fields) {
				t.Fatalf("fields %v, want %v (%v)", got, tc.fields, e.Fields)
			}
			for f, msgs := range e.Fields {
				if unknown := strings.HasPrefix(msgs[0], "Unknown field"); unknown != (tc.name == "unknown field" || f == "data.TaskId" || f == "data.x") {
					t.Errorf("%s: %q", f, msgs[0])
				}
			}
		})
	}
}

// TestSendSenderIsAUUID: the public document's NotificationDto.senderId is
// a uuid; a send naming its sender otherwise was served to clients that
// could not read it. Upper case is stored lower-cased, as ids are. The api
// names a sender such as "bob" by its UUID first
// (api.TestSendNamesUpstreamIDs), so "bob" reaches here only if the api
// did not: refused, never stored.
func TestSendSenderIsAUUID(t *testing.T) {
	for _, tc := range []struct {
		sender, stored string
		ok             bool
	}{
		{"123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174000", true},
		{"123E4567-E89B-12D3-A456-426614174000", "123e4567-e89b-12d3-a456-426614174000", true},
		{"bob", "", false},
		{"", "", false},
		{"{123e4567-e89b-12d3-a456-426614174000}", "", false},
	} {
		cmd := Send{RecipientID: "alice", SenderID: tc.sender, NotificationType: "t"}
		err := cmd.validate()
		var e *commands.Error
		switch {
		case tc.ok && (err != nil || cmd.SenderID != tc.stored):
			t.Errorf("%q: err %v, stored %q", tc.sender, err, cmd.SenderID)
		case !tc.ok && (!errors.As(err, &e) || len(e.Fields["senderId"]) == 0):
			t.Errorf("%q: err %v, want validationErrors.senderId", tc.sender, err)
		}
	}
}

// TestSendTypeCanBeFiltered: the list's notificationTypes filter trims
// each type and refuses control characters, so a type with spaces at
// either end or a control character was stored and never found.
func TestSendTypeCanBeFiltered(t *testing.T) {
	for _, tc := range []struct {
		typ string
		ok  bool
	}{
		{"task.assigned", true},
		{"task assigned", true},
		{"tâche.assignée", true},
		{" task", false},
		{"task\t", false},
		{"a\nb", false},
		{"a\u0085b", false},
		{"", false},
	} {
		cmd := Send{RecipientID: "alice", SenderID: "123e4567-e89b-12d3-a456-426614174000", NotificationType: tc.typ}
		err := cmd.validate()
		var e *commands.Error
		switch {
		case tc.ok && err != nil:
			t.Errorf("%q: %v", tc.typ, err)
		case !tc.ok && (!errors.As(err, &e) || len(e.Fields["notificationType"]) != 1):
			t.Errorf("%q: err %v, want one validationErrors.notificationType", tc.typ, err)
		}
	}
}
