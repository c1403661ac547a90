package snapshotter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// SidecarContainer is the server pod's container the snapshot is taken in.
const SidecarContainer = "datastore"

// DatastoreInEffect is the datastore type the controller resolved, else the
// one asked for; empty when neither is known yet.
func DatastoreInEffect(c *v1beta1.Cluster) v1beta1.DatastoreType {
	if c.Status.Datastore != nil && c.Status.Datastore.Type != "" {
		return c.Status.Datastore.Type
	}
	return c.Spec.Datastore.Type
}

// Supported reports whether a snapshot of datastore ds can be taken: k3k
// holds the data of sqlite and etcd, not of an external datastore.
func Supported(ds v1beta1.DatastoreType) bool {
	return ds == v1beta1.SQLiteDatastore || ds == v1beta1.EtcdDatastore
}

// PickPod picks the server pod to take the snapshot in: a running pod
// whose datastore sidecar is ready, the lowest ordinal first (with etcd any
// voting member holds the cluster's committed state). Nil when none is.
func PickPod(pods []corev1.Pod) *corev1.Pod {
	var ready []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, cs := range p.Status.InitContainerStatuses {
			if cs.Name == SidecarContainer && cs.Ready {
				ready = append(ready, p)
			}
		}
	}
	sort.Slice(ready, func(i, j int) bool { return ordinal(ready[i].Name) < ordinal(ready[j].Name) })
	if len(ready) == 0 {
		return nil
	}
	return ready[0]
}

func ordinal(pod string) int {
	i := strings.LastIndex(pod, "-")
	n, err := strconv.Atoi(pod[i+1:])
	if err != nil {
		return 1 << 30
	}
	return n
}

// K3sVersion is the tag of the image the pod's k3s container runs. A digest
// (repo:tag@sha256:…, as an admission policy that pins images writes it) is
// not a version and is dropped; an image without a tag (repo@sha256:…) gives
// the Cluster's spec.version, or "" when that is empty too (the controller's
// default version is not written anywhere the snapshot's taker can read).
func K3sVersion(p *corev1.Pod, c *v1beta1.Cluster) string {
	for _, ctr := range p.Spec.Containers {
		if ctr.Name == "k3s" {
			if tag := imageTag(ctr.Image); tag != "" {
				return tag
			}
		}
	}
	if c != nil {
		return c.Spec.Version
	}
	return ""
}

// imageTag is the tag of an image reference, "" when it has none.
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	// The tag follows the last colon after the last slash; a colon before
	// it is a registry's port.
	name := image[strings.LastIndex(image, "/")+1:]
	if i := strings.LastIndex(name, ":"); i >= 0 {
		return name[i+1:]
	}
	return ""
}

// SidecarCommand is what runs in the datastore sidecar of pod.
func SidecarCommand(c *v1beta1.Cluster, ds v1beta1.DatastoreType, pod string) []string {
	if ds == v1beta1.EtcdDatastore {
		// The member's own client port, checked against its DNS name.
		port := strconv.Itoa(layout.DatastoreClientPort)
		return []string{"/usr/local/bin/datastore", "snapshot", "etcd",
			"--endpoint=https://" + layout.ServerPodHost(c, pod) + ":" + port,
			"--dial-address=127.0.0.1:" + port,
			"--ca-file=" + layout.EtcdCAPath, "--cert-file=" + layout.EtcdCertPath, "--key-file=" + layout.EtcdKeyPath}
	}
	// The pod directory is the sidecar's emptyDir: the copy never takes room
	// on the data volume, which may be nearly full.
	return []string{"/usr/local/bin/datastore", "snapshot", "sqlite",
		"--data-dir=" + layout.DatastoreDataDir, "--tmp-dir=" + layout.DatastorePodDir}
}

// Executor runs command in pod's datastore sidecar as kubectl exec does:
// WebSockets, and SPDY from API servers that lack them.
func Executor(rc *rest.Config, pod *corev1.Pod, command []string, stdin bool) (remotecommand.Executor, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	req := cs.CoreV1().RESTClient().Post().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: SidecarContainer, Command: command, Stdin: stdin, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(rc, http.MethodGet, req.URL().String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(rc, http.MethodPost, req.URL())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// ExecError is a snapshot command that could not be run or failed in the
// sidecar. Stderr holds the sidecar's last lines (never a secret: the
// snapshot command writes only progress and errors there).
type ExecError struct {
	Pod    string
	Err    error
	Stderr string
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("taking the snapshot in pod %s: %v; the sidecar said: %s", e.Pod, e.Err, e.Stderr)
}

func (e *ExecError) Unwrap() error { return e.Err }

// Source is what a snapshot is taken of.
type Source struct {
	// Config reaches the host API with the rights to exec into Pod.
	Config    *rest.Config
	Cluster   *v1beta1.Cluster
	Pod       *corev1.Pod
	Datastore v1beta1.DatastoreType
}

// Receive execs the sidecar's snapshot command and writes the data it
// streams to data, a file it reads again for etcd (to take the revision from
// the snapshot itself and check that it opens). It returns the manifest,
// complete but for the token, once the data matched it.
func Receive(ctx context.Context, src Source, data *os.File) (snapshot.Manifest, error) {
	m, err := receive(ctx, func() (remotecommand.Executor, error) {
		return Executor(src.Config, src.Pod, SidecarCommand(src.Cluster, src.Datastore, src.Pod.Name), false)
	}, src.Pod, data)
	if err != nil {
		return snapshot.Manifest{}, err
	}
	if src.Datastore == v1beta1.EtcdDatastore {
		info, err := snapshot.InspectEtcd(data.Name())
		if err != nil {
			return snapshot.Manifest{}, fmt.Errorf("the etcd snapshot received from %s is not usable: %w", src.Pod.Name, err)
		}
		m.Revision, m.CompactRevision = info.Revision, info.CompactRevision
	}
	m.Cluster = snapshot.ClusterRef{Namespace: src.Cluster.Namespace, Name: src.Cluster.Name}
	m.Source = src.Pod.Name
	m.K3sVersion = K3sVersion(src.Pod, src.Cluster)
	return m, nil
}

// streamAttempts bounds how often a snapshot whose stream came cut short
// while the exec itself reported success is taken again.
const streamAttempts = 3

// receive takes the snapshot through the executors exec makes, into data, up
// to streamAttempts times while the stream comes cut short without an error
// from the exec (kubernetes/kubernetes#124571; seen in the e2e suite under
// load: the first 64 KiB of a SQLite snapshot of about 670 KiB, exit status 0). Each try starts
// data over. Any other failure ends it.
func receive(ctx context.Context, exec func() (remotecommand.Executor, error), pod *corev1.Pod, data *os.File) (snapshot.Manifest, error) {
	for attempt := 1; ; attempt++ {
		m, err := stream(ctx, exec, pod, data)
		var cut *snapshot.TruncatedError
		if err == nil || !errors.As(err, &cut) || attempt == streamAttempts || ctx.Err() != nil {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("%w (try %d of %d)", err, attempt, streamAttempts)
			}
			return m, err
		}
		if _, err := data.Seek(0, io.SeekStart); err != nil {
			return snapshot.Manifest{}, err
		}
		if err := data.Truncate(0); err != nil {
			return snapshot.Manifest{}, err
		}
	}
}

func stream(ctx context.Context, newExec func() (remotecommand.Executor, error), pod *corev1.Pod, data io.Writer) (snapshot.Manifest, error) {
	exec, err := newExec()
	if err != nil {
		return snapshot.Manifest{}, err
	}
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	execErr := make(chan error, 1)
	go func() {
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: pw, Stderr: &limitedBuffer{b: &stderr, max: 16 << 10}})
		// nil closes with io.EOF, the end of a stream that was all sent.
		pw.CloseWithError(err)
		execErr <- err
	}()
	m, readErr := snapshot.ReadStream(pr, data)
	// Drain, so the exec ends even when the stream was refused early.
	_, _ = io.Copy(io.Discard, pr)
	err = <-execErr
	if err != nil {
		return snapshot.Manifest{}, &ExecError{Pod: pod.Namespace + "/" + pod.Name, Err: err, Stderr: lastLines(stderr.String(), 3)}
	}
	if readErr != nil {
		return snapshot.Manifest{}, fmt.Errorf("receiving the snapshot from pod %s/%s: %w", pod.Namespace, pod.Name, readErr)
	}
	return m, nil
}

// ErrExists is returned by WriteFile when path exists already.
var ErrExists = errors.New("the snapshot file exists already")

// WriteFile writes the snapshot file at path (mode 0600) through a
// temporary file path+".partial", made durable before it takes the final
// name: path exists only complete, and is never replaced.
func WriteFile(path string, m snapshot.Manifest, token []byte, data io.Reader) error {
	tmp, err := os.OpenFile(path+PartialSuffix, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating the snapshot file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := snapshot.WriteArchive(tmp, m, token, data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the snapshot file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the snapshot file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the snapshot file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		// Link, not rename: a file made at path meanwhile is never replaced.
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("naming the snapshot file %s: %w", path, ErrExists)
		}
		return fmt.Errorf("naming the snapshot file %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// PartialSuffix ends the names of the files a snapshot is written through.
const PartialSuffix = ".partial"

// syncDir makes a directory's entries (a new or removed name) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
