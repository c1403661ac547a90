package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// On its very first start, right after it takes the bootstrap lock, k3s
// generates its CAs, keys and certificates into server/tls on the data volume
// and only then stores them in the datastore (bootstraplock.go). It writes
// those files in place, not through a rename, so a k3s killed in between (an
// OOM kill, a node lost, a deleted pod whose process is killed) can leave one
// of them truncated or empty. Every later start then stops on it ("error
// reading server/tls/server-ca.crt: data does not contain any valid RSA or
// ECDSA certificates") and the server never comes back.
//
// While the datastore holds no bootstrap data, those files were never handed
// to anyone: k3s stores them before its API serves, and every kubeconfig and
// agent credential comes later. So on the sidecar's first start in a pod (no
// k3s of the pod running, see bootstraplock.go), when no bootstrap data is
// stored and a file in server/tls does not parse, the whole directory is set
// aside (renamed, kept for a look) and k3s generates a new set, as on a first
// start. Files that parse are never touched, and nothing is once data is
// stored: then the datastore's copy is the cluster's, and a directory that
// parses may be a cluster's only copy (a database lost, its files kept).

// k3sTLSDir is k3s's certificate directory below its data dir.
const k3sTLSDir = "server/tls"

// brokenTLSFiles lists the files below dir that k3s could not load: empty
// files, certificates (.crt) without a certificate, keys (.key) without a
// private key, JSON (.json) that does not parse. A missing dir has none.
func brokenTLSFiles(dir string) ([]string, error) {
	var broken []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == dir {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var bad bool
		switch {
		case len(data) == 0:
			bad = true
		case strings.HasSuffix(path, ".crt"):
			_, err := certutil.ParseCertsPEM(data)
			bad = err != nil
		case strings.HasSuffix(path, ".key"):
			_, err := keyutil.ParsePrivateKeyPEM(data)
			bad = err != nil
		case strings.HasSuffix(path, ".json"):
			bad = !json.Valid(data)
		}
		if bad {
			rel, _ := filepath.Rel(dir, path)
			broken = append(broken, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checking k3s's certificates in %s: %w", dir, err)
	}
	return broken, nil
}

// setAsideUnfinishedTLS renames k3sDir's server/tls to
// server/tls.unfinished-<time> when a file in it is broken, and returns the
// new name and the broken files ("" and none when all parse). The caller
// makes sure that k3s never stored its bootstrap data and is not running.
func setAsideUnfinishedTLS(k3sDir string, now time.Time) (string, []string, error) {
	dir := filepath.Join(k3sDir, k3sTLSDir)
	broken, err := brokenTLSFiles(dir)
	if err != nil || len(broken) == 0 {
		return "", nil, err
	}
	aside := dir + ".unfinished-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(dir, aside); err != nil {
		return "", broken, fmt.Errorf("setting aside k3s's unfinished certificates: %w", err)
	}
	return aside, broken, nil
}
