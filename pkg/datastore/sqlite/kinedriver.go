package sqlite

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/k3s-io/kine/pkg/drivers"
	kinesqlite "github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/server"

	"github.com/k3k-io/k3k/pkg/datastore/sqlite/batchlog"
)

// kineScheme is the endpoint scheme under which kine finds its SQLite driver
// with our change: its queries run through connections that keep their
// prepared statements (reuseStatements).
const kineScheme = "k3k-sqlite"

func init() {
	drivers.Register(kineScheme, newKineBackend)
}

// newKineBackend is kine's own SQLite driver (schema, queries, error
// translation, all kine's), whose database handle is then replaced by one
// that reuses prepared statements, before anything is served.
func newKineBackend(ctx context.Context, wg *sync.WaitGroup, cfg *drivers.Config) (bool, server.Backend, error) {
	// "sqlite3" is the name kine's own registration passes.
	backend, dialect, err := kinesqlite.NewVariant(ctx, wg, "sqlite3", cfg)
	if err != nil {
		return false, nil, err
	}
	if err := reuseStatements(ctx, wg, dialect, cfg); err != nil {
		return false, nil, fmt.Errorf("opening the database for kine's queries: %w", err)
	}
	return false, backend, nil
}

// v2Scheme is the endpoint scheme of the v2 backend (batchlog): kine's
// SQLite driver sets the schema up and lends its statements, our backend
// serves them.
const v2Scheme = "k3k-sqlite-v2"

// v2Param carries, in the DSN kine hands to the driver, the key under which
// Open left the hooks the backend needs from this Server (sync, gate,
// checkpointer). kine's driver registry has no other way to pass them; the
// parameter is removed before the DSN reaches SQLite.
const v2Param = "_k3k_v2"

var (
	v2Mu    sync.Mutex
	v2Seq   int
	v2Hooks = map[string]batchlog.Config{}
)

func init() {
	drivers.Register(v2Scheme, newV2Backend)
}

// registerV2 stores cfg for the driver and returns its key and a function
// that removes it.
func registerV2(cfg batchlog.Config) (string, func()) {
	v2Mu.Lock()
	defer v2Mu.Unlock()
	v2Seq++
	key := strconv.Itoa(v2Seq)
	v2Hooks[key] = cfg
	return key, func() {
		v2Mu.Lock()
		delete(v2Hooks, key)
		v2Mu.Unlock()
	}
}

func newV2Backend(ctx context.Context, wg *sync.WaitGroup, cfg *drivers.Config) (bool, server.Backend, error) {
	path, query, _ := strings.Cut(cfg.DataSourceName, "?")
	params, err := url.ParseQuery(query)
	if err != nil {
		return false, nil, errors.New("v2 backend: unparsable database parameters")
	}
	key := params.Get(v2Param)
	v2Mu.Lock()
	hooks, ok := v2Hooks[key]
	v2Mu.Unlock()
	if !ok {
		return false, nil, errors.New("v2 backend: opened without its datastore")
	}
	// Only our parameter goes; the rest must reach SQLite as kineParams
	// wrote them (url.Values would reorder the _pragma values).
	var kept []string
	for _, p := range strings.Split(query, "&") {
		if !strings.HasPrefix(p, v2Param+"=") {
			kept = append(kept, p)
		}
	}
	c := *cfg
	c.DataSourceName = path + "?" + strings.Join(kept, "&")
	_, dialect, err := kinesqlite.NewVariant(ctx, wg, "sqlite3", &c)
	if err != nil {
		return false, nil, err
	}
	if err := reuseStatements(ctx, wg, dialect, &c); err != nil {
		return false, nil, fmt.Errorf("opening the database for the v2 backend: %w", err)
	}
	hooks.Dialect = dialect
	hooks.WaitGroup = wg
	return false, batchlog.New(hooks), nil
}
