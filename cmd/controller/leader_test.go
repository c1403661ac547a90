package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/k3k-io/k3k/internal/testenv"
)

// stallingProxy forwards to a real kube-apiserver and holds every request for
// one Lease while a stall lasts, the way a starved or overloaded API server
// answers late: the request is answered after the stall, unless the client
// gave up first.
type stallingProxy struct {
	lease string
	mu    sync.Mutex
	until time.Time
	proxy *httputil.ReverseProxy
}

func (p *stallingProxy) stall(d time.Duration) {
	p.mu.Lock()
	p.until = time.Now().Add(d)
	p.mu.Unlock()
}

func (p *stallingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.Contains(r.URL.Path, "/leases/"+p.lease) {
		p.mu.Lock()
		wait := time.Until(p.until)
		p.mu.Unlock()
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-r.Context().Done():
				return
			}
		}
	}
	p.proxy.ServeHTTP(w, r)
}

// TestLeaderKeepsItsLeaseThroughAStalledAPIServer runs the manager with the
// flags' leader election settings against a real kube-apiserver whose Lease
// requests stall for 15 s after the manager has become leader. With the
// defaults it must stay leader and renew after the stall; with
// controller-runtime's own defaults (15 s, 10 s, 2 s), which the controller
// used before, the same stall must end it with "leader election lost", or the
// stall does not test anything.
func TestLeaderKeepsItsLeaseThroughAStalledAPIServer(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	env, err := testenv.StartEnvtest()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	const stall = 15 * time.Second
	cases := []struct {
		name     string
		args     []string
		wantLost bool
	}{
		{name: "the defaults", wantLost: false},
		{name: "controller-runtime's defaults", args: []string{"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"}, wantLost: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseFlags(tc.args, &zap.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lease := "leader-test-" + string(rune('a'+i))
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lease}}
			if err := env.Client.Create(context.Background(), ns); err != nil {
				t.Fatal(err)
			}
			target, err := url.Parse(env.Config.Host)
			if err != nil {
				t.Fatal(err)
			}
			transport, err := rest.TransportFor(env.Config)
			if err != nil {
				t.Fatal(err)
			}
			rp := httputil.NewSingleHostReverseProxy(target)
			rp.Transport = transport
			p := &stallingProxy{lease: lease, proxy: rp}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)

			opts := managerOptions(o, env.Scheme)
			opts.Metrics.BindAddress, opts.HealthProbeBindAddress = "0", "0"
			opts.LeaderElectionID, opts.LeaderElectionNamespace = lease, lease
			mgr, err := ctrl.NewManager(&rest.Config{Host: srv.URL}, opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			select {
			case <-mgr.Elected():
			case err := <-done:
				t.Fatalf("manager stopped before it was elected: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatal("not elected within 2 minutes")
			}
			before := leaseRenewTime(t, env, lease)
			p.stall(stall)
			// Long enough for one renewal after the stall at the slower
			// retry period, and for the loss to show at the faster one.
			select {
			case err := <-done:
				done <- err
				if !tc.wantLost {
					t.Fatalf("manager stopped during a %s stall of its Lease requests: %v", stall, err)
				}
				if err == nil || !strings.Contains(err.Error(), "leader election lost") {
					t.Fatalf("manager stopped with %v, want leader election lost", err)
				}
				t.Logf("stopped as expected: %v", err)
				return
			case <-time.After(stall + 2*o.lease.retryPeriod + 2*time.Second):
			}
			if tc.wantLost {
				t.Fatalf("still leader after a %s stall with a %s renew deadline: the stall tests nothing", stall, o.lease.renewDeadline)
			}
			after := leaseRenewTime(t, env, lease)
			if !after.After(before) {
				t.Fatalf("Lease renewed at %s before the stall and %s after: not renewed since", before, after)
			}
			t.Logf("still leader; Lease renewed at %s; before the stall it was %s", after.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano))
		})
	}
}

// leaseRenewTime reads the Lease directly from the API server (not through the
// proxy).
func leaseRenewTime(t *testing.T, env *testenv.Envtest, name string) time.Time {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: name, Name: name}, l); err != nil {
		t.Fatal(err)
	}
	if l.Spec.RenewTime == nil {
		t.Fatal("the Lease has no renew time")
	}
	return l.Spec.RenewTime.Time
}
