// Command backup measures what issue 17 asks of backups: the time and size of
// a snapshot of N objects on each datastore, and the time to restore it into
// a new datastore and in place (make bench-backup). Every step runs the
// product's own commands as separate processes of the datastore binary — a
// real `datastore sqlite` and a real single-member `datastore etcd`, both with
// the fsync they run with in a pod, `datastore snapshot` streaming to a file
// and `datastore restore` reading it — so the numbers are those of a pod,
// less the pods/exec transport. It is a measurement, not a test: a number
// never fails it, but a restore that does not end with exactly the N objects
// does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	bin := flag.String("datastore-bin", "", "path of the datastore binary (built with CGO_ENABLED=0)")
	dir := flag.String("dir", "/var/tmp", "directory on the disk to measure (not a tmpfs: fsync is part of the numbers)")
	kinds := flag.String("datastores", "sqlite,etcd", "datastores to measure: sqlite, etcd")
	rounds := flag.Int("rounds", 3, "how often every datastore is measured; each round starts with the next datastore in turn")
	objects := flag.Int("objects", 10000, "ConfigMaps of about 1 KiB written before the snapshot")
	writers := flag.Int("writers", 16, "concurrent clients writing the objects (only to save time: the writes are not measured)")
	changed := flag.Float64("changed", 0.1, "fraction of the objects changed before the in-place restore")
	timeout := flag.Duration("timeout", 30*time.Minute, "limit of one datastore's round")
	flag.Parse()
	if *bin == "" {
		exitOn(fmt.Errorf("--datastore-bin is required"))
	}
	if *rounds < 1 || *objects < 1 || *writers < 1 || *changed <= 0 || *changed > 1 {
		exitOn(fmt.Errorf("--rounds, --objects and --writers must be at least 1, --changed in (0, 1]"))
	}
	names := strings.Split(*kinds, ",")
	for _, n := range names {
		if n != "sqlite" && n != "etcd" {
			exitOn(fmt.Errorf("unknown datastore %q", n))
		}
	}
	base, err := os.MkdirTemp(*dir, "k3k-bench-backup-")
	exitOn(err)
	defer os.RemoveAll(base)
	b := &bench{bin: *bin, objects: *objects, writers: *writers, changed: max(1, int(*changed*float64(*objects)))}
	exitOn(b.writeCerts(base))

	var results []round
	for r := range *rounds {
		rd := round{}
		// Each round starts with the next datastore, so that none is always
		// measured first (cold page cache) or last (after the others' files).
		for i := range names {
			name := names[(r+i)%len(names)]
			dir := filepath.Join(base, fmt.Sprintf("%s-%d", name, r+1))
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			res, err := b.run(ctx, name, dir)
			cancel()
			if err != nil {
				exitOn(fmt.Errorf("round %d, %s: %w", r+1, name, err))
			}
			rd[name] = res
			// The disk holds one datastore's files at a time, not every round's.
			exitOn(os.RemoveAll(dir))
		}
		results = append(results, rd)
	}
	header := fmt.Sprintf("%d ConfigMaps of ~1 KiB under /registry/configmaps/; restore-in-place into the datastore holding them with %d changed.\n"+
		"Durability as in a pod: sqlite `--sync group` (the default: commits share fsyncs), etcd with fsync on (the member's default). Disk: %s.",
		b.objects, b.changed, *dir)
	printTable(os.Stdout, header, names, results)
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-backup:", err)
		os.Exit(1)
	}
}
