package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/k3k-io/k3k/internal/testenv"
)

func startAPIServer(t *testing.T, s *Server) *kubernetes.Clientset {
	t.Helper()
	api, err := testenv.StartAPIServer(testContext(t), testenv.APIServerConfig{
		EtcdServers: []string{s.Endpoint()}, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatalf("starting kube-apiserver on %s: %v", s.Endpoint(), err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	cs, err := kubernetes.NewForConfig(api.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func configMap(name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Data:       map[string]string{"value": value},
	}
}

// TestKubeAPIServerCreatesUpdatesDeletesListsAndWatches runs a real
// kube-apiserver on each backend.
func TestKubeAPIServerCreatesUpdatesDeletesListsAndWatches(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) { kubeAPIServerRoundTrip(t, b) })
	}
}

func kubeAPIServerRoundTrip(t *testing.T, backend BackendKind) {
	s := openT(t, Config{DataDir: t.TempDir(), Backend: backend})
	cs := startAPIServer(t, s)
	ctx := testContext(t)
	cms := cs.CoreV1().ConfigMaps("default")

	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()

	for i := range 20 {
		if _, err := cms.Create(ctx, configMap(fmt.Sprintf("cm-%02d", i), "v1"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create cm-%02d: %v", i, err)
		}
	}
	cm, err := cms.Get(ctx, "cm-05", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["value"] = "v2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	// An update with the old resourceVersion is what the mod-revision guard exists for.
	stale := cm.DeepCopy()
	stale.Data["value"] = "lost"
	if _, err := cms.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update error = %v, want a conflict", err)
	}
	if err := cms.Delete(ctx, "cm-07", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}

	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, item := range list.Items {
		got[item.Name] = item.Data["value"]
	}
	if len(got) != 19 || got["cm-05"] != "v2" || got["cm-00"] != "v1" {
		t.Fatalf("list = %v, want 19 config maps with cm-05=v2", got)
	}
	if _, gone := got["cm-07"]; gone {
		t.Fatalf("deleted cm-07 is still listed")
	}
	// Paging goes through kine's limit and continue handling.
	page, err := cms.List(ctx, metav1.ListOptions{Limit: 7})
	if err != nil || len(page.Items) != 7 || page.Continue == "" {
		t.Fatalf("first page: %d items, continue %q, err %v", len(page.Items), page.Continue, err)
	}

	var added, modified, deleted int
	timeout := time.After(30 * time.Second)
	for added < 20 || modified < 1 || deleted < 1 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed early: %d added, %d modified, %d deleted", added, modified, deleted)
			}
			switch ev.Type {
			case watch.Added:
				added++
			case watch.Modified:
				modified++
				if v := ev.Object.(*corev1.ConfigMap).Data["value"]; v != "v2" {
					t.Fatalf("modified event carries %q, want v2", v)
				}
			case watch.Deleted:
				deleted++
				if n := ev.Object.(*corev1.ConfigMap).Name; n != "cm-07" {
					t.Fatalf("deleted event for %s, want cm-07", n)
				}
			}
		case <-timeout:
			t.Fatalf("watch saw %d added, %d modified, %d deleted; want 20, 1, 1", added, modified, deleted)
		}
	}
}

// TestRestartOnAnotherAddressServesEveryObject runs on each backend.
func TestRestartOnAnotherAddressServesEveryObject(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) { restartOnAnotherAddress(t, b) })
	}
}

func restartOnAnotherAddress(t *testing.T, backend BackendKind) {
	dir := t.TempDir()
	first, err := Open(testContext(t), Config{DataDir: dir, Backend: backend, ListenAddress: testenv.FreeAddr(t, "127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close(context.Background()) })
	if !strings.HasPrefix(first.Endpoint(), "http://127.0.0.2:") {
		t.Fatalf("endpoint %s, want one on 127.0.0.2", first.Endpoint())
	}
	cs := startAPIServer(t, first)
	ctx := testContext(t)
	want := map[string]string{}
	for i := range 30 {
		name := fmt.Sprintf("moved-%02d", i)
		want[name] = fmt.Sprintf("value-%d", i)
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap(name, want[name]), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "moved"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}

	second := openT(t, Config{DataDir: dir, Backend: backend, ListenAddress: testenv.FreeAddr(t, "127.0.0.3")})
	if !strings.HasPrefix(second.Endpoint(), "http://127.0.0.3:") {
		t.Fatalf("endpoint %s, want one on 127.0.0.3", second.Endpoint())
	}
	cs2 := startAPIServer(t, second)
	list, err := cs2.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, item := range list.Items {
		if strings.HasPrefix(item.Name, "moved-") {
			got[item.Name] = item.Data["value"]
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the move the apiserver lists %v, want %v", got, want)
	}
	if _, err := cs2.CoreV1().Namespaces().Get(ctx, "moved", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace after the move: %v", err)
	}
	if _, err := cs2.CoreV1().ConfigMaps("default").Create(ctx, configMap("after-move", "x"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("write after the move: %v", err)
	}
}
