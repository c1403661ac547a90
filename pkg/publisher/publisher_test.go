package publisher_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/agentbootstrap"
	"github.com/k3k-io/k3k/pkg/dirwatch"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/publisher"
)

// TestRotationReachesAgents runs the whole path: k3s writes its kubeconfig, the
// publisher (with only its Role's rights) puts it in the Secret on the host
// apiserver, "kubelet" copies the Secret into a volume the way kubelet does, and an
// agent using agentbootstrap talks to the virtual apiserver with it. Then k3s
// writes a kubeconfig with a new client certificate: the Secret changes exactly
// once and the agent, requesting all along, switches to the new identity without
// a restart and without a failed request.
func TestRotationReachesAgents(t *testing.T) {
	rotationReachesAgents(t, nil)
}

// TestRotationReachesAgentsWithoutInotify runs the same path on a node whose
// inotify instances are all taken (CI of 2026-12-05: publishers exited with
// "too many open files" and their servers never became Ready): the publisher
// and the agent poll their directories, and nothing else could notice the
// changes in time (resyncs an hour apart).
func TestRotationReachesAgentsWithoutInotify(t *testing.T) {
	noInstance := func() (*fsnotify.Watcher, error) { return nil, syscall.EMFILE }
	rotationReachesAgents(t, []dirwatch.Option{dirwatch.WithNotify(noInstance)})
}

func rotationReachesAgents(t *testing.T, watch []dirwatch.Option) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	tn := newTenant(t)
	tn.writeKubeconfig(t, "admin-1")
	p := tn.publisher(t, func(c *publisher.Config) {
		if watch != nil {
			c.WatchOptions, c.Resync = watch, time.Hour
		}
	})
	runPublisher(t, ctx, p, tn)

	vol := &testenv.SecretVolume{Dir: t.TempDir()}
	published := make(chan time.Time, 10)
	runKubelet(t, ctx, tn, vol, published)
	<-published

	// The Secret holds a kubeconfig for the Service, and it works.
	data := tn.secret(t, tn.kubeconfigSecret).Data[layout.SecretKeyKubeconfig]
	if err := kubeconfig.Validate(data, time.Now()); err != nil {
		t.Fatalf("published kubeconfig is invalid: %v", err)
	}
	k, err := kubeconfig.Parse(data)
	must(t, err)
	if k.Server != serviceURL {
		t.Fatalf("published server = %q, want %q", k.Server, serviceURL)
	}
	if user, err := whoami(ctx, virtualClient(t, k.RESTConfig())); err != nil || user != "admin-1" {
		t.Fatalf("published credentials reach the virtual apiserver as %q: %v", user, err)
	}
	health := httptest.NewServer(p.HealthHandler())
	defer health.Close()
	if body := get(t, health.URL); !strings.HasPrefix(body, "ok: Published") {
		t.Errorf("/healthz = %q", body)
	}

	// The agent.
	var (
		client    atomic.Pointer[kubernetes.Clientset]
		changedAt atomic.Int64
	)
	loaderConfig := agentbootstrap.Config{
		Dir: vol.Dir,
		OnChange: func(cfg *rest.Config) {
			client.Store(virtualClient(t, cfg))
			changedAt.Store(time.Now().UnixNano())
		},
	}
	if watch != nil {
		loaderConfig.WatchOptions, loaderConfig.Resync = watch, time.Hour
	}
	loader, err := agentbootstrap.New(loaderConfig)
	must(t, err)
	cfg, err := loader.Wait(ctx)
	must(t, err)
	client.Store(virtualClient(t, cfg))
	go func() { _ = loader.Run(ctx) }()

	var (
		requests, failures atomic.Int64
		seenAt             = map[string]time.Time{}
		mu                 sync.Mutex
		stopAgent          = make(chan struct{})
		agentDone          = make(chan struct{})
		stopOnce           sync.Once
	)
	stop := func() { stopOnce.Do(func() { close(stopAgent) }); <-agentDone }
	defer stop()
	go func() {
		defer close(agentDone)
		for {
			select {
			case <-stopAgent:
				return
			default:
			}
			user, err := whoami(ctx, client.Load())
			requests.Add(1)
			if err != nil {
				failures.Add(1)
				t.Errorf("agent request failed: %v", err)
				continue
			}
			mu.Lock()
			if _, ok := seenAt[user]; !ok {
				seenAt[user] = time.Now()
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitFor(t, "the agent to work as admin-1", func() bool { mu.Lock(); defer mu.Unlock(); return !seenAt["admin-1"].IsZero() })

	writesBefore := tn.writes.count(tn.kubeconfigSecret)
	tn.writeKubeconfig(t, "admin-2")
	written := time.Now()
	waitFor(t, "the agent to work as admin-2", func() bool { mu.Lock(); defer mu.Unlock(); return !seenAt["admin-2"].IsZero() })
	mu.Lock()
	using := seenAt["admin-2"]
	mu.Unlock()
	// Let the agent run on with the new credentials before stopping it.
	for n := requests.Load(); requests.Load() < n+20; {
		time.Sleep(5 * time.Millisecond)
	}
	stop()

	secretAt := <-published
	t.Logf("kubeconfig change on disk -> agent using new credentials: %s "+
		"(disk -> Secret updated: %s, Secret -> kubelet swap -> agent reloaded: %s, reload -> first request as new user: %s; "+
		"kubelet's own refresh delay of a real Secret volume, about 1m by default, comes on top)",
		using.Sub(written).Round(time.Millisecond), secretAt.Sub(written).Round(time.Millisecond),
		time.Unix(0, changedAt.Load()).Sub(secretAt).Round(time.Millisecond),
		using.Sub(time.Unix(0, changedAt.Load())).Round(time.Millisecond))

	if n := tn.writes.count(tn.kubeconfigSecret) - writesBefore; n != 1 {
		t.Errorf("the kubeconfig Secret was written %d times for one rotation, want 1 (%v)", n, tn.writes.all())
	}
	if f := failures.Load(); f != 0 {
		t.Errorf("%d of %d agent requests failed during rotation", f, requests.Load())
	}
	if st := loader.Status(); st.Generation != 2 || st.Err != nil {
		t.Errorf("agent status = %+v, want generation 2 without error", st)
	}
	if n := tn.writes.count(tn.tokenSecret); n != 0 {
		t.Errorf("the token Secret, which has its value, was written %d times", n)
	}
}

// TestInvalidContentIsNotPublished feeds the publisher what a broken or
// half-finished k3s could leave on disk. None of it reaches the Secret, each has a
// reason that names the problem without content, and the last good kubeconfig
// stays published.
func TestInvalidContentIsNotPublished(t *testing.T) {
	ctx := t.Context()
	tn := newTenant(t)
	good := tn.writeKubeconfig(t, "admin")
	p := tn.publisher(t, nil)
	res, err := p.Sync(ctx)
	if err != nil || res.State != publisher.StatePublished || !res.Published {
		t.Fatalf("Sync() = %+v, %v", res, err)
	}
	before := tn.secret(t, tn.kubeconfigSecret)
	writes := tn.writes.count("")

	other, err := virtualCA.Issue(testenv.CertSpec{CommonName: "other"})
	must(t, err)
	goodKey, err := kubeconfig.Parse(good)
	must(t, err)
	mismatched := bytes.Replace(good, b64(goodKey.KeyData), b64(other.Key), 1)
	tests := []struct {
		name   string
		data   []byte // nil removes the file
		state  publisher.State
		reason string
	}{
		{"garbage", []byte("\x89PNG\r\n\x1a\n not a kubeconfig"), publisher.StateInvalid, "malformed"},
		{"truncated, as a half-written file", good[:len(good)*2/3], publisher.StateInvalid, "malformed"},
		{"an expired client certificate", k3sKubeconfig(t, testenv.CertSpec{CommonName: "admin", NotAfter: time.Now().Add(-time.Minute)}), publisher.StateInvalid, "validity"},
		{"a key that is not the certificate's", mismatched, publisher.StateInvalid, "does not match"},
		{"an empty file, as just truncated", []byte{}, publisher.StateWaiting, "empty"},
		{"no file", nil, publisher.StateWaiting, "has not written"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.data == nil {
				must(t, os.Remove(tn.kubeconfigPath))
			} else {
				must(t, os.WriteFile(tn.kubeconfigPath, tt.data, 0o600))
			}
			res, err := p.Sync(ctx)
			if err != nil {
				t.Fatalf("Sync() error = %v", err)
			}
			if res.State != tt.state || !strings.Contains(res.Reason, tt.reason) || res.Published {
				t.Fatalf("Sync() = %+v, want state %s with a reason about %q", res, tt.state, tt.reason)
			}
			assertNoKeyMaterial(t, res.Reason, goodKey.KeyData, other.Key)
			after := tn.secret(t, tn.kubeconfigSecret)
			if after.ResourceVersion != before.ResourceVersion || !bytes.Equal(after.Data[layout.SecretKeyKubeconfig], before.Data[layout.SecretKeyKubeconfig]) {
				t.Fatal("the Secret changed")
			}
		})
	}
	if n := tn.writes.count("") - writes; n != 0 {
		t.Fatalf("%d writes for invalid content: %v", n, tn.writes.all())
	}

	// A file seen half-written while k3s writes it, then completed: published once.
	rotated := k3sKubeconfig(t, testenv.CertSpec{CommonName: "admin-2"})
	must(t, os.WriteFile(tn.kubeconfigPath, rotated[:len(rotated)/2], 0o600))
	if res, _ := p.Sync(ctx); res.State != publisher.StateInvalid {
		t.Fatalf("half-written file: %+v", res)
	}
	must(t, os.WriteFile(tn.kubeconfigPath, rotated, 0o600))
	if res, err := p.Sync(ctx); err != nil || !res.Published {
		t.Fatalf("completed file: %+v, %v", res, err)
	}
	if n := tn.writes.count("") - writes; n != 1 {
		t.Fatalf("%d writes for one completed file, want 1", n)
	}
}

// TestUnchangedFileWritesNothing runs many publish cycles over the same file, with
// the file rewritten in place with the same content as k3s does on restart, and
// checks that the apiserver saw no write at all.
func TestUnchangedFileWritesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	tn := newTenant(t)
	data := tn.writeKubeconfig(t, "admin")
	p := tn.publisher(t, func(c *publisher.Config) { c.Resync = 10 * time.Millisecond; c.Debounce = 5 * time.Millisecond })
	if res, err := p.Sync(ctx); err != nil || !res.Published {
		t.Fatalf("first Sync() = %+v, %v", res, err)
	}
	writes := tn.writes.count("")
	rv := tn.secret(t, tn.kubeconfigSecret).ResourceVersion

	for range 50 {
		if res, err := p.Sync(ctx); err != nil || res.Published || res.State != publisher.StatePublished {
			t.Fatalf("Sync() = %+v, %v", res, err)
		}
	}
	runPublisher(t, ctx, p, tn)
	start := p.Status().Syncs
	for i := 0; p.Status().Syncs < start+100; i++ {
		if i%10 == 0 {
			must(t, os.WriteFile(tn.kubeconfigPath, data, 0o600))
		}
		if ctx.Err() != nil {
			t.Fatal("the publisher stopped syncing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := tn.writes.count("") - writes; n != 0 {
		t.Fatalf("%d writes over %d unchanged cycles: %v", n, p.Status().Syncs, tn.writes.all())
	}
	if got := tn.secret(t, tn.kubeconfigSecret).ResourceVersion; got != rv {
		t.Fatalf("resourceVersion moved from %s to %s", rv, got)
	}
	t.Logf("%d publish cycles over an unchanged file, 0 writes", p.Status().Syncs)
}

// TestRoleAllowsOnlyTheTwoSecrets checks the Role the controller grants the
// publisher against the real apiserver's RBAC, and that the publisher needs no more.
func TestRoleAllowsOnlyTheTwoSecrets(t *testing.T) {
	ctx := t.Context()
	tn := newTenant(t)
	secrets := tn.restricted.CoreV1().Secrets(tn.namespace)
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: error = %v, want Forbidden", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	_, err := secrets.Get(ctx, "k3k-other-kubeconfig", metav1.GetOptions{})
	forbidden("get another Secret", err)
	_, err = secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "k3k-other-kubeconfig", Namespace: tn.namespace}}, metav1.UpdateOptions{})
	forbidden("update another Secret", err)
	_, err = secrets.Patch(ctx, "k3k-other-kubeconfig", types.MergePatchType, []byte(`{"data":{"x":"eA=="}}`), metav1.PatchOptions{})
	forbidden("patch another Secret", err)
	_, err = secrets.List(ctx, metav1.ListOptions{})
	forbidden("list Secrets", err)
	_, err = secrets.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", tn.kubeconfigSecret).String()})
	forbidden("watch its own Secret", err)
	for _, name := range []string{tn.kubeconfigSecret, "k3k-new"} {
		_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tn.namespace}}, metav1.CreateOptions{})
		if name == tn.kubeconfigSecret && apierrors.IsAlreadyExists(err) {
			t.Errorf("create %s: the apiserver got as far as the name clash; create must be refused first", name)
		} else {
			forbidden("create "+name, err)
		}
	}
	forbidden("delete its own Secret", secrets.Delete(ctx, tn.kubeconfigSecret, metav1.DeleteOptions{}))
	_, err = tn.restricted.CoreV1().Secrets("default").Get(ctx, tn.kubeconfigSecret, metav1.GetOptions{})
	forbidden("get a Secret of the same name in another namespace", err)
	_, err = tn.restricted.CoreV1().ConfigMaps(tn.namespace).Get(ctx, tn.kubeconfigSecret, metav1.GetOptions{})
	forbidden("get a ConfigMap of the same name", err)

	for _, name := range []string{tn.kubeconfigSecret, tn.tokenSecret} {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		allowed("get "+name, err)
		if err == nil {
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
			allowed("update "+name, err)
		}
		_, err = secrets.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"k3k.io/test":"patched"}}}`), metav1.PatchOptions{})
		allowed("patch "+name, err)
	}
	// The apiserver's own view of the ServiceAccount's rights agrees.
	review, err := tn.restricted.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: tn.namespace, Verb: "create", Resource: "secrets",
		}},
	}, metav1.CreateOptions{})
	allowed("self subject access review", err)
	if err == nil && review.Status.Allowed {
		t.Error("the ServiceAccount may create Secrets")
	}

	// The publisher does its whole job with these rights.
	before := len(tn.writes.all())
	tn.writeKubeconfig(t, "admin")
	p := tn.publisher(t, nil)
	if res, err := p.Sync(ctx); err != nil || !res.Published {
		t.Fatalf("Sync() with the Role's rights = %+v, %v", res, err)
	}

	// The Secret deleted: the publisher cannot recreate it and says so, without
	// trying to create; the controller's empty placeholder is then filled.
	must(t, hostAdmin.CoreV1().Secrets(tn.namespace).Delete(ctx, tn.kubeconfigSecret, metav1.DeleteOptions{}))
	res, err := p.Sync(ctx)
	if !errors.Is(err, publisher.ErrSecretMissing) || res.Published {
		t.Fatalf("Sync() without the Secret = %+v, %v; want ErrSecretMissing", res, err)
	}
	t.Logf("reported: %v", err)
	must(t, tn.precreate(ctx, tn.kubeconfigSecret, nil))
	if res, err := p.Sync(ctx); err != nil || !res.Published {
		t.Fatalf("Sync() after the controller's placeholder = %+v, %v", res, err)
	}
	for _, r := range tn.writes.all()[before:] {
		if strings.HasPrefix(r, "POST") && strings.Contains(r, "/secrets") {
			t.Errorf("the publisher tried to create a Secret: %s", r)
		}
	}
	if err := kubeconfig.Validate(tn.secret(t, tn.kubeconfigSecret).Data[layout.SecretKeyKubeconfig], time.Now()); err != nil {
		t.Fatalf("refilled Secret: %v", err)
	}
}

// TestTokenSecretRestoredFromServer loses the token Secret's value, then the whole
// Secret, and checks that each time the value comes back from the server's own
// token file: never a new one.
func TestTokenSecretRestoredFromServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	tn := newTenant(t)
	tn.writeKubeconfig(t, "admin")
	p := tn.publisher(t, nil)
	if res, err := p.Sync(ctx); err != nil || res.TokenRestored {
		t.Fatalf("Sync() with the token present = %+v, %v", res, err)
	}
	token := func() string { return string(tn.secret(t, tn.tokenSecret).Data[layout.SecretKeyToken]) }

	// The value emptied.
	s := tn.secret(t, tn.tokenSecret)
	s.Data = map[string][]byte{layout.SecretKeyToken: {}}
	_, err := hostAdmin.CoreV1().Secrets(tn.namespace).Update(ctx, s, metav1.UpdateOptions{})
	must(t, err)
	if res, err := p.Sync(ctx); err != nil || !res.TokenRestored {
		t.Fatalf("Sync() with the token emptied = %+v, %v", res, err)
	}
	if got := token(); got != tn.token {
		t.Fatalf("restored token differs from the server's (len %d vs %d)", len(got), len(tn.token))
	}

	// Emptied by an in-place restore (k3kcli cluster restore), which marks
	// the Secret: the server's copy is the token of the data being
	// replaced, so nothing is restored until the mark is gone.
	s = tn.secret(t, tn.tokenSecret)
	s.Annotations = map[string]string{v1beta1.AnnotationRestorePending: "in-place"}
	s.Data = map[string][]byte{}
	_, err = hostAdmin.CoreV1().Secrets(tn.namespace).Update(ctx, s, metav1.UpdateOptions{})
	must(t, err)
	if res, err := p.Sync(ctx); err != nil || res.TokenRestored || token() != "" {
		t.Fatalf("Sync() with the token emptied by a restore = %+v, %v; token restored: %v", res, err, token() != "")
	}
	s = tn.secret(t, tn.tokenSecret)
	s.Annotations = nil
	_, err = hostAdmin.CoreV1().Secrets(tn.namespace).Update(ctx, s, metav1.UpdateOptions{})
	must(t, err)
	if res, err := p.Sync(ctx); err != nil || !res.TokenRestored || token() != tn.token {
		t.Fatalf("Sync() once the restore mark is gone = %+v, %v", res, err)
	}

	// The whole Secret deleted, while the publisher runs: it reports and retries
	// until the controller recreates the empty placeholder, then fills it.
	must(t, hostAdmin.CoreV1().Secrets(tn.namespace).Delete(ctx, tn.tokenSecret, metav1.DeleteOptions{}))
	p = tn.publisher(t, func(c *publisher.Config) { c.MinBackoff, c.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond })
	runPublisher(t, ctx, p, tn)
	waitFor(t, "the publisher to report the missing Secret", func() bool { return errors.Is(p.Status().Err, publisher.ErrSecretMissing) })
	if err := p.Status().Err; strings.Contains(err.Error(), tn.token) {
		t.Fatalf("error holds the token: %v", err)
	}
	syncs := p.Status().Syncs
	waitFor(t, "the publisher to retry", func() bool { return p.Status().Syncs >= syncs+3 })
	must(t, tn.precreate(ctx, tn.tokenSecret, nil))
	waitFor(t, "the token to be restored", func() bool { return token() != "" })
	if got := token(); got != tn.token {
		t.Fatalf("restored token differs from the server's (len %d vs %d)", len(got), len(tn.token))
	}
	// The kubeconfig Secret, untouched by all this, was written once.
	if n := tn.writes.count(tn.kubeconfigSecret); n != 1 {
		t.Errorf("kubeconfig Secret written %d times, want 1", n)
	}
}

// runPublisher runs p until the test ends, logging to the test log, and checks
// then that nothing it logged holds PEM, base64 PEM or the tenant's token.
func runPublisher(t *testing.T, ctx context.Context, p *publisher.Publisher, tn *tenant) {
	t.Helper()
	var (
		mu   sync.Mutex
		logs strings.Builder
	)
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(&logs, prefix, args)
	}, funcr.Options{})
	ctx, cancel := context.WithCancel(logr.NewContext(ctx, log))
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		out := logs.String()
		t.Logf("publisher log:\n%s", out)
		for _, secret := range []string{"-----BEGIN", "LS0tLS1CRUdJT", tn.token} {
			if strings.Contains(out, secret) {
				t.Errorf("the publisher logged secret material (%.12s…)", secret)
			}
		}
	})
}

// runKubelet copies the kubeconfig Secret into vol whenever it changes, as kubelet
// does for a Secret volume (without kubelet's refresh delay), and reports when it
// saw each change.
func runKubelet(t *testing.T, ctx context.Context, tn *tenant, vol *testenv.SecretVolume, published chan<- time.Time) {
	t.Helper()
	w, err := hostAdmin.CoreV1().Secrets(tn.namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", tn.kubeconfigSecret).String(),
	})
	must(t, err)
	t.Cleanup(w.Stop)
	go func() {
		var last []byte
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*corev1.Secret)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			data := s.Data[layout.SecretKeyKubeconfig]
			if len(data) == 0 || bytes.Equal(data, last) {
				continue
			}
			last = data
			at := time.Now()
			if err := vol.Write(map[string][]byte{layout.SecretKeyKubeconfig: data}); err != nil {
				t.Errorf("kubelet: %v", err)
				return
			}
			published <- at
		}
	}()
}

// waitFor polls cond; the bound only keeps a broken component from hanging the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test server on loopback
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return string(body)
}

// b64 is data as a kubeconfig embeds it, to swap a key inside a rendered file.
func b64(data []byte) []byte {
	return []byte(base64.StdEncoding.EncodeToString(data))
}

// assertNoKeyMaterial fails when s holds PEM or a piece of any key, raw or base64.
func assertNoKeyMaterial(t *testing.T, s string, keys ...[]byte) {
	t.Helper()
	if strings.Contains(s, "-----BEGIN") {
		t.Fatalf("message holds PEM: %s", s)
	}
	for _, key := range keys {
		for _, form := range []string{string(key), string(b64(key))} {
			for i := 0; i+24 <= len(form); i += 12 {
				if strings.Contains(s, form[i:i+24]) {
					t.Fatalf("message holds key material: %s", s)
				}
			}
		}
	}
}

// TestFileAppearsLateAndIsReplaced starts the publisher before k3s has written
// anything, then has the file appear and be replaced by rename, with no resync to
// fall back on: the directory watch alone must carry each change to the Secret.
func TestFileAppearsLateAndIsReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	tn := newTenant(t)
	p := tn.publisher(t, func(c *publisher.Config) { c.Resync = time.Hour })
	runPublisher(t, ctx, p, tn)
	waitFor(t, "the publisher to wait for the file", func() bool { return p.Status().State == publisher.StateWaiting })

	published := func() []byte { return tn.secret(t, tn.kubeconfigSecret).Data[layout.SecretKeyKubeconfig] }
	for _, user := range []string{"admin-1", "admin-2"} {
		data := k3sKubeconfig(t, testenv.CertSpec{CommonName: user})
		want, err := kubeconfig.Rewrite(data, kubeconfig.Endpoint{URL: serviceURL})
		must(t, err)
		tmp := tn.kubeconfigPath + ".tmp"
		must(t, os.WriteFile(tmp, data, 0o600))
		must(t, os.Rename(tmp, tn.kubeconfigPath))
		waitFor(t, "the Secret to hold "+user+"'s kubeconfig", func() bool { return bytes.Equal(published(), want) })
	}
	if n := tn.writes.count(tn.kubeconfigSecret); n != 2 {
		t.Errorf("kubeconfig Secret written %d times for two files, want 2", n)
	}
}

// TestHealth answers 200 whatever the publisher found, and 503 only when its loop
// has stopped completing Syncs.
func TestHealth(t *testing.T) {
	tn := newTenant(t)
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	p := tn.publisher(t, func(c *publisher.Config) { c.Now = func() time.Time { return *now.Load() } })
	srv := httptest.NewServer(p.HealthHandler())
	defer srv.Close()
	status := func() (int, string) {
		resp, err := http.Get(srv.URL) //nolint:noctx // a test server on loopback
		must(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := status(); code != 200 || !strings.Contains(body, "Starting") {
		t.Errorf("before the first Sync: %d %q", code, body)
	}
	if _, err := p.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, body := status(); code != 200 || !strings.Contains(body, "Waiting") {
		t.Errorf("waiting for k3s: %d %q", code, body)
	}
	later := start.Add(10 * time.Minute)
	now.Store(&later)
	if code, body := status(); code != 503 {
		t.Errorf("loop stuck for ten minutes: %d %q", code, body)
	}
}

// TestServersOfOneClusterDoNotTakeTurns: with several servers (etcd HA) every
// k3s writes its own kubeconfig, each with its own client certificate from the
// cluster's CA. The first publisher's Secret stays while it is as good as the
// others' (same CA and server, valid beyond the hand-over window), so the
// servers do not rewrite it in turn; when it nears expiry, another server's
// replaces it, once.
func TestServersOfOneClusterDoNotTakeTurns(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	tn := newTenant(t)
	start := time.Now()
	// The test CA lives a day, so the certificates and the hand-over window are
	// scaled down: server 0's certificate ends after 12 h, server 1's after 20 h,
	// and a publisher hands over 1 h before expiry.
	admin := func(user string, life time.Duration) []byte {
		return k3sKubeconfig(t, testenv.CertSpec{CommonName: user, Organization: []string{"system:masters"}, NotAfter: start.Add(life)})
	}
	must(t, os.WriteFile(tn.kubeconfigPath, admin("admin-from-server-0", 12*time.Hour), 0o600))
	other := filepath.Join(t.TempDir(), "kubeconfig.yaml") // server 1's emptyDir
	must(t, os.WriteFile(other, admin("admin-from-server-1", 20*time.Hour), 0o600))
	clock0, clock1 := start, start
	server0 := tn.publisher(t, func(c *publisher.Config) {
		c.Identity, c.HandOver, c.Now = "k3k-demo-server-0", time.Hour, func() time.Time { return clock0 }
	})
	server1 := tn.publisher(t, func(c *publisher.Config) {
		c.Identity, c.HandOver, c.Now, c.KubeconfigPath = "k3k-demo-server-1", time.Hour, func() time.Time { return clock1 }, other
	})

	if res, err := server0.Sync(ctx); err != nil || !res.Published {
		t.Fatalf("server 0 Sync() = %+v, %v", res, err)
	}
	first := tn.secret(t, tn.kubeconfigSecret)
	if first.Annotations[publisher.AnnotationPublishedBy] != "k3k-demo-server-0" {
		t.Fatalf("annotations %v, want the publisher named", first.Annotations)
	}
	writes := tn.writes.count("")
	for range 20 {
		for _, p := range []*publisher.Publisher{server0, server1} {
			if res, err := p.Sync(ctx); err != nil || res.Published {
				t.Fatalf("Sync() = %+v, %v: a server rewrote a Secret that serves as well as its own", res, err)
			}
		}
	}
	if n := tn.writes.count(""); n != writes {
		t.Fatalf("%d writes over 20 rounds of two servers, want 0: %v", n-writes, tn.writes.all())
	}
	if got := tn.secret(t, tn.kubeconfigSecret); got.ResourceVersion != first.ResourceVersion {
		t.Fatalf("the Secret changed hands without a reason")
	}

	// 11.5 h later server 0's certificate is inside the hand-over window and
	// server 1's lasts longer: server 1 takes over, once.
	clock0, clock1 = start.Add(690*time.Minute), start.Add(690*time.Minute)
	if res, err := server1.Sync(ctx); err != nil || !res.Published {
		t.Fatalf("server 1 Sync() near expiry = %+v, %v, want it to take over", res, err)
	}
	taken := tn.secret(t, tn.kubeconfigSecret)
	if taken.Annotations[publisher.AnnotationPublishedBy] != "k3k-demo-server-1" {
		t.Fatalf("annotations %v after the hand-over", taken.Annotations)
	}
	k, err := kubeconfig.Parse(taken.Data[layout.SecretKeyKubeconfig])
	must(t, err)
	if user, err := whoami(ctx, virtualClient(t, k.RESTConfig())); err != nil || user != "admin-from-server-1" {
		t.Fatalf("handed-over credentials reach the virtual apiserver as %q: %v", user, err)
	}
	// Server 0, whose own certificate is the one about to expire, leaves it.
	for range 5 {
		if res, err := server0.Sync(ctx); err != nil || res.Published {
			t.Fatalf("server 0 Sync() after the hand-over = %+v, %v", res, err)
		}
	}
	if got := tn.secret(t, tn.kubeconfigSecret); got.ResourceVersion != taken.ResourceVersion {
		t.Fatalf("server 0 took the Secret back")
	}
}
