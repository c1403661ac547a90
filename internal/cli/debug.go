package cli

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// debugTransport logs each request k3kcli sends to the host API server:
// method, URL, status and duration, never headers or bodies (they carry
// credentials and Secrets).
type debugTransport struct {
	next http.RoundTripper
	out  io.Writer
	mu   *sync.Mutex
}

func (d debugTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := d.next.RoundTrip(req)
	d.mu.Lock()
	defer d.mu.Unlock()
	u := *req.URL
	u.User = nil
	if err != nil {
		fmt.Fprintf(d.out, "debug: %s %s: %v (%s)\n", req.Method, u.String(), err, time.Since(start).Round(time.Millisecond))
		return resp, err
	}
	fmt.Fprintf(d.out, "debug: %s %s %d (%s)\n", req.Method, u.String(), resp.StatusCode, time.Since(start).Round(time.Millisecond))
	return resp, err
}

// withDebug makes cfg log its requests on out.
func withDebug(cfg *rest.Config, out io.Writer) {
	mu := &sync.Mutex{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return debugTransport{next: rt, out: out, mu: mu} })
}
