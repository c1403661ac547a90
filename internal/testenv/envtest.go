package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// Envtest is a kube-apiserver and etcd started by controller-runtime's envtest from
// the binaries in ToolsDir, the way a package's TestMain starts it once.
type Envtest struct {
	// Env is the running environment; Stop ends it.
	Env *envtest.Environment
	// Config is an admin client configuration for its apiserver.
	Config *rest.Config
	// Scheme knows client-go's types and k3k's.
	Scheme *runtime.Scheme
	// Client is a client of Config with Scheme, without a cache.
	Client client.Client
}

// StartEnvtest starts envtest and installs the CRDs found in crdDirs (none when
// there are none; a directory that does not exist is an error). A missing binary is
// an error that names the make target which builds it.
func StartEnvtest(crdDirs ...string) (*Envtest, error) {
	return StartEnvtestWithFlags(nil, crdDirs...)
}

// StartEnvtestWithFlags is StartEnvtest with kube-apiserver flags set or
// replaced (name without dashes → value), e.g. a service range larger than
// envtest's /24 for a run that creates thousands of Services.
func StartEnvtestWithFlags(apiserverFlags map[string]string, crdDirs ...string) (*Envtest, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1beta1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := Binary(bin); err != nil {
			return nil, fmt.Errorf("envtest: %w", err)
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: len(crdDirs) > 0,
		BinaryAssetsDirectory: ToolsDir(),
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	for name, value := range apiserverFlags {
		args.Set(name, value)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Envtest{Env: env, Config: cfg, Scheme: scheme, Client: c}, nil
}

// Stop ends the apiserver and etcd. It is meant to be deferred in TestMain, which
// has nowhere to return an error to, so a failure is printed to stderr.
func (e *Envtest) Stop() {
	if err := e.Env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
}

// AdminKubeconfig adds a user called name in group system:masters and renders a
// kubeconfig for it, for tests that drive a command-line tool.
func (e *Envtest) AdminKubeconfig(name string) ([]byte, error) {
	user, err := e.Env.ControlPlane.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	return user.KubeConfig()
}

// StartManager runs mgr until the test ends, then stops it and reports an
// error it returned.
func StartManager(t testing.TB, mgr manager.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}
