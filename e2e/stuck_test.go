//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStuckCreateSaysWhy creates clusters that cannot start on the real node
// and checks that `k3kcli cluster create` says why while it waits and in its
// timeout error (exit 3), from the ServersReady condition the controller
// derives from the server pod, its claim and the claim's events; and that the
// same cause is an Event on the Cluster.
func TestStuckCreateSaysWhy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		flags []string
		// want are what the output must say, the last one also the Event.
		want []string
	}{{
		name:  "stuck-volume",
		flags: []string{"--storage-class", "no-such-class"},
		want:  []string{"ServersReady=ServerVolumePending", "is Pending", `ProvisioningFailed: storageclass.storage.k8s.io "no-such-class" not found`},
	}, {
		// The suite's images are imported, never pulled: a version that was
		// not imported cannot be pulled.
		name:  "stuck-image",
		flags: []string{"--version", "v0.0.0-not-imported"},
		want:  []string{"ServersReady=ServerImagePullFailing", "cannot pull image", "v0.0.0-not-imported"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ns := "e2e-" + tc.name
			if _, err := host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating namespace: %v", err)
			}
			t.Cleanup(func() {
				if !t.Failed() {
					_ = host.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
				}
			})
			args := append([]string{"--kubeconfig", cfg.hostKubeconfig, "cluster", "create", tc.name, "-n", ns,
				"--timeout", "2m", "--output-kubeconfig", cfg.workDir + "/" + tc.name + ".kubeconfig"}, tc.flags...)
			cmd := exec.Command(cfg.k3kcli, args...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			t.Logf("k3kcli %s:\n%s", strings.Join(args[2:], " "), out.String())
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 3 {
				t.Fatalf("create ended with %v, want exit code 3 (timed out)", err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			last := lines[len(lines)-1]
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the progress does not say %q", w)
				}
				if !strings.Contains(last, w) {
					t.Errorf("the timeout error does not say %q: %s", w, last)
				}
			}
			evs, err := host.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Cluster,involvedObject.name=" + tc.name})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range evs.Items {
				t.Logf("event %s %s: %s", e.Type, e.Reason, e.Message)
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, tc.want[len(tc.want)-1]) {
					found = true
				}
			}
			if !found {
				t.Errorf("no Warning Event on the Cluster says %q", tc.want[len(tc.want)-1])
			}
		})
	}
}
