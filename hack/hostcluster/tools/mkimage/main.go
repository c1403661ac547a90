// Command mkimage packs local files into a one-layer container image and writes it
// as a `docker save` style tarball, which `ctr images import` and `kind load
// image-archive` accept. No registry and no container engine are involved.
//
//	mkimage -o app.tar -t example.test/app:v1 -entrypoint /bin/app \
//	    /bin/app=./app        copy a host file to /bin/app (keeps its mode)
//	    /data/                an empty directory
//	    /bin/sh@busybox       a symbolic link to busybox
//
// Entries are written in the order given, after /etc/ and /tmp/, which every image
// gets. File times are zero so the same inputs give the same image digest.
package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	log.SetFlags(0)
	log.SetPrefix("mkimage: ")
	out := flag.String("o", "", "output tarball (required)")
	ref := flag.String("t", "", "image reference, e.g. example.test/app:v1 (required)")
	entrypoint := flag.String("entrypoint", "", "entrypoint, split on spaces")
	cmd := flag.String("cmd", "", "default arguments, split on spaces")
	workdir := flag.String("workdir", "/", "working directory")
	user := flag.String("user", "", "the user the image runs as (a number: nothing resolves names); empty: root")
	var env listFlag
	flag.Var(&env, "env", "KEY=VALUE added to the environment (repeatable)")
	flag.Parse()
	if *out == "" || *ref == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, *ref, *entrypoint, *cmd, *workdir, *user, env, flag.Args()); err != nil {
		log.Fatal(err)
	}
}

func run(out, ref, entrypoint, cmd, workdir, user string, env, entries []string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("parsing image reference: %w", err)
	}
	layerFile, err := os.CreateTemp("", "mkimage-layer-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(layerFile.Name())
	if err := writeLayer(layerFile, append([]string{"/etc/", "/tmp/"}, entries...)); err != nil {
		layerFile.Close()
		return err
	}
	if err := layerFile.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromFile(layerFile.Name())
	if err != nil {
		return fmt.Errorf("reading layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = strings.Fields(entrypoint)
	cfg.Config.Cmd = strings.Fields(cmd)
	cfg.Config.WorkingDir = workdir
	cfg.Config.User = user
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}, env...)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	log.Printf("%s -> %s (%s)", ref, out, digest)
	return nil
}

// writeLayer writes the layer tar: parent directories first, then each entry.
func writeLayer(w io.Writer, entries []string) error {
	tw := tar.NewWriter(w)
	seen := map[string]bool{}
	var zero time.Time = time.Unix(0, 0)
	mkdirAll := func(dir string) error {
		var chain []string
		for d := path.Clean(dir); d != "/" && d != "." && !seen[d]; d = path.Dir(d) {
			chain = append([]string{d}, chain...)
		}
		for _, d := range chain {
			seen[d] = true
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: zero}
			if d == "/tmp" {
				hdr.Mode = 0o1777
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
		return nil
	}
	written := map[string]bool{}
	for _, e := range entries {
		// The first separator tells the kind: a source path may hold an @
		// (Go's module cache: k8s.io/kubernetes@v1.34.3/…), a link target
		// an =.
		eq, at := strings.Index(e, "="), strings.Index(e, "@")
		isFile := eq >= 0 && (at < 0 || eq < at)
		isLink := at >= 0 && !isFile
		// A later entry for the same path would silently replace the earlier one
		// (say, a link named like the file it points to): refuse it.
		if isFile || isLink {
			sep := at
			if isFile {
				sep = eq
			}
			p := e[:sep]
			if p = path.Clean(p); written[p] {
				return fmt.Errorf("entry %q: %s is already in the image", e, p)
			}
			written[p] = true
		}
		switch {
		case isLink:
			dst, target := e[:at], e[at+1:]
			if err := checkAbs(dst); err != nil {
				return err
			}
			if err := mkdirAll(path.Dir(dst)); err != nil {
				return err
			}
			hdr := &tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(path.Clean(dst), "/"), Linkname: target, Mode: 0o777, ModTime: zero}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		case isFile:
			dst, src := e[:eq], e[eq+1:]
			if err := checkAbs(dst); err != nil {
				return err
			}
			if err := mkdirAll(path.Dir(dst)); err != nil {
				return err
			}
			if err := addFile(tw, path.Clean(dst), src, zero); err != nil {
				return err
			}
		case strings.HasSuffix(e, "/"):
			if err := checkAbs(e); err != nil {
				return err
			}
			if err := mkdirAll(e); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q is neither /dst=src, /dir/ nor /link@target", e)
		}
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, dst, src string, mtime time.Time) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	// The permission bits, and set-user-ID and set-group-ID (an image that
	// tests no_new_privs carries a set-user-ID program); files belong to root.
	mode := int64(st.Mode().Perm())
	if st.Mode()&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if st.Mode()&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: mode, Size: st.Size(), ModTime: mtime}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

func checkAbs(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("image path %q must be absolute", p)
	}
	return nil
}
