//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Real k3s opens its port and writes its kubeconfig seconds before its API
// serves. These scenarios prove that "ready" (the pod's readiness, the
// Cluster's Ready, k3kcli create returning) means the API answers.

// freshClient is a client of the kubeconfig at path that opens a new
// connection for every request, so that every request is routed through the
// Service anew (a kept-alive connection would stay on one server pod and never
// meet a new one), and that never retries. Its timeout is generous: a slow
// answer on this busy machine is not what is measured.
func freshClient(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	rc := restConfig(t, path)
	rc.Timeout = 20 * time.Second
	rc.QPS, rc.Burst = 1000, 1000
	// Our own transport: HTTP/1.1 (no ForceAttemptHTTP2 with a custom TLS
	// config) without keep-alive, where HTTP/2 would multiplex every request
	// over one connection. The kubeconfig's credentials are client
	// certificates, which the TLS config carries.
	tlsConfig, err := rest.TLSConfigFor(rc)
	if err != nil {
		t.Fatalf("TLS config of %s: %v", path, err)
	}
	rc.Transport = &http.Transport{
		TLSClientConfig:     tlsConfig,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   true,
	}
	rc.TLSClientConfig = rest.TLSClientConfig{}
	return kubernetes.NewForConfigOrDie(rc)
}

// hammer sends n requests through c back to back (reads, and a write every
// fifth) and returns the errors, each with the request's number.
func hammer(ctx context.Context, c kubernetes.Interface, n int, tag string) []error {
	var errs []error
	for i := range n {
		var err error
		if i%5 == 4 {
			_, err = c.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", tag, i)},
			}, metav1.CreateOptions{})
		} else {
			_, err = c.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", i, err))
		}
	}
	return errs
}

// TestReadinessCreateThenHammer creates a cluster 5 times in a row and sends
// requests through the kubeconfig k3kcli wrote the moment create returns. Not
// one may fail: create returning means the API serves at that address.
func TestReadinessCreateThenHammer(t *testing.T) {
	t.Parallel()
	// Each round is a cluster's first start; 5 rounds (10 before) keep every
	// assertion at half the suite's cost.
	const rounds, requests = 5, 50
	var failed, total int
	var took []time.Duration
	for round := range rounds {
		name := fmt.Sprintf("hammer-%d", round)
		ns := "e2e-" + name
		ctx := context.Background()
		if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating namespace %s: %v", ns, err)
		}
		path := cfg.workDir + "/" + name + ".kubeconfig"
		start := time.Now()
		k3kcli(t, "cluster", "create", name, "-n", ns, "--expose", "nodeport", "--persistence-type", "ephemeral",
			"--timeout", "5m", "--output-kubeconfig", path)
		took = append(took, time.Since(start))
		errs := hammer(ctx, freshClient(t, path), requests, name)
		total += requests
		failed += len(errs)
		for _, err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		t.Logf("round %d: create took %s; %d/%d requests right after it failed", round, took[round].Round(time.Millisecond), len(errs), requests)
		if t.Failed() {
			dumpPod(t, &vcluster{name: name, namespace: ns})
			return // keep the namespace to look at
		}
		k3kcli(t, "cluster", "delete", name, "-n", ns)
		if err := host.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Logf("deleting namespace %s: %v", ns, err)
		}
	}
	t.Logf("RESULT create-then-hammer: %d rounds, %d requests right after create returned, %d failed; create took %s",
		rounds, total, failed, summary(took))
}

// event is a moment of the rolling deletion, to place errors against.
type event struct {
	at   time.Time
	what string
}

// rollingServerDeletion deletes v's three etcd server pods one at a time,
// each after its predecessor's replacement is Ready, while a client sends
// requests through the Service, each on a new connection. Each replacement
// must come back on a new IP as the same member (members, the IDs by pod),
// and a replacement that joins the Service before its API serves would fail
// requests right after it turns Ready: those must not happen. Errors while a
// deleted pod terminates are counted and reported apart.
func rollingServerDeletion(t *testing.T, v *vcluster, crc client.Client, members map[string]string) {
	t.Helper()
	c := freshClient(t, v.kubeconfig)

	type failure struct {
		at  time.Time
		err error
	}
	var (
		mu       sync.Mutex
		failures []failure
		requests int
	)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			var err error
			if i%5 == 4 {
				_, err = c.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rolling-%d", i)},
				}, metav1.CreateOptions{})
			} else {
				_, err = c.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
			}
			if ctx.Err() != nil {
				return
			}
			mu.Lock()
			requests++
			if err != nil {
				failures = append(failures, failure{time.Now(), err})
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() {
		stop()
		<-done
	}()

	// settle keeps each replacement's first seconds in the Service apart from
	// the next deletion, so an error is placed against one event only.
	const settle = 10 * time.Second
	var joins, deletions []event
	for i := range 3 {
		pod := fmt.Sprintf("k3k-%s-server-%d", v.name, i)
		old := getPod(t, v, pod)
		start := time.Now()
		deletions = append(deletions, event{start, "deleted " + pod})
		if err := host.CoreV1().Pods(v.namespace).Delete(context.Background(), pod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		fresh := waitPodReplaced(t, v, old, 8*time.Minute)
		if fresh.Status.PodIP == old.Status.PodIP {
			t.Fatalf("the new %s has the old IP %s; the test proves nothing", pod, old.Status.PodIP)
		}
		joins = append(joins, event{readySince(fresh), pod + " (new) Ready"})
		after := waitMembers(t, crc, v, 3, 8*time.Minute)
		if !maps.Equal(after, members) {
			t.Fatalf("members changed from %v to %v; a pod with a new IP must stay the same member", members, after)
		}
		t.Logf("%s %s → %s: member healthy again after %s", pod, old.Status.PodIP, fresh.Status.PodIP, time.Since(start).Round(time.Second))
		time.Sleep(settle)
	}
	stop()
	<-done

	// An error within settle after a replacement turned Ready, and not while a
	// deleted pod was still terminating (before its replacement was Ready), is
	// one a not-yet-serving server caused.
	mu.Lock()
	defer mu.Unlock()
	var joining, terminating []failure
	for _, f := range failures {
		blamed := false
		for _, j := range joins {
			if !f.at.Before(j.at.Add(-time.Second)) && f.at.Before(j.at.Add(settle)) {
				joining = append(joining, f)
				blamed = true
				break
			}
		}
		if !blamed {
			terminating = append(terminating, f)
		}
	}
	for _, f := range joining {
		t.Errorf("%s: error within %s of a replacement turning Ready: %v", f.at.Format("15:04:05.000"), settle, f.err)
	}
	for _, f := range terminating {
		t.Logf("%s: error while a deleted server terminated (%s): %v", f.at.Format("15:04:05.000"), kind(f.err), f.err)
	}
	for _, e := range append(deletions, joins...) {
		t.Logf("%s %s", e.at.Format("15:04:05.000"), e.what)
	}
	t.Logf("RESULT rolling deletion of 3 etcd servers: %d requests, %d errors (%d within %s of a replacement turning Ready, %d while a deleted pod terminated)",
		requests, len(failures), len(joining), settle, len(terminating))
}

// readySince is when p's Ready condition last turned true.
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Now()
}

// kind names an error's class for the report.
func kind(err error) string {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status):
		return fmt.Sprintf("HTTP %d %s", status.Status().Code, status.Status().Reason)
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	case strings.Contains(err.Error(), "connection reset"), strings.Contains(err.Error(), "EOF"):
		return "connection reset"
	default:
		return "other"
	}
}
