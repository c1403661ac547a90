package main

import (
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestMigrationRestoreMovesEtcdRevisionsPastTheSQLiteSnapshot: the step of
// k3kcli cluster migrate that loads a SQLite snapshot into a new etcd member.
// The SQLite datastore's history (300 objects written five times) puts its
// revision R well above the number of keys; `datastore restore --replace
// --revision-above-snapshot` into a fresh etcd member → exactly the
// snapshot's keys, every one with a revision above R, and R refused as
// compacted, so a client holding a SQLite-era resourceVersion relists
// instead of being served etcd's history under numbers it already saw.
// Without the flag the keys land below R (checked first, so the test can
// fail).
func TestMigrationRestoreMovesEtcdRevisionsPastTheSQLiteSnapshot(t *testing.T) {
	source := sqliteReplaceTarget(t)
	for round := range 4 {
		put(t, source.client, 0, 300, func(i int) string { return fmt.Sprintf("round-%d-%d", round, i) })
	}
	stream, want := snapshotState(t, source, 300)
	r := revision(t, source.client)
	if r < 1500 {
		t.Fatalf("the SQLite datastore is at revision %d; the test needs a history well above its 301 keys", r)
	}

	plain := etcdReplaceTarget(t)
	if out, err := restore(t, stream, plain.restore...); err != nil {
		t.Fatalf("restore --replace: %v\n%s", err, out)
	}
	if _, revs := clusterKeys(t, plain.client); revs[replaceKey(0)] >= r {
		t.Fatalf("without --revision-above-snapshot a key got revision %d, above the snapshot's %d: the test proves nothing", revs[replaceKey(0)], r)
	}

	target := etcdReplaceTarget(t)
	out, err := restore(t, stream, append(target.restore, "--revision-above-snapshot")...)
	if err != nil {
		t.Fatalf("restore --replace --revision-above-snapshot: %v\n%s", err, out)
	}
	t.Logf("restore said: %s", strings.TrimSpace(out))
	if !strings.Contains(out, fmt.Sprintf("past the snapshot's %d", r)) {
		t.Fatalf("restore output %q does not say the revision was moved", out)
	}
	checkReplaced(t, target.client, want, r)
	if resp, err := target.client.Get(t.Context(), "/k3k/", clientv3.WithPrefix()); err != nil || resp.Count != 0 {
		t.Fatalf("the scratch key is left behind: %v, %d keys under /k3k/", err, resp.Count)
	}
}
