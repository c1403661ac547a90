package snapshot

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// streamMagic opens every wire stream, so that anything else on the sidecar's
// stdout (a shell's message, a wrong binary) is refused at once.
const streamMagic = "K3K-SNAPSHOT-STREAM 1\n"

// Frame types of the wire stream: data, then one manifest.
const (
	frameData     byte = 'D'
	frameManifest byte = 'M'
)

// maxFrame is the largest data frame written and accepted.
const maxFrame = 1 << 20

// StreamWriter sends a snapshot's data in frames and its manifest last. It
// counts and hashes what it sends; Finish puts both into the manifest.
type StreamWriter struct {
	w       *bufio.Writer
	started bool
	size    int64
	sum     hash.Hash
	header  [5]byte
}

// NewStreamWriter returns a StreamWriter writing to w.
func NewStreamWriter(w io.Writer) *StreamWriter {
	return &StreamWriter{w: bufio.NewWriterSize(w, maxFrame+8), sum: sha256.New()}
}

func (s *StreamWriter) frame(typ byte, p []byte) error {
	if !s.started {
		if _, err := io.WriteString(s.w, streamMagic); err != nil {
			return err
		}
		s.started = true
	}
	s.header[0] = typ
	binary.BigEndian.PutUint32(s.header[1:], uint32(len(p)))
	if _, err := s.w.Write(s.header[:]); err != nil {
		return err
	}
	_, err := s.w.Write(p)
	return err
}

// Write sends p as data.
func (s *StreamWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), maxFrame)]
		if err := s.frame(frameData, chunk); err != nil {
			return n, err
		}
		s.sum.Write(chunk)
		s.size += int64(len(chunk))
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// Finish sends m, with the size and sha256 of the data sent, and flushes.
func (s *StreamWriter) Finish(m Manifest) error {
	m.FormatVersion = FormatVersion
	m.Size = s.size
	m.SHA256 = hex.EncodeToString(s.sum.Sum(nil))
	b, err := m.marshal()
	if err != nil {
		return err
	}
	if err := s.frame(frameManifest, b); err != nil {
		return err
	}
	return s.w.Flush()
}

// TruncatedError is a stream that ended before its manifest: what the reader
// got was whole, only the rest never came. Through `kubectl exec`'s streams
// that happens without any error from the exec, under load
// (kubernetes/kubernetes#124571), so a caller may take the snapshot again.
type TruncatedError struct {
	// Size is how many bytes of data arrived whole.
	Size int64
	Err  error
	// beforeManifest: the stream ended between frames, not inside one.
	beforeManifest bool
}

func (e *TruncatedError) Error() string {
	if e.beforeManifest {
		return fmt.Sprintf("snapshot stream ended before its manifest after %d bytes of data: %v", e.Size, e.Err)
	}
	return fmt.Sprintf("snapshot stream cut short after %d bytes of data: %v", e.Size, e.Err)
}

func (e *TruncatedError) Unwrap() error { return e.Err }

// ReadStream reads a wire stream, writes its data to data and returns its
// manifest once the data matched the manifest's size and sha256. Anything
// else — another format, a stream cut short, data that does not match — is
// an error.
func ReadStream(r io.Reader, data io.Writer) (Manifest, error) {
	br := bufio.NewReaderSize(r, maxFrame+8)
	magic := make([]byte, len(streamMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != streamMagic {
		return Manifest{}, errors.New("not a k3k snapshot stream (does the server pod run this k3k version's datastore image?)")
	}
	sum := sha256.New()
	var size int64
	var header [5]byte
	buf := make([]byte, maxFrame)
	for {
		if _, err := io.ReadFull(br, header[:]); err != nil {
			return Manifest{}, &TruncatedError{Size: size, Err: err, beforeManifest: true}
		}
		n := binary.BigEndian.Uint32(header[1:])
		switch header[0] {
		case frameData:
			if n > maxFrame {
				return Manifest{}, fmt.Errorf("snapshot stream: data frame of %d bytes", n)
			}
			if _, err := io.ReadFull(br, buf[:n]); err != nil {
				return Manifest{}, &TruncatedError{Size: size, Err: err}
			}
			sum.Write(buf[:n])
			size += int64(n)
			if _, err := data.Write(buf[:n]); err != nil {
				return Manifest{}, fmt.Errorf("writing snapshot data: %w", err)
			}
		case frameManifest:
			if n > maxManifest {
				return Manifest{}, fmt.Errorf("snapshot stream: manifest of %d bytes", n)
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(br, b); err != nil {
				return Manifest{}, fmt.Errorf("snapshot stream: reading manifest: %w", err)
			}
			m, err := parseManifest(b)
			if err != nil {
				return Manifest{}, err
			}
			switch _, err := br.ReadByte(); {
			case err == nil:
				return Manifest{}, errors.New("snapshot stream: data after the manifest")
			case !errors.Is(err, io.EOF):
				return Manifest{}, fmt.Errorf("snapshot stream: after the manifest: %w", err)
			}
			if got := hex.EncodeToString(sum.Sum(nil)); m.Size != size || m.SHA256 != got {
				return Manifest{}, fmt.Errorf("snapshot stream: received %d bytes with sha256 %s, the manifest says %d bytes with sha256 %s", size, got, m.Size, m.SHA256)
			}
			return m, m.Validate()
		default:
			return Manifest{}, fmt.Errorf("snapshot stream: unknown frame type %q", header[0])
		}
	}
}
