package syncloop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// TestLoopRetriesAndCounts runs a loop without informers over keys whose
// reconciles fail once, ask for a requeue once, or belong to objects that are
// gone, and checks what is retried and what is counted.
func TestLoopRetriesAndCounts(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	reconcile := func(_ context.Context, key string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[key]++
		switch {
		case key == "fails-once" && calls[key] == 1:
			return false, errors.New("boom")
		case key == "requeues-once" && calls[key] == 1:
			return true, nil
		}
		return false, nil
	}
	called := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[key]
	}

	var p Progress
	l := New(Config{
		Name: "test", Noun: "thing", Workers: 2, Progress: &p,
		Reconcile: reconcile,
		Exists:    func(key string) bool { return key != "gone" },
	})
	defer l.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	wait("synced", p.Synced)
	for _, k := range []string{"fails-once", "requeues-once", "gone"} {
		l.Add(k)
	}
	// The failed pass is not counted; a requeue is no failure.
	wait("the retried passes", func() bool { return p.Reconciled("fails-once") == 1 && p.Reconciled("requeues-once") == 2 })
	wait("the pass over the gone object", func() bool { return called("gone") == 1 })
	if got := p.Reconciled("gone"); got != 0 {
		t.Errorf("an object that is gone has count %d, want 0", got)
	}
	for key, want := range map[string]int{"fails-once": 2, "requeues-once": 2, "gone": 1} {
		if got := called(key); got != want {
			t.Errorf("%s reconciled %d times, want %d", key, got, want)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v when its context ended, want nil", err)
	}
	if p.Synced() {
		t.Error("still synced after Run returned")
	}
}

func TestHandlerUnwrapsUnknownFinalState(t *testing.T) {
	var got []any
	h := Handler(func(obj any) { got = append(got, obj) })
	h.OnAdd("added", false)
	h.OnUpdate("old", "updated")
	h.OnDelete("deleted")
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: "tombstone"})
	want := []any{"added", "updated", "deleted", "tombstone"}
	if len(got) != len(want) {
		t.Fatalf("enqueued %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("enqueued %v, want %v", got, want)
			break
		}
	}
}
