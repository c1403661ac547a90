package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// etcd's backend layout, as etcd's own snapshot status reads it: bucket "key"
// is keyed by revision (8-byte big-endian main revision, '_', 8-byte sub
// revision); bucket "meta" holds the compaction marks.
var (
	etcdKeyBucket       = []byte("key")
	etcdMetaBucket      = []byte("meta")
	etcdFinishedCompact = []byte("finishedCompactRev")
)

// EtcdInfo is what a snapshot database says about itself.
type EtcdInfo struct {
	Revision        int64
	CompactRevision int64
	TotalKeys       int
}

// InspectEtcd checks an etcd snapshot database at path (the sha256 etcd
// appends to every snapshot, then that it opens as etcd's backend) and reads
// its newest and compacted revisions.
func InspectEtcd(path string) (EtcdInfo, error) {
	if err := verifyEtcdChecksum(path); err != nil {
		return EtcdInfo{}, err
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return EtcdInfo{}, fmt.Errorf("opening etcd snapshot: %w", err)
	}
	defer db.Close()
	var info EtcdInfo
	err = db.View(func(tx *bolt.Tx) error {
		keys := tx.Bucket(etcdKeyBucket)
		if keys == nil {
			return errors.New("etcd snapshot without a key bucket")
		}
		k, _ := keys.Cursor().Last()
		if len(k) < 8 {
			return errors.New("etcd snapshot holds no revision")
		}
		info.Revision = int64(binary.BigEndian.Uint64(k[:8]))
		info.TotalKeys = keys.Stats().KeyN
		if meta := tx.Bucket(etcdMetaBucket); meta != nil {
			if v := meta.Get(etcdFinishedCompact); len(v) >= 8 {
				info.CompactRevision = int64(binary.BigEndian.Uint64(v[:8]))
			}
		}
		return nil
	})
	return info, err
}

// verifyEtcdChecksum checks the sha256 etcd appends to a snapshot: a snapshot
// whose size is not a multiple of 512 plus 32 has none (etcd restores it only
// with its hash check skipped), one whose hash differs is damaged.
func verifyEtcdChecksum(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	n := st.Size()
	if n%512 != sha256.Size {
		return fmt.Errorf("etcd snapshot of %d bytes carries no sha256 of its own", n)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, n-sha256.Size); err != nil {
		return fmt.Errorf("reading etcd snapshot: %w", err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return fmt.Errorf("reading etcd snapshot: %w", err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return errors.New("etcd snapshot is damaged: its sha256 does not match its content")
	}
	return nil
}

// ReadEtcdKeys calls fn, in key order, with the newest value of every key live
// in the etcd snapshot database at path, with its lease. It reads etcd's
// backend directly: bucket "key" holds one row per revision, and a row whose
// key carries etcd's tombstone mark deletes the key.
func ReadEtcdKeys(path string, fn func(key string, value []byte, lease int64) error) error {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("opening etcd snapshot: %w", err)
	}
	defer db.Close()
	type entry struct {
		value []byte
		lease int64
		live  bool
	}
	newest := map[string]entry{}
	err = db.View(func(tx *bolt.Tx) error {
		keys := tx.Bucket(etcdKeyBucket)
		if keys == nil {
			return errors.New("etcd snapshot without a key bucket")
		}
		// Rows come in revision order, so the last row of a key wins.
		return keys.ForEach(func(rev, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("etcd snapshot row: %w", err)
			}
			tombstone := len(rev) == etcdRevBytes+1 && rev[etcdRevBytes] == 't'
			newest[string(kv.Key)] = entry{value: bytes.Clone(kv.Value), lease: kv.Lease, live: !tombstone}
			return nil
		})
	})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(newest))
	for k, e := range newest {
		if e.live {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		if err := fn(k, newest[k].value, newest[k].lease); err != nil {
			return err
		}
	}
	return nil
}

// etcdRevBytes is the length of a revision in etcd's key bucket: 8 bytes of
// main revision, '_', 8 bytes of sub revision; a tombstone adds 't'.
const etcdRevBytes = 17
