package sqlite

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/k3k-io/k3k/pkg/layout"
)

// SyncMode says how an acknowledged write is made durable. Both modes survive
// kill -9 of the process; they differ in cost and in what readers may see.
type SyncMode string

const (
	// SyncGroup runs SQLite with synchronous=NORMAL and, before a write is
	// acknowledged, waits for an fsync of the WAL that started after the write
	// committed. Concurrent writers share one fsync, the way etcd batches its WAL.
	// A committed write can be read (or watched) for the duration of that fsync
	// before it is durable; after a power loss such a write, never acknowledged,
	// may be gone.
	SyncGroup SyncMode = "group"
	// SyncCommit runs SQLite with synchronous=FULL: every commit fsyncs the WAL
	// before it becomes visible. Nothing is ever visible that is not durable, at
	// the price of one fsync per write with no sharing between writers.
	SyncCommit SyncMode = "commit"
)

// BackendKind says what serves the etcd API's requests on the SQLite file.
// Both write standard kine rows; see docs/datastore.md, "Datastore v2".
type BackendKind string

const (
	// BackendKine is kine's own logstructured/sqllog backend with our ack
	// guard in front: the default before v2, kept as the way back
	// (--backend kine) on the same file.
	BackendKine BackendKind = "kine"
	// BackendV2 is batchlog, the default: writes batched into one
	// transaction, watch events from the write path, streaming lists. It
	// became the default once its 3-round bench, its 200 kill -9 rounds and
	// the e2e suite on it were green (docs/datastore.md, "Datastore v2").
	BackendV2 BackendKind = "v2"
)

// DefaultListenAddress is Config.ListenAddress when it is empty: loopback,
// because only the server pod's own containers connect, on the port they
// expect (layout.DatastoreClientPort).
var DefaultListenAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(layout.DatastoreClientPort))

// Defaults for the zero values of Config.
const (
	DefaultIntegrityCheckTimeout = time.Minute
	DefaultCompactInterval       = 5 * time.Minute
	// DefaultCacheBytes is SQLite's page cache per connection. It is kept
	// modest because kine keeps up to 20 connections and each has its own cache;
	// reads of a hot database come from the shared memory map instead.
	DefaultCacheBytes = 8 << 20
	// DefaultMmapBytes maps this much of the file, shared by all connections, so
	// reads are served from the kernel's page cache without a copy.
	DefaultMmapBytes = 256 << 20
)

// DatabaseFile is the name of the SQLite file inside the data dir.
const DatabaseFile = "state.db"

// LockFile is the name of the lock file inside the data dir; it holds the pid of
// the owner.
const LockFile = "datastore.lock"

// Config says where the data lives and how to serve it. Only DataDir is required.
type Config struct {
	// DataDir is the directory holding the database. It must exist and be
	// writable: a missing directory usually means an unmounted volume, and
	// starting empty there would look like a cluster that lost all its objects.
	DataDir string
	// ListenAddress is host:port for the etcd API; port 0 picks a free port (see
	// Server.Endpoint). Default DefaultListenAddress.
	ListenAddress string
	// Sync chooses how acknowledged writes are made durable. Default SyncGroup.
	Sync SyncMode
	// Backend chooses what serves the requests. Default BackendV2.
	Backend BackendKind
	// IntegrityCheckTimeout bounds the start-up integrity check of an existing
	// database. A check that does not finish in time is logged and skipped; a
	// check that finds damage stops the start. Default DefaultIntegrityCheckTimeout.
	IntegrityCheckTimeout time.Duration
	// CompactInterval is how often the datastore compacts old revisions on its own,
	// in addition to the compactions kube-apiserver requests. Default
	// DefaultCompactInterval; negative disables it.
	CompactInterval time.Duration
	// CacheBytes and MmapBytes tune SQLite's page cache and memory map per
	// connection. Defaults DefaultCacheBytes and DefaultMmapBytes; negative means
	// SQLite's own default (2 MiB cache, no mmap).
	CacheBytes int64
	MmapBytes  int64
	// MetricsRegisterer receives kine's SQL metrics; nil registers none.
	MetricsRegisterer prometheus.Registerer

	// v2CompactMinRetain replaces kine's 1000 newest revisions that v2
	// never compacts, for tests that need compaction without writing
	// thousands of rows; 0 keeps kine's.
	v2CompactMinRetain int64
}

// withDefaults returns c with zero values replaced by defaults, or an error that
// says which setting is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" {
		return c, errors.New("data dir is required")
	}
	if c.ListenAddress == "" {
		c.ListenAddress = DefaultListenAddress
	}
	if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil {
		return c, fmt.Errorf("listen address %q: %w", c.ListenAddress, err)
	}
	switch c.Sync {
	case "":
		c.Sync = SyncGroup
	case SyncGroup, SyncCommit:
	default:
		return c, fmt.Errorf("sync mode %q: want %q or %q", c.Sync, SyncGroup, SyncCommit)
	}
	switch c.Backend {
	case "":
		c.Backend = BackendV2
	case BackendKine, BackendV2:
	default:
		return c, fmt.Errorf("backend %q: want %q or %q", c.Backend, BackendKine, BackendV2)
	}
	if c.IntegrityCheckTimeout == 0 {
		c.IntegrityCheckTimeout = DefaultIntegrityCheckTimeout
	}
	if c.CompactInterval == 0 {
		c.CompactInterval = DefaultCompactInterval
	} else if c.CompactInterval < 0 {
		c.CompactInterval = 0
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.MmapBytes == 0 {
		c.MmapBytes = DefaultMmapBytes
	}
	return c, nil
}
