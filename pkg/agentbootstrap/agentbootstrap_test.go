package agentbootstrap_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/agentbootstrap"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

const server = "https://k3k-demo-service.tenants.svc:443"

type fixture struct {
	ca  *testenv.CertKey
	vol *testenv.SecretVolume
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	ca, err := testenv.NewCA("k3s-ca")
	if err != nil {
		t.Fatal(err)
	}
	return fixture{ca: ca, vol: &testenv.SecretVolume{Dir: t.TempDir()}}
}

// credentials issues a client certificate and renders the kubeconfig holding it.
func (f fixture) credentials(t *testing.T, spec testenv.CertSpec) (*testenv.CertKey, []byte) {
	t.Helper()
	ck, err := f.ca.Issue(spec)
	if err != nil {
		t.Fatal(err)
	}
	data, err := testenv.K3sKubeconfig(server, f.ca.Cert, ck)
	if err != nil {
		t.Fatal(err)
	}
	return ck, data
}

// publish updates the volume as kubelet does when the Secret changes; a nil kubeconfig
// is the controller's empty placeholder, which has no key at all.
func (f fixture) publish(t *testing.T, data []byte) {
	t.Helper()
	files := map[string][]byte{}
	if data != nil {
		files[layout.SecretKeyKubeconfig] = data
	}
	if err := f.vol.Write(files); err != nil {
		t.Fatal(err)
	}
}

func TestWaitReturnsOnlyValidCredentials(t *testing.T) {
	f := newFixture(t)
	f.publish(t, nil)
	l, err := agentbootstrap.New(agentbootstrap.Config{Dir: f.vol.Dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	type result struct {
		cfg *rest.Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		cfg, err := l.Wait(ctx)
		done <- result{cfg, err}
	}()

	waitForErr(t, l, kubeconfig.ErrEmpty)
	f.publish(t, []byte("garbage: [\n"))
	waitForErr(t, l, kubeconfig.ErrMalformed)
	_, expired := f.credentials(t, testenv.CertSpec{CommonName: "old", NotAfter: time.Now().Add(-time.Minute)})
	f.publish(t, expired)
	waitForErr(t, l, kubeconfig.ErrExpired)
	select {
	case r := <-done:
		t.Fatalf("Wait returned before valid credentials appeared: %v", r.err)
	default:
	}

	admin, valid := f.credentials(t, testenv.CertSpec{CommonName: "admin"})
	f.publish(t, valid)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.cfg.Host != server || !bytes.Equal(r.cfg.CertData, admin.Cert) || !bytes.Equal(r.cfg.KeyData, admin.Key) {
		t.Fatalf("Wait returned other credentials (host %q)", r.cfg.Host)
	}
	if st := l.Status(); st.Generation != 1 || st.Err != nil {
		t.Fatalf("status = %+v", st)
	}
}

func TestWaitGivesUpWithTheReason(t *testing.T) {
	f := newFixture(t)
	key, mismatched := f.credentials(t, testenv.CertSpec{CommonName: "admin"})
	other, _ := f.credentials(t, testenv.CertSpec{CommonName: "other"})
	mismatched = bytes.Replace(mismatched, b64(key.Key), b64(other.Key), 1)
	f.publish(t, mismatched)
	l, err := agentbootstrap.New(agentbootstrap.Config{Dir: f.vol.Dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = l.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), kubeconfig.ErrKeyMismatch.Error()) {
		t.Fatalf("Wait() error = %v, want the deadline and the key mismatch", err)
	}
	if strings.Contains(err.Error(), "BEGIN") || strings.Contains(err.Error(), string(b64(other.Key)[:20])) {
		t.Fatalf("error holds key material: %v", err)
	}
}

// TestRunFollowsKubeletUpdates swaps the volume the way kubelet does and checks that
// each valid new kubeconfig is announced once, and that nothing invalid ever
// replaces the credentials in use.
func TestRunFollowsKubeletUpdates(t *testing.T) {
	f := newFixture(t)
	first, data1 := f.credentials(t, testenv.CertSpec{CommonName: "admin-1"})
	f.publish(t, data1)
	changes := make(chan *rest.Config, 10)
	l, err := agentbootstrap.New(agentbootstrap.Config{
		Dir:      f.vol.Dir,
		OnChange: func(cfg *rest.Config) { changes <- cfg },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg, err := l.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfg.CertData, first.Cert) {
		t.Fatal("Wait returned other credentials")
	}
	runDone := make(chan error, 1)
	go func() { runDone <- l.Run(ctx) }()

	second, data2 := f.credentials(t, testenv.CertSpec{CommonName: "admin-2"})
	f.publish(t, data2)
	expectChange(t, changes, second)

	// The same content again, as kubelet writes on a resync: no announcement.
	f.publish(t, data2)
	other, _ := f.credentials(t, testenv.CertSpec{CommonName: "other"})
	_, expired := f.credentials(t, testenv.CertSpec{CommonName: "expired", NotAfter: time.Now().Add(-time.Minute)})
	bad := []struct {
		name string
		data []byte
		want error
	}{
		{"garbage", []byte{0xff, 0x00, 0x13, 0x37}, kubeconfig.ErrMalformed},
		{"truncated", data2[:len(data2)/2], kubeconfig.ErrMalformed},
		{"expired", expired, kubeconfig.ErrExpired},
		{"mismatched", bytes.Replace(data2, b64(second.Key), b64(other.Key), 1), kubeconfig.ErrKeyMismatch},
		{"empty placeholder", nil, kubeconfig.ErrEmpty},
	}
	for _, b := range bad {
		f.publish(t, b.data)
		waitForErr(t, l, b.want)
		if got := l.Current(); !bytes.Equal(got.CertData, second.Cert) {
			t.Fatalf("after %s content the credentials in use changed", b.name)
		}
	}
	if st := l.Status(); st.Generation != 2 {
		t.Fatalf("generation = %d after refused content, want 2", st.Generation)
	}

	third, data3 := f.credentials(t, testenv.CertSpec{CommonName: "admin-3"})
	f.publish(t, data3)
	expectChange(t, changes, third)
	if st := l.Status(); st.Generation != 3 || st.Err != nil {
		t.Fatalf("status = %+v", st)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatalf("Run() = %v", err)
	}
	if len(changes) != 0 {
		t.Fatalf("%d unexpected announcements", len(changes))
	}
}

func TestNewRefusesAnEmptyDirectory(t *testing.T) {
	if _, err := agentbootstrap.New(agentbootstrap.Config{}); err == nil {
		t.Fatal("New accepted a config without a directory")
	}
}

// BenchmarkReload measures the time from kubelet's swap of "..data" to the agent
// holding the new credentials.
func BenchmarkReload(b *testing.B) {
	ca, err := testenv.NewCA("k3s-ca")
	if err != nil {
		b.Fatal(err)
	}
	var configs [2][]byte
	for i := range configs {
		ck, err := ca.Issue(testenv.CertSpec{CommonName: "admin"})
		if err != nil {
			b.Fatal(err)
		}
		if configs[i], err = testenv.K3sKubeconfig(server, ca.Cert, ck); err != nil {
			b.Fatal(err)
		}
	}
	vol := &testenv.SecretVolume{Dir: b.TempDir()}
	if err := vol.Write(map[string][]byte{layout.SecretKeyKubeconfig: configs[0]}); err != nil {
		b.Fatal(err)
	}
	changes := make(chan *rest.Config, 1)
	l, err := agentbootstrap.New(agentbootstrap.Config{Dir: vol.Dir, OnChange: func(c *rest.Config) { changes <- c }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	if _, err := l.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	go func() { _ = l.Run(ctx) }()
	b.ResetTimer()
	for i := range b.N {
		if err := vol.Write(map[string][]byte{layout.SecretKeyKubeconfig: configs[(i+1)%2]}); err != nil {
			b.Fatal(err)
		}
		<-changes
	}
}

func expectChange(t *testing.T, changes <-chan *rest.Config, want *testenv.CertKey) {
	t.Helper()
	select {
	case cfg := <-changes:
		if !bytes.Equal(cfg.CertData, want.Cert) || !bytes.Equal(cfg.KeyData, want.Key) {
			t.Fatal("OnChange got other credentials than the volume's")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("OnChange was not called after the volume changed")
	}
}

// waitForErr waits until the loader has seen content refused for reason want. It
// polls because the loader reacts on its own goroutine; the bound is generous and
// only stops a broken loader from hanging the test.
func waitForErr(t *testing.T, l *agentbootstrap.Loader, want error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !errors.Is(l.Status().Err, want) {
		if time.Now().After(deadline) {
			t.Fatalf("status error = %v, want %v", l.Status().Err, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// b64 is data as a kubeconfig embeds it, to swap a key inside a rendered file.
func b64(data []byte) []byte {
	return []byte(base64.StdEncoding.EncodeToString(data))
}
