package syncloop

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Warning is a Warning Event a syncer records on a virtual object, the
// tenant's only view of what the host refused: `kubectl describe` and
// `kubectl get events` in the virtual cluster show it. With Type Normal it
// records what went as it should, as a kubelet does (a container started).
type Warning struct {
	// Object is the virtual object (APIVersion, Kind, Namespace, Name, UID,
	// ResourceVersion).
	Object corev1.ObjectReference
	// Component is the event source's component ("kubelet" for pods, as a
	// kubelet reports them; "k3k-kubelet" for what only the agent does).
	Component, Node string
	Reason, Message string
	At              time.Time
	// Type is the event's type: Warning when empty, or Normal (a container
	// started, as a kubelet reports it).
	Type string
}

// Record writes w into the virtual cluster. Failing to is logged, not
// retried: the refusal it reports is retried (or final) either way.
func (w Warning) Record(ctx context.Context, virtual kubernetes.Interface) {
	now := metav1.NewTime(w.At)
	typ := w.Type
	if typ == "" {
		typ = corev1.EventTypeWarning
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: w.Object.Name + ".", Namespace: w.Object.Namespace},
		InvolvedObject: w.Object,
		Reason:         w.Reason, Message: w.Message, Type: typ,
		Source:         corev1.EventSource{Component: w.Component, Host: w.Node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "k3k.io/kubelet", ReportingInstance: w.Node,
	}
	if _, err := virtual.CoreV1().Events(w.Object.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "recording event", "kind", w.Object.Kind,
			"object", w.Object.Namespace+"/"+w.Object.Name, "reason", w.Reason)
	}
}

// Said remembers, by key, the last message said about an object, so that a
// refusal retried on every pass is said once per object (UID) and message.
// The zero value is ready to use.
type Said struct {
	mu   sync.Mutex
	last map[string]said
}

type said struct {
	uid     types.UID
	message string
}

// First reports whether message about the object uid under key is new, and
// remembers it.
func (s *Said) First(key string, uid types.UID, message string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.last[key]; ok && last.uid == uid && last.message == message {
		return false
	}
	if s.last == nil {
		s.last = map[string]said{}
	}
	s.last[key] = said{uid: uid, message: message}
	return true
}

// Forget drops what was said under key: the object is gone or fine again,
// and a new refusal must be said.
func (s *Said) Forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, key)
}
