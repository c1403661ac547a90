package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/k3k-io/k3k/pkg/datastore/etcd"
)

// The operator's commands of docs/etcd.md's Alarms section, run as the binary
// runs in a pod: against the member's own client port on 127.0.0.1, with the
// member certificate (which names DNS names only) as client certificate.
func TestEtcdAlarmListsAndDisarmsThroughThePodsOwnMember(t *testing.T) {
	tm := startTestMember(t)
	id := etcd.FormatID(tm.id)

	flags := append([]string{"--endpoint=https://" + tm.clientAddr}, tm.tlsFlags...)
	run := func(wantCode int, args ...string) string {
		t.Helper()
		code, out := runToExit(t, append(append([]string{"etcd-alarm"}, args...), flags...)...)
		if code != wantCode {
			t.Fatalf("datastore etcd-alarm %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		return out
	}
	if out := run(0, "list"); !strings.Contains(out, "alarms: none") || !strings.Contains(out, id+" member-0 voter") {
		t.Fatalf("list of a healthy member:\n%s", out)
	}

	// etcd's corruption check raises the alarm this way; so does the test,
	// for this member and for the whole cluster (member ID 0).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mc := clientv3.RetryMaintenanceClient(tm.client, tm.client.ActiveConnection())
	for _, mid := range []uint64{tm.id, 0} {
		if _, err := mc.Alarm(ctx, &etcdserverpb.AlarmRequest{Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: mid, Alarm: etcdserverpb.AlarmType_CORRUPT}); err != nil {
			t.Fatal(err)
		}
	}
	out := run(0, "list")
	if !strings.Contains(out, "CORRUPT "+id+" (member-0)") || !strings.Contains(out, "CORRUPT 0 (the whole cluster)") {
		t.Fatalf("list with two CORRUPT alarms:\n%s", out)
	}

	if out := run(1, "disarm", "BROKEN", id); !strings.Contains(out, `alarm "BROKEN"`) {
		t.Fatalf("disarm of an unknown alarm:\n%s", out)
	}
	if out := run(1, "disarm", "CORRUPT", "not-hex"); !strings.Contains(out, "hexadecimal") {
		t.Fatalf("disarm with a bad member ID:\n%s", out)
	}
	out = run(0, "disarm", "corrupt", id)
	if !strings.Contains(out, "disarmed CORRUPT of member "+id) || strings.Contains(out, "CORRUPT "+id+" (member-0)") || !strings.Contains(out, "CORRUPT 0 (the whole cluster)") {
		t.Fatalf("disarm of the member's alarm:\n%s", out)
	}
	if out := run(0, "disarm", "CORRUPT", "0"); !strings.Contains(out, "alarms: none") {
		t.Fatalf("disarm of the cluster-wide alarm:\n%s", out)
	}
	if _, err := tm.client.Put(ctx, "/k3k/after-disarm", "x"); err != nil {
		t.Fatalf("a write after both disarms: %v", err)
	}
}
