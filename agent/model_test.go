package agent

import (
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"2", 2 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{"Mon, 30 Nov 2026 12:00:07 GMT", 7 * time.Second, true},
		{"Mon, 30 Nov 2026 11:00:00 GMT", 0, true},
		{"", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %s, %t; want %s, %t", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBackoffHonoursRetryAfterAndCap(t *testing.T) {
	m := NewOpenAIModel(OpenAIOptions{BaseURL: "http://127.0.0.1:1", BaseBackoff: 100 * time.Millisecond, MaxBackoff: 3 * time.Second})
	for attempt := 0; attempt < 6; attempt++ {
		d := m.backoff(attempt, 0)
		base := 100 * time.Millisecond << attempt
		if d < min(base/2, 3*time.Second) || d > min(base, 3*time.Second) {
			t.Errorf("attempt %d: backoff %s outside [%s, %s]", attempt, d, base/2, base)
		}
	}
	if d := m.backoff(0, 2*time.Second); d != 2*time.Second {
		t.Errorf("Retry-After 2s gave %s", d)
	}
	if d := m.backoff(5, 0); d > 3*time.Second {
		t.Errorf("backoff %s beyond the 3s cap", d)
	}
}
