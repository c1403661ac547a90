package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
)

func TestUpdatePatchesOnlyWhatTheFlagsSay(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "up", "-n", ns, "--wait=false", "--servers", "3", "--datastore", "etcd",
		"--tls-san", "a.example.com", "--tls-san", "b.example.com", "--server-args=--kube-apiserver-arg=v=2"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	before := getCluster(t, ns, "up")

	r := k3kcli(t, "cluster", "update", "up", "-n", ns, "--wait=false", "--servers", "5", "--version", "v1.34.3-k3s1",
		"--add-tls-san", "c.example.com", "--remove-tls-san", "a.example.com", "--storage-size", "10Gi")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	for _, want := range []string{
		"spec.servers: 3 -> 5", "spec.version: (the controller's default) -> v1.34.3-k3s1",
		"spec.tlsSANs: [a.example.com, b.example.com] -> [b.example.com, c.example.com]",
		"spec.persistence.storageRequestSize: 2Gi -> 10Gi", fmt.Sprintf("updated (generation %d)", before.Generation+1),
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("stdout does not show %q:\n%s", want, r.out)
		}
	}
	after := getCluster(t, ns, "up")
	s := after.Spec
	if s.Servers != 5 || s.Version != "v1.34.3-k3s1" || !slices.Equal(s.TLSSANs, []string{"b.example.com", "c.example.com"}) || s.Persistence.StorageRequestSize != "10Gi" {
		t.Errorf("stored spec: %+v", s)
	}
	if !slices.Equal(s.ServerArgs, before.Spec.ServerArgs) || s.Datastore != before.Spec.Datastore {
		t.Errorf("fields the flags did not name changed: %+v", s)
	}

	// Server arguments are held whole: one with a comma stays one argument.
	r = k3kcli(t, "cluster", "update", "up", "-n", ns, "--wait=false",
		"--add-server-arg=--disable=traefik,servicelb", "--remove-server-arg=--kube-apiserver-arg=v=2")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if want := `spec.serverArgs: ["--kube-apiserver-arg=v=2"] -> ["--disable=traefik,servicelb"]`; !strings.Contains(r.out, want) {
		t.Errorf("stdout does not show %q:\n%s", want, r.out)
	}
	if strings.Contains(r.out, "spec.servers") || strings.Contains(r.out, "spec.tlsSANs") {
		t.Errorf("stdout shows changes the flags did not ask for:\n%s", r.out)
	}
	after2 := getCluster(t, ns, "up")
	if !slices.Equal(after2.Spec.ServerArgs, []string{"--disable=traefik,servicelb"}) || after2.Generation != after.Generation+1 {
		t.Errorf("stored serverArgs %q, generation %d (want %d)", after2.Spec.ServerArgs, after2.Generation, after.Generation+1)
	}
	if after2.Spec.Servers != s.Servers || !slices.Equal(after2.Spec.TLSSANs, s.TLSSANs) || after2.Spec.Version != s.Version {
		t.Errorf("fields the server-arg flags did not name changed: %+v", after2.Spec)
	}
	after = after2

	r = k3kcli(t, "cluster", "update", "up", "-n", ns, "--servers", "5", "--add-server-arg=--disable=traefik,servicelb")
	if r.code != ExitOK || !strings.Contains(r.out, "nothing to change") {
		t.Fatalf("same value: exit %d, stdout %q", r.code, r.out)
	}
	if g := getCluster(t, ns, "up").Generation; g != after.Generation {
		t.Errorf("an update that changes nothing moved the generation from %d to %d", after.Generation, g)
	}
}

func TestUpdateRefusesWhatCannotBeApplied(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "lite", "-n", ns, "--wait=false", "--storage-size", "5Gi"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	if r := k3kcli(t, "cluster", "create", "eph", "-n", ns, "--wait=false", "--persistence-type", "ephemeral"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	before := getCluster(t, ns, "lite")
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"lite", "--servers", "3"}, []string{"runs sqlite, which runs exactly 1 server"}},
		{[]string{"lite", "--servers", "0"}, []string{"out of range"}},
		{[]string{"lite", "--storage-size", "1Gi"}, []string{"smaller than the current 5Gi"}},
		{[]string{"lite", "--storage-size", "lots"}, []string{"not a positive quantity"}},
		{[]string{"lite", "--remove-tls-san", "nope.example.com"}, []string{"has no such TLS SAN"}},
		{[]string{"lite", "--version", "v1/../x"}, []string{"is not an image tag"}},
		{[]string{"lite", "--remove-server-arg=--disable=traefik"}, []string{"has no such server argument"}},
		{[]string{"lite", "--add-server-arg="}, []string{"must not be empty"}},
		// Refused by admission (the CRD's rules), not by k3kcli: the same
		// message create gets, and nothing changes.
		{[]string{"lite", "--add-server-arg=--token=x"}, []string{"updating cluster " + ns + "/lite",
			"serverArgs: --token is set by k3k and cannot be overridden", "hint: fix the rejected value"}},
		{[]string{"eph", "--storage-size", "5Gi"}, []string{"no volumes to grow"}},
	}
	for _, tc := range cases {
		r := k3kcli(t, append([]string{"cluster", "update", "-n", ns}, tc.args...)...)
		if r.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", tc.args, r.code, ExitUsage)
		}
		assertOneLineError(t, r.errOut, tc.want...)
	}
	if g := getCluster(t, ns, "lite").Generation; g != before.Generation {
		t.Errorf("a refused update changed the cluster (generation %d -> %d)", before.Generation, g)
	}
	if r := k3kcli(t, "cluster", "update", "missing", "-n", ns, "--servers", "1"); r.code != ExitError {
		t.Errorf("missing cluster: exit %d, want %d", r.code, ExitError)
	}
}

// update waits for the controller to report on the new generation: a Ready
// status written for the old generation does not end the wait.
func TestUpdateWaitsForTheNewGeneration(t *testing.T) {
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", "gen", "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	c := getCluster(t, ns, "gen")
	ready := metav1.Condition{Type: v1beta1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonReady}
	c.Status.ObservedGeneration = c.Generation
	setStatus(t, c, v1beta1.PhaseReady, ready)

	progress := &syncBuffer{}
	done := make(chan result, 1)
	go func() {
		done <- k3kcliTo(t, time.Now, progress, "cluster", "update", "gen", "-n", ns, "--add-tls-san", "gen.example.com", "--timeout", "2m")
	}()
	var next int64
	eventually(t, "the CLI to wait for the new generation", func() error {
		next = c.Generation + 1
		if !strings.Contains(progress.String(), fmt.Sprintf("waiting for the controller to see generation %d", next)) {
			return fmt.Errorf("progress so far:\n%s", progress.String())
		}
		return nil
	})
	c = getCluster(t, ns, "gen")
	c.Status.ObservedGeneration = next
	setStatus(t, c, v1beta1.PhaseReady, ready)
	r := <-done
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.out, "is ready with the change") {
		t.Errorf("stdout: %s", r.out)
	}
}
