package api

import (
	"errors"
	"strings"
	"testing"

	"astro/commands"
	"astro/commands/notifications"
)

// TestSendNamesUpstreamIDs: where the public document types an id as
// uuid, a send's other ids are named by their name-based UUID before the
// command sees them ("bob", data.taskId 7: the shared load generator's
// body); what cannot be named reaches the command as it came, for it to
// refuse with its field. The UUIDs are those of events.NameUUID's pinned
// values.
func TestSendNamesUpstreamIDs(t *testing.T) {
	const (
		id       = "123e4567-e89b-12d3-a456-426614174000"
		bob      = "03f5eda1-f39a-50ac-aeb5-1834e4a7bf6c" // NameUUID("bob")
		seven    = "a835367d-666a-51a5-9822-32a35a68e7c1" // NameUUID("7")
		fortyTwo = "cec6663a-faab-5b8a-a9b8-cd31004901ee" // NameUUID("42")
	)
	t.Run("sender", func(t *testing.T) {
		for _, tc := range []struct{ sent, command string }{
			{id, id},
			{strings.ToUpper(id), id},
			{"bob", bob},
			{`b\u006fb`, bob}, // an escape is the same name
			// Left for the command to refuse (400, senderId).
			{"", ""},
			{" bob", " bob"},
			{"bob ", "bob "},
			{`b\tb`, "b\tb"},
			{"{" + id + "}", "{" + id + "}"},
			{strings.Repeat("x", 201), strings.Repeat("x", 201)},
		} {
			req, err := DecodeSend([]byte(`{"recipientId":"alice","senderId":"` + tc.sent + `","notificationType":"t"}`))
			if err != nil {
				t.Fatalf("%q: %v", tc.sent, err)
			}
			if got := command(t, req).SenderID; got != tc.command {
				t.Errorf("senderId %q reaches the command as %q, want %q", tc.sent, got, tc.command)
			}
		}
	})
	t.Run("data", func(t *testing.T) {
		for _, tc := range []struct{ sent, command string }{
			{`{"taskId":7}`, `{"taskId":"` + seven + `"}`},
			{`{"taskId":"42","taskName":"Task 42"}`, `{"taskId":"` + fortyTwo + `","taskName":"Task 42"}`},
			{`{"taskId":42}`, `{"taskId":"` + fortyTwo + `"}`}, // 42 and "42" are one id
			{`{"projectId":"` + strings.ToUpper(id) + `"}`, `{"projectId":"` + id + `"}`},
			{`{"assigneeId":"bob","taskId":null}`, `{"assigneeId":"` + bob + `","taskId":null}`},
			{`{"assigneeId":-7}`, `{"assigneeId":"80befab3-00b6-5c0e-a945-149806a8e8bb"}`}, // NameUUID("-7")
			// Order, the other members' bytes and escapes in them are kept;
			// only the spaces between members go.
			{`{ "taskName" : "a\u00e9 b" , "task\u0049d" : 7 }`, `{"taskName":"a\u00e9 b","taskId":"` + seven + `"}`},
			// Nothing to name: the data as it came, spaces and all.
			{`{ "taskId" : "` + id + `" }`, `{ "taskId" : "` + id + `" }`},
			{`{"taskId":null}`, `{"taskId":null}`},
			{`{}`, `{}`},
			{`null`, `null`},
			{`[7]`, `[7]`},
			// Left for the command to refuse (400, data.<field>).
			{`{"taskId":7.0}`, `{"taskId":7.0}`},
			{`{"taskId":7e0}`, `{"taskId":7e0}`},
			{`{"taskId":true}`, `{"taskId":true}`},
			{`{"taskId":{"id":7}}`, `{"taskId":{"id":7}}`},
			{`{"taskId":["7"]}`, `{"taskId":["7"]}`},
			{`{"taskId":""}`, `{"taskId":""}`},
			{`{"taskId":" 7"}`, `{"taskId":" 7"}`},
			{`{"taskId":"{` + id + `}"}`, `{"taskId":"{` + id + `}"}`},
			{`{"taskName":7}`, `{"taskName":7}`}, // a string field is no id
			{`{"marker":7}`, `{"marker":7}`},     // nor is an unknown one
			// A field's name in any case is that field, as a .NET client
			// writes it; the same field twice is left for the command to
			// refuse the spelling it does not know.
			{`{"TaskName":"T","TASKID":7}`, `{"taskName":"T","taskId":"` + seven + `"}`},
			{`{"taskName":"a","TaskName":"b"}`, `{"taskName":"a","TaskName":"b"}`},
		} {
			req, err := DecodeSend([]byte(`{"recipientId":"alice","senderId":"bob","notificationType":"t","data":` + tc.sent + `}`))
			if err != nil {
				t.Fatalf("%s: %v", tc.sent, err)
			}
			if got := string(command(t, req).Data); got != tc.command {
				t.Errorf("data %s reaches the command as %s, want %s", tc.sent, got, tc.command)
			}
		}
	})
}

// command is the command of req, sent by a caller of no workspace: the
// body names none.
func command(t *testing.T, req SendRequest) notifications.Send {
	t.Helper()
	cmd, err := req.Command(commands.Caller{})
	if err != nil {
		t.Fatalf("%+v: %v", req, err)
	}
	return cmd
}

// TestSendWorkspaceID: the token names the workspace; a body may name the
// same one or none, and one naming another is refused on every transport,
// which all turn a body into the command with Command.
func TestSendWorkspaceID(t *testing.T) {
	caller := commands.Caller{UserID: "svc", WorkspaceID: "w1"}
	for _, tc := range []struct {
		body      string
		forbidden bool
	}{
		{`{}`, false},
		{`{"workspaceId":"w1"}`, false},
		{`{"workspaceId":""}`, false},
		{`{"workspaceId":null}`, false},
		{`{"workspaceId":"w2"}`, true},
		{`{"workspaceId":"W1"}`, true}, // ids are compared as written, as the token's
		{`{"workspaceId":"w1 "}`, true},
	} {
		req, err := DecodeSend([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		cmd, err := req.Command(caller)
		var e *commands.Error
		switch {
		case tc.forbidden && !(errors.As(err, &e) && e.Code == commands.EForbidden):
			t.Errorf("%s: %v, want Forbidden", tc.body, err)
		case !tc.forbidden && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case !tc.forbidden && cmd.Caller.WorkspaceID != "w1":
			t.Errorf("%s: the command's workspace is %q, want the token's", tc.body, cmd.Caller.WorkspaceID)
		}
	}
}
