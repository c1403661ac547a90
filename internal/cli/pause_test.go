package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
)

func TestPauseAndResumeSetTheFieldAndWaitForTheController(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "nap", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	progress := &syncBuffer{}
	done := make(chan result, 1)
	go func() {
		done <- k3kcliTo(t, time.Now, progress, "cluster", "pause", "nap", "-n", ns, "--timeout", "2m")
	}()
	var c *v1beta1.Cluster
	eventually(t, "the CLI to set spec.paused", func() error {
		if c = getCluster(t, ns, "nap"); !c.Spec.Paused {
			return fmt.Errorf("spec.paused is false")
		}
		return nil
	})
	// The controller's answer, in two steps: pausing, then paused.
	c.Status.ObservedGeneration = c.Generation
	setStatus(t, c, v1beta1.PhasePaused, metav1.Condition{Type: v1beta1.ConditionPaused, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonPausing, Message: "1 pods still running"})
	eventually(t, "the CLI to show the pause in progress", func() error {
		if !strings.Contains(progress.String(), "Paused: Paused=Pausing (1 pods still running)") {
			return fmt.Errorf("progress so far:\n%s", progress.String())
		}
		return nil
	})
	c = getCluster(t, ns, "nap")
	setStatus(t, c, v1beta1.PhasePaused, metav1.Condition{Type: v1beta1.ConditionPaused, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonPaused, Message: "scaled to zero"})
	r := <-done
	if r.code != ExitOK || !strings.Contains(r.out, "cluster "+ns+"/nap paused after") {
		t.Fatalf("pause: exit %d, stdout %q", r.code, r.out)
	}

	done = make(chan result, 1)
	go func() { done <- k3kcli(t, "cluster", "resume", "nap", "-n", ns, "--timeout", "2m") }()
	eventually(t, "the CLI to clear spec.paused", func() error {
		if c = getCluster(t, ns, "nap"); c.Spec.Paused {
			return fmt.Errorf("spec.paused is still true")
		}
		return nil
	})
	c.Status.ObservedGeneration = c.Generation
	c.Status.Conditions = nil
	setStatus(t, c, v1beta1.PhaseReady, metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonReady})
	r = <-done
	if r.code != ExitOK || !strings.Contains(r.out, "resumed after") {
		t.Fatalf("resume: exit %d, stdout %q", r.code, r.out)
	}
}

func TestPauseRefusesClustersWhoseDataWouldNotSurvive(t *testing.T) {
	ns := newNamespace(t)
	for _, args := range [][]string{{"eph", "--persistence-type", "ephemeral"}, {"ha", "--datastore", "etcd", "--servers", "3"}} {
		if r := k3kcli(t, append([]string{"cluster", "create", "-n", ns, "--wait=false"}, args...)...); r.code != ExitOK {
			t.Fatal("create failed")
		}
	}
	for name, want := range map[string]string{"eph": "pausing it would lose its data", "ha": "runs etcd, which pause does not support yet"} {
		r := k3kcli(t, "cluster", "pause", name, "-n", ns)
		if r.code != ExitUsage {
			t.Errorf("%s: exit %d, want %d", name, r.code, ExitUsage)
		}
		assertOneLineError(t, r.errOut, want)
		if getCluster(t, ns, name).Spec.Paused {
			t.Errorf("%s: spec.paused set although refused", name)
		}
	}
}
