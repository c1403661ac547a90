package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// k3kcliBare runs the CLI with exactly args: no --kubeconfig is added, so the
// test chooses how the host kubeconfig is found.
func k3kcliBare(t *testing.T, args ...string) result {
	t.Helper()
	var out bytes.Buffer
	errOut := &syncBuffer{}
	code := Run(context.Background(), cliOptions(&out, errOut, time.Now), args)
	r := result{code: code, out: out.String(), errOut: errOut.String()}
	t.Logf("k3kcli %s -> exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.out, r.errOut)
	return r
}

// hostKubeconfigCopy is a private copy of the suite's host kubeconfig, which
// a test may let k3kcli edit, and the name of its context.
func hostKubeconfigCopy(t *testing.T) (path, hostContext string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path, cfg.CurrentContext
}

func loadKubeconfig(t *testing.T, path string) *clientcmdapi.Config {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	return cfg
}

func TestKubeconfigGetMergeSwitchContextAndDeleteRemovesIt(t *testing.T) {
	ns := newNamespace(t)
	path, hostContext := hostKubeconfigCopy(t)
	if r := k3kcli(t, "cluster", "create", "mg", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	publishKubeconfig(t, ns, "mg")
	name := "k3k-" + ns + "-mg"

	r := k3kcliBare(t, "--kubeconfig", path, "kubeconfig", "get", "mg", "-n", ns, "--merge", "--server", "https://127.0.0.1:7443")
	if r.code != ExitOK {
		t.Fatalf("merge: exit %d: %s", r.code, r.errOut)
	}
	cfg := loadKubeconfig(t, path)
	if cfg.CurrentContext != hostContext {
		t.Errorf("--merge changed the current context to %q", cfg.CurrentContext)
	}
	kc := cfg.Contexts[name]
	if kc == nil || kc.Cluster != name || kc.AuthInfo != name {
		t.Fatalf("context %s not merged: %+v", name, kc)
	}
	if got := cfg.Clusters[name].Server; got != "https://127.0.0.1:7443" {
		t.Errorf("merged server %q", got)
	}
	if len(cfg.AuthInfos[name].ClientCertificateData) == 0 || len(cfg.AuthInfos[name].ClientKeyData) == 0 {
		t.Error("the merged user has no credentials")
	}
	if cfg.Contexts[hostContext] == nil || len(cfg.Contexts) != 2 {
		t.Errorf("contexts after merge: %v, want the host's and %s", keys(cfg.Contexts), name)
	}
	if !strings.Contains(r.out, "merged into "+path) || strings.Contains(r.out, "BEGIN") {
		t.Errorf("stdout should name the file and print no credentials:\n%s", r.out)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode after merge: %v %v", info.Mode().Perm(), err)
	}

	// A second merge replaces the entries instead of adding more; with
	// --switch-context the cluster becomes the current context.
	r = k3kcliBare(t, "--kubeconfig", path, "kubeconfig", "get", "mg", "-n", ns, "--switch-context", "--server", "https://127.0.0.1:8443")
	if r.code != ExitOK {
		t.Fatalf("switch: exit %d: %s", r.code, r.errOut)
	}
	cfg = loadKubeconfig(t, path)
	if cfg.CurrentContext != name || cfg.Clusters[name].Server != "https://127.0.0.1:8443" || len(cfg.Contexts) != 2 {
		t.Errorf("after --switch-context: current %q, server %q, contexts %v", cfg.CurrentContext, cfg.Clusters[name].Server, keys(cfg.Contexts))
	}

	// The current context is now the virtual cluster's; the host is reached
	// with --context, as with kubectl.
	r = k3kcliBare(t, "--kubeconfig", path, "--context", hostContext, "cluster", "delete", "mg", "-n", ns)
	if r.code != ExitOK {
		t.Fatalf("delete: exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.out, "removed context "+name+" from "+path) {
		t.Errorf("delete does not say it removed the context:\n%s", r.out)
	}
	cfg = loadKubeconfig(t, path)
	if cfg.Contexts[name] != nil || cfg.Clusters[name] != nil || cfg.AuthInfos[name] != nil {
		t.Errorf("entries left after delete: contexts %v clusters %v users %v", keys(cfg.Contexts), keys(cfg.Clusters), keys(cfg.AuthInfos))
	}
	if cfg.CurrentContext != "" {
		t.Errorf("current context %q still names the deleted cluster", cfg.CurrentContext)
	}
	if cfg.Contexts[hostContext] == nil {
		t.Error("delete removed the host's context")
	}
}

// With $KUBECONFIG naming several files, a new context goes to the first
// file, the others are left byte for byte, and delete finds it there.
func TestMergeHonoursTheKubeconfigChain(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "chain", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	publishKubeconfig(t, ns, "chain")
	hostPath, _ := hostKubeconfigCopy(t)
	hostBefore, err := os.ReadFile(hostPath)
	if err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(t.TempDir(), "personal")
	personal := clientcmdapi.NewConfig()
	personal.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://other.example.com"}
	personal.AuthInfos["other"] = &clientcmdapi.AuthInfo{Token: "x"}
	personal.Contexts["other"] = &clientcmdapi.Context{Cluster: "other", AuthInfo: "other"}
	if err := clientcmd.WriteToFile(*personal, first); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", first+string(os.PathListSeparator)+hostPath)
	name := "k3k-" + ns + "-chain"

	r := k3kcliBare(t, "kubeconfig", "get", "chain", "-n", ns, "--merge", "--server", "https://127.0.0.1:7443")
	if r.code != ExitOK {
		t.Fatalf("merge through $KUBECONFIG: exit %d: %s", r.code, r.errOut)
	}
	if got := loadKubeconfig(t, first); got.Contexts[name] == nil || got.Contexts["other"] == nil {
		t.Errorf("first file's contexts %v, want other and %s", keys(got.Contexts), name)
	}
	if after, _ := os.ReadFile(hostPath); !bytes.Equal(after, hostBefore) {
		t.Error("the second file of $KUBECONFIG was changed")
	}
	r = k3kcliBare(t, "cluster", "delete", "chain", "-n", ns)
	if r.code != ExitOK {
		t.Fatalf("delete: exit %d: %s", r.code, r.errOut)
	}
	if got := loadKubeconfig(t, first); got.Contexts[name] != nil || got.Contexts["other"] == nil {
		t.Errorf("after delete the first file's contexts are %v, want only other", keys(got.Contexts))
	}
	if !strings.Contains(r.out, "removed context "+name+" from "+first) {
		t.Errorf("delete does not name the file:\n%s", r.out)
	}
}

func TestCreateMergeWritesNoFileOfItsOwn(t *testing.T) {
	ns := newNamespace(t)
	path, hostContext := hostKubeconfigCopy(t)
	dir := t.TempDir()
	t.Chdir(dir)
	done := make(chan result, 1)
	go func() {
		done <- k3kcliBare(t, "--kubeconfig", path, "cluster", "create", "cm", "-n", ns, "--expose", "nodeport:30444", "--timeout", "2m", "--switch-context")
	}()
	playController(t, ns, "cm", 30444, nil)
	r := <-done
	if r.code != ExitOK {
		t.Fatalf("create: exit %d: %s", r.code, r.errOut)
	}
	name := "k3k-" + ns + "-cm"
	cfg := loadKubeconfig(t, path)
	if cfg.CurrentContext != name || cfg.Clusters[name] == nil || cfg.Clusters[name].Server != "https://127.0.0.1:30444" {
		t.Errorf("after create --switch-context: current %q, contexts %v", cfg.CurrentContext, keys(cfg.Contexts))
	}
	if cfg.Contexts[hostContext] == nil {
		t.Error("the host context is gone")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("create --merge also wrote %s", entries[0].Name())
	}
}

func TestMergeFlagsConflictWithAnOutputFile(t *testing.T) {
	for _, args := range [][]string{
		{"kubeconfig", "get", "x", "--merge", "--output-kubeconfig", "x.yaml"},
		{"cluster", "create", "x", "--merge", "--output-kubeconfig", "x.yaml"},
		{"cluster", "create", "x", "--switch-context", "--wait=false"},
		{"cluster", "connect", "x", "--merge", "--output-kubeconfig", "x.yaml"},
		{"cluster", "connect", "x", "--local-port", "70000"},
	} {
		r := k3kcli(t, args...)
		if r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, r.code, ExitUsage)
		}
		assertOneLineError(t, r.errOut)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
