//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Scenario 6 (etcd HA) is in etcd_test.go; the shared-mode agent's scenario
// in agent_test.go.

// workload is what the tests write into a virtual cluster and later expect
// back: a namespace holding a ConfigMap and a Secret. Every request goes through
// retry, so only a lost or wrong object fails a check.
type workload struct{ namespace string }

func (w workload) create(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	// AlreadyExists counts as written: a retried create may have succeeded
	// before its answer was lost; check verifies the content.
	created := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err := retry(func(ctx context.Context) error {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.namespace}}, metav1.CreateOptions{})
		return created(err)
	}); err != nil {
		t.Fatalf("creating namespace %s in the virtual cluster: %v", w.namespace, err)
	}
	if err := retry(func(ctx context.Context) error {
		_, err := c.CoreV1().ConfigMaps(w.namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hello " + w.namespace},
		}, metav1.CreateOptions{})
		return created(err)
	}); err != nil {
		t.Fatalf("creating a ConfigMap in the virtual cluster: %v", err)
	}
	if err := retry(func(ctx context.Context) error {
		_, err := c.CoreV1().Secrets(w.namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "credentials"}, Data: map[string][]byte{"password": []byte("s3cr3t-" + w.namespace)},
		}, metav1.CreateOptions{})
		return created(err)
	}); err != nil {
		t.Fatalf("creating a Secret in the virtual cluster: %v", err)
	}
}

// check fails unless every object of the workload is there with its content.
func (w workload) check(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	if err := retry(func(ctx context.Context) error {
		_, err := c.CoreV1().Namespaces().Get(ctx, w.namespace, metav1.GetOptions{})
		return err
	}); err != nil {
		t.Fatalf("namespace %s: %v", w.namespace, err)
	}
	var cm *corev1.ConfigMap
	if err := retry(func(ctx context.Context) (err error) {
		cm, err = c.CoreV1().ConfigMaps(w.namespace).Get(ctx, "settings", metav1.GetOptions{})
		return err
	}); err != nil {
		t.Fatalf("ConfigMap %s/settings: %v", w.namespace, err)
	}
	if got, want := cm.Data["greeting"], "hello "+w.namespace; got != want {
		t.Fatalf("ConfigMap %s/settings holds %q, want %q", w.namespace, got, want)
	}
	var s *corev1.Secret
	if err := retry(func(ctx context.Context) (err error) {
		s, err = c.CoreV1().Secrets(w.namespace).Get(ctx, "credentials", metav1.GetOptions{})
		return err
	}); err != nil {
		t.Fatalf("Secret %s/credentials: %v", w.namespace, err)
	}
	if got, want := string(s.Data["password"]), "s3cr3t-"+w.namespace; got != want {
		t.Fatalf("Secret %s/credentials holds %q, want %q", w.namespace, got, want)
	}
}

// recovery is how long one disruption took to heal.
type recovery struct {
	podReady, apiServing time.Duration
}

// deleteServerPod deletes the server pod and waits until a new pod with a
// different IP is ready and the virtual API answers again.
func deleteServerPod(t *testing.T, v *vcluster) recovery {
	t.Helper()
	ctx := context.Background()
	old, err := serverPod(ctx, v)
	if err != nil || old == nil {
		t.Fatalf("server pod before deletion: %v", err)
	}
	start := time.Now()
	if err := host.CoreV1().Pods(v.namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the server pod: %v", err)
	}
	var r recovery
	fresh := waitPodReplaced(t, v, old, 5*time.Minute)
	r.podReady = time.Since(start)
	serving(t, v.client, 3*time.Minute)
	r.apiServing = time.Since(start)
	if fresh.Status.PodIP == old.Status.PodIP {
		t.Fatalf("the new server pod has the old pod's IP %s; the test proves nothing", old.Status.PodIP)
	}
	t.Logf("server pod %s → %s: pod ready after %s, virtual API serving after %s",
		old.Status.PodIP, fresh.Status.PodIP, r.podReady.Round(time.Millisecond), r.apiServing.Round(time.Millisecond))
	return r
}

// TestSQLiteDynamic runs scenarios 1, 2, 3 and 5 of the suite in order on one
// cluster with the default datastore (SQLite) and a PersistentVolumeClaim:
// each step starts from what the previous one left and checks that nothing
// written so far was lost.
func TestSQLiteDynamic(t *testing.T) {
	t.Parallel()
	v := createCluster(t, "dynamic", "--datastore", "sqlite", "--persistence-type", "dynamic")
	var written []workload
	write := func(t *testing.T, name string) {
		w := workload{namespace: name}
		w.create(t, v.client)
		written = append(written, w)
	}
	checkAll := func(t *testing.T) {
		for _, w := range written {
			w.check(t, v.client)
		}
	}

	t.Run("the written kubeconfig works", func(t *testing.T) {
		write(t, "created")
		checkAll(t)
		var list *corev1.NamespaceList
		if err := retry(func(ctx context.Context) (err error) {
			list, err = v.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		names := []string{}
		for _, n := range list.Items {
			names = append(names, n.Name)
		}
		for _, want := range []string{"default", "kube-system", "created"} {
			if !slices.Contains(names, want) {
				t.Fatalf("namespaces %v lack %s", names, want)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("the server pod is deleted and comes back on a new IP", func(t *testing.T) {
		kubeconfig := secretData(t, v, v.kubeconfigSecret())
		var pod, api []time.Duration
		for round := 1; round <= cfg.rounds; round++ {
			r := deleteServerPod(t, v)
			pod, api = append(pod, r.podReady), append(api, r.apiServing)
			checkAll(t)
			write(t, "round-"+strconv.Itoa(round))
			if got := secretData(t, v, v.kubeconfigSecret()); !equalData(got, kubeconfig) {
				t.Fatalf("round %d: the kubeconfig Secret changed", round)
			}
		}
		t.Logf("recovery after server pod deletion over %d rounds: pod ready %s; virtual API serving %s",
			cfg.rounds, summary(pod), summary(api))
	})
	if t.Failed() {
		return
	}

	for _, container := range []string{"datastore", "k3s"} {
		t.Run("only the "+container+" container is killed", func(t *testing.T) {
			ctx := context.Background()
			before, err := serverPod(ctx, v)
			if err != nil || before == nil {
				t.Fatalf("server pod: %v", err)
			}
			restarts := containerStatus(before, container).RestartCount
			start := time.Now()
			killContainer(t, before, container)
			eventually(t, 3*time.Minute, container+" restarted and the pod ready", func(ctx context.Context) (bool, error) {
				p, err := serverPod(ctx, v)
				if err != nil || p == nil {
					return false, err
				}
				if p.UID != before.UID {
					return false, fmt.Errorf("the pod was replaced, not restarted in place")
				}
				cs := containerStatus(p, container)
				return cs.RestartCount > restarts && cs.Ready && podReady(p), nil
			})
			ready := time.Since(start)
			// Reading and writing both go through the restarted datastore.
			eventually(t, 3*time.Minute, "the virtual API reads and writes", func(ctx context.Context) (bool, error) {
				_, err := v.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{GenerateName: "after-kill-"},
				}, metav1.CreateOptions{})
				return err == nil, err
			})
			t.Logf("%s killed: container ready after %s, virtual API writing after %s", container,
				ready.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			checkAll(t)
			write(t, "after-"+container+"-kill")
		})
	}
	if t.Failed() {
		return
	}

	t.Run("the token and kubeconfig Secrets are deleted and restored", func(t *testing.T) {
		ctx := context.Background()
		token := secretData(t, v, v.tokenSecret())
		kubeconfig := secretData(t, v, v.kubeconfigSecret())
		start := time.Now()
		for _, name := range []string{v.tokenSecret(), v.kubeconfigSecret()} {
			if err := host.CoreV1().Secrets(v.namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting Secret %s: %v", name, err)
			}
		}
		for _, s := range []struct {
			name string
			want map[string][]byte
		}{{v.tokenSecret(), token}, {v.kubeconfigSecret(), kubeconfig}} {
			eventually(t, 3*time.Minute, "Secret "+s.name+" restored", func(ctx context.Context) (bool, error) {
				got, err := host.CoreV1().Secrets(v.namespace).Get(ctx, s.name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return err == nil && equalData(got.Data, s.want), err
			})
			t.Logf("Secret %s restored with its old content after %s", s.name, time.Since(start).Round(time.Millisecond))
		}
		serving(t, v.client, time.Minute)
		checkAll(t)
		write(t, "after-secrets-restored")
		// The restored token is the one the server's data needs: a new pod
		// started from it serves the same data.
		deleteServerPod(t, v)
		checkAll(t)
	})
}

// TestEphemeral checks what docs/architecture.md promises for
// `persistence.type: ephemeral`: the data lives and dies with the pod; a new
// pod starts an empty cluster (a new CA, so a new kubeconfig) that is usable
// again once its kubeconfig is republished.
func TestEphemeral(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := createCluster(t, "ephemeral", "--persistence-type", "ephemeral")
	w := workload{namespace: "before-restart"}
	w.create(t, v.client)
	w.check(t, v.client)
	oldKubeconfig := secretData(t, v, v.kubeconfigSecret())

	old, err := serverPod(ctx, v)
	if err != nil || old == nil {
		t.Fatalf("server pod: %v", err)
	}
	start := time.Now()
	if err := host.CoreV1().Pods(v.namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "the kubeconfig Secret republished with the new server's credentials", func(ctx context.Context) (bool, error) {
		s, err := host.CoreV1().Secrets(v.namespace).Get(ctx, v.kubeconfigSecret(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(s.Data["kubeconfig.yaml"]) > 0 && !equalData(s.Data, oldKubeconfig), nil
	})
	t.Logf("kubeconfig republished %s after the pod deletion", time.Since(start).Round(time.Millisecond))

	svc, err := host.CoreV1().Services(v.namespace).Get(ctx, v.service(), metav1.GetOptions{})
	if err != nil || len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("API Service %s has no node port: %v", v.service(), err)
	}
	path := filepath.Join(cfg.workDir, "ephemeral-new.kubeconfig")
	server := fmt.Sprintf("https://%s:%d", cfg.nodeIP, svc.Spec.Ports[0].NodePort)
	k3kcli(t, "kubeconfig", "get", v.name, "-n", v.namespace, "--server", server, "--output-kubeconfig", path)
	fresh := virtualClient(t, path)
	serving(t, fresh, 3*time.Minute)
	t.Logf("ephemeral cluster usable again %s after the pod deletion", time.Since(start).Round(time.Millisecond))

	if err := retry(func(ctx context.Context) error {
		_, err := fresh.CoreV1().Namespaces().Get(ctx, w.namespace, metav1.GetOptions{})
		return err
	}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s after the restart of an ephemeral cluster: want NotFound, got %v", w.namespace, err)
	}
	if _, err := v.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatalf("the old kubeconfig still works: the new server kept the old CA, so the data dir was not ephemeral")
	}
	after := workload{namespace: "after-restart"}
	after.create(t, fresh)
	after.check(t, fresh)
}

func equalData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		if vb, ok := b[k]; !ok || !bytes.Equal(va, vb) {
			return false
		}
	}
	return true
}

// summary is "min X, median Y, max Z" of the durations.
func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	return fmt.Sprintf("min %s, median %s, max %s", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}
