package snapshot

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"
)

// maxToken bounds the token entry a reader accepts.
const maxToken = 4 << 10

// WriteArchive writes a snapshot file to w: m (with TokenSHA256 set from
// token), token, and the m.Size bytes of data. m must describe data already
// (ReadStream's manifest does); it is checked again while copying, and a
// mismatch is an error.
func WriteArchive(w io.Writer, m Manifest, token []byte, data io.Reader) error {
	if len(token) == 0 {
		return errors.New("a snapshot without the cluster token cannot be restored")
	}
	sum := sha256.Sum256(token)
	m.TokenSHA256 = hex.EncodeToString(sum[:])
	if err := m.Validate(); err != nil {
		return err
	}
	dataEntry, _ := m.DataEntry()
	mb, err := m.marshal()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	mtime := m.CreatedAt.UTC().Truncate(time.Second)
	put := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: size, ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX})
	}
	if err := put(ManifestEntry, int64(len(mb))); err != nil {
		return err
	}
	if _, err := tw.Write(mb); err != nil {
		return err
	}
	if err := put(TokenEntry, int64(len(token))); err != nil {
		return err
	}
	if _, err := tw.Write(token); err != nil {
		return err
	}
	if err := put(dataEntry, m.Size); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(data, m.Size+1))
	if err != nil {
		return fmt.Errorf("writing snapshot data: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != m.Size || got != m.SHA256 {
		return fmt.Errorf("snapshot data of %d bytes with sha256 %s, the manifest says %d bytes with sha256 %s", n, got, m.Size, m.SHA256)
	}
	return tw.Close()
}

// Archive is a snapshot file's manifest and token.
type Archive struct {
	Manifest Manifest
	Token    []byte
}

// ReadArchive reads a snapshot file, writes its datastore file to data and
// returns its manifest and token once every entry matched the manifest. A
// caller must not use what it wrote to data when an error is returned.
func ReadArchive(r io.Reader, data io.Writer) (Archive, error) {
	tr := tar.NewReader(r)
	next := func(want string) (*tar.Header, error) {
		h, err := tr.Next()
		if err != nil {
			return nil, fmt.Errorf("not a k3k snapshot: reading entry %s: %w", want, err)
		}
		if h.Name != want || h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("not a k3k snapshot: entry %q where %s belongs", h.Name, want)
		}
		return h, nil
	}
	h, err := next(ManifestEntry)
	if err != nil {
		return Archive{}, err
	}
	if h.Size > maxManifest {
		return Archive{}, fmt.Errorf("not a k3k snapshot: manifest of %d bytes", h.Size)
	}
	mb, err := io.ReadAll(tr)
	if err != nil {
		return Archive{}, fmt.Errorf("reading snapshot manifest: %w", err)
	}
	m, err := parseManifest(mb)
	if err != nil {
		return Archive{}, err
	}
	if err := m.Validate(); err != nil {
		return Archive{}, err
	}
	if h, err = next(TokenEntry); err != nil {
		return Archive{}, err
	}
	if h.Size == 0 || h.Size > maxToken {
		return Archive{}, fmt.Errorf("snapshot token entry of %d bytes", h.Size)
	}
	token, err := io.ReadAll(tr)
	if err != nil {
		return Archive{}, fmt.Errorf("reading snapshot token: %w", err)
	}
	if sum := sha256.Sum256(token); hex.EncodeToString(sum[:]) != m.TokenSHA256 {
		return Archive{}, errors.New("snapshot token does not match the manifest's tokenSHA256")
	}
	dataEntry, _ := m.DataEntry()
	if h, err = next(dataEntry); err != nil {
		return Archive{}, err
	}
	if h.Size != m.Size {
		return Archive{}, fmt.Errorf("snapshot data entry of %d bytes, the manifest says %d", h.Size, m.Size)
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(data, sum), tr)
	if err != nil {
		return Archive{}, fmt.Errorf("reading snapshot data: %w", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); n != m.Size || got != m.SHA256 {
		return Archive{}, fmt.Errorf("snapshot data of %d bytes with sha256 %s, the manifest says %d bytes with sha256 %s", n, got, m.Size, m.SHA256)
	}
	if _, err := tr.Next(); err != io.EOF {
		return Archive{}, errors.New("not a k3k snapshot: entries after the data")
	}
	return Archive{Manifest: m, Token: token}, nil
}
