package snapshot

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func randomData(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// stream sends data and m through a StreamWriter and returns the bytes.
func stream(t *testing.T, data []byte, m Manifest) []byte {
	t.Helper()
	var buf bytes.Buffer
	sw := NewStreamWriter(&buf)
	// Written in odd pieces: frames do not follow the writer's calls.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 777_777)
		if _, err := sw.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := sw.Finish(m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestStreamCarriesDataAndManifest(t *testing.T) {
	data := randomData(t, 3*maxFrame+12345)
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	wire := stream(t, data, Manifest{Datastore: SQLite, Revision: 42, CreatedAt: at})
	var got bytes.Buffer
	m, err := ReadStream(bytes.NewReader(wire), &got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatal("data differs after the stream")
	}
	if m.Revision != 42 || m.Size != int64(len(data)) || m.Datastore != SQLite || !m.CreatedAt.Equal(at) || m.FormatVersion != FormatVersion {
		t.Fatalf("manifest %+v", m)
	}
}

func TestDamagedStreamsAreRefused(t *testing.T) {
	data := randomData(t, 2*maxFrame)
	wire := stream(t, data, Manifest{Datastore: Etcd})
	manifestFrame := bytes.LastIndex(wire, []byte("{\n  \"formatVersion\"")) - 5
	flipped := bytes.Clone(wire)
	flipped[len(streamMagic)+5+1000] ^= 0xff
	cases := []struct {
		name string
		wire []byte
		want string
	}{
		{"a flipped data byte fails the sha256", flipped, "sha256"},
		{"a stream cut in the data has no manifest", wire[:len(wire)/2], "cut short"},
		{"a stream cut before the manifest has none", wire[:manifestFrame], "ended before its manifest"},
		{"something else on stdout is no stream", []byte("sh: datastore: not found\n"), "not a k3k snapshot stream"},
		{"nothing at all is no stream", nil, "not a k3k snapshot stream"},
		{"bytes after the manifest are refused", append(bytes.Clone(wire), 'x'), "after the manifest"},
		{"an unknown frame is refused", append([]byte(streamMagic), 'X', 0, 0, 0, 1, 'y'), "unknown frame"},
		{"a giant frame is refused", append([]byte(streamMagic), 'D', 0xff, 0xff, 0xff, 0xff), "data frame of"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadStream(bytes.NewReader(tc.wire), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	data := randomData(t, 100_000)
	m, err := ReadStream(bytes.NewReader(stream(t, data, Manifest{Datastore: Etcd, Revision: 7})), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	m.Cluster = ClusterRef{Namespace: "ns", Name: "c"}
	m.K3sVersion = "v1.34.3-k3s1"
	var file bytes.Buffer
	if err := WriteArchive(&file, m, []byte("the-token"), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	a, err := ReadArchive(bytes.NewReader(file.Bytes()), &got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) || string(a.Token) != "the-token" || a.Manifest.Cluster.Name != "c" || a.Manifest.Revision != 7 || a.Manifest.TokenSHA256 == "" {
		t.Fatalf("archive read back as %+v", a.Manifest)
	}
	if !strings.HasPrefix(file.String(), ManifestEntry) {
		t.Fatal("the manifest is not the first entry")
	}
}

func TestArchiveRefusals(t *testing.T) {
	data := randomData(t, 10_000)
	m, err := ReadStream(bytes.NewReader(stream(t, data, Manifest{Datastore: SQLite})), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&bytes.Buffer{}, m, nil, bytes.NewReader(data)); err == nil {
		t.Fatal("an archive without a token was written")
	}
	if err := WriteArchive(&bytes.Buffer{}, m, []byte("t"), bytes.NewReader(data[1:])); err == nil {
		t.Fatal("an archive with less data than its manifest says was written")
	}
	var file bytes.Buffer
	if err := WriteArchive(&file, m, []byte("t"), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(file.Bytes())
	i := bytes.Index(damaged, data[:64])
	damaged[i+10] ^= 1
	if _, err := ReadArchive(bytes.NewReader(damaged), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("damaged data read with error %v", err)
	}
	if _, err := ReadArchive(strings.NewReader("not a tar at all"), &bytes.Buffer{}); err == nil {
		t.Fatal("garbage read as an archive")
	}
}

func TestManifestValidation(t *testing.T) {
	good := Manifest{FormatVersion: FormatVersion, Datastore: SQLite, Size: 1, SHA256: strings.Repeat("a", 64)}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*Manifest){
		"a newer format":        func(m *Manifest) { m.FormatVersion = 2 },
		"an unknown datastore":  func(m *Manifest) { m.Datastore = "postgres" },
		"no data":               func(m *Manifest) { m.Size = 0 },
		"a malformed sha256":    func(m *Manifest) { m.SHA256 = "../../etc/passwd" },
		"a malformed token sum": func(m *Manifest) { m.TokenSHA256 = "x" },
	} {
		m := good
		change(&m)
		if m.Validate() == nil {
			t.Errorf("%s passed validation", name)
		}
	}
}

// TestStreamThroughAPipe is how k3kcli reads the sidecar's stdout: through a
// pipe that the exec closes, cleanly (nil: io.EOF) or with the exec's error,
// which must not pass for the end of a complete stream.
func TestStreamThroughAPipe(t *testing.T) {
	wire := stream(t, randomData(t, 5000), Manifest{Datastore: SQLite})
	for _, tc := range []struct {
		name    string
		closeAs error
		ok      bool
	}{
		{"a clean end", nil, true},
		{"a failed exec", errors.New("command terminated with exit code 1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() {
				_, _ = pw.Write(wire)
				pw.CloseWithError(tc.closeAs)
			}()
			_, err := ReadStream(pr, &bytes.Buffer{})
			if (err == nil) != tc.ok {
				t.Fatalf("error %v", err)
			}
			if !tc.ok && !strings.Contains(err.Error(), "exit code 1") {
				t.Fatalf("the exec's error is lost: %v", err)
			}
		})
	}
}
