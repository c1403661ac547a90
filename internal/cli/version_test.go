package cli

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestVersionShowsTheClientAndTheControllers(t *testing.T) {
	r := k3kcli(t, "version", "--client")
	if r.code != ExitOK || !strings.HasPrefix(r.out, "client: ") || strings.Contains(r.out, "controller") {
		t.Fatalf("--client: exit %d, stdout %q", r.code, r.out)
	}

	// The suite's API server may hold another test's Deployment: count only
	// the one made here.
	ns := newNamespace(t)
	labels := map[string]string{"app.kubernetes.io/part-of": "k3k", "app.kubernetes.io/component": "controller", "app.kubernetes.io/version": "v9.8.7"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "k3k", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "k3k"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "k3k"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "k3k-io/k3k-controller:v9.8.7"}}}},
		},
	}
	r = k3kcli(t, "version")
	if r.code != ExitOK || !strings.Contains(r.out, "client: ") || !strings.Contains(r.out, "controller: ") {
		t.Fatalf("exit %d, stdout %q", r.code, r.out)
	}
	if err := k8s.Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), d) })
	r = k3kcli(t, "version")
	want := "controller: v9.8.7 in " + ns + "/k3k, image k3k-io/k3k-controller:v9.8.7, 0/0 ready"
	if r.code != ExitOK || !strings.Contains(r.out, want) {
		t.Fatalf("exit %d, stdout %q, want a line %q", r.code, r.out, want)
	}
}

func TestDebugLogsRequestsWithoutCredentials(t *testing.T) {
	ns := newNamespace(t)
	r := k3kcli(t, "--debug", "cluster", "list", "-n", ns)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	want := "debug: GET " + strings.TrimSuffix(apiServerURL, "/") + "/apis/k3k.io/v1beta1/namespaces/" + ns + "/clusters"
	if !strings.Contains(r.errOut, want) || !strings.Contains(r.errOut, " 200 (") {
		t.Errorf("stderr does not log the list request %q with its status:\n%s", want, r.errOut)
	}
	for _, secret := range []string{"Bearer", "BEGIN", "Authorization"} {
		if strings.Contains(r.errOut, secret) {
			t.Errorf("--debug printed %q", secret)
		}
	}
	if r := k3kcli(t, "cluster", "list", "-n", ns); strings.Contains(r.errOut, "debug:") {
		t.Error("requests logged without --debug")
	}
}
