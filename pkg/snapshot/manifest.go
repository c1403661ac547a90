package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// FormatVersion is the version of the snapshot format this package writes.
const FormatVersion = 1

// Datastore types a snapshot can hold.
const (
	SQLite = "sqlite"
	Etcd   = "etcd"
)

// Entry names in a snapshot archive.
const (
	ManifestEntry = "manifest.json"
	TokenEntry    = "token"
	SQLiteEntry   = "state.db"
	EtcdEntry     = "etcd.db"
)

// ClusterRef names the Cluster a snapshot was taken of.
type ClusterRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Manifest describes one snapshot.
type Manifest struct {
	// FormatVersion is FormatVersion when written by this package.
	FormatVersion int        `json:"formatVersion"`
	Cluster       ClusterRef `json:"cluster"`
	// Datastore is SQLite or Etcd.
	Datastore string `json:"datastore"`
	// Revision is the datastore's revision the snapshot holds: kine's newest
	// row id, or etcd's newest main revision. Every write up to it is in the
	// snapshot, none after it.
	Revision int64 `json:"revision"`
	// CompactRevision is the revision the datastore was compacted to.
	CompactRevision int64 `json:"compactRevision,omitempty"`
	// K3sVersion is the Cluster's k3s version when the snapshot was taken.
	K3sVersion string `json:"k3sVersion,omitempty"`
	// EtcdVersion is the storage version etcd reported (etcd only).
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Source is the server pod the snapshot was taken from.
	Source string `json:"source,omitempty"`
	// CreatedAt is when the sidecar took the snapshot (UTC).
	CreatedAt time.Time `json:"createdAt"`
	// Size and SHA256 are those of the datastore file.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// TokenSHA256 is the sha256 of the token entry; empty in the wire
	// format, where there is no token.
	TokenSHA256 string `json:"tokenSHA256,omitempty"`
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// DataEntry is the archive entry holding the datastore file.
func (m Manifest) DataEntry() (string, error) {
	switch m.Datastore {
	case SQLite:
		return SQLiteEntry, nil
	case Etcd:
		return EtcdEntry, nil
	}
	return "", fmt.Errorf("snapshot of an unknown datastore %q", m.Datastore)
}

// Validate checks what a reader relies on.
func (m Manifest) Validate() error {
	if m.FormatVersion != FormatVersion {
		return fmt.Errorf("snapshot format version %d, this k3k reads %d", m.FormatVersion, FormatVersion)
	}
	if _, err := m.DataEntry(); err != nil {
		return err
	}
	if m.Size <= 0 {
		return errors.New("snapshot manifest: no data")
	}
	if !sha256Hex.MatchString(m.SHA256) {
		return errors.New("snapshot manifest: sha256 is not 64 lower-case hex digits")
	}
	if m.TokenSHA256 != "" && !sha256Hex.MatchString(m.TokenSHA256) {
		return errors.New("snapshot manifest: tokenSHA256 is not 64 lower-case hex digits")
	}
	return nil
}

func (m Manifest) marshal() ([]byte, error) {
	return json.MarshalIndent(m, "", "  ")
}

// maxManifest bounds what is read as a manifest, so garbage cannot make a
// reader allocate without end.
const maxManifest = 64 << 10

func parseManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("reading snapshot manifest: %w", err)
	}
	return m, nil
}
