package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ackGuard decides when kine's answer to a write may reach the client. It holds
// the answer back until the write is durable (SyncGroup), and it refuses to
// pass on kine's answer to a write that kine did not store: a create reported
// as done, an update or delete reported as a conflict.
//
// The second part works around two kine v0.17.5 bugs in LogStructured.Create:
//
//   - When the insert of a create fails (a full disk, an I/O error), Create
//     looks the key up, finds it absent, and returns the lookup's nil error, so
//     the client is told the object was created. kube-apiserver would answer 201
//     for an object that does not exist.
//   - When a create follows a delete of the same key, its second insert assigns
//     to a shadowed variable, so Create returns revision 0 and kine answers with
//     the store's current revision instead of the new row's. Under concurrent
//     writes that is a later revision than the key's, and kube-apiserver would
//     hand out a resourceVersion whose next update fails its compare.
//
// So after every successful create the guard reads the row the create wrote
// and answers with its revision; when there is none it sends the create again,
// then refuses (writeAttempts). An update or delete whose insert fails is
// answered as a failed compare with the key unchanged, which a client takes
// for a conflict and retries at once; the guard recognises it by the key
// still being at the compared revision (unappliedWrite), sends it again and
// then refuses the same way.
type ackGuard struct {
	side  *sql.DB
	gsync *groupSync // nil in SyncCommit mode
	ckpt  *checkpointer
	gate  *writeGate
	log   logr.Logger
	// createdStmt is createAt, prepared on first use (kine creates the table
	// after the guard exists). The pure-Go driver has no statement cache, and
	// parsing the query costs more than running it.
	mu          sync.Mutex
	createdStmt *sql.Stmt
}

func newAckGuard(side *sql.DB, gsync *groupSync, ckpt *checkpointer, gate *writeGate, log logr.Logger) *ackGuard {
	return &ackGuard{side: side, gsync: gsync, ckpt: ckpt, gate: gate, log: log}
}

// etcdWriteMethods are the etcd v3 calls that may change the database. Only
// these wait for the fsync; reads and watches never do.
var etcdWriteMethods = map[string]bool{
	"/etcdserverpb.KV/Put":         true,
	"/etcdserverpb.KV/Txn":         true,
	"/etcdserverpb.KV/DeleteRange": true,
	"/etcdserverpb.KV/Compact":     true,
}

// createAt tells whether the row at revision id is a create of key: kine's
// answer is right for every create but one that follows a delete.
const createAt = `SELECT COUNT(*) FROM kine WHERE id = ? AND name = ? AND created = 1`

// newestCreate finds the newest create of key, and whether no delete of key
// came after it, for a create whose answer is wrong (see ackGuard). The row
// must be newer than the key's last delete: otherwise the re-create wrote
// nothing and the newest create is the one that delete ended.
const newestCreate = `SELECT COALESCE(MAX(id), 0),
	COALESCE(MAX(id), 0) > (SELECT COALESCE(MAX(id), 0) FROM kine WHERE name = ? AND deleted = 1)
	FROM kine WHERE name = ? AND created = 1`

func (a *ackGuard) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !etcdWriteMethods[info.FullMethod] {
		return handler(ctx, req)
	}
	for attempt := 1; ; attempt++ {
		resp, err := a.write(ctx, info.FullMethod, req, handler)
		notStored, notApplied := errors.Is(err, errNotStored), errors.Is(err, errNotApplied)
		if (notStored || notApplied) && attempt < writeAttempts {
			// kine swallows the error of a failed insert (see ackGuard).
			// Nothing was written, so sending the same transaction again is
			// what a client's retry would do; its compare is evaluated afresh.
			msg := "kine reported a create that it did not store; sending it again"
			if notApplied {
				msg = "kine answered a write as a failed compare although the key is at the compared revision: the write failed inside kine; sending it again"
			}
			a.log.Info(msg, "method", info.FullMethod, "key", writeKey(req), "attempt", attempt)
			continue
		}
		if notStored || notApplied {
			// An error, not kine's false answer: a false "conflict" would
			// send kube-apiserver round its update loop without a pause
			// until its deadline, and the write would fail silently.
			return nil, status.Error(codes.Unavailable,
				"the write was not stored: the database did not take it (full volume, or a transient failure); nothing was changed, retry")
		}
		return resp, err
	}
}

// writeAttempts bounds how often a write that kine reported but did not
// store is sent again before the client gets an error.
const writeAttempts = 3

var (
	// errNotStored: kine answered a create as successful but wrote no row.
	errNotStored = errors.New("create not stored")
	// errNotApplied: kine answered a write as a failed compare although the
	// key is at the compared revision, see unappliedWrite.
	errNotApplied = errors.New("write not applied")
)

// write passes one write to kine through the gate, waits for its fsync and
// corrects a create's answer (see ackGuard).
func (a *ackGuard) write(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	if err := a.gate.enter(ctx, method, writeKey(req)); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	resp, err := a.inGate(ctx, req, handler)
	a.gate.leave()
	if err != nil {
		return resp, err
	}
	if unappliedWrite(req, resp) {
		return nil, errNotApplied
	}
	// The fsync starts now, after the commit; the create check runs while it
	// does.
	var batch *syncBatch
	if a.gsync != nil {
		batch = a.gsync.start()
	}
	var checkErr error
	if key := createKey(req); key != "" {
		if txn, ok := resp.(*etcdserverpb.TxnResponse); ok && txn.Succeeded {
			var rev int64
			if rev, checkErr = a.storedRevision(ctx, key, txn.GetHeader().GetRevision()); checkErr == nil {
				setRevision(txn, rev)
			}
		}
	}
	if batch != nil {
		if err := a.gsync.wait(ctx, batch); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	if checkErr != nil {
		return nil, checkErr
	}
	a.ckpt.wrote()
	return resp, nil
}

// inGate runs kine's handler while the write holds the gate. It is a function
// of its own so that a stall report can find the holder's stack by its name.
//
//go:noinline
func (a *ackGuard) inGate(ctx context.Context, req any, handler grpc.UnaryHandler) (any, error) {
	return handler(ctx, req)
}

// storedRevision returns the revision of the row a create of key, reported by
// kine at revision rev, wrote; an error when it wrote none.
func (a *ackGuard) storedRevision(ctx context.Context, key string, rev int64) (int64, error) {
	var n int
	stmt, err := a.createdQuery(ctx)
	if err == nil {
		err = stmt.QueryRowContext(ctx, rev, key).Scan(&n)
	}
	if err != nil {
		return 0, status.Errorf(codes.Unavailable, "confirming that the create was stored: %v", err)
	}
	if n == 1 {
		return rev, nil
	}
	var (
		id    int64
		fresh bool
	)
	if err := a.side.QueryRowContext(ctx, newestCreate, key, key).Scan(&id, &fresh); err != nil {
		return 0, status.Errorf(codes.Unavailable, "confirming that the create was stored: %v", err)
	}
	if id == 0 || !fresh {
		return 0, errNotStored
	}
	return id, nil
}

func (a *ackGuard) createdQuery(ctx context.Context) (*sql.Stmt, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.createdStmt == nil {
		stmt, err := a.side.PrepareContext(ctx, createAt)
		if err != nil {
			return nil, err
		}
		a.createdStmt = stmt
	}
	return a.createdStmt, nil
}

// unappliedWrite tells whether kine answered a write guarded by the key's mod
// revision (kube-apiserver's updates and deletes) as a failed compare while
// the key is at exactly that revision. etcd never does: the compare holds.
// kine v0.17.5 does when its insert fails (LogStructured.Update and Delete
// swallow the error and answer with the key as it is), and no concurrent
// write can explain it, since every write gives the key a new revision.
func unappliedWrite(req, resp any) bool {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok || len(txn.Compare) != 1 {
		return false
	}
	r, ok := resp.(*etcdserverpb.TxnResponse)
	if !ok || r.Succeeded || len(r.Responses) != 1 {
		return false
	}
	c := txn.Compare[0]
	if c.Target != etcdserverpb.Compare_MOD || c.Result != etcdserverpb.Compare_EQUAL || c.GetModRevision() <= 0 {
		return false
	}
	current := r.Responses[0].GetResponseRange()
	if current == nil || len(current.Kvs) != 1 {
		return false
	}
	kv := current.Kvs[0]
	return string(kv.Key) == string(c.Key) && kv.ModRevision == c.GetModRevision()
}

// setRevision makes a create's answer carry the revision of the row it wrote,
// as etcd's does.
func setRevision(txn *etcdserverpb.TxnResponse, rev int64) {
	if txn.Header != nil {
		txn.Header.Revision = rev
	}
	for _, r := range txn.Responses {
		if put := r.GetResponsePut(); put != nil && put.Header != nil {
			put.Header.Revision = rev
		}
	}
}

// createKey returns the key of a create: a Txn that puts a key if its mod
// revision is 0, with nothing else on success and at most a read of the key on
// failure. kube-apiserver sends the first shape, clients that want the current
// value on conflict the second; kine serves both through LogStructured.Create.
// "" for anything else.
func createKey(req any) string {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok || len(txn.Compare) != 1 || len(txn.Success) != 1 || len(txn.Failure) > 1 {
		return ""
	}
	if len(txn.Failure) == 1 && txn.Failure[0].GetRequestRange() == nil {
		return ""
	}
	c := txn.Compare[0]
	put := txn.Success[0].GetRequestPut()
	if put == nil || c.Target != etcdserverpb.Compare_MOD || c.Result != etcdserverpb.Compare_EQUAL || c.GetModRevision() != 0 {
		return ""
	}
	return string(put.Key)
}

// writeKey names the key a write changes, for a stall report: the key of a
// Put or DeleteRange, the first compared key of a Txn, "" for a Compact.
func writeKey(req any) string {
	switch r := req.(type) {
	case *etcdserverpb.PutRequest:
		return string(r.Key)
	case *etcdserverpb.DeleteRangeRequest:
		return string(r.Key)
	case *etcdserverpb.TxnRequest:
		if len(r.Compare) > 0 {
			return string(r.Compare[0].Key)
		}
		for _, op := range r.Success {
			if put := op.GetRequestPut(); put != nil {
				return string(put.Key)
			}
			if del := op.GetRequestDeleteRange(); del != nil {
				return string(del.Key)
			}
		}
	}
	return ""
}
