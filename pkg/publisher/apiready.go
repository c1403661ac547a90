package publisher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/pkg/kubeconfig"
)

// k3s opens its port and writes its kubeconfig a few seconds before its API
// server is ready (/readyz fails until then). A kubeconfig published, or a pod
// marked Ready, in that window hands clients a server that does not answer. So
// the publisher asks the API server itself, through the very kubeconfig k3s
// wrote (its admin credentials; k3s turns anonymous auth off, so the kubelet
// cannot ask /readyz directly), before it publishes, and serves the answer on
// its health port for the k3s container's readiness probe.

// apiChecker asks an API server's /readyz with a kubeconfig's credentials. It
// keeps one HTTP client per kubeconfig content, so the readiness probe reuses
// its connection instead of a TLS handshake per probe.
type apiChecker struct {
	timeout time.Duration

	mu     sync.Mutex
	data   []byte
	host   string
	client *http.Client
}

// check returns nil when the API server k names answers GET /readyz with 200
// "ok" to k's credentials; data is the content k was parsed from. The error
// says why not, with the server's URL and the names of the failing checks,
// never credentials.
func (c *apiChecker) check(ctx context.Context, data []byte, k *kubeconfig.Kubeconfig) error {
	host, client, err := c.clientFor(data, k)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(host, "/")+"/readyz", nil)
	if err != nil {
		return fmt.Errorf("the API server at %s: %w", host, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("the API server at %s does not answer: %w", host, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok" {
		return nil
	}
	msg := fmt.Sprintf("the API server at %s is not ready: /readyz answered %d", host, resp.StatusCode)
	if failed := failedChecks(body); failed != "" {
		msg += " (" + failed + ")"
	}
	return errors.New(msg)
}

// clientFor returns the client for k, building a new one from k when data,
// the content k was parsed from, changed (k3s rewrote the file with new
// credentials).
func (c *apiChecker) clientFor(data []byte, k *kubeconfig.Kubeconfig) (string, *http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil && bytes.Equal(c.data, data) {
		return c.host, c.client, nil
	}
	cfg := k.RESTConfig()
	cfg.UserAgent = "k3k-kubeconfig-publisher"
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", nil, fmt.Errorf("building a client for %s: %w", k.Server, err)
	}
	if c.client != nil {
		c.client.CloseIdleConnections()
	}
	c.data, c.host, c.client = bytes.Clone(data), k.Server, client
	return c.host, c.client, nil
}

// failedChecks names the checks a /readyz body reports as failed ("[-]etcd
// failed: reason withheld"), at most a few, so a reason stays one short line.
func failedChecks(body []byte) string {
	var failed []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, ok := strings.CutPrefix(line, "[-]"); ok {
			if n, _, ok := strings.Cut(name, " "); ok {
				name = n
			}
			failed = append(failed, name)
		}
	}
	if len(failed) > 4 {
		failed = append(failed[:4], fmt.Sprintf("and %d more", len(failed)-4))
	}
	if len(failed) == 0 {
		return ""
	}
	return "failing: " + strings.Join(failed, ", ")
}

// unwrapURLError drops the *url.Error wrapper, which repeats the URL.
func unwrapURLError(err error) error {
	var u *url.Error
	if errors.As(err, &u) && u.Err != nil {
		return u.Err
	}
	return err
}

// APIReady reports whether the API server of the kubeconfig k3s wrote answers
// /readyz ok through that kubeconfig's credentials: nil when it does, else why
// not (no kubeconfig yet, an invalid one, no answer, or failing checks).
func (p *Publisher) APIReady(ctx context.Context) error {
	data, err := os.ReadFile(p.cfg.KubeconfigPath)
	if errors.Is(err, os.ErrNotExist) {
		return errors.New("k3s has not written " + p.cfg.KubeconfigPath + " yet")
	}
	if err != nil {
		return fmt.Errorf("reading kubeconfig: %w", err)
	}
	k, err := kubeconfig.ParseValid(data, p.cfg.Now())
	if err != nil {
		return err
	}
	return p.api.check(ctx, data, k)
}

// ReadyHandler serves /readyz for the k3s container's readiness probe: 200
// once the server's API answers its own /readyz through the admin kubeconfig
// k3s wrote, 503 with the reason otherwise. Each probe asks the API anew, so a
// server whose API stops serving leaves the Service's endpoints. It is not a
// liveness check: a slow API makes the pod unready, never restarts it.
func (p *Publisher) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.APIReady(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
