package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/go-logr/logr"
)

// ErrCorrupt marks a database that failed its integrity check.
var ErrCorrupt = errors.New("database is damaged")

// maxIntegrityErrors caps how many problems the check collects; one is enough to
// refuse the file, a few help whoever repairs it.
const maxIntegrityErrors = 10

// openSide opens the datastore's own connection to the database, beside kine's
// pool: it runs the start-up check, the readiness write, the status queries and
// the final checkpoint. It never creates a file.
func openSide(path string) (*sql.DB, error) {
	db, err := sql.Open(sideDriver, sideDSN(path))
	if err != nil {
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	return db, nil
}

// CheckIntegrity runs SQLite's full integrity_check on the database file at
// path, which no process may be writing. It returns nil for a clean file and an
// error wrapping ErrCorrupt for a damaged one. The start-up check is the quicker
// quick_check, bounded by Config.IntegrityCheckTimeout.
func CheckIntegrity(ctx context.Context, path string) error {
	return checkDatabase(ctx, path, "integrity_check")
}

// checkIntegrity runs SQLite's quick_check on an existing database file within
// ctx's deadline. It returns an error wrapping ErrCorrupt when the file is
// damaged or is not a database; it logs and returns nil when the deadline comes
// first, since a slow check is no evidence of damage. It never writes the file.
func checkIntegrity(ctx context.Context, path string) error {
	return checkDatabase(ctx, path, "quick_check")
}

func checkDatabase(ctx context.Context, path, pragma string) error {
	log := logr.FromContextOrDiscard(ctx)
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		log.Info("no database yet, a new one will be created", "file", path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("database %s: %w", path, err)
	}
	if info.Size() == 0 {
		// SQLite treats an empty file as an empty database; kine fills it in.
		return nil
	}
	db, err := openSide(path)
	if err != nil {
		return err
	}
	defer db.Close()

	log.Info("checking database integrity", "file", path, "sizeBytes", info.Size())
	rows, err := db.QueryContext(ctx, fmt.Sprintf("PRAGMA %s(%d)", pragma, maxIntegrityErrors))
	if err != nil {
		return classifyCheckError(ctx, log, path, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return classifyCheckError(ctx, log, path, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return classifyCheckError(ctx, log, path, err)
	}
	if len(problems) > 0 {
		return corruptError(path, strings.Join(problems, "; "))
	}
	log.Info("database integrity check passed", "file", path)
	return nil
}

func classifyCheckError(ctx context.Context, log logr.Logger, path string, err error) error {
	if ctx.Err() != nil {
		log.Info("database integrity check did not finish in time; starting without it", "file", path, "reason", ctx.Err().Error())
		return nil
	}
	msg := err.Error()
	for _, sign := range []string{"not a database", "malformed", "corrupt", "SQLITE_NOTADB", "SQLITE_CORRUPT"} {
		if strings.Contains(msg, sign) {
			return corruptError(path, msg)
		}
	}
	return fmt.Errorf("checking database %s: %w", path, err)
}

// corruptError names the file and the way back. It never suggests deleting the
// file: the damaged copy is the input to any recovery.
func corruptError(path, problems string) error {
	return fmt.Errorf("%w: %s failed its integrity check (%s). The datastore will not start on it and has not changed it. "+
		"To recover: stop every process using the data dir; copy the whole data dir aside; then either restore a backup "+
		"of %s, or salvage with `sqlite3 %s .recover > dump.sql`, load it with `sqlite3 new.db < dump.sql`, "+
		"check it with `sqlite3 new.db 'PRAGMA integrity_check'`, and move new.db to %s (removing the old -wal and -shm files)",
		ErrCorrupt, path, problems, DatabaseFile, path, path)
}
