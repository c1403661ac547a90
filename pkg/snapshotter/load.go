package snapshotter

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"

	"k8s.io/client-go/tools/remotecommand"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/snapshot"
)

// RestoreCommand is what loads a snapshot in the datastore sidecar of pod
// (`datastore restore`, into an empty datastore).
func RestoreCommand(c *v1beta1.Cluster, ds v1beta1.DatastoreType, pod string) []string {
	port := strconv.Itoa(layout.DatastoreClientPort)
	if ds == v1beta1.EtcdDatastore {
		// The etcd sidecar's only writable place is its volume, empty in a
		// new cluster.
		return []string{"/usr/local/bin/datastore", "restore",
			"--endpoint=https://" + layout.ServerPodHost(c, pod) + ":" + port, "--dial-address=127.0.0.1:" + port,
			"--ca-file=" + layout.EtcdCAPath, "--cert-file=" + layout.EtcdCertPath, "--key-file=" + layout.EtcdKeyPath,
			"--tmp-dir=" + layout.EtcdDataDir}
	}
	return []string{"/usr/local/bin/datastore", "restore", "--endpoint=http://127.0.0.1:" + port, "--tmp-dir=" + layout.DatastorePodDir}
}

// Load streams data, the datastore file of a checked snapshot archive whose
// manifest is m, into the sidecar of src.Pod running command (RestoreCommand,
// or the CLI's replace command), and returns the last line the sidecar said.
// k3kcli's `cluster create --restore-from` and `cluster restore`, and the
// restore Job's `datastore restore-from-file`, all load here.
func Load(ctx context.Context, src Source, command []string, m snapshot.Manifest, data io.Reader) (string, error) {
	exec, err := Executor(src.Config, src.Pod, command, true)
	if err != nil {
		return "", err
	}
	pr, pw := io.Pipe()
	go func() {
		sw := snapshot.NewStreamWriter(pw)
		_, err := io.Copy(sw, data)
		if err == nil {
			err = sw.Finish(snapshot.Manifest{Datastore: m.Datastore, Revision: m.Revision, CompactRevision: m.CompactRevision, CreatedAt: m.CreatedAt})
		}
		pw.CloseWithError(err)
	}()
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: &stdout, Stderr: &limitedBuffer{b: &stderr, max: 16 << 10}})
	_ = pr.Close()
	if err != nil {
		return "", &LoadError{Pod: src.Pod.Namespace + "/" + src.Pod.Name, Err: err, Stderr: lastLines(stderr.String(), 3)}
	}
	return lastLines(stderr.String(), 1), nil
}

// LoadError is a load that could not be run or failed in the sidecar.
// Stderr holds the sidecar's last lines (`datastore restore` writes only
// progress and errors there, never a key's value).
type LoadError struct {
	Pod    string
	Err    error
	Stderr string
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("loading the snapshot in pod %s: %v; the sidecar said: %s", e.Pod, e.Err, e.Stderr)
}

func (e *LoadError) Unwrap() error { return e.Err }
