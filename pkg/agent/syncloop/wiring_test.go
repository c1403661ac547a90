package syncloop

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestAddObjectQueuesTheObjectsKey checks that an object of any kind is
// queued under "namespace/name" and that what is not an object is ignored.
func TestAddObjectQueuesTheObjectsKey(t *testing.T) {
	tests := []struct {
		name string
		obj  any
		want string // "" when nothing is queued
	}{
		{"a pod is queued by namespace and name", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}, "ns/web"},
		{"a claim is queued the same way", &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "data", Name: "pg"}}, "data/pg"},
		{"a tombstone's key is not an object and is ignored", "ns/x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(Config{Name: "test"})
			defer l.ShutDown()
			l.AddObject(tt.obj)
			if tt.want == "" {
				if n := l.queue.Len(); n != 0 {
					t.Fatalf("%d keys queued, want none", n)
				}
				return
			}
			if got, _ := l.queue.Get(); got != tt.want {
				t.Errorf("queued %q, want %q", got, tt.want)
			}
		})
	}
}

// TestInCache checks Exists built from a store: keys of stored objects
// exist, others and malformed keys do not.
func TestInCache(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := store.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "api"}}); err != nil {
		t.Fatal(err)
	}
	exists := InCache(store)
	for key, want := range map[string]bool{"ns/api": true, "ns/gone": false, "other/api": false, "a/b/c": false, "": false} {
		if got := exists(key); got != want {
			t.Errorf("exists(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestFound checks that NotFound becomes no object and no error, and any
// other error is passed on without the object.
func TestFound(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	gone := apierrors.NewNotFound(corev1.Resource("pods"), "web")
	broken := errors.New("cache broken")
	tests := []struct {
		name    string
		obj     *corev1.Pod
		err     error
		wantObj *corev1.Pod
		wantErr error
	}{
		{"an object that is there is returned", pod, nil, pod, nil},
		{"an object that is gone is nil without an error", nil, gone, nil, nil},
		{"another error is returned without the object", pod, broken, nil, broken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Found(tt.obj, tt.err)
			if got != tt.wantObj || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("Found() = %v, %v; want %v, %v", got, err, tt.wantObj, tt.wantErr)
			}
		})
	}
}
