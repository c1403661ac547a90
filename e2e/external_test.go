//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// The external datastore scenario runs a real PostgreSQL server (Debian's
// postgresql package, through hack/postgres.sh) on this machine:
//
//	E2E_POSTGRES_ADDRESS  the address it listens on; default the node's IP (the
//	                      host cluster's node is this machine), which server pods reach
//	E2E_POD_CIDR          the pod network allowed to log in; default 10.244.0.0/16
//	                      (hack/hostcluster's)
const (
	pgPassword = "k3k-e2e-Pa55word"
	pgPort     = "15432"
)

// postgres runs hack/postgres.sh with args.
func postgres(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "hack", "postgres.sh"), args...)
	cmd.Env = append(os.Environ(), "PG_PORT="+pgPort, "PG_PASSWORD="+pgPassword, "PG_USER=k3s", "PG_DATABASE=k3s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/postgres.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestExternalPostgres runs a virtual cluster on an external PostgreSQL with
// ephemeral server volumes, so everything the cluster knows after a server
// pod is deleted came back from the database. Then the two ways an external
// datastore fails: a wrong password and a database that is down. Each must
// show as a Cluster condition naming the cause, with k3s never started on
// it, and nothing may print the password.
func TestExternalPostgres(t *testing.T) {
	t.Parallel()
	addr := os.Getenv("E2E_POSTGRES_ADDRESS")
	if addr == "" {
		addr = cfg.nodeIP
	}
	podCIDR := os.Getenv("E2E_POD_CIDR")
	if podCIDR == "" {
		podCIDR = "10.244.0.0/16"
	}
	postgres(t, "up", addr, podCIDR)
	t.Cleanup(func() { postgres(t, "down") })

	crc := clusterClient(t)
	ctx := context.Background()
	endpoint := fmt.Sprintf("postgres://%s:%s/k3s", addr, pgPort)
	dsn := func(password string) string {
		return fmt.Sprintf("postgres://k3s:%s@%s:%s/k3s?sslmode=disable", password, addr, pgPort)
	}

	// create makes a namespace, the Secret with the DSN and a Cluster on it.
	create := func(t *testing.T, name, password string) *vcluster {
		t.Helper()
		v := &vcluster{name: name, namespace: "e2e-" + name, kubeconfig: filepath.Join(cfg.workDir, name+".kubeconfig")}
		if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v.namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating namespace: %v", err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				dumpPod(t, v)
				dumpInit(t, v)
				return
			}
			if err := host.CoreV1().Namespaces().Delete(context.Background(), v.namespace, metav1.DeleteOptions{}); err != nil {
				t.Logf("deleting namespace %s: %v", v.namespace, err)
			}
		})
		if _, err := host.CoreV1().Secrets(v.namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "pg"},
			StringData: map[string]string{"endpoint": dsn(password)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the DSN Secret: %v", err)
		}
		c := &v1beta1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v.namespace},
			Spec: v1beta1.ClusterSpec{
				Persistence: v1beta1.PersistenceConfig{Type: v1beta1.EphemeralPersistence},
				Datastore: v1beta1.DatastoreConfig{Type: v1beta1.ExternalDatastore, External: &v1beta1.ExternalDatastoreConfig{
					Endpoint: endpoint, SecretRef: &corev1.LocalObjectReference{Name: "pg"},
				}},
				Expose: &v1beta1.ExposeConfig{NodePort: &v1beta1.NodePortConfig{}},
				// The test reaches the API on the node's node port, as
				// k3kcli cluster create --expose nodeport arranges.
				TLSSANs: []string{cfg.nodeIP},
			},
		}
		if err := crc.Create(ctx, c); err != nil {
			t.Fatalf("creating Cluster %s: %v", name, err)
		}
		return v
	}

	t.Run("a cluster on PostgreSQL keeps its data when its server pod is deleted", func(t *testing.T) {
		start := time.Now()
		v := create(t, "ext", pgPassword)
		cond := waitCondition(t, crc, v, v1beta1ClusterReady, metav1.ConditionTrue, "", 5*time.Minute)
		t.Logf("Ready after %s: %s", time.Since(start).Round(time.Millisecond), cond.Message)
		ds := condition(t, crc, v, "DatastoreReady")
		if ds.Reason != "ExternalDatastoreReachable" {
			t.Fatalf("DatastoreReady = %s %s: %s; want ExternalDatastoreReachable", ds.Status, ds.Reason, ds.Message)
		}
		k3kcli(t, "kubeconfig", "get", v.name, "-n", v.namespace, "--output-kubeconfig", v.kubeconfig)
		v.client = virtualClient(t, v.kubeconfig)
		serving(t, v.client, 3*time.Minute)
		w := workload{namespace: "kept-in-postgres"}
		w.create(t, v.client)
		// k3s's environment holds the DSN with its password; the publisher
		// must not be able to read it (docs/security.md, "One PID namespace
		// per server pod").
		t.Run("the publisher cannot see k3s, whose environment holds the password", func(t *testing.T) {
			k3s := serverContainerPIDs(t, v, "k3s")
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", k3s[0]))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(env), pgPassword) {
				t.Fatalf("k3s's environment does not hold the password: nothing here to protect?")
			}
			publisher := serverContainerPIDs(t, v, "kubeconfig-publisher")
			if a, b := pidNamespace(t, k3s[0]), pidNamespace(t, publisher[0]); a == b {
				t.Errorf("k3s and the publisher share PID namespace %s: the publisher can read k3s's environment", a)
			}
		})

		r := deleteServerPod(t, v)
		t.Logf("recovery on PostgreSQL with an empty data dir: pod ready %s, API serving %s", r.podReady.Round(time.Millisecond), r.apiServing.Round(time.Millisecond))
		w.check(t, v.client)

		t.Run("the database is down when the server pod starts: the condition says unreachable", func(t *testing.T) {
			postgres(t, "stop")
			old, err := serverPod(ctx, v)
			if err != nil || old == nil {
				t.Fatalf("server pod: %v", err)
			}
			if err := host.CoreV1().Pods(v.namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			cond := waitCondition(t, crc, v, "DatastoreReady", metav1.ConditionFalse, "ExternalDatastoreUnreachable", 3*time.Minute)
			t.Logf("DatastoreReady: %s: %s", cond.Reason, cond.Message)
			if !strings.Contains(cond.Message, addr+":"+pgPort) {
				t.Errorf("the condition does not say where: %q", cond.Message)
			}
			ready := condition(t, crc, v, v1beta1ClusterReady)
			if ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "DatastoreReady") {
				t.Errorf("Ready = %s: %s; want False naming DatastoreReady", ready.Status, ready.Message)
			}
			assertK3sNeverStarted(t, v)

			postgres(t, "start")
			start := time.Now()
			waitCondition(t, crc, v, v1beta1ClusterReady, metav1.ConditionTrue, "", 6*time.Minute)
			serving(t, v.client, 3*time.Minute)
			t.Logf("database back: cluster Ready again after %s", time.Since(start).Round(time.Second))
			w.check(t, v.client)
		})
	})

	t.Run("a wrong password: the condition says the credentials were refused", func(t *testing.T) {
		v := create(t, "ext-badpw", "not-the-password-xyzzy")
		cond := waitCondition(t, crc, v, "DatastoreReady", metav1.ConditionFalse, "ExternalDatastoreAuthFailed", 3*time.Minute)
		t.Logf("DatastoreReady: %s: %s", cond.Reason, cond.Message)
		if !strings.Contains(cond.Message, "password authentication failed") {
			t.Errorf("the condition does not say what PostgreSQL refused: %q", cond.Message)
		}
		assertK3sNeverStarted(t, v)
		assertNoSecretShown(t, crc, v, "not-the-password-xyzzy", pgPassword)
	})
}

const v1beta1ClusterReady = "Ready"

// condition reads one condition of the Cluster.
func condition(t *testing.T, crc client.Client, v *vcluster, typ string) metav1.Condition {
	t.Helper()
	c := &v1beta1.Cluster{}
	if err := crc.Get(context.Background(), client.ObjectKey{Namespace: v.namespace, Name: v.name}, c); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(c.Status.Conditions, typ)
	if cond == nil {
		t.Fatalf("Cluster %s has no condition %s: %+v", v.name, typ, c.Status.Conditions)
	}
	return *cond
}

// waitCondition waits until the Cluster's condition typ has status (and
// reason, when not empty) and returns it.
func waitCondition(t *testing.T, crc client.Client, v *vcluster, typ string, status metav1.ConditionStatus, reason string, timeout time.Duration) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	var last string
	eventually(t, timeout, fmt.Sprintf("condition %s=%s %s", typ, status, reason), func(ctx context.Context) (bool, error) {
		c := &v1beta1.Cluster{}
		if err := crc.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: v.name}, c); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, typ)
		if cond == nil {
			return false, nil
		}
		if now := fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message); now != last {
			t.Logf("%s %s", typ, now)
			last = now
		}
		got = *cond
		return cond.Status == status && (reason == "" || cond.Reason == reason), nil
	})
	return got
}

// assertK3sNeverStarted: the check holds k3s back, so no crash loop of k3s
// hides the cause.
func assertK3sNeverStarted(t *testing.T, v *vcluster) {
	t.Helper()
	p, err := serverPod(context.Background(), v)
	if err != nil || p == nil {
		t.Fatalf("server pod: %v", err)
	}
	cs := containerStatus(p, "k3s")
	if cs != nil && (cs.RestartCount > 0 || cs.State.Running != nil || cs.State.Terminated != nil) {
		t.Fatalf("k3s ran although the datastore check failed: %+v", cs)
	}
}

// assertNoSecretShown: the Cluster's status and the namespace's events do not
// contain the passwords.
func assertNoSecretShown(t *testing.T, crc client.Client, v *vcluster, secrets ...string) {
	t.Helper()
	c := &v1beta1.Cluster{}
	if err := crc.Get(context.Background(), client.ObjectKey{Namespace: v.namespace, Name: v.name}, c); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, cond := range c.Status.Conditions {
		texts = append(texts, cond.Message)
	}
	events, err := host.CoreV1().Events(v.namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		texts = append(texts, e.Message)
	}
	p, err := serverPod(context.Background(), v)
	if err == nil && p != nil {
		for _, st := range p.Status.InitContainerStatuses {
			for _, s := range []corev1.ContainerState{st.State, st.LastTerminationState} {
				if s.Terminated != nil {
					texts = append(texts, s.Terminated.Message)
				}
			}
		}
		logs, err := host.CoreV1().Pods(v.namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "datastore-check", TailLines: ptr.To[int64](50)}).DoRaw(context.Background())
		if err == nil {
			texts = append(texts, string(logs))
		}
	}
	for _, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Fatalf("a password is shown: %q", text)
			}
		}
	}
	if len(texts) == 0 {
		t.Fatal("nothing to look at: no conditions, events or messages")
	}
}

// dumpInit logs the datastore check's state and output.
func dumpInit(t *testing.T, v *vcluster) {
	p, err := serverPod(context.Background(), v)
	if err != nil || p == nil {
		return
	}
	if cs := containerStatus(p, "datastore-check"); cs != nil {
		t.Logf("  datastore-check: restarts %d state %+v last %+v", cs.RestartCount, cs.State, cs.LastTerminationState)
	}
	logs, err := host.CoreV1().Pods(v.namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "datastore-check"}).DoRaw(context.Background())
	if err != nil && !apierrors.IsBadRequest(err) {
		t.Logf("  datastore-check logs: %v", err)
	}
	t.Logf("  datastore-check logs:\n%s", logs)
}
