package sqlite

import (
	"context"
	"fmt"
	"sync"

	"github.com/k3s-io/kine/pkg/drivers"
	kinesqlite "github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/server"
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
