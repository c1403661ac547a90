package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/k3k-io/k3k/pkg/datastore/sqlite"
)

// crashRounds is how many times the crash test kills the datastore; CI runs the
// default, `make test-datastore-crash` many more.
func crashRounds(t *testing.T) int {
	if v := os.Getenv("K3K_CRASH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("K3K_CRASH_ROUNDS=%q is not a positive number", v)
		}
		return n
	}
	return 20
}

const (
	crashWriters     = 8
	keysPerWriter    = 6
	crashOpTimeout   = 5 * time.Second
	maxLoadPerRound  = 700 * time.Millisecond
	minLoadPerRound  = 50 * time.Millisecond
	deletePercentage = 10
)

// revisionMismatches counts acknowledged writes whose response revision was not
// the revision stored for the key. kine v0.17.5 answers a create that follows a
// delete with the store's current revision; the datastore corrects it (see
// pkg/datastore/sqlite/ack.go), so this must stay 0.
var revisionMismatches atomic.Int64

// keyState is what a writer knows of its own key. Each key has exactly one
// writer, so after an acknowledged write its value is known exactly; a write in
// flight at the kill may land or not, so both outcomes stay allowed.
type keyState struct {
	modRev   int64  // 0: absent
	value    string // meaningful when modRev != 0
	inFlight *write // the unacknowledged write, if the last attempt failed
}

type write struct {
	deleted bool
	value   string
}

// TestAcknowledgedWritesSurviveKill9 runs kube-apiserver's write pattern (create
// if absent, update or delete guarded by mod revision) against the datastore,
// SIGKILLs it at a random moment, restarts it and checks every key: its value
// must be the last acknowledged one, or the one in flight at the kill.
//
// It runs over both backends: --backend v2 (batchlog) must keep the same
// promise as kine's path.
func TestAcknowledgedWritesSurviveKill9(t *testing.T) {
	for _, backend := range []string{"kine", "v2"} {
		t.Run(backend, func(t *testing.T) {
			revisionMismatches.Store(0)
			crashTest(t, "--backend", backend)
		})
	}
}

func crashTest(t *testing.T, flags ...string) {
	rounds := crashRounds(t)
	dir := t.TempDir()
	states := make([][]keyState, crashWriters)
	for w := range states {
		states[w] = make([]keyState, keysPerWriter)
	}
	var acked, lost, inFlightLanded int
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 42))

	for round := 1; round <= rounds; round++ {
		p := startProcWith(t, dir, flags...)
		c := newClient(t, p.endpoint)
		// Check what survived the previous kill, then continue from it.
		l, landed := verifyAndResync(t, c, states, round)
		lost += l
		inFlightLanded += landed

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		counts := make([]int, crashWriters)
		for w := range crashWriters {
			wg.Go(func() { counts[w] = writeLoop(ctx, t, c, w, states[w], rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))) })
		}
		time.Sleep(minLoadPerRound + time.Duration(rng.Int64N(int64(maxLoadPerRound-minLoadPerRound))))
		p.kill(t)
		wg.Wait()
		cancel()
		_ = c.Close()
		for _, n := range counts {
			acked += n
		}
	}

	// A last start to check the final kill, then a clean stop and a full check.
	p := startProcWith(t, dir, flags...)
	c := newClient(t, p.endpoint)
	l, landed := verifyAndResync(t, c, states, rounds+1)
	lost += l
	inFlightLanded += landed
	_ = c.Close()
	if code := p.stop(t); code != 0 {
		t.Fatalf("final stop exited %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sqlite.CheckIntegrity(ctx, filepath.Join(dir, sqlite.DatabaseFile)); err != nil {
		t.Fatalf("integrity check after %d kills: %v", rounds, err)
	}
	t.Logf("crash rounds: %d, acknowledged writes: %d, in-flight writes that landed: %d, lost writes: %d, reported revisions that differed from the stored one: %d, integrity check: ok",
		rounds, acked, inFlightLanded, lost, revisionMismatches.Load())
	if lost != 0 {
		t.Fatalf("%d acknowledged writes were lost", lost)
	}
	if n := revisionMismatches.Load(); n != 0 {
		t.Fatalf("%d acknowledged writes answered a revision other than the one stored", n)
	}
	if acked < rounds {
		t.Fatalf("only %d writes acknowledged in %d rounds; the load did not run", acked, rounds)
	}
}

func newClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func crashKey(w, k int) string { return fmt.Sprintf("/registry/crash/w%d/k%d", w, k) }

// writeLoop writes until the first failure (the kill) and returns how many
// writes were acknowledged.
func writeLoop(ctx context.Context, t *testing.T, c *clientv3.Client, w int, keys []keyState, rng *rand.Rand) int {
	n := 0
	for seq := 0; ctx.Err() == nil; seq++ {
		k := rng.IntN(len(keys))
		st := &keys[k]
		key := crashKey(w, k)
		wr := write{value: fmt.Sprintf("w%d-k%d-%d-%d", w, k, time.Now().UnixNano(), seq)}
		cmp := clientv3.Compare(clientv3.ModRevision(key), "=", st.modRev)
		op := clientv3.OpPut(key, wr.value)
		if st.modRev != 0 && rng.IntN(100) < deletePercentage {
			wr = write{deleted: true}
			op = clientv3.OpDelete(key)
		}
		st.inFlight = &wr
		opCtx, cancel := context.WithTimeout(ctx, crashOpTimeout)
		resp, err := c.Txn(opCtx).If(cmp).Then(op).Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return n // the datastore is gone; the write stays in flight
		}
		if !resp.Succeeded {
			// Only this writer touches the key, so a failed guard may only mean
			// the revision we hold is not the one stored. The value must still be
			// our last acknowledged one; adopt the stored revision, as
			// kube-apiserver does from the Else read, and go on.
			ranges := resp.Responses[0].GetResponseRange()
			present := ranges != nil && len(ranges.Kvs) == 1
			if present != (st.modRev != 0) || (present && string(ranges.Kvs[0].Value) != st.value) {
				t.Errorf("guarded write to %s failed and the key holds something else than the last acknowledged write", key)
				return n
			}
			revisionMismatches.Add(1)
			st.inFlight = nil
			if present {
				st.modRev = ranges.Kvs[0].ModRevision
			}
			continue
		}
		st.inFlight = nil
		if wr.deleted {
			st.modRev, st.value = 0, ""
		} else {
			st.modRev, st.value = resp.Header.Revision, wr.value
		}
		n++
	}
	return n
}

// verifyAndResync compares every key with what its writer knows, counts
// acknowledged writes that are missing, and adopts the surviving state.
func verifyAndResync(t *testing.T, c *clientv3.Client, states [][]keyState, round int) (lost, inFlightLanded int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for w := range states {
		for k := range states[w] {
			st := &states[w][k]
			key := crashKey(w, k)
			resp, err := c.Get(ctx, key)
			if err != nil {
				t.Fatalf("round %d: reading %s: %v", round, key, err)
			}
			present := len(resp.Kvs) == 1
			var got string
			var rev int64
			if present {
				got, rev = string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
			}
			matchesAcked := present == (st.modRev != 0) && (!present || got == st.value)
			matchesInFlight := st.inFlight != nil && present == !st.inFlight.deleted && (!present || got == st.inFlight.value)
			switch {
			case matchesAcked:
			case matchesInFlight:
				inFlightLanded++
			default:
				lost++
				t.Errorf("round %d: %s is %q (present %v, rev %d); last acknowledged %q (rev %d), in flight %+v",
					round, key, got, present, rev, st.value, st.modRev, st.inFlight)
			}
			st.inFlight = nil
			st.modRev, st.value = 0, ""
			if present {
				st.modRev, st.value = rev, got
			}
		}
	}
	return lost, inFlightLanded
}
