package testenv

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	errNotYet := errors.New("not yet")
	tests := []struct {
		name      string
		failures  int // how many calls fail before cond succeeds; -1: always
		wantErr   bool
		wantCalls int
	}{
		{"a condition that holds at once is called once", 0, false, 1},
		{"a condition that holds on the third call returns nil then", 2, false, 3},
		{"a condition that never holds returns its last error", -1, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := Poll(50*time.Millisecond, time.Millisecond, func() error {
				calls++
				if tt.failures < 0 || calls <= tt.failures {
					return errNotYet
				}
				return nil
			})
			if (err != nil) != tt.wantErr {
				t.Fatalf("Poll() = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr && (!errors.Is(err, errNotYet) || !strings.Contains(err.Error(), "not within 50ms")) {
				t.Errorf("error %q does not wrap the last error with the timeout", err)
			}
			if tt.wantCalls > 0 && calls != tt.wantCalls {
				t.Errorf("cond called %d times, want %d", calls, tt.wantCalls)
			}
		})
	}
}
