//go:build cgo

package sqlite

import (
	"net/url"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" database/sql driver, the one kine uses with cgo
)

// sideDriver and sideDSN open our own connection with the same SQLite library
// kine uses in this build (see sidedriver_nocgo.go). Release binaries are built
// without cgo; this variant keeps `go test` working where cgo is on.
const sideDriver = "sqlite3"

func sideDSN(path string) string {
	q := url.Values{}
	q.Add("mode", "rw") // never create a file
	q.Add("_busy_timeout", "10000")
	return "file:" + path + "?" + q.Encode()
}
