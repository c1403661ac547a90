package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/layout"
)

// publishKubeconfig writes a k3s-style kubeconfig into the cluster's Secret,
// as the server pod's publisher would.
func publishKubeconfig(t *testing.T, ns, name string) {
	t.Helper()
	kc, err := testenv.NewAdminKubeconfig("https://127.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	raw := kc.Data
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "k3k-" + name + "-kubeconfig", Namespace: ns},
		Data: map[string][]byte{layout.SecretKeyKubeconfig: raw}}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestKubeconfigGet(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "kc", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}

	r := k3kcli(t, "kubeconfig", "get", "kc", "-n", ns)
	if r.code != ExitError {
		t.Fatalf("before publication: exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, "has no usable kubeconfig yet", "not published yet", "hint: it is still starting")

	publishKubeconfig(t, ns, "kc")

	t.Run("printed, pointing at the in-cluster Service when the cluster is not exposed", func(t *testing.T) {
		r := k3kcli(t, "kubeconfig", "get", "kc", "-n", ns)
		if r.code != ExitOK {
			t.Fatalf("exit %d: %s", r.code, r.errOut)
		}
		cfg, err := clientcmd.Load([]byte(r.out))
		if err != nil {
			t.Fatalf("stdout is not a kubeconfig: %v", err)
		}
		want := "https://k3k-kc-service." + ns + ".svc:443"
		if got := cfg.Clusters[cfg.CurrentContext].Server; got != want {
			t.Errorf("server %q, want %q", got, want)
		}
		// stdout is the kubeconfig alone; stderr says the address works
		// inside the host cluster only, and how to connect from here.
		note := "note: the cluster is not exposed, so " + want + " works only inside the host cluster; from here run k3kcli cluster connect kc -n " + ns + " --merge"
		if !strings.Contains(r.errOut, note) {
			t.Errorf("stderr does not say %q:\n%s", note, r.errOut)
		}
		if strings.Contains(r.out, "note:") {
			t.Errorf("the note went to stdout, into the kubeconfig:\n%s", r.out)
		}
	})

	t.Run("written with mode 0600, server overridden, without the in-cluster note", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kc.yaml")
		if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := k3kcli(t, "kubeconfig", "get", "kc", "-n", ns, "--output-kubeconfig", path, "--server", "https://127.0.0.1:6443")
		if r.code != ExitOK {
			t.Fatalf("exit %d: %s", r.code, r.errOut)
		}
		info, err := os.Stat(path)
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("file mode %v (err %v), want 0600", info.Mode().Perm(), err)
		}
		cfg, err := clientcmd.LoadFromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Clusters["k3k-"+ns+"-kc"].Server; got != "https://127.0.0.1:6443" {
			t.Errorf("server %q, want the --server override", got)
		}
		if strings.Contains(r.out, "BEGIN") {
			t.Error("credentials printed while writing a file")
		}
		if strings.Contains(r.out+r.errOut, "not exposed") {
			t.Errorf("the in-cluster note shows although --server replaced the address:\n%s%s", r.out, r.errOut)
		}
	})

	t.Run("a bad --server is a usage error", func(t *testing.T) {
		r := k3kcli(t, "kubeconfig", "get", "kc", "-n", ns, "--server", "127.0.0.1:6443")
		if r.code != ExitUsage {
			t.Fatalf("exit %d, want %d", r.code, ExitUsage)
		}
		assertOneLineError(t, r.errOut, "is not an https URL")
	})
}

func TestKubeconfigGetKeepsADamagedSecretOutOfTheError(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "bad", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "k3k-bad-kubeconfig", Namespace: ns},
		Data: map[string][]byte{layout.SecretKeyKubeconfig: []byte("token: SUPER-SECRET-TOKEN\n\tnot: [yaml")}}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	r := k3kcli(t, "kubeconfig", "get", "bad", "-n", ns)
	if r.code != ExitError {
		t.Fatalf("exit %d, want %d", r.code, ExitError)
	}
	assertOneLineError(t, r.errOut, "not a valid kubeconfig")
	if strings.Contains(r.out+r.errOut, "SUPER-SECRET-TOKEN") {
		t.Error("the Secret's content reached the output")
	}
}
