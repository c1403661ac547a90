package sqlite

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// logLines collects what a logger writes, one line per call.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// with returns the lines that contain s.
func (l *logLines) with(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// waitFor waits until a line contains s, or fails the test after 10 s.
func (l *logLines) waitFor(t *testing.T, s string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if lines := l.with(s); len(lines) > 0 {
			return lines[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no log line contains %q; got %q", s, l.with(""))
	return ""
}

func updateTxn(key string, rev int64) *etcdserverpb.TxnRequest {
	return &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{{Key: []byte(key), Target: etcdserverpb.Compare_MOD, Result: etcdserverpb.Compare_EQUAL,
			TargetUnion: &etcdserverpb.Compare_ModRevision{ModRevision: rev}}},
		Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{Key: []byte(key), Value: []byte("v")}}}},
		Failure: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{Key: []byte(key)}}}},
	}
}

// failedCompare is kine's answer to a guarded write whose compare failed: the
// key as it is now.
func failedCompare(key string, modRev int64) *etcdserverpb.TxnResponse {
	return &etcdserverpb.TxnResponse{
		Header: &etcdserverpb.ResponseHeader{Revision: modRev + 5},
		Responses: []*etcdserverpb.ResponseOp{{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{
			Kvs: []*mvccpb.KeyValue{{Key: []byte(key), ModRevision: modRev}}, Count: 1,
		}}}},
	}
}

func TestUnappliedWrite(t *testing.T) {
	key := "/registry/leases/kube-node-lease/node-1"
	deleteTxn := updateTxn(key, 7)
	deleteTxn.Success = []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{Key: []byte(key)}}}}
	versionTxn := updateTxn(key, 7)
	versionTxn.Compare[0].Target = etcdserverpb.Compare_VERSION
	cases := []struct {
		name string
		req  any
		resp any
		want bool
	}{
		{"an update answered as a conflict with the key at the compared revision was not applied", updateTxn(key, 7), failedCompare(key, 7), true},
		{"a delete answered so was not applied either", deleteTxn, failedCompare(key, 7), true},
		{"a conflict with the key at a later revision is a real conflict", updateTxn(key, 7), failedCompare(key, 9), false},
		{"a conflict with the key gone is a real conflict", updateTxn(key, 7), &etcdserverpb.TxnResponse{Responses: []*etcdserverpb.ResponseOp{{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: &etcdserverpb.RangeResponse{}}}}}, false},
		{"another key at that revision says nothing about this one", updateTxn(key, 7), failedCompare(key+"x", 7), false},
		{"a succeeded write was applied", updateTxn(key, 7), &etcdserverpb.TxnResponse{Succeeded: true}, false},
		{"a create is checked against the database instead", updateTxn(key, 0), failedCompare(key, 0), false},
		{"a compare of the version is not a mod revision guard", versionTxn, failedCompare(key, 7), false},
		{"a put has no compare", &etcdserverpb.PutRequest{Key: []byte(key)}, &etcdserverpb.PutResponse{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := unappliedWrite(tc.req, tc.resp); got != tc.want {
				t.Fatalf("unappliedWrite = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAnUpdateKineAnsweredAsAConflictIsSentAgain: kine v0.17.5 answers an
// update whose insert failed as a failed compare with the key unchanged. A
// client takes that for a conflict and retries at once (kube-apiserver until
// its deadline, silently). The guard sends it again, and answers Unavailable
// after writeAttempts such answers; a real conflict passes unchanged.
func TestAnUpdateKineAnsweredAsAConflictIsSentAgain(t *testing.T) {
	s := openT(t, Config{DataDir: t.TempDir(), ListenAddress: "127.0.0.1:0"})
	c := etcdClient(t, s.Endpoint())
	ctx := testContext(t)
	var logs logLines
	g := newAckGuard(s.side, nil, newCheckpointer(s.side, newWriteGate()), newWriteGate(), logs.logger())
	info := &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.KV/Txn"}
	key := "/registry/leases/kube-node-lease/node-1"
	if err := create(ctx, c, key, "v0"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	rev := got.Kvs[0].ModRevision

	calls := 0
	resp, err := g.unaryInterceptor(ctx, updateTxn(key, rev), info, func(ctx context.Context, _ any) (any, error) {
		if calls++; calls == 1 {
			return failedCompare(key, rev), nil
		}
		r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, "v")).Else(clientv3.OpGet(key)).Commit()
		return (*etcdserverpb.TxnResponse)(r), err
	})
	if err != nil || calls != 2 || !resp.(*etcdserverpb.TxnResponse).Succeeded {
		t.Fatalf("update after one false conflict: %v after %d calls, want success after 2", err, calls)
	}
	if lines := logs.with("failed compare although the key is at the compared revision"); len(lines) != 1 || !strings.Contains(lines[0], key) {
		t.Fatalf("the resend was not logged with the key: %q", logs.with(""))
	}

	calls = 0
	_, err = g.unaryInterceptor(ctx, updateTxn(key, rev), info, func(context.Context, any) (any, error) {
		calls++
		return failedCompare(key, rev), nil
	})
	if status.Code(err) != codes.Unavailable || calls != writeAttempts {
		t.Fatalf("an update never applied: %v after %d calls, want Unavailable after %d", err, calls, writeAttempts)
	}

	calls = 0
	resp, err = g.unaryInterceptor(ctx, updateTxn(key, rev), info, func(context.Context, any) (any, error) {
		calls++
		return failedCompare(key, rev+1), nil
	})
	if err != nil || calls != 1 || resp.(*etcdserverpb.TxnResponse).Succeeded {
		t.Fatalf("a real conflict: %v after %d calls, want the failed compare after 1", err, calls)
	}
}

// TestAWriteHoldingTheGateTooLongIsReportedOnce: a write that keeps the write
// gate stops every other write, while reads go on. The watch names it (method,
// key, how long, its stack) once, and says when it lets go.
func TestAWriteHoldingTheGateTooLongIsReportedOnce(t *testing.T) {
	var logs logLines
	gate := newWriteGate()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const after = 100 * time.Millisecond
	g := newAckGuard(nil, nil, newCheckpointer(nil, gate), gate, logr.Discard())
	info := &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.KV/Txn"}
	key := "/registry/leases/kube-node-lease/node-1"

	release := make(chan struct{})
	held := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = g.unaryInterceptor(ctx, updateTxn(key, 7), info, func(context.Context, any) (any, error) {
			close(held)
			<-release
			return &etcdserverpb.TxnResponse{Succeeded: true}, nil
		})
	})
	<-held
	// A second write queues behind it.
	wg.Go(func() {
		_, _ = g.unaryInterceptor(ctx, updateTxn(key+"-2", 8), info, func(context.Context, any) (any, error) {
			return &etcdserverpb.TxnResponse{Succeeded: true}, nil
		})
	})
	for queued := false; !queued; time.Sleep(time.Millisecond) {
		gate.mu.Lock()
		queued = gate.waiting == 1
		gate.mu.Unlock()
	}
	go gate.watch(ctx, logs.logger(), after)

	report := logs.waitFor(t, "held the write gate too long")
	for _, want := range []string{`"method"="/etcdserverpb.KV/Txn"`, `"key"="` + key + `"`, `"waitingWrites"=1`, "heldFor", "(*ackGuard).inGate"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %s: %s", want, report)
		}
	}
	time.Sleep(5 * after)
	if n := len(logs.with("held the write gate too long")); n != 1 {
		t.Errorf("the stall was reported %d times, want once", n)
	}
	close(release)
	wg.Wait()
	end := logs.waitFor(t, "left the write gate")
	if !strings.Contains(end, key) {
		t.Errorf("the end of the stall does not name the key: %s", end)
	}
	if n := len(logs.with("held the write gate too long")); n != 1 {
		t.Errorf("the stall was reported %d times, want once; the quick second write must not be", n)
	}
}

// TestASlowFsyncIsReportedOnce: while an fsync runs no write is acknowledged;
// one that runs too long is reported once, and its end is logged.
func TestASlowFsyncIsReportedOnce(t *testing.T) {
	var logs logLines
	dir := t.TempDir()
	g := newGroupSync(dir+"/state.db", dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const after = 100 * time.Millisecond
	go g.watch(ctx, logs.logger(), after)
	// An fsync that started a while ago and has not returned.
	g.mu.Lock()
	g.syncSince = time.Now().Add(-time.Minute)
	g.mu.Unlock()
	report := logs.waitFor(t, "fsync of the WAL has not finished")
	if !strings.Contains(report, "state.db-wal") || !strings.Contains(report, `"running"="1m0`) {
		t.Errorf("the report does not say which file and for how long: %s", report)
	}
	time.Sleep(5 * after)
	if n := len(logs.with("has not finished")); n != 1 {
		t.Errorf("the slow fsync was reported %d times, want once", n)
	}
}
