//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testHostEvents checks, on a running virtual pod and on one whose image
// cannot be pulled, that what the host's kubelet says about their host pods
// is shown on them (pkg/agent/eventsync): reported by the virtual node,
// naming nothing of the host, the node's pull error replaced by its kind.
func testHostEvents(t *testing.T, v *vcluster, ns string, running, hostPod *corev1.Pod) {
	t.Run("the host kubelet's Events appear on the virtual pods", func(t *testing.T) {
		fromHost := func(ctx context.Context, pod string) ([]corev1.Event, error) {
			evs, err := v.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
			if err != nil {
				return nil, err
			}
			var out []corev1.Event
			for _, e := range evs.Items {
				// The agent's own "Started" has the same reporter; the host's
				// is never carried over.
				if e.ReportingController == "k3k.io/kubelet" && e.Reason != "Started" {
					out = append(out, e)
				}
			}
			return out, nil
		}
		noHostNames := func(evs []corev1.Event) {
			t.Helper()
			for _, e := range evs {
				if e.Source.Host != running.Spec.NodeName {
					t.Errorf("%s event %q reported by %q, want the virtual node %s", e.Reason, e.Message, e.Source.Host, running.Spec.NodeName)
				}
				// The host node's name ("vm" here) is too short to look for
				// in free text; the source above is where it would be.
				for _, host := range []string{hostPod.Name, string(hostPod.UID), v.namespace + "/"} {
					if strings.Contains(e.Message, host) {
						t.Errorf("%s event %q names the host (%q)", e.Reason, e.Message, host)
					}
				}
			}
		}
		eventually(t, 2*time.Minute, "the host kubelet's Created event on "+running.Name, func(ctx context.Context) (bool, error) {
			evs, err := fromHost(ctx, running.Name)
			if err != nil {
				return false, err
			}
			for _, e := range evs {
				if e.Reason == "Created" && e.InvolvedObject.UID == running.UID && e.Source.Component == "kubelet" {
					t.Logf("on %s: %s %s %q", running.Name, e.Type, e.Reason, e.Message)
					noHostNames(evs)
					return true, nil
				}
			}
			return false, fmt.Errorf("%d events from the host, no Created", len(evs))
		})

		const image = "k3k-io/no-such-image:v0"
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "no-such-image", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			}}},
		}
		if err := retry(func(ctx context.Context) error {
			_, err := v.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = retry(func(ctx context.Context) error {
				return v.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			})
		})
		wantPrefix := fmt.Sprintf("Failed to pull image %q: ", image)
		eventually(t, 3*time.Minute, "a Warning Failed event on the pod whose image cannot be pulled", func(ctx context.Context) (bool, error) {
			evs, err := fromHost(ctx, pod.Name)
			if err != nil {
				return false, err
			}
			for _, e := range evs {
				if e.Type == corev1.EventTypeWarning && e.Reason == "Failed" && strings.HasPrefix(e.Message, wantPrefix) {
					if !strings.HasSuffix(e.Message, "(the host node's message is not shown)") {
						t.Errorf("the pull failure shows the node's message: %q", e.Message)
					}
					t.Logf("on %s: %s %s %q", pod.Name, e.Type, e.Reason, e.Message)
					noHostNames(evs)
					return true, nil
				}
			}
			return false, fmt.Errorf("%d events from the host, no failed pull: %v", len(evs), evs)
		})
	})
}
