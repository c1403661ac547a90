package snapshotter

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestDirCountsOnlyItsOwnRegularFiles lays out a claim a hostile tenant with
// write access could prepare — a directory and a symbolic link named like
// snapshots, the link pointing at a file to be destroyed, a snapshot of a
// cluster whose name extends this one's — and rotates with keep 1: only the
// cluster's older regular snapshot file goes, the link's target survives.
func TestDirCountsOnlyItsOwnRegularFiles(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	older, newer := FileName("c", t0, 10), FileName("c", t0.Add(time.Minute), 12)
	sameTime := FileName("c", t0, 9)
	for _, name := range []string{older, newer, sameTime, FileName("c-x", t0, 1), FileName("cc", t0, 1)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, FileName("c", t0.Add(-time.Hour), 1)), 0o700); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, FileName("c", t0.Add(-2*time.Hour), 2))); err != nil {
		t.Fatal(err)
	}
	d := Dir{Path: dir, Cluster: "c"}
	files, err := d.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if want := []string{newer, older, sameTime}; !slices.Equal(names, want) {
		t.Fatalf("List = %v, want %v (newest first, then by revision)", names, want)
	}
	removed, err := d.Rotate(1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{older, sameTime}; !slices.Equal(removed, want) {
		t.Fatalf("Rotate(1) removed %v, want %v", removed, want)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Fatalf("the link's target: %q, %v", b, err)
	}
	if _, err := d.Rotate(0); err == nil {
		t.Fatal("Rotate(0) would delete every snapshot and was accepted")
	}
	if n, _ := os.ReadDir(dir); len(n) != 5 {
		t.Fatalf("left %d entries, want 5 (the newest, two other clusters', the directory, the link)", len(n))
	}
}
