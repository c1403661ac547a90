package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/layout"
)

func TestCreateStoresTheClusterTheFlagsAskFor(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name string
		args []string
		want v1beta1.ClusterSpec
	}{{
		name: "no flags leaves every default to the CRD and the controller",
		args: nil,
		want: v1beta1.ClusterSpec{
			Mode: v1beta1.SharedMode, Servers: 1,
			Persistence: v1beta1.PersistenceConfig{WhenDeleted: v1beta1.DeleteVolumes},
		},
	}, {
		name: "every common flag lands in its field",
		args: []string{"--servers", "3", "--datastore", "etcd", "--persistence-type", "dynamic", "--storage-class", "fast",
			"--storage-size", "10Gi", "--version", "v1.33.5-k3s1", "--tls-san", "a.example.com,b.example.com", "--tls-san", "10.1.2.3",
			"--server-args=--kube-apiserver-arg=v=2", "--server-args", "--disable=traefik,servicelb"},
		want: v1beta1.ClusterSpec{
			Mode: v1beta1.SharedMode, Servers: 3, Version: "v1.33.5-k3s1",
			TLSSANs:    []string{"a.example.com", "b.example.com", "10.1.2.3"},
			ServerArgs: []string{"--kube-apiserver-arg=v=2", "--disable=traefik,servicelb"},
			Persistence: v1beta1.PersistenceConfig{Type: v1beta1.DynamicPersistence, StorageClassName: ptr.To("fast"),
				StorageRequestSize: "10Gi", WhenDeleted: v1beta1.DeleteVolumes},
			Datastore: v1beta1.DatastoreConfig{Type: v1beta1.EtcdDatastore},
		},
	}, {
		name: "a node port adds the host's name to the TLS SANs, since the kubeconfig uses it",
		args: []string{"--expose", "nodeport:30443", "--persistence-type", "ephemeral"},
		want: v1beta1.ClusterSpec{
			Mode: v1beta1.SharedMode, Servers: 1, TLSSANs: []string{"127.0.0.1"},
			Persistence: v1beta1.PersistenceConfig{Type: v1beta1.EphemeralPersistence, WhenDeleted: v1beta1.DeleteVolumes},
			Expose:      &v1beta1.ExposeConfig{NodePort: &v1beta1.NodePortConfig{ServerPort: ptr.To[int32](30443)}},
		},
	}, {
		name: "an ingress takes its host and class",
		args: []string{"--expose", "ingress:k3k.example.com", "--ingress-class", "nginx"},
		want: v1beta1.ClusterSpec{
			Mode: v1beta1.SharedMode, Servers: 1,
			Persistence: v1beta1.PersistenceConfig{WhenDeleted: v1beta1.DeleteVolumes},
			Expose:      &v1beta1.ExposeConfig{Ingress: &v1beta1.IngressConfig{Host: "k3k.example.com", IngressClassName: ptr.To("nginx")}},
		},
	}, {
		name: "a load balancer without a port leaves the port to the controller",
		args: []string{"--expose", "loadbalancer"},
		want: v1beta1.ClusterSpec{
			Mode: v1beta1.SharedMode, Servers: 1,
			Persistence: v1beta1.PersistenceConfig{WhenDeleted: v1beta1.DeleteVolumes},
			Expose:      &v1beta1.ExposeConfig{LoadBalancer: &v1beta1.LoadBalancerConfig{}},
		},
	}}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "c" + string(rune('a'+i))
			args := append([]string{"cluster", "create", name, "-n", ns, "--wait=false"}, tc.args...)
			r := k3kcli(t, args...)
			if r.code != ExitOK {
				t.Fatalf("exit code %d, stderr: %s", r.code, r.errOut)
			}
			if !strings.Contains(r.out, "cluster "+ns+"/"+name+" created") {
				t.Errorf("stdout does not confirm the creation: %q", r.out)
			}
			got := getCluster(t, ns, name).Spec
			// The CRD's default, applied by the API server, not by k3kcli.
			tc.want.PodSecurityLevel = v1beta1.PodSecurityBaseline
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("stored spec differs\n got: %+v\nwant: %+v", got, tc.want)
			}
		})
	}
}

// playController does what the controller would for a NodePort cluster: it
// reports progress, creates the API Service and publishes a kubeconfig, then
// reports Ready.
// playController plays the k3k controller for a Cluster the CLI creates. After
// reporting Provisioning it waits for provisioningSeen (when not nil), so a
// test can hold that state until the CLI has shown it.
func playController(t *testing.T, ns, name string, nodePort int32, provisioningSeen func() error) []byte {
	t.Helper()
	ctx := context.Background()
	var c *v1beta1.Cluster
	eventually(t, "the CLI creates the cluster", func() error {
		c = &v1beta1.Cluster{}
		return k8s.Get(ctx, keyOf(ns, name), c)
	})
	setStatus(t, c, v1beta1.PhaseProvisioning, metav1.Condition{Type: v1beta1.ConditionServersReady, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonServersStarting},
		metav1.Condition{Type: v1beta1.ConditionKubeconfigPublished, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonWaiting})
	if provisioningSeen != nil {
		eventually(t, "the CLI to show the Provisioning state", provisioningSeen)
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: layout.NamesFor(c).Service, Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "x"},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, NodePort: nodePort}}},
	}
	if err := k8s.Create(ctx, svc); err != nil {
		t.Fatalf("creating the API Service: %v", err)
	}
	kc, err := testenv.NewAdminKubeconfig("https://127.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	raw, admin := kc.Data, kc.Admin
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: layout.NamesFor(c).Kubeconfig, Namespace: ns},
		Data:       map[string][]byte{layout.SecretKeyKubeconfig: raw},
	}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatalf("creating the kubeconfig Secret: %v", err)
	}
	c = getCluster(t, ns, name)
	setStatus(t, c, v1beta1.PhaseReady, metav1.Condition{Type: v1beta1.ConditionServersReady, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonServersReady},
		metav1.Condition{Type: v1beta1.ConditionKubeconfigPublished, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonPublished},
		metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonReady})
	return admin.Cert
}

func setStatus(t *testing.T, c *v1beta1.Cluster, phase v1beta1.ClusterPhase, conds ...metav1.Condition) {
	t.Helper()
	c.Status.Phase = phase
	for _, cond := range conds {
		meta.SetStatusCondition(&c.Status.Conditions, cond)
	}
	if err := k8s.Status().Update(context.Background(), c); err != nil {
		t.Fatalf("updating status of %s: %v", c.Name, err)
	}
}

func TestCreateWaitsShowsProgressAndWritesAPrivateKubeconfig(t *testing.T) {
	ns := newNamespace(t)
	out := filepath.Join(t.TempDir(), "demo.yaml")
	done := make(chan result, 1)
	progress := &syncBuffer{}
	go func() {
		done <- k3kcliTo(t, time.Now, progress, "cluster", "create", "demo", "-n", ns, "--expose", "nodeport:30443", "--timeout", "2m", "--output-kubeconfig", out)
	}()
	const provisioning = "Provisioning: KubeconfigPublished=Waiting, ServersReady=ServersStarting"
	clientCert := playController(t, ns, "demo", 30443, func() error {
		if !strings.Contains(progress.String(), provisioning) {
			return fmt.Errorf("progress so far:\n%s", progress.String())
		}
		return nil
	})
	r := <-done
	if r.code != ExitOK {
		t.Fatalf("exit code %d, stderr: %s", r.code, r.errOut)
	}
	// playController holds Provisioning until the CLI has shown it; the Pending
	// state before it may be over before the CLI's first look
	// (TestCreateTimesOutWithExitCode3 shows it).
	for _, want := range []string{provisioning, "Ready"} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("progress does not show %q:\n%s", want, r.errOut)
		}
	}
	if !strings.Contains(r.errOut, "s] ") {
		t.Errorf("progress lines carry no elapsed time:\n%s", r.errOut)
	}
	info, err := os.Stat(out)
	if err != nil {
		t.Fatalf("kubeconfig not written: %v", err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %o, want 0600", info.Mode().Perm())
	}
	cfg, err := clientcmd.LoadFromFile(out)
	if err != nil {
		t.Fatalf("written kubeconfig does not load: %v", err)
	}
	ctxName := "k3k-" + ns + "-demo"
	if cfg.CurrentContext != ctxName {
		t.Errorf("current context %q, want %q", cfg.CurrentContext, ctxName)
	}
	if got := cfg.Clusters[ctxName].Server; got != "https://127.0.0.1:30443" {
		t.Errorf("server %q, want the node port on the host's address https://127.0.0.1:30443", got)
	}
	if string(cfg.AuthInfos[ctxName].ClientCertificateData) != string(clientCert) {
		t.Error("the client certificate is not the published one")
	}
	for _, want := range []string{"is ready after", "export KUBECONFIG=" + out, "kubectl get nodes"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("stdout does not say %q:\n%s", want, r.out)
		}
	}
	if strings.Contains(r.out+r.errOut, string(clientCert[30:60])) {
		t.Error("credentials were printed")
	}
}

func TestCreateTimesOutWithExitCode3(t *testing.T) {
	ns := newNamespace(t)
	r := k3kcli(t, "cluster", "create", "slow", "-n", ns, "--timeout", "1s")
	if r.code != ExitTimeout {
		t.Fatalf("exit code %d, want %d", r.code, ExitTimeout)
	}
	assertOneLineError(t, r.errOut, "not ready after 1s", "hint: it keeps starting in the background")
	if !strings.Contains(r.errOut, "Pending (waiting for the k3k controller)") {
		t.Errorf("progress does not say that no controller has answered:\n%s", r.errOut)
	}
	getCluster(t, ns, "slow") // created all the same
}

func TestCreateReportsAFailedClusterWithExitCode4(t *testing.T) {
	ns := newNamespace(t)
	done := make(chan result, 1)
	go func() { done <- k3kcli(t, "cluster", "create", "broken", "-n", ns, "--timeout", "2m") }()
	var c *v1beta1.Cluster
	eventually(t, "the CLI creates the cluster", func() error {
		c = &v1beta1.Cluster{}
		return k8s.Get(context.Background(), keyOf(ns, "broken"), c)
	})
	setStatus(t, c, v1beta1.PhaseFailed, metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: v1beta1.ReasonInvalidSpec, Message: "storage class slow does not exist"})
	r := <-done
	if r.code != ExitClusterFailed {
		t.Fatalf("exit code %d, want %d", r.code, ExitClusterFailed)
	}
	assertOneLineError(t, r.errOut, "failed: storage class slow does not exist", "hint: kubectl describe clusters.k3k.io broken")
}

// assertOneLineError checks that the last line of stderr is the error, on one
// line, and says each of wants.
func assertOneLineError(t *testing.T, stderr string, wants ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "error: ") {
		t.Fatalf("last line of stderr is not an error: %q", last)
	}
	for _, want := range wants {
		if !strings.Contains(last, want) {
			t.Errorf("error %q does not say %q", last, want)
		}
	}
}
