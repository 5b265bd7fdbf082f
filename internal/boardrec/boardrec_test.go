package boardrec

import "testing"

func TestPending(t *testing.T) {
	for _, tt := range []struct {
		name, rec string
		want      bool
	}{
		{"shown, pinned", `{"ref":{"id":"m1"},"pinned":true,"shown":{"revision":1},"want":{"revision":1}}`, false},
		{"no plan yet", `{"ref":{"id":""}}`, false},
		{"not pinned", `{"ref":{"id":"m1"},"pinned":false,"shown":{"revision":1},"want":{"revision":1}}`, true},
		{"pin refused", `{"ref":{"id":"m1"},"pin_unavailable":true,"shown":{"revision":1},"want":{"revision":1}}`, false},
		{"wants newer", `{"ref":{"id":"m1"},"pinned":true,"shown":{"revision":1},"want":{"revision":2}}`, true},
		{"to unpin", `{"ref":{"id":"m2"},"pinned":true,"unpin":[{"id":"m1"}]}`, true},
		{"to restore", `{"ref":{"id":"m2"},"pinned":true,"restore":[{"ref":{"id":"m1"}}]}`, true},
		{"unreadable", `{not json`, true},
	} {
		if got := Pending([]byte(tt.rec)); got != tt.want {
			t.Errorf("%s: Pending = %t, want %t", tt.name, got, tt.want)
		}
	}
}
