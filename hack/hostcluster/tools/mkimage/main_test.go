package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestWriteLayer(t *testing.T) {
	src := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(src, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	atDir := filepath.Join(t.TempDir(), "mod", "k8s.io", "kubernetes@v1.34.3")
	if err := os.MkdirAll(atDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cert := filepath.Join(atDir, "localhost.crt")
	if err := os.WriteFile(cert, []byte("cert"), 0o644); err != nil {
		t.Fatal(err)
	}
	setuid := filepath.Join(t.TempDir(), "nnp")
	if err := os.WriteFile(setuid, []byte("nnp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(setuid, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		entries []string
		want    []string // "type name [target|mode size]"
		wantErr string
	}{
		{
			name:    "a file gets its parent directories first and keeps its mode",
			entries: []string{"/usr/bin/app=" + src},
			want:    []string{"dir usr/", "dir usr/bin/", "file usr/bin/app 755 6"},
		},
		{
			name:    "a source path with an @ is a file, a link target with an = a link",
			entries: []string{"/localhost.crt=" + cert, "/odd@x=y"},
			want:    []string{"file localhost.crt 644 4", "link odd x=y"},
		},
		{
			name:    "a set-user-ID file stays one",
			entries: []string{"/nnp=" + setuid},
			want:    []string{"file nnp 4755 3"},
		},
		{
			name:    "a link and a directory share parents, each made once",
			entries: []string{"/bin/sh@busybox", "/bin/cat@busybox", "/var/lib/data/"},
			want:    []string{"dir bin/", "link bin/sh busybox", "link bin/cat busybox", "dir var/", "dir var/lib/", "dir var/lib/data/"},
		},
		{
			name:    "/tmp is sticky and world-writable",
			entries: []string{"/tmp/"},
			want:    []string{"dir tmp/ 1777"},
		},
		{name: "a second entry for the same path is refused", entries: []string{"/bin/busybox=" + src, "/bin/busybox@busybox"}, wantErr: "already in the image"},
		{name: "a relative path is refused", entries: []string{"bin/app=" + src}, wantErr: "must be absolute"},
		{name: "an entry of no known form is refused", entries: []string{"/bin/app"}, wantErr: "neither"},
		{name: "a missing source file is an error", entries: []string{"/app=/does/not/exist"}, wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := writeLayer(&buf, tc.entries)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			tr := tar.NewReader(&buf)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				switch h.Typeflag {
				case tar.TypeDir:
					s := "dir " + h.Name
					if h.Mode != 0o755 {
						s += " " + strconv.FormatInt(h.Mode, 8)
					}
					got = append(got, s)
				case tar.TypeSymlink:
					got = append(got, "link "+h.Name+" "+h.Linkname)
				case tar.TypeReg:
					got = append(got, "file "+h.Name+" "+strconv.FormatInt(h.Mode, 8)+" "+strconv.FormatInt(h.Size, 10))
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("layer entries\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}
