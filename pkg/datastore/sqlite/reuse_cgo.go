//go:build cgo

package sqlite

import (
	"context"
	"sync"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
)

// reuseStatements changes nothing with cgo (mattn/go-sqlite3, used by tests
// only): the statement reuse is built for the pure-Go SQLite of release
// binaries (reuse_nocgo.go).
func reuseStatements(context.Context, *sync.WaitGroup, *generic.Generic, *drivers.Config) error {
	return nil
}
