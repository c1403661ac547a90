package testenv

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Poll calls cond every interval until it returns nil, and returns nil then.
// When timeout passes first it returns cond's last error, saying how long it
// waited. It is the one shape of the suites' eventually helpers: each wraps
// it with its own timeout, interval and what it adds to a failure (the
// agent suite, the tail of the agent's log). The polling is apimachinery's
// (wait.PollUntilContextTimeout); Poll adds only the last error. It is for
// waiting on real components, never for timing; e2e, whose conditions take a
// context, calls wait itself.
func Poll(timeout, interval time.Duration, cond func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err == nil {
		return nil
	}
	if last == nil {
		last = err
	}
	return fmt.Errorf("not within %s: %w", timeout, last)
}
