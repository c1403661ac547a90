package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// replaceTarget is a running datastore that an in-place restore replaces
// the data of: a real `datastore sqlite` process, or a real etcd member.
type replaceTarget struct {
	client *clientv3.Client
	// snapshot is the `datastore snapshot` command line for it.
	snapshot []string
	// restore is the `datastore restore --replace` command line for it.
	restore []string
}

func sqliteReplaceTarget(t *testing.T) replaceTarget {
	dir := t.TempDir()
	p := startProc(t, dir)
	return replaceTarget{client: newClient(t, p.endpoint),
		snapshot: []string{"sqlite", "--data-dir", dir, "--tmp-dir", t.TempDir()},
		restore:  []string{"--replace", "--endpoint", p.endpoint, "--sqlite-data-dir", dir, "--tmp-dir", t.TempDir()}}
}

func etcdReplaceTarget(t *testing.T) replaceTarget {
	m := startTestMember(t)
	return replaceTarget{client: m.client,
		snapshot: append([]string{"etcd", "--endpoint", m.name, "--dial-address", m.clientAddr}, m.tlsFlags...),
		restore:  append([]string{"--replace", "--endpoint", m.name, "--dial-address", m.clientAddr, "--tmp-dir", t.TempDir()}, m.tlsFlags...)}
}

func replaceKey(i int) string { return fmt.Sprintf("/registry/configmaps/ns/cm-%05d", i) }

// put writes keys from..to-1 with values made by value.
func put(t *testing.T, c *clientv3.Client, from, to int, value func(int) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := from; i < to; i++ {
		if _, err := c.Put(ctx, replaceKey(i), value(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// deleteKey deletes key as kube-apiserver does (kine knows no other way).
func deleteKey(t *testing.T, c *clientv3.Client, key string) {
	t.Helper()
	ctx := context.Background()
	cur, err := c.Get(ctx, key)
	if err != nil || len(cur.Kvs) == 0 {
		t.Fatalf("get %s: %v %v", key, err, cur)
	}
	if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", cur.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit(); err != nil {
		t.Fatal(err)
	}
}

// clusterKeys is every key under /registry/ and /bootstrap/ but the
// datastore's own health key, with its value and mod revision.
func clusterKeys(t *testing.T, c *clientv3.Client) (map[string]string, map[string]int64) {
	t.Helper()
	values, revs := map[string]string{}, map[string]int64{}
	for _, p := range []string{"/registry/", "/bootstrap/"} {
		resp, err := c.Get(context.Background(), p, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if k := string(kv.Key); k != "/registry/health" {
				values[k], revs[k] = string(kv.Value), kv.ModRevision
			}
		}
	}
	return values, revs
}

func revision(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// snapshotState writes n objects and the bootstrap key, snapshots, and
// returns the stream and the live cluster keys the snapshot holds.
func snapshotState(t *testing.T, target replaceTarget, n int) ([]byte, map[string]string) {
	t.Helper()
	put(t, target.client, 0, n, func(i int) string { return fmt.Sprintf("v%d", i) })
	ctx := context.Background()
	lease, err := target.client.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []clientv3.Op{
		clientv3.OpPut("/bootstrap/0123abcd", "bootstrap of the snapshot"),
		clientv3.OpPut("/registry/events/ns/before", "an event", clientv3.WithLease(lease.ID)),
	} {
		if _, err := target.client.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := clusterKeys(t, target.client)
	delete(want, "/registry/events/ns/before") // under a lease: left out
	return snapshotStream(t, target.snapshot...), want
}

// changeAfterSnapshot is what happens between the snapshot and the
// restore: updates, deletions, new objects, a new Event, new bootstrap data.
func changeAfterSnapshot(t *testing.T, c *clientv3.Client, n int) {
	t.Helper()
	put(t, c, 0, n/4, func(i int) string { return fmt.Sprintf("changed-%d", i) })
	for i := n / 4; i < n/4+10; i++ {
		deleteKey(t, c, replaceKey(i))
	}
	put(t, c, n, n+n/2, func(i int) string { return fmt.Sprintf("new-%d", i) })
	ctx := context.Background()
	for _, op := range []clientv3.Op{
		clientv3.OpPut("/bootstrap/0123abcd", "bootstrap of later"),
		clientv3.OpPut("/bootstrap/other", "a second bootstrap key"),
		clientv3.OpPut("/registry/events/ns/after", "a later event"),
	} {
		if _, err := c.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
}

// checkReplaced fails unless target holds exactly want under /registry/ and
// /bootstrap/, every key written after revision before, a read or watch at
// before refused as compacted, and the datastore still writable.
func checkReplaced(t *testing.T, c *clientv3.Client, want map[string]string, before int64) {
	t.Helper()
	got, revs := clusterKeys(t, c)
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("after the restore %s = %q, want %q", k, got[k], v)
		}
		if revs[k] <= before {
			t.Fatalf("restored %s has mod revision %d, not above %d, the revision before the restore", k, revs[k], before)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Fatalf("after the restore %s = %q, which the snapshot does not hold", k, got[k])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(before)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("a list at revision %d, from before the restore: %v, want %v", before, err, rpctypes.ErrCompacted)
	}
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	select {
	case resp := <-c.Watch(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(before)):
		if resp.CompactRevision == 0 && !errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			t.Fatalf("a watch from revision %d, from before the restore: %d events, err %v; want it cancelled as compacted", before, len(resp.Events), resp.Err())
		}
	case <-ctx.Done():
		t.Fatalf("a watch from revision %d, from before the restore, was neither served nor refused", before)
	}
	if _, err := c.Put(ctx, "/registry/configmaps/ns/after-restore", "written"); err != nil {
		t.Fatalf("the datastore is not writable after the restore: %v", err)
	}
}

// syncBuffer is a bytes.Buffer that a process writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// restoreProc starts `datastore restore ARGS…` with stream on stdin.
func restoreProc(t *testing.T, stream []byte, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"restore"}, args...)...)
	cmd.Stdin = bytes.NewReader(stream)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// TestInPlaceRestoreReplacesTheDataAndMovesRevisionsForward: on both
// datastores, a snapshot of 300 objects, then updates, deletions, new
// objects and new bootstrap data, then `datastore restore --replace` →
// exactly the snapshot's keys with their values, each with a revision above
// the last one before the restore, and the revisions before it compacted, so
// a client at one of them is told to relist. Run twice it changes nothing
// but the revisions (what re-running k3kcli after an interruption does).
func TestInPlaceRestoreReplacesTheDataAndMovesRevisionsForward(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(*testing.T) replaceTarget
	}{{"sqlite", sqliteReplaceTarget}, {"etcd", etcdReplaceTarget}} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target(t)
			stream, want := snapshotState(t, target, 300)
			changeAfterSnapshot(t, target.client, 300)
			before := revision(t, target.client)

			out, err := restore(t, stream, target.restore...)
			if err != nil {
				t.Fatalf("restore --replace: %v\n%s", err, out)
			}
			t.Logf("restore said: %s", strings.TrimSpace(out))
			if !strings.Contains(out, "with 301 keys") || !strings.Contains(out, "1 under a lease") {
				t.Fatalf("restore output %q, want 301 keys written and the Event left out", out)
			}
			checkReplaced(t, target.client, want, before)

			// The key checkReplaced wrote is not the snapshot's: removed again.
			again := revision(t, target.client)
			if out, err := restore(t, stream, target.restore...); err != nil {
				t.Fatalf("second restore --replace: %v\n%s", err, out)
			}
			checkReplaced(t, target.client, want, again)
		})
	}
}

// TestAnInPlaceRestoreKilledMidwayFinishesWhenRunAgain: `datastore restore
// --replace` killed with SIGKILL while it writes leaves a mix of the
// snapshot's keys and later ones; the same command run again ends with
// exactly the snapshot's keys, revisions moved forward and compacted.
func TestAnInPlaceRestoreKilledMidwayFinishesWhenRunAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(*testing.T) replaceTarget
		n      int
	}{{"sqlite", sqliteReplaceTarget, 3000}, {"etcd", etcdReplaceTarget, 5000}} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target(t)
			stream, want := snapshotState(t, target, tc.n)
			changeAfterSnapshot(t, target.client, tc.n)
			before := revision(t, target.client)

			cmd, out := restoreProc(t, stream, target.restore...)
			// Killed once a tenth of the keys are written.
			deadline := time.Now().Add(2 * time.Minute)
			for revision(t, target.client) < before+int64(tc.n/10) {
				if time.Now().After(deadline) {
					t.Fatalf("the restore wrote nothing in 2 minutes:\n%s", out)
				}
				time.Sleep(time.Millisecond)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			if err == nil {
				t.Fatalf("the restore finished before it was killed; give it more keys:\n%s", out)
			}
			// Midway: some keys of the snapshot written, none of the later
			// ones deleted yet.
			got, _ := clusterKeys(t, target.client)
			if _, ok := got[replaceKey(tc.n)]; !ok {
				t.Fatalf("the killed restore got as far as deleting keys: the test did not interrupt it midway")
			}
			if got[replaceKey(0)] != want[replaceKey(0)] {
				t.Fatalf("the killed restore wrote %s = %q, not the snapshot's %q", replaceKey(0), got[replaceKey(0)], want[replaceKey(0)])
			}

			if out, err := restore(t, stream, target.restore...); err != nil {
				t.Fatalf("restore --replace run again: %v\n%s", err, out)
			}
			checkReplaced(t, target.client, want, before)
		})
	}
}

// TestASecondReplaceWaitsForTheFirst: a replace goes on when the k3kcli
// that started it went away, and the user runs k3kcli again. The second
// replace waits on the sidecar's restore lock (held here by the test) and
// writes nothing until it is free, then does the job.
func TestASecondReplaceWaitsForTheFirst(t *testing.T) {
	target := sqliteReplaceTarget(t)
	stream, want := snapshotState(t, target, 50)
	changeAfterSnapshot(t, target.client, 50)
	before := revision(t, target.client)
	tmp := target.restore[slices.Index(target.restore, "--tmp-dir")+1]
	lock, err := os.OpenFile(filepath.Join(tmp, restoreLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cmd, out := restoreProc(t, stream, target.restore...)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "waiting for another restore") {
		if time.Now().After(deadline) {
			t.Fatalf("the second replace did not wait for the lock:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if got := revision(t, target.client); got != before {
		t.Fatalf("the waiting replace wrote: revision %d → %d", before, got)
	}
	lock.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the replace, once the lock was free: %v\n%s", err, out)
	}
	checkReplaced(t, target.client, want, before)
}
