package snapshotter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// FileExt ends the name of every snapshot file a backup writes.
const FileExt = ".k3ksnap"

// timeLayout is the UTC time in a snapshot file's name: sortable, and free
// of the colons some file systems and tools refuse.
const timeLayout = "20060102T150405Z"

// Dir is a directory of one cluster's scheduled snapshots (the backup
// claim's mount). A cluster's snapshots are named
// <cluster>-<UTC time>-r<revision>.k3ksnap; Dir counts and deletes those
// names only, so other files on the claim — another cluster's snapshots, a
// file someone copied there, a snapshot being written — are never touched.
type Dir struct {
	Path    string
	Cluster string
}

// File is one snapshot file of a Dir.
type File struct {
	Name     string
	Time     time.Time
	Revision int64
}

// FileName is the name of cluster's snapshot taken at t holding revision.
func FileName(cluster string, t time.Time, revision int64) string {
	return fmt.Sprintf("%s-%s-r%d%s", cluster, t.UTC().Format(timeLayout), revision, FileExt)
}

func (d Dir) pattern() *regexp.Regexp {
	// A cluster's name never holds digits right after its own dash-separated
	// prefix in a way that matches: "a" does not match "a-b-2026...": the
	// time must follow the name's dash directly.
	return regexp.MustCompile(`^` + regexp.QuoteMeta(d.Cluster) + `-([0-9]{8}T[0-9]{6}Z)-r([0-9]{1,19})` + regexp.QuoteMeta(FileExt) + `$`)
}

// parse reads a snapshot file name of d's cluster; false for any other name.
func (d Dir) parse(re *regexp.Regexp, name string) (File, bool) {
	m := re.FindStringSubmatch(name)
	if m == nil {
		return File{}, false
	}
	t, err := time.Parse(timeLayout, m[1])
	if err != nil {
		return File{}, false
	}
	rev, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return File{}, false
	}
	return File{Name: name, Time: t, Revision: rev}, true
}

// List returns the cluster's snapshot files, the newest first (by the time
// in the name, then the revision). Only regular files count.
func (d Dir) List() ([]File, error) {
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", d.Path, err)
	}
	re := d.pattern()
	var files []File
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if f, ok := d.parse(re, e.Name()); ok {
			files = append(files, f)
		}
	}
	sort.Slice(files, func(i, j int) bool {
		if !files[i].Time.Equal(files[j].Time) {
			return files[i].Time.After(files[j].Time)
		}
		return files[i].Revision > files[j].Revision
	})
	return files, nil
}

// Rotate deletes the cluster's snapshot files beyond the keep newest and
// returns their names. keep below 1 is refused: the newest is never deleted.
func (d Dir) Rotate(keep int) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("keep must be at least 1, got %d", keep)
	}
	files, err := d.List()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, f := range files[min(keep, len(files)):] {
		if err := os.Remove(filepath.Join(d.Path, f.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, f.Name)
	}
	if len(removed) > 0 {
		if err := syncDir(d.Path); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// RemovePartials removes the temporary files of the cluster's snapshots that
// a run killed before it could clean up left behind (a snapshot name with
// PartialSuffix, or the received data's DataPartialSuffix), and returns their
// names.
func (d Dir) RemovePartials() ([]string, error) {
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", d.Path, err)
	}
	re := d.pattern()
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		name := e.Name()
		base, ok := strings.CutSuffix(name, PartialSuffix)
		if !ok {
			continue
		}
		base = strings.TrimSuffix(base, dataSuffix)
		if _, ok := d.parse(re, base); !ok && base != d.receiving() {
			continue
		}
		if err := os.Remove(filepath.Join(d.Path, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// dataSuffix and receiving name the file the data is received into before
// the revision (and so the final name) is known:
// <cluster>-receiving.k3ksnap.data.partial.
const dataSuffix = ".data"

func (d Dir) receiving() string { return d.Cluster + "-receiving" + FileExt }

// ReceivingPath is the temporary file a run receives the snapshot data into,
// beside the final file so that naming it stays on one file system. It ends
// in PartialSuffix, so it never counts as a snapshot.
func (d Dir) ReceivingPath() string {
	return filepath.Join(d.Path, d.receiving()+dataSuffix+PartialSuffix)
}

// Result is what a backup run reports: the backup Job's container writes it
// as its termination message, where the controller reads it into the
// Cluster's status. Error is set, and nothing else, when the run failed.
// Small on purpose: a termination message holds at most 4096 bytes.
type Result struct {
	File      string    `json:"file,omitempty"`
	Revision  int64     `json:"revision,omitempty"`
	Size      int64     `json:"size,omitempty"`
	SHA256    string    `json:"sha256,omitempty"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// Removed is how many older snapshots the rotation deleted.
	Removed int    `json:"removed,omitempty"`
	Error   string `json:"error,omitempty"`
}
