package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/k3k-io/k3k/pkg/datastore"
)

// Status reads the sizes from the files and the filesystem, and the revisions
// from the database.
func (s *Server) Status(ctx context.Context) (datastore.Status, error) {
	st := datastore.Status{
		Kind: Kind, Endpoint: s.endpoint,
		CompactIntervalSeconds: s.cfg.CompactInterval.Seconds(),
	}
	var err error
	if st.DBSizeBytes, err = fileSize(s.dbPath); err != nil {
		return st, err
	}
	if st.WALSizeBytes, err = fileSize(s.dbPath + "-wal"); err != nil {
		return st, err
	}
	var fsStat syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(s.dbPath), &fsStat); err != nil {
		return st, fmt.Errorf("reading free space of %s: %w", filepath.Dir(s.dbPath), err)
	}
	st.VolumeSizeBytes = fsStat.Blocks * uint64(fsStat.Bsize)
	st.VolumeFreeBytes = fsStat.Bavail * uint64(fsStat.Bsize)

	err = s.side.QueryRowContext(ctx, `SELECT freelist_count * page_size FROM pragma_freelist_count(), pragma_page_size()`).
		Scan(&st.DBFreeBytes)
	if err != nil {
		return st, fmt.Errorf("reading free pages of %s: %w", s.dbPath, err)
	}
	err = s.side.QueryRowContext(ctx, `SELECT
		(SELECT COALESCE(MAX(id), 0) FROM kine),
		(SELECT COALESCE(MAX(prev_revision), 0) FROM kine WHERE name = 'compact_rev_key')`).
		Scan(&st.Revision, &st.CompactRevision)
	if err != nil {
		return st, fmt.Errorf("reading revisions of %s: %w", s.dbPath, err)
	}
	return st, nil
}

func fileSize(path string) (int64, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}
