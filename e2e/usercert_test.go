//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
)

// TestUserKubeconfig hands a user of the shared cluster a kubeconfig of its
// own (k3kcli kubeconfig generate): the certificate is signed by real k3s's
// controller manager with the cluster's client CA, the virtual API server
// knows the user by name and groups, and the user may do what a binding of
// its group allows, in that namespace, and nothing else.
func TestUserKubeconfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := sharedCluster(t)
	const ns = "team-carol"
	createVirtualNamespace(t, v, ns)

	path := filepath.Join(t.TempDir(), "carol.yaml")
	out := k3kcli(t, "kubeconfig", "generate", v.name, "-n", v.namespace, "--user", "carol", "--group", "e2e-devs",
		"--expires", "1h", "--output-kubeconfig", path)
	for _, want := range []string{`certificate for user "carol" in groups e2e-devs, valid until`, "nothing yet, no binding names the user carol or the group e2e-devs"} {
		if !strings.Contains(out, want) {
			t.Errorf("k3kcli did not say %q:\n%s", want, out)
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig file mode %v, want 0600", info.Mode().Perm())
	}
	var carol kubernetes.Interface
	carol, err = newVirtualClient(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := cert.ParseCertsPEM(restConfig(t, path).CertData)
	if err != nil {
		t.Fatalf("the kubeconfig's client certificate: %v", err)
	}
	if left := time.Until(certs[0].NotAfter); left < 55*time.Minute || left > time.Hour+time.Minute {
		t.Errorf("certificate valid for %s more, want about the hour asked", left.Round(time.Second))
	}
	t.Logf("certificate: subject %s, issuer %s, valid until %s", certs[0].Subject, certs[0].Issuer, certs[0].NotAfter.UTC().Format(time.RFC3339))

	var review *authenticationv1.SelfSubjectReview
	if err := retry(func(ctx context.Context) error {
		review, err = carol.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	u := review.Status.UserInfo
	t.Logf("the virtual API server knows the kubeconfig as user %q, groups %v", u.Username, u.Groups)
	if u.Username != "carol" || !slices.Contains(u.Groups, "e2e-devs") || slices.Contains(u.Groups, "system:masters") {
		t.Fatalf("user %q groups %v, want carol in e2e-devs", u.Username, u.Groups)
	}

	if _, err := carol.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing pods in %s before any binding: %v, want Forbidden", ns, err)
	}
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-devs-view"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "e2e-devs"}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "carol listing pods in "+ns+" once e2e-devs may view it", func(ctx context.Context) (bool, error) {
		_, err := carol.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	for _, forbidden := range []struct {
		what string
		call func() error
	}{
		{"secrets in " + ns + " (view does not show them)", func() error {
			_, err := carol.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"pods in kube-system", func() error {
			_, err := carol.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"a ConfigMap created in " + ns, func() error {
			_, err := carol.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "carol-was-here"}}, metav1.CreateOptions{})
			return err
		}},
	} {
		if err := forbidden.call(); !apierrors.IsForbidden(err) {
			t.Errorf("carol, %s: %v, want Forbidden", forbidden.what, err)
		}
	}
}
