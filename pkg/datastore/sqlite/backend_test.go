package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// backends are the two ways of serving the file; tests that must hold for
// both run over this table.
var backends = []BackendKind{BackendKine, BackendV2}

// transcript records a client's view of a sequence of requests, so that two
// backends can be compared answer by answer.
type transcript struct{ lines []string }

func (tr *transcript) add(format string, args ...any) {
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

func kvString(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s=%q c%d m%d l%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Lease)
}

func (tr *transcript) txn(what string, resp *clientv3.TxnResponse, err error) {
	if err != nil {
		tr.add("%s: error %v", what, err)
		return
	}
	s := fmt.Sprintf("%s: succeeded=%v rev=%d", what, resp.Succeeded, resp.Header.Revision)
	for _, r := range resp.Responses {
		if rr := r.GetResponseRange(); rr != nil {
			for _, kv := range rr.Kvs {
				s += " range[" + kvString(kv) + "]"
			}
		}
		if p := r.GetResponsePut(); p != nil {
			s += fmt.Sprintf(" put(rev=%d)", p.Header.GetRevision())
		}
		if d := r.GetResponseDeleteRange(); d != nil {
			s += fmt.Sprintf(" deleted=%d", d.Deleted)
			for _, kv := range d.PrevKvs {
				s += " prev[" + kvString(kv) + "]"
			}
		}
	}
	tr.lines = append(tr.lines, s)
}

func (tr *transcript) get(what string, resp *clientv3.GetResponse, err error) {
	if err != nil {
		tr.add("%s: error %v", what, err)
		return
	}
	s := fmt.Sprintf("%s: rev=%d count=%d more=%v", what, resp.Header.Revision, resp.Count, resp.More)
	for _, kv := range resp.Kvs {
		s += " [" + kvString(kv) + "]"
	}
	tr.lines = append(tr.lines, s)
}

// watchUntil records the events of a watch from rev with PrevKV until one
// at revision until, or the watch's cancellation.
func (tr *transcript) watchUntil(ctx context.Context, c *clientv3.Client, what, prefix string, rev, until int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wc := c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithPrevKV())
	for resp := range wc {
		if resp.Canceled || resp.Err() != nil {
			tr.add("%s: canceled compact=%d err=%v", what, resp.CompactRevision, resp.Err())
			return
		}
		for _, ev := range resp.Events {
			tr.add("%s: %s %s prev[%s]", what, ev.Type, kvString(ev.Kv), kvString(ev.PrevKv))
			if ev.Kv.ModRevision >= until {
				return
			}
		}
	}
	tr.add("%s: closed", what)
}

func createTxn(ctx context.Context, c *clientv3.Client, key, val string) (*clientv3.TxnResponse, error) {
	return c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val)).Else(clientv3.OpGet(key)).Commit()
}

func updateAt(ctx context.Context, c *clientv3.Client, key, val string, rev int64) (*clientv3.TxnResponse, error) {
	return c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, val)).Else(clientv3.OpGet(key)).Commit()
}

func deleteAt(ctx context.Context, c *clientv3.Client, key string, rev int64) (*clientv3.TxnResponse, error) {
	return c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
}

// paritySequence runs one fixed sequence of etcd requests (kube-apiserver's
// shapes and a few others) and records every answer.
func paritySequence(ctx context.Context, t *testing.T, c *clientv3.Client) []string {
	t.Helper()
	var tr transcript
	rev := func(r *clientv3.TxnResponse, err error) int64 {
		t.Helper()
		if err != nil {
			t.Fatalf("txn: %v", err)
		}
		return r.Header.Revision
	}
	r, err := createTxn(ctx, c, "/p/a", "a1")
	tr.txn("create a", r, err)
	a1 := rev(r, err)
	r, err = createTxn(ctx, c, "/p/a", "a-again")
	tr.txn("create a again", r, err)
	r, err = createTxn(ctx, c, "/p/b", "b1")
	tr.txn("create b", r, err)
	b1 := rev(r, err)
	r, err = updateAt(ctx, c, "/p/a", "a2", a1)
	tr.txn("update a at its revision", r, err)
	a2 := rev(r, err)
	r, err = updateAt(ctx, c, "/p/a", "a-stale", a1)
	tr.txn("update a at a stale revision", r, err)
	r, err = updateAt(ctx, c, "/p/missing", "x", a1)
	tr.txn("update a missing key", r, err)
	r, err = deleteAt(ctx, c, "/p/b", a1)
	tr.txn("delete b at a stale revision", r, err)
	r, err = deleteAt(ctx, c, "/p/b", b1)
	tr.txn("delete b at its revision", r, err)
	bDeleted := rev(r, err)
	r, err = deleteAt(ctx, c, "/p/b", bDeleted)
	tr.txn("delete b again", r, err)
	r, err = createTxn(ctx, c, "/p/b", "b2")
	tr.txn("recreate b", r, err)
	b2 := rev(r, err)
	for _, k := range []string{"/p/c", "/p/d", "/p/e"} {
		r, err = createTxn(ctx, c, k, "v"+k)
		tr.txn("create "+k, r, err)
	}
	last := rev(r, err)
	_, err = c.Put(ctx, "/p/plain", "x")
	tr.add("plain put: %v", err)
	_, err = c.Delete(ctx, "/p/c")
	tr.add("plain delete: %v", err)

	g, err := c.Get(ctx, "/p/a", clientv3.WithRev(a1))
	tr.get("get a at its first revision", g, err)
	g, err = c.Get(ctx, "/p/b", clientv3.WithRev(bDeleted))
	tr.get("get b while deleted", g, err)
	g, err = c.Get(ctx, "/p/b")
	tr.get("get b now", g, err)
	g, err = c.Get(ctx, "/p/b", clientv3.WithKeysOnly())
	tr.get("get b keys only", g, err)
	g, err = c.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithLimit(2))
	tr.get("list page 1", g, err)
	if err == nil && len(g.Kvs) > 0 {
		from := string(g.Kvs[len(g.Kvs)-1].Key) + "\x00"
		g2, err := c.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd("/p/")), clientv3.WithLimit(2), clientv3.WithRev(g.Header.Revision))
		tr.get("list page 2", g2, err)
	}
	g, err = c.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithRev(b2-1))
	tr.get("list at an old revision", g, err)
	g, err = c.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	tr.get("count", g, err)
	g, err = c.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithRev(last+1000))
	tr.get("list at a future revision", g, err)
	g, err = c.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	tr.get("list everything, keys only", g, err)
	tr.watchUntil(ctx, c, "watch from a", "/p/", a1, last)

	// kine never compacts the newest 1000 revisions.
	fill := rev(createTxn(ctx, c, "/filler", "0"))
	for i := 1; i <= 1010; i++ {
		fill = rev(updateAt(ctx, c, "/filler", fmt.Sprint(i), fill))
	}
	cr, err := c.Compact(ctx, a2)
	if err != nil {
		tr.add("compact: %v", err)
	} else {
		tr.add("compact: rev=%d", cr.Header.Revision)
	}
	_, err = c.Compact(ctx, a2)
	tr.add("compact again: %v", err)
	g, err = c.Get(ctx, "/p/a", clientv3.WithRev(a1))
	tr.get("get below the compact revision", g, err)
	g, err = c.Get(ctx, "/p/a", clientv3.WithRev(a2))
	tr.get("get at the compact revision", g, err)
	g, err = c.Get(ctx, "/p/", clientv3.WithPrefix(), clientv3.WithRev(a1))
	tr.get("list below the compact revision", g, err)
	tr.watchUntil(ctx, c, "watch from below the compact revision", "/p/", a1, last)
	tr.watchUntil(ctx, c, "watch from after the compact revision", "/p/", a2+2, last)
	r, err = updateAt(ctx, c, "/p/d", "d2", last-1)
	tr.txn("update d after compaction", r, err)
	return tr.lines
}

// TestBothBackendsAnswerAlike runs the same requests against --backend kine
// (stock kine's logstructured/sqllog with our ack guard) and --backend v2
// and requires identical answers, revisions included: creates, conflicting
// creates, guarded updates and deletes at current and stale revisions, a
// re-create after a delete, gets at old revisions, paged lists at a
// revision, counts, watches with PrevKV, and compaction with what follows it.
func TestBothBackendsAnswerAlike(t *testing.T) {
	got := map[BackendKind][]string{}
	tables := map[BackendKind][]string{}
	for _, b := range backends {
		s := openT(t, Config{DataDir: t.TempDir(), Backend: b, CompactInterval: -1})
		ctx := testContext(t)
		got[b] = paritySequence(ctx, t, etcdClient(t, s.Endpoint()))
		tables[b] = kineTable(ctx, t, s)
	}
	// The same requests, serially, leave identical kine tables, every
	// column of every row: v2's rows are stock kine's.
	compareViews(t, "kine table rows", tables[BackendKine], tables[BackendV2])
	kine, v2 := got[BackendKine], got[BackendV2]
	for i := 0; i < max(len(kine), len(v2)); i++ {
		var k, v string
		if i < len(kine) {
			k = kine[i]
		}
		if i < len(v2) {
			v = v2[i]
		}
		if k != v {
			t.Errorf("answer %d differs:\n kine: %s\n   v2: %s", i, k, v)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("kine's answers:\n%s", strings.Join(kine, "\n"))
	}
}

// TestV2ConcurrentWritersLoseNothingAndWatchersSeeEveryRevisionOnce has 16
// goroutines create and update distinct and shared keys against v2 while a
// watcher watches from the start: every acknowledged write is stored at the
// revision it was answered with, revisions have no gaps, and the watcher
// sees every revision exactly once, in order; in both sync modes.
func TestV2ConcurrentWritersLoseNothingAndWatchersSeeEveryRevisionOnce(t *testing.T) {
	for _, mode := range []SyncMode{SyncGroup, SyncCommit} {
		t.Run(string(mode), func(t *testing.T) { concurrentWriters(t, mode) })
	}
}

func concurrentWriters(t *testing.T, mode SyncMode) {
	s := openT(t, Config{DataDir: t.TempDir(), Backend: BackendV2, Sync: mode})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	start, err := c.Get(ctx, "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	from := start.Header.Revision + 1
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wc := c.Watch(wctx, "/c/", clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV())

	const writers, each = 16, 20
	type ack struct {
		key, val string
		rev      int64
	}
	var (
		mu   sync.Mutex
		acks []ack
		wg   sync.WaitGroup
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := fmt.Sprintf("/c/own-%d-%d", w, i)
				if i%2 == 1 {
					key = fmt.Sprintf("/c/shared-%d", i%3)
				}
				val := fmt.Sprintf("w%d-%d", w, i)
				for {
					g, err := c.Get(ctx, key)
					if err != nil {
						t.Errorf("get: %v", err)
						return
					}
					var cur int64
					if len(g.Kvs) > 0 {
						cur = g.Kvs[0].ModRevision
					}
					r, err := updateAt(ctx, c, key, val, cur)
					if err != nil {
						t.Errorf("write: %v", err)
						return
					}
					if r.Succeeded {
						mu.Lock()
						acks = append(acks, ack{key, val, r.Header.Revision})
						mu.Unlock()
						break
					}
				}
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	byRev := map[int64]ack{}
	var maxRev int64
	for _, a := range acks {
		if _, dup := byRev[a.rev]; dup {
			t.Fatalf("two writes answered with revision %d", a.rev)
		}
		byRev[a.rev] = a
		maxRev = max(maxRev, a.rev)
	}
	if len(acks) != writers*each {
		t.Fatalf("%d writes acknowledged, want %d", len(acks), writers*each)
	}
	for r := from; r <= maxRev; r++ {
		a, ok := byRev[r]
		if !ok {
			t.Fatalf("revision %d has no acknowledged write: revisions have a gap", r)
		}
		g, err := c.Get(ctx, a.key, clientv3.WithRev(r))
		if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != a.val || g.Kvs[0].ModRevision != r {
			t.Fatalf("write of %s=%s answered at %d is not stored there: %v %v", a.key, a.val, r, g, err)
		}
	}
	next := from
	prev := map[string]string{}
	for next <= maxRev {
		resp, ok := <-wc
		if !ok || resp.Err() != nil {
			t.Fatalf("watch ended at revision %d: %v", next, resp.Err())
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("watch delivered revision %d, want %d", ev.Kv.ModRevision, next)
			}
			a := byRev[next]
			if string(ev.Kv.Key) != a.key || string(ev.Kv.Value) != a.val {
				t.Fatalf("watch event at %d is %s=%s, want %s=%s", next, ev.Kv.Key, ev.Kv.Value, a.key, a.val)
			}
			if p, had := prev[a.key]; had && (ev.PrevKv == nil || string(ev.PrevKv.Value) != p) {
				t.Fatalf("watch event at %d has PrevKV %v, want %s", next, ev.PrevKv, p)
			}
			prev[a.key] = a.val
			next++
		}
	}
}

// writeMix writes creates, updates, deletes, a re-create, a leased key and
// kube-apiserver's compaction-key transaction, and returns the revision
// after the first writes (for reads at an old revision) and the last one.
func writeMix(ctx context.Context, t *testing.T, c *clientv3.Client, prefix string) (early, last int64) {
	t.Helper()
	must := func(r *clientv3.TxnResponse, err error) int64 {
		t.Helper()
		if err != nil || !r.Succeeded {
			t.Fatalf("write under %s: %v %v", prefix, r, err)
		}
		return r.Header.Revision
	}
	a := must(createTxn(ctx, c, prefix+"a", "a1"))
	b := must(createTxn(ctx, c, prefix+"b", "b1"))
	early = must(updateAt(ctx, c, prefix+"a", "a2", a))
	must(deleteAt(ctx, c, prefix+"b", b))
	must(createTxn(ctx, c, prefix+"b", "b2"))
	lease, err := c.Grant(ctx, 3600)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(prefix+"leased"), "=", 0)).
		Then(clientv3.OpPut(prefix+"leased", "l", clientv3.WithLease(lease.ID))).Commit()
	must(r, err)
	// kube-apiserver's compaction transaction on compact_rev_key.
	// kine keeps it under compact_rev_key_apiserver; absent, its version is 0.
	g, err := c.Get(ctx, "compact_rev_key")
	if err != nil {
		t.Fatalf("get compact_rev_key: %v", err)
	}
	var version int64
	if len(g.Kvs) == 1 {
		version = g.Kvs[0].Version
	}
	r, err = c.Txn(ctx).If(clientv3.Compare(clientv3.Version("compact_rev_key"), "=", version)).
		Then(clientv3.OpPut("compact_rev_key", prefix)).Else(clientv3.OpGet("compact_rev_key")).Commit()
	must(r, err)
	return early, must(createTxn(ctx, c, prefix+"c", "c1"))
}

// fileView is what a client sees of the whole store: every key with its
// revisions, the current revision, a list at an old revision, a watch with
// PrevKV from there, and what a read below the compact revision answers.
func fileView(ctx context.Context, t *testing.T, c *clientv3.Client, early, last, belowCompact int64) []string {
	t.Helper()
	var tr transcript
	g, err := c.Get(ctx, "", clientv3.WithFromKey())
	tr.get("everything", g, err)
	g, err = c.Get(ctx, "/x/", clientv3.WithPrefix(), clientv3.WithRev(early))
	tr.get("list at an old revision", g, err)
	g, err = c.Get(ctx, "/x/", clientv3.WithPrefix(), clientv3.WithRev(belowCompact))
	tr.get("list below the compact revision", g, err)
	// A watch from early+1 starts after early, the compact revision.
	tr.watchUntil(ctx, c, "watch", "/x/", early+1, last)
	return tr.lines
}

// TestTheEscapeHatchStockKineServesWhatV2WroteAndBack is the operator's way
// out of v2: v2 writes a mix and compacts, stops; then --backend kine, which
// is stock kine v0.17.5's logstructured/sqllog over the same file (with our
// ack guard in front, which reads but never writes the kine table), serves
// it and must show every key, value and revision, the same old-revision
// list, watch events with PrevKV and compact revision; it writes more and
// compacts with kine's own compactor; and v2 started on that file again
// shows what kine showed.
func TestTheEscapeHatchStockKineServesWhatV2WroteAndBack(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	phase := func(b BackendKind, write func(c *clientv3.Client)) []string {
		t.Helper()
		s, err := Open(ctx, Config{DataDir: dir, ListenAddress: "127.0.0.1:0", Backend: b, CompactInterval: -1})
		if err != nil {
			t.Fatalf("open with %s: %v", b, err)
		}
		defer func() {
			if err := s.Close(ctx); err != nil {
				t.Fatalf("close %s: %v", b, err)
			}
		}()
		c := etcdClient(t, s.Endpoint())
		if write != nil {
			write(c)
		}
		return nil
	}
	var early, last, compactedAt int64
	view := func(b BackendKind) []string {
		var lines []string
		phase(b, func(c *clientv3.Client) { lines = fileView(ctx, t, c, early, last, compactedAt-1) })
		return lines
	}
	compactAfterFiller := func(c *clientv3.Client, key string, to int64) {
		r, err := createTxn(ctx, c, key, "0")
		if err != nil || !r.Succeeded {
			t.Fatalf("filler: %v %v", r, err)
		}
		rev := r.Header.Revision
		for i := 1; i <= 1005; i++ {
			r, err := updateAt(ctx, c, key, fmt.Sprint(i), rev)
			if err != nil || !r.Succeeded {
				t.Fatalf("filler: %v %v", r, err)
			}
			rev = r.Header.Revision
		}
		if _, err := c.Compact(ctx, to); err != nil {
			t.Fatalf("compact to %d: %v", to, err)
		}
	}

	phase(BackendV2, func(c *clientv3.Client) {
		e, _ := writeMix(ctx, t, c, "/x/")
		compactAfterFiller(c, "/filler-v2", e)
		early, compactedAt = e, e
		_, last = writeMix(ctx, t, c, "/x/2/")
	})
	fromV2 := view(BackendV2)
	fromKine := view(BackendKine)
	compareViews(t, "stock kine on v2's file", fromV2, fromKine)
	if testing.Verbose() {
		t.Logf("v2's view:\n%s", strings.Join(fromV2, "\n"))
	}

	phase(BackendKine, func(c *clientv3.Client) {
		_, l := writeMix(ctx, t, c, "/x/3/")
		compactAfterFiller(c, "/filler-kine", l)
		compactedAt = l
		_, last = writeMix(ctx, t, c, "/x/4/")
	})
	early = compactedAt
	kineAgain := view(BackendKine)
	v2Again := view(BackendV2)
	compareViews(t, "v2 on kine's file", kineAgain, v2Again)
	if testing.Verbose() {
		t.Logf("kine's view:\n%s", strings.Join(kineAgain, "\n"))
	}
	if err := CheckIntegrity(ctx, dir+"/"+DatabaseFile); err != nil {
		t.Fatal(err)
	}
}

func compareViews(t *testing.T, what string, want, got []string) {
	t.Helper()
	if len(want) < 4 {
		t.Fatalf("%s: the view is too short to mean anything: %q", what, want)
	}
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("%s: line %d differs:\n want: %s\n  got: %s", what, i, w, g)
		}
	}
}

// TestV2AWriteThatFailsInABatchFailsAlone injects a statement error for one
// key (a trigger that aborts its insert: a real SQLite error, as a full disk
// gives) while 16 goroutines write: every write of that key is answered
// Unavailable and not stored, every other write is acknowledged and stored
// at its revision, and revisions have no gaps (a rolled-back batch uses
// none up).
func TestV2AWriteThatFailsInABatchFailsAlone(t *testing.T) {
	s := openT(t, Config{DataDir: t.TempDir(), Backend: BackendV2})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	if _, err := s.side.ExecContext(ctx, `CREATE TRIGGER k3k_test_fail BEFORE INSERT ON kine
		WHEN NEW.name LIKE '/bad/%' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	start, err := c.Get(ctx, "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		revs      = map[int64]string{}
		badErrors int
		wg        sync.WaitGroup
	)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				key := fmt.Sprintf("/good/%d-%d", w, i)
				if w%4 == 0 && i%2 == 0 {
					key = fmt.Sprintf("/bad/%d-%d", w, i)
				}
				r, err := createTxn(ctx, c, key, "v")
				mu.Lock()
				switch {
				case strings.HasPrefix(key, "/bad/"):
					if status.Code(err) != codes.Unavailable {
						t.Errorf("write of %s answered %v, %v; want Unavailable", key, r, err)
					}
					badErrors++
				case err != nil || !r.Succeeded:
					t.Errorf("write of %s failed: %v %v", key, r, err)
				default:
					revs[r.Header.Revision] = key
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if badErrors != 20 || len(revs) != 140 {
		t.Fatalf("%d failed and %d stored writes, want 20 and 140", badErrors, len(revs))
	}
	for r := start.Header.Revision + 1; r <= start.Header.Revision+140; r++ {
		key, ok := revs[r]
		if !ok {
			t.Fatalf("no acknowledged write at revision %d: revisions have a gap", r)
		}
		g, err := c.Get(ctx, key)
		if err != nil || len(g.Kvs) != 1 || g.Kvs[0].ModRevision != r {
			t.Fatalf("%s answered at %d is not stored there: %v %v", key, r, g, err)
		}
	}
	g, err := c.Get(ctx, "/bad/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || g.Count != 0 {
		t.Fatalf("failed writes left %v keys (%v)", g, err)
	}
}

// TestV2AWriteIsInvisibleUntilItIsDurable holds the group fsync back after
// a v2 write committed (its row is in the file): neither a get nor a watch
// may see it, and its client waits, until the fsync returns.
func TestV2AWriteIsInvisibleUntilItIsDurable(t *testing.T) {
	s := openT(t, Config{DataDir: t.TempDir(), Backend: BackendV2, Sync: SyncGroup})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	if err := create(ctx, c, "/d/before", "x"); err != nil {
		t.Fatal(err)
	}
	before, err := c.Get(ctx, "/d/before")
	if err != nil {
		t.Fatal(err)
	}
	wc := c.Watch(ctx, "/d/", clientv3.WithPrefix(), clientv3.WithRev(before.Header.Revision+1))
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.gsync.mu.Lock()
	s.gsync.hold = func() {
		once.Do(func() { close(entered) })
		<-release
	}
	s.gsync.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- create(ctx, c, "/d/held", "y") }()
	<-entered

	var rows int
	if err := s.side.QueryRowContext(ctx, `SELECT COUNT(*) FROM kine WHERE name = '/d/held'`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the held write is not committed in the file (%d rows, %v): the test would prove nothing", rows, err)
	}
	g, err := c.Get(ctx, "/d/held")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Kvs) != 0 || g.Header.Revision != before.Header.Revision {
		t.Fatalf("before its fsync the write is visible: %v at revision %d", g.Kvs, g.Header.Revision)
	}
	select {
	case resp := <-wc:
		t.Fatalf("a watcher saw the write before its fsync: %v", resp.Events)
	case err := <-done:
		t.Fatalf("the write was acknowledged before its fsync: %v", err)
	default:
	}
	s.gsync.mu.Lock()
	s.gsync.hold = nil
	s.gsync.mu.Unlock()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the held write: %v", err)
	}
	resp := <-wc
	if len(resp.Events) != 1 || string(resp.Events[0].Kv.Key) != "/d/held" {
		t.Fatalf("after the fsync the watcher got %v", resp.Events)
	}
	if v, ok := getValue(ctx, t, c, "/d/held"); !ok || v != "y" {
		t.Fatalf("after the fsync get answers %q, %v", v, ok)
	}
}

// kineTable is every row of the kine table, all columns.
func kineTable(ctx context.Context, t *testing.T, s *Server) []string {
	t.Helper()
	rows, err := s.side.QueryContext(ctx, `SELECT id, name, created, deleted, create_revision, prev_revision, lease, value, old_value FROM kine ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			id                           int64
			name                         string
			created, deleted, crev, prev sql.NullInt64
			lease                        sql.NullInt64
			value, oldValue              []byte
		)
		if err := rows.Scan(&id, &name, &created, &deleted, &crev, &prev, &lease, &value, &oldValue); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %q c=%v d=%v crev=%v prev=%v lease=%v value=%q(%v) old=%q(%v)",
			id, name, created, deleted, crev, prev, lease, value, value == nil, oldValue, oldValue == nil))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestV2WatchersFromDifferentRevisionsSeeEveryEventOnce has 16 writers
// write values big enough that the watch ring (4 MiB) holds only the last
// few dozen events, while three watchers watch: one from the start, one
// started halfway from the first revision (it must read the table, then
// switch to the ring while writes go on), and one that reads nothing until
// the writes are done. Each must see every revision once, in order, with
// the value written and the previous value of its key.
func TestV2WatchersFromDifferentRevisionsSeeEveryEventOnce(t *testing.T) {
	s := openT(t, Config{DataDir: t.TempDir(), Backend: BackendV2})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	start, err := c.Get(ctx, "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	from := start.Header.Revision + 1
	watch := func() clientv3.WatchChan {
		return c.Watch(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV())
	}
	live, slow := watch(), watch()
	var (
		mu   sync.Mutex
		vals = map[int64][2]string{} // revision → key, value
		wg   sync.WaitGroup
		half sync.WaitGroup
	)
	const writers, each = 16, 16
	big := strings.Repeat("x", 48<<10)
	half.Add(writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if i == each/2 {
					half.Done()
				}
				key := fmt.Sprintf("/w/%d", (w+i)%5)
				val := fmt.Sprintf("%d-%d-%s", w, i, big)
				for {
					g, err := c.Get(ctx, key)
					if err != nil {
						t.Errorf("get: %v", err)
						return
					}
					var cur int64
					if len(g.Kvs) > 0 {
						cur = g.Kvs[0].ModRevision
					}
					r, err := updateAt(ctx, c, key, val, cur)
					if err != nil {
						t.Errorf("write: %v", err)
						return
					}
					if r.Succeeded {
						mu.Lock()
						vals[r.Header.Revision] = [2]string{key, val}
						mu.Unlock()
						break
					}
				}
			}
		}(w)
	}
	half.Wait()
	late := watch()
	wg.Wait()
	if t.Failed() {
		return
	}
	last := from + writers*each - 1
	for name, wc := range map[string]clientv3.WatchChan{"live": live, "late": late, "slow": slow} {
		next := from
		prev := map[string]string{}
		for next <= last {
			resp, ok := <-wc
			if !ok || resp.Err() != nil {
				t.Fatalf("%s watch ended at revision %d: %v", name, next, resp.Err())
			}
			for _, ev := range resp.Events {
				want, ok := vals[next]
				if !ok || ev.Kv.ModRevision != next {
					t.Fatalf("%s watch delivered revision %d, want %d (acknowledged: %v)", name, ev.Kv.ModRevision, next, ok)
				}
				if string(ev.Kv.Key) != want[0] || string(ev.Kv.Value) != want[1] {
					t.Fatalf("%s watch: event at %d is not the write acknowledged there", name, next)
				}
				if p, had := prev[want[0]]; had && (ev.PrevKv == nil || string(ev.PrevKv.Value) != p) {
					t.Fatalf("%s watch: event at %d has the wrong PrevKV", name, next)
				}
				prev[want[0]] = want[1]
				next++
			}
		}
	}
}

// TestV2AWatcherPassedByCompactionIsCancelledAsCompacted holds a watcher
// back (a raw watch stream on its own connection that nobody reads, so
// gRPC's flow control stops the server's sends after its first window),
// writes past the watch ring, compacts beyond the watcher's position, then
// reads: the events it gets are consecutive from its start, and the watch
// ends cancelled with etcd's "compacted" error instead of skipping the
// compacted revisions.
func TestV2AWatcherPassedByCompactionIsCancelledAsCompacted(t *testing.T) {
	s := openT(t, Config{DataDir: t.TempDir(), Backend: BackendV2, CompactInterval: -1, v2CompactMinRetain: 1})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	start, err := c.Get(ctx, "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	from := start.Header.Revision + 1

	conn, err := grpc.NewClient(strings.TrimPrefix(s.Endpoint(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()),
		// kine's server merges queued batches into one message.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := etcdserverpb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{
		CreateRequest: &etcdserverpb.WatchCreateRequest{Key: []byte("/m/"), RangeEnd: []byte("/m0"), StartRevision: from, PrevKv: true},
	}}); err != nil {
		t.Fatal(err)
	}
	if created, err := stream.Recv(); err != nil || !created.Created {
		t.Fatalf("watch not created: %v %v", created, err)
	}

	const writes = 300
	big := strings.Repeat("m", 48<<10)
	rev := int64(0)
	for i := 0; i < writes; i++ {
		r, err := updateAt(ctx, c, "/m/k", fmt.Sprintf("%d-%s", i, big), rev)
		if err != nil || !r.Succeeded {
			t.Fatalf("write %d: %v %v", i, r, err)
		}
		rev = r.Header.Revision
	}
	if _, err := c.Compact(ctx, rev-1); err != nil {
		t.Fatalf("compact: %v", err)
	}

	next := from
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch stream failed at revision %d: %v", next, err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision != next {
				t.Fatalf("watch delivered revision %d, want %d", ev.Kv.ModRevision, next)
			}
			next++
		}
		if resp.Canceled {
			if !strings.Contains(resp.CancelReason, "compacted") {
				t.Fatalf("watch cancelled at revision %d for %q, want compacted", next, resp.CancelReason)
			}
			t.Logf("watch cancelled as compacted after %d of %d events", next-from, writes)
			return
		}
		if next > rev {
			t.Fatalf("the watcher received all %d events: it was never held behind the compaction, so the test proved nothing", writes)
		}
	}
}

// TestLiveEventsKeepPrevKVOfKeysOlderThanTheCompaction is what the virtual
// API server met in a conformance run: an object written before the last
// compaction, then updated and deleted while a watch (its watch cache's)
// is open. Each event must carry the key's previous version: without it the
// API server reads the update as a create, and a DELETE without PrevKV
// ("etcd event received with PrevKv=nil") makes its watch cache drop every
// watcher of the resource. Both backends are held to it.
func TestLiveEventsKeepPrevKVOfKeysOlderThanTheCompaction(t *testing.T) {
	for _, b := range []BackendKind{BackendV2, BackendKine} {
		t.Run(string(b), func(t *testing.T) {
			s := openT(t, Config{DataDir: t.TempDir(), Backend: b, CompactInterval: -1, v2CompactMinRetain: 1})
			ctx := testContext(t)
			c := etcdClient(t, s.Endpoint())
			old, err := createTxn(ctx, c, "/p/old", "v1")
			if err != nil || !old.Succeeded {
				t.Fatalf("create: %v %v", old, err)
			}
			// Other writes move the revision on; the compaction passes the
			// key's only version, which it keeps (it is the latest).
			rev := int64(0)
			for i := range 20 {
				r, err := updateAt(ctx, c, "/q/filler", fmt.Sprint(i), rev)
				if err != nil || !r.Succeeded {
					t.Fatalf("filler: %v %v", r, err)
				}
				rev = r.Header.Revision
			}
			if _, err := c.Compact(ctx, rev); err != nil {
				t.Fatalf("compact to %d: %v", rev, err)
			}

			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			// A live watch: from the current revision, as the API server's
			// watch cache watches after its list.
			wc := c.Watch(wctx, "/p/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(rev+1))
			upd, err := updateAt(ctx, c, "/p/old", "v2", old.Header.Revision)
			if err != nil || !upd.Succeeded {
				t.Fatalf("update: %v %v", upd, err)
			}
			if del, err := deleteAt(ctx, c, "/p/old", upd.Header.Revision); err != nil || !del.Succeeded {
				t.Fatalf("delete: %v %v", del, err)
			}
			want := []struct {
				typ  mvccpb.Event_EventType
				prev string
			}{{mvccpb.PUT, "v1"}, {mvccpb.DELETE, "v2"}}
			for len(want) > 0 {
				resp, ok := <-wc
				if !ok || resp.Err() != nil {
					t.Fatalf("watch ended: %v", resp.Err())
				}
				for _, ev := range resp.Events {
					w := want[0]
					want = want[1:]
					if ev.Type != w.typ || ev.PrevKv == nil || string(ev.PrevKv.Value) != w.prev {
						t.Fatalf("%s event at %d has PrevKV %v, want the value %q", ev.Type, ev.Kv.ModRevision, ev.PrevKv, w.prev)
					}
				}
			}
		})
	}
}
