package testenv

import (
	"fmt"
	"time"
)

// Poll calls cond every interval until it returns nil, and returns nil then.
// When timeout passes first it returns cond's last error, saying how long it
// waited. It is the one shape of the suites' eventually helpers: each wraps
// it with its own timeout, interval and what it adds to a failure (the
// agent suite, the tail of the agent's log). It is for waiting on real
// components, never for timing; e2e, whose conditions take a context, keeps
// its own.
func Poll(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}
