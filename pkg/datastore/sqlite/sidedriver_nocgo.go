//go:build !cgo

package sqlite

import (
	"net/url"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, the one kine uses without cgo
)

// sideDriver and sideDSN open our own connection with the same SQLite library
// kine uses in this build: two SQLite copies in one process do not see each
// other's POSIX locks, and closing a file in one drops the other's locks.
const sideDriver = "sqlite"

func sideDSN(path string) string {
	q := url.Values{}
	q.Add("mode", "rw") // never create a file
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "temp_store(MEMORY)") // no writable temp dir in the container, see kineParams
	return "file:" + path + "?" + q.Encode()
}
