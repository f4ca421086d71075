package events

import "testing"

// TestDataUUID: the one rule by which a send's data ids (api's nameData)
// and an old event's (NormalData) are named. The UUIDs are TestNameUUID's
// pinned values.
func TestDataUUID(t *testing.T) {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	for _, tc := range []struct {
		value, want string // want "" for what it cannot name
	}{
		{`"` + id + `"`, `"` + id + `"`},
		{`"123E4567-E89B-12D3-A456-426614174000"`, `"` + id + `"`},
		{`42`, `"cec6663a-faab-5b8a-a9b8-cd31004901ee"`},
		{`"42"`, `"cec6663a-faab-5b8a-a9b8-cd31004901ee"`}, // 42 and "42" are one id
		{`"bob"`, `"03f5eda1-f39a-50ac-aeb5-1834e4a7bf6c"`},
		{`"b\u006fb"`, `"03f5eda1-f39a-50ac-aeb5-1834e4a7bf6c"`}, // an escape is the same name
		{`null`, `null`},
		{``, ""},
		{`7.0`, ""},
		{`7e0`, ""},
		{`true`, ""},
		{`{"id":7}`, ""},
		{`["7"]`, ""},
		{`""`, ""},
		{`" 7"`, ""},
		{`"{` + id + `}"`, ""},
		{`"0123456789abcdef0123456789abcdef"`, ""},
	} {
		got, ok := DataUUID([]byte(tc.value))
		if ok != (tc.want != "") || string(got) != tc.want {
			t.Errorf("DataUUID(%s) = %s, %v; want %q", tc.value, got, ok, tc.want)
		}
	}
}

func TestIsJSONInteger(t *testing.T) {
	for n, want := range map[string]bool{
		"0": true, "7": true, "-7": true, "12345678901234567890123": true,
		"": false, "-": false, "7.0": false, "7e0": false, "1E3": false, "-0.5": false, `"7"`: false,
	} {
		if got := isJSONInteger([]byte(n)); got != want {
			t.Errorf("isJSONInteger(%q) = %v, want %v", n, got, want)
		}
	}
}

func TestDataFieldName(t *testing.T) {
	for _, tc := range []struct{ name, field string }{
		{"taskId", "taskId"},
		{"TaskId", "taskId"},
		{"TASKNAME", "taskName"},
		{"fileName", "fileName"},
		{"marker", ""},
		{"task_id", ""},
	} {
		field, ok := DataFieldName(tc.name)
		if ok != (tc.field != "") || field != tc.field {
			t.Errorf("DataFieldName(%q) = %q, %v; want %q", tc.name, field, ok, tc.field)
		}
		if ok {
			if _, known := DataField(field); !known {
				t.Errorf("DataFieldName(%q) = %q, which DataField does not know", tc.name, field)
			}
		}
	}
}
