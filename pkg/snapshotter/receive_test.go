package snapshotter

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/k3k-io/k3k/pkg/snapshot"
)

// scriptedExec plays one recorded stdout (and exec result) per exec, in order:
// the sidecar's side of `kubectl exec`, which cannot be made to lose its
// output on purpose with a real API server.
type scriptedExec struct {
	outs  [][]byte
	errs  []error
	execs int
}

func (s *scriptedExec) next() (remotecommand.Executor, error) { return s, nil }

func (s *scriptedExec) Stream(o remotecommand.StreamOptions) error {
	return s.StreamWithContext(context.Background(), o)
}

func (s *scriptedExec) StreamWithContext(_ context.Context, o remotecommand.StreamOptions) error {
	i := s.execs
	s.execs++
	if _, err := o.Stdout.Write(s.outs[i]); err != nil {
		return err
	}
	return s.errs[i]
}

// TestReceiveTakesACutStreamAgain: a stream cut short while the exec reported
// success (kubernetes/kubernetes#124571) is taken again, from an empty file,
// up to three times; a stream the exec itself reports failed, and one that
// arrived whole but wrong, are not.
func TestReceiveTakesACutStreamAgain(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16) // 300 KiB, a few data frames
	var whole bytes.Buffer
	w := snapshot.NewStreamWriter(&whole)
	for off := 0; off < len(payload); off += 64 << 10 {
		if _, err := w.Write(payload[off:min(off+64<<10, len(payload))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(snapshot.Manifest{Datastore: "sqlite"}); err != nil {
		t.Fatal(err)
	}
	cut := whole.Bytes()[:whole.Len()/3]
	bad := bytes.Clone(whole.Bytes())
	bad[len(bad)/2] ^= 0xff
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "k3k-c-server-0"}}

	run := func(t *testing.T, s *scriptedExec) ([]byte, error) {
		t.Helper()
		f, err := os.Create(filepath.Join(t.TempDir(), "data"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = receive(context.Background(), s.next, pod, f)
		got, rerr := os.ReadFile(f.Name())
		if rerr != nil {
			t.Fatal(rerr)
		}
		return got, err
	}

	t.Run("cut twice, then whole", func(t *testing.T) {
		s := &scriptedExec{outs: [][]byte{cut, cut, whole.Bytes()}, errs: []error{nil, nil, nil}}
		got, err := run(t, s)
		if err != nil {
			t.Fatalf("after two cut streams and a whole one: %v", err)
		}
		if s.execs != 3 || !bytes.Equal(got, payload) {
			t.Fatalf("%d execs, %d bytes of data (want 3 and the %d bytes sent once)", s.execs, len(got), len(payload))
		}
	})
	t.Run("cut three times", func(t *testing.T) {
		s := &scriptedExec{outs: [][]byte{cut, cut, cut}, errs: []error{nil, nil, nil}}
		_, err := run(t, s)
		var trunc *snapshot.TruncatedError
		if !errors.As(err, &trunc) || !strings.Contains(err.Error(), "try 3 of 3") || s.execs != 3 {
			t.Fatalf("after three cut streams: %v, %d execs; want the truncation, said to be the third try", err, s.execs)
		}
	})
	t.Run("the exec failed: no second try", func(t *testing.T) {
		s := &scriptedExec{outs: [][]byte{cut, whole.Bytes()}, errs: []error{errors.New("command terminated with exit code 1"), nil}}
		_, err := run(t, s)
		var execErr *ExecError
		if !errors.As(err, &execErr) || s.execs != 1 {
			t.Fatalf("%v after %d execs; want the exec's error after one", err, s.execs)
		}
	})
	t.Run("whole but wrong: no second try", func(t *testing.T) {
		s := &scriptedExec{outs: [][]byte{bad, whole.Bytes()}, errs: []error{nil, nil}}
		_, err := run(t, s)
		if err == nil || !strings.Contains(err.Error(), "sha256") || s.execs != 1 {
			t.Fatalf("%v after %d execs; want the sha256 mismatch after one", err, s.execs)
		}
	})
}
