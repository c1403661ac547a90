package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SecretVolume is a directory updated the way kubelet updates a Secret volume
// (kubelet's AtomicWriter): the files live in a timestamped directory, "..data" is a
// symlink to it, and each key is a symlink to "..data/<key>". An update writes a new
// timestamped directory, points "..data_tmp" at it, renames "..data_tmp" over
// "..data" (the one atomic step) and removes the old directory. Readers therefore
// see the old content or the new, never a mix, and never the same inode changing.
type SecretVolume struct {
	// Dir is the mount point the consumer watches.
	Dir string
}

// Write replaces the volume's content with files, as kubelet does on a Secret change.
func (v *SecretVolume) Write(files map[string][]byte) error {
	if err := os.MkdirAll(v.Dir, 0o755); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	ts, err := os.MkdirTemp(v.Dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return fmt.Errorf("creating timestamped directory: %w", err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ts, name), data, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return fmt.Errorf("linking ..data_tmp: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		return fmt.Errorf("swapping ..data: %w", err)
	}
	for name := range files {
		link := filepath.Join(v.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return fmt.Errorf("linking %s: %w", name, err)
		}
	}
	if old != "" && strings.HasPrefix(old, "..") {
		if err := os.RemoveAll(filepath.Join(v.Dir, old)); err != nil {
			return fmt.Errorf("removing old directory: %w", err)
		}
	}
	return nil
}
