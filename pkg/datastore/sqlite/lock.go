package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// dirLock is an exclusive flock on the data dir's lock file, held for the life of
// the server. The kernel drops it when the process dies, so a killed owner never
// leaves a stale lock behind, and a second process (or a second Open in the same
// process) is refused while the owner lives.
type dirLock struct {
	f *os.File
}

// checkDataDir returns a clear error when dir is missing, not a directory, or not
// writable. It never creates dir.
func checkDataDir(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("data dir %s does not exist: it must be an existing directory (usually the mounted volume); the datastore does not create it, so that an unmounted volume is never mistaken for an empty cluster", dir)
	case err != nil:
		return fmt.Errorf("data dir %s: %w", dir, err)
	case !info.IsDir():
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	return nil
}

// lockDataDir takes the exclusive lock on dir or says who holds it.
func lockDataDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		if errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("data dir %s is not writable (%w): mount the volume read-write", dir, err)
		}
		return nil, fmt.Errorf("opening lock file in data dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(owner))
			if pid == "" {
				pid = "unknown"
			}
			return nil, fmt.Errorf("data dir %s is in use by another datastore process (pid %s, lock file %s): refusing to start, because two writers on one SQLite file corrupt it", dir, pid, path)
		}
		return nil, fmt.Errorf("locking data dir %s: %w", dir, err)
	}
	// Record the owner for the message above. A failure here means the volume
	// does not take writes, which the database would hit a moment later anyway.
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("data dir %s is not writable: %w", dir, err)
		}
	} else {
		f.Close()
		return nil, fmt.Errorf("data dir %s is not writable: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

// release drops the lock. The file stays: removing it would let a third process
// lock a new inode while a second one still waits on the old one.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
