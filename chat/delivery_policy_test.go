package chat

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err   error
		want  Outcome
		after time.Duration
	}{
		{errors.New("connection reset"), Retry, 0},
		{&RateLimitError{RetryAfter: 3 * time.Second, Err: errors.New("429")}, RetryAfter, 3 * time.Second},
		{fmt.Errorf("slack: reply: not_in_channel: %w", ErrUndeliverable), Permanent, 0},
		{fmt.Errorf("slack: pin: not_in_channel: %w", ErrPinUnavailable), PinUnavailable, 0},
		{fmt.Errorf("discord: edit: %w", ErrMessageGone), MessageGone, 0},
		{fmt.Errorf("discord: edit: %w", ErrEditLater), EditLater, 0},
	} {
		got, after := Classify(tt.err)
		if got != tt.want || after != tt.after {
			t.Errorf("Classify(%v) = %s, %s; want %s, %s", tt.err, got, after, tt.want, tt.after)
		}
	}
}

func TestBackoffWait(t *testing.T) {
	b := Backoff{First: time.Second, Max: 8 * time.Second}
	for attempt, full := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 30: 8 * time.Second} {
		for range 50 {
			if w := b.Wait(attempt, errors.New("500")); w < full/2 || w > full {
				t.Fatalf("Wait(%d) = %s, want within [%s, %s]", attempt, w, full/2, full)
			}
		}
	}
	if w := b.Wait(1, &RateLimitError{RetryAfter: 20 * time.Second}); w != 20*time.Second {
		t.Errorf("a 429's own wait: %s, want 20s", w)
	}
	if w := b.Wait(1, &RateLimitError{}); w != minWait {
		t.Errorf("a 429 without a wait: %s, want %s", w, minWait)
	}
}

func TestSendUntil(t *testing.T) {
	b := Backoff{First: time.Millisecond, Max: time.Millisecond}
	ctx := context.Background()
	failing := func(errs ...error) (func(context.Context) error, *int) {
		n := 0
		return func(context.Context) error {
			n++
			if n <= len(errs) {
				return errs[n-1]
			}
			return nil
		}, &n
	}
	transient := errors.New("500")
	for _, tt := range []struct {
		name     string
		errs     []error
		attempts int
		wantN    int
		wantErr  bool
	}{
		{"succeeds after transient failures", []error{transient, transient}, 0, 3, false},
		{"a permanent refusal is tried once", []error{fmt.Errorf("x: %w", ErrUndeliverable), nil}, 0, 1, true},
		{"a gone message goes back to the caller", []error{fmt.Errorf("x: %w", ErrMessageGone)}, 0, 1, true},
		{"attempts run out", []error{transient, transient, transient}, 2, 2, true},
		{"429s are retried", []error{&RateLimitError{RetryAfter: time.Millisecond}}, 0, 2, false},
	} {
		send, n := failing(tt.errs...)
		got, err := sendUntil(ctx, b, tt.attempts, nil, send)
		if got != tt.wantN || *n != tt.wantN || (err != nil) != tt.wantErr {
			t.Errorf("%s: %d attempts (%d calls), err %v; want %d, error %t", tt.name, got, *n, err, tt.wantN, tt.wantErr)
		}
	}
	send, n := failing(transient, transient, transient)
	if _, err := sendUntil(ctx, b, 0, func() bool { return true }, send); err == nil || *n != 1 {
		t.Errorf("giveUp: %d calls, err %v; want 1 call and the error", *n, err)
	}
}
