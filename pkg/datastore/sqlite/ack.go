package sqlite

import (
	"context"
	"database/sql"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ackGuard decides when kine's answer to a write may reach the client. It holds
// the answer back until the write is durable (SyncGroup), and it refuses to
// acknowledge a create that kine reports as done but did not store.
//
// The second part works around kine v0.17: when the insert of a create fails
// (a full disk, an I/O error), LogStructured.Create looks the key up, finds it
// absent, and returns the lookup's nil error, so the client is told the object
// was created. kube-apiserver would answer 201 for an object that does not
// exist. Updates and deletes do not have this problem: kine answers them with a
// failed compare, which the client retries and eventually reports.
type ackGuard struct {
	side  *sql.DB
	gsync *groupSync // nil in SyncCommit mode
}

// etcdWriteMethods are the etcd v3 calls that may change the database. Only
// these wait for the fsync; reads and watches never do.
var etcdWriteMethods = map[string]bool{
	"/etcdserverpb.KV/Put":         true,
	"/etcdserverpb.KV/Txn":         true,
	"/etcdserverpb.KV/DeleteRange": true,
	"/etcdserverpb.KV/Compact":     true,
}

// storedCreate finds the row a create at revision rev wrote for key.
const storedCreate = `SELECT COUNT(*) FROM kine WHERE id = ? AND name = ? AND created = 1 AND deleted = 0`

func (a *ackGuard) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil || !etcdWriteMethods[info.FullMethod] {
		return resp, err
	}
	if key := createKey(req); key != "" {
		if txn, ok := resp.(*etcdserverpb.TxnResponse); ok && txn.Succeeded {
			if err := a.checkStored(ctx, key, txn.GetHeader().GetRevision()); err != nil {
				return nil, err
			}
		}
	}
	if a.gsync != nil {
		if err := a.gsync.sync(ctx); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	return resp, nil
}

func (a *ackGuard) checkStored(ctx context.Context, key string, rev int64) error {
	var n int
	if err := a.side.QueryRowContext(ctx, storedCreate, rev, key).Scan(&n); err != nil {
		return status.Errorf(codes.Unavailable, "confirming that the create was stored: %v", err)
	}
	if n != 1 {
		return status.Error(codes.ResourceExhausted,
			"the create was not stored: the database refused the write (is the volume full?); nothing was changed")
	}
	return nil
}

// createKey returns the key of a kube-apiserver style create (a Txn that puts
// a key if its mod revision is 0, with nothing else), which is the shape kine
// serves through LogStructured.Create; "" for anything else.
func createKey(req any) string {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok || len(txn.Compare) != 1 || len(txn.Success) != 1 || len(txn.Failure) != 0 {
		return ""
	}
	c := txn.Compare[0]
	put := txn.Success[0].GetRequestPut()
	if put == nil || c.Target != etcdserverpb.Compare_MOD || c.Result != etcdserverpb.Compare_EQUAL || c.GetModRevision() != 0 {
		return ""
	}
	return string(put.Key)
}
