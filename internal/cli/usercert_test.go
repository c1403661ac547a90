package cli

import (
	"context"
	"crypto/x509/pkix"
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
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/cert"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/layout"
)

// signingCluster is a second real kube-apiserver standing for a virtual
// cluster's, with a real kube-controller-manager signing client
// certificates with the CA the apiserver trusts, as k3s does with its
// client CA; signerArgs are more of its flags.
func signingCluster(t *testing.T, signerArgs ...string) *testenv.APIServer {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	etcd, err := testenv.StartEtcd(ctx, testenv.EtcdConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Stop() })
	api, err := testenv.StartAPIServer(ctx, testenv.APIServerConfig{EtcdServers: []string{etcd.URL}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	kcm, err := testenv.StartCSRSigner(ctx, api, dir, signerArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kcm.Stop()
		if t.Failed() {
			log, _ := os.ReadFile(kcm.LogPath)
			t.Logf("kube-controller-manager log:\n%s", log)
		}
	})
	return api
}

// signingClusterNamed is a Cluster name in a namespace of its own, whose
// published admin kubeconfig is a signingCluster's.
func signingClusterNamed(t *testing.T, name string, signerArgs ...string) (*testenv.APIServer, string) {
	t.Helper()
	api := signingCluster(t, signerArgs...)
	ns := newNamespace(t)
	if r := k3kcli(t, "cluster", "create", name, "-n", ns, "--wait=false"); r.code != ExitOK {
		t.Fatal("create failed")
	}
	admin, err := api.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "k3k-" + name + "-kubeconfig", Namespace: ns},
		Data: map[string][]byte{layout.SecretKeyKubeconfig: admin}}); err != nil {
		t.Fatal(err)
	}
	return api, ns
}

func TestKubeconfigGenerate(t *testing.T) {
	t.Parallel() // beside the expiry test's wait
	ctx := context.Background()
	api, ns := signingClusterNamed(t, "team")
	virtualAdmin, err := kubernetes.NewForConfig(api.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("refused before anything is asked of the cluster", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{nil, "--user is required"},
			{[]string{"--user", "system:admin"}, `--user "system:admin" is refused: names beginning with system: are Kubernetes' own`},
			{[]string{"--user", "alice", "--group", "System:Masters"}, `--group "System:Masters" is refused`},
			{[]string{"--user", "alice", "--group", ""}, "--group is empty"},
			{[]string{"--user", "kube-apiserver"}, `--user "kube-apiserver" is refused: k3s's own components`},
			{[]string{"--user", "alice", "--group", "k3s-cloud-controller-manager"}, `--group "k3s-cloud-controller-manager" is refused`},
			{[]string{"--user", "alice", "--expires", "5m"}, "--expires 5m0s is shorter than 10m0s"},
			{[]string{"--user", "alice", "--merge", "--output-kubeconfig", "x.yaml"}, "--output-kubeconfig and --merge both say where the kubeconfig goes"},
			{[]string{"--user", "alice", "--server", "127.0.0.1:6443"}, "is not an https URL"},
		} {
			r := k3kcli(t, append([]string{"kubeconfig", "generate", "team", "-n", ns}, tc.args...)...)
			if r.code != ExitUsage {
				t.Errorf("%v: exit %d, want %d", tc.args, r.code, ExitUsage)
			}
			assertOneLineError(t, r.errOut, tc.want)
		}
		csrs, err := virtualAdmin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(csrs.Items) != 0 {
			t.Errorf("%d CertificateSigningRequests after refused runs, want none", len(csrs.Items))
		}
	})

	t.Run("without an address it can reach, it says how to give one", func(t *testing.T) {
		// Not exposed: the kubeconfig's address is in-cluster, so k3kcli
		// would forward to a server pod, and there is none.
		r := k3kcli(t, "kubeconfig", "generate", "team", "-n", ns, "--user", "alice")
		if r.code != ExitError {
			t.Fatalf("exit %d, want %d", r.code, ExitError)
		}
		assertOneLineError(t, r.errOut, "has no ready server pod to ask for a certificate")
	})

	path := filepath.Join(t.TempDir(), "alice.yaml")
	r := k3kcli(t, "kubeconfig", "generate", "team", "-n", ns, "--user", "alice", "--group", "developers", "--group", "qa",
		"--expires", "24h", "--server", api.URL, "--output-kubeconfig", path)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	for _, want := range []string{`certificate for user "alice" in groups developers, qa, valid until `, "nothing yet, no binding names the user alice or the group developers or the group qa"} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.errOut)
		}
	}
	// The signer backdates a day-long certificate by 5 minutes: no cap.
	if strings.Contains(r.errOut, "capped") {
		t.Errorf("stderr says the lifetime was capped, though the signer gave what was asked:\n%s", r.errOut)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig file mode %v, want 0600", info.Mode().Perm())
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name := "alice@k3k-" + ns + "-team"
	if cfg.CurrentContext != name || cfg.Clusters[name] == nil || cfg.Clusters[name].Server != api.URL {
		t.Fatalf("context %q, clusters %v: want %s pointing at %s", cfg.CurrentContext, cfg.Clusters, name, api.URL)
	}
	certs, err := cert.ParseCertsPEM(cfg.AuthInfos[name].ClientCertificateData)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(certs[0].NotAfter); left < 24*time.Hour-signerLeeway || left > 24*time.Hour+time.Minute {
		t.Errorf("certificate valid for %s more, want about the 24h asked", left.Round(time.Second))
	}

	rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, name, nil, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	alice, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the virtual API server knows the user by its name and groups", func(t *testing.T) {
		review, err := alice.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u := review.Status.UserInfo
		if u.Username != "alice" || !slices.Contains(u.Groups, "developers") || !slices.Contains(u.Groups, "qa") || slices.Contains(u.Groups, "system:masters") {
			t.Errorf("user %q groups %v, want alice in developers and qa", u.Username, u.Groups)
		}
	})

	t.Run("it may do what its group is bound to, and nothing else", func(t *testing.T) {
		if _, err := alice.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing pods before any binding: %v, want Forbidden", err)
		}
		// A Role of its own: the aggregated ClusterRoles (view, edit) get
		// their rules from a controller this kube-controller-manager does
		// not run.
		if _, err := virtualAdmin.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := virtualAdmin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "developers-read-pods"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "developers"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The authorizer sees a new binding within moments, not at once.
		if err := testenv.Poll(30*time.Second, 200*time.Millisecond, func() error {
			_, err := alice.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			return err
		}); err != nil {
			t.Errorf("listing pods in default once developers may read them: %v", err)
		}
		if _, err := alice.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing secrets with a role for pods: %v, want Forbidden", err)
		}
		if _, err := alice.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing pods in another namespace: %v, want Forbidden", err)
		}
		// A new kubeconfig for the same group says what it may do at once.
		r := k3kcli(t, "kubeconfig", "generate", "team", "-n", ns, "--user", "ann", "--group", "developers", "--server", api.URL)
		if r.code != ExitOK {
			t.Fatalf("exit %d: %s", r.code, r.errOut)
		}
		if want := "it may do what RBAC in the cluster grants it, now: RoleBinding default/developers-read-pods (Role pod-reader)"; !strings.Contains(r.errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.errOut)
		}
	})

	t.Run("the signing request says who asked", func(t *testing.T) {
		csrs, err := virtualAdmin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(csrs.Items) != 2 {
			t.Fatalf("%d CertificateSigningRequests, want 2 (alice's, ann's)", len(csrs.Items))
		}
		c := csrs.Items[0]
		if c.Annotations[csrAnnotation] != "k3kcli kubeconfig generate --user alice" {
			c = csrs.Items[1]
		}
		if !strings.HasPrefix(c.Name, "k3kcli-kubeconfig-") || c.Annotations[csrAnnotation] != "k3kcli kubeconfig generate --user alice" {
			t.Errorf("request %s annotations %v", c.Name, c.Annotations)
		}
		if len(c.Status.Certificate) == 0 || len(c.Status.Conditions) == 0 || c.Status.Conditions[0].Reason != "K3kcliKubeconfigGenerate" {
			t.Errorf("request status %+v: want approved by k3kcli and signed", c.Status.Conditions)
		}
	})
}

// TestKubeconfigGenerateIsRefusedOnceExpired: a signer that caps every
// certificate at 20 s (--cluster-signing-duration) gives a shorter
// lifetime than asked, which k3kcli says; the kubeconfig works until then
// and is refused after.
func TestKubeconfigGenerateIsRefusedOnceExpired(t *testing.T) {
	t.Parallel() // it waits for the certificate to expire
	ctx := context.Background()
	api, ns := signingClusterNamed(t, "brief", "--cluster-signing-duration=20s")
	r := k3kcli(t, "kubeconfig", "generate", "brief", "-n", ns, "--user", "bob", "--expires", "10m", "--server", api.URL)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.errOut)
	}
	if !strings.Contains(r.errOut, "note: the cluster's signer capped the lifetime") {
		t.Errorf("stderr does not say the lifetime was capped:\n%s", r.errOut)
	}
	cfg, err := clientcmd.Load([]byte(r.out))
	if err != nil {
		t.Fatalf("stdout is not a kubeconfig: %v", err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	bob, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := cert.ParseCertsPEM(rc.CertData)
	if err != nil {
		t.Fatal(err)
	}
	whoami := func() error {
		_, err := bob.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}
	if err := whoami(); err != nil {
		t.Fatalf("before the certificate expires (%s): %v", certs[0].NotAfter.UTC().Format(time.RFC3339), err)
	}
	time.Sleep(time.Until(certs[0].NotAfter) + 2*time.Second)
	if err := whoami(); !apierrors.IsUnauthorized(err) {
		t.Errorf("after the certificate expired at %s: %v, want Unauthorized", certs[0].NotAfter.UTC().Format(time.RFC3339), err)
	}
}

func TestCheckIssuedRefusesAnotherCertificateThanAsked(t *testing.T) {
	ca, err := testenv.NewCA("client-ca")
	if err != nil {
		t.Fatal(err)
	}
	// Within the test CA's own day: its certificates end no later than it.
	until := time.Now().Add(2 * time.Hour)
	issue := func(user string, server bool, notAfter time.Time, groups ...string) *testenv.CertKey {
		ck, err := ca.Issue(testenv.CertSpec{CommonName: user, Organization: groups, Server: server, NotAfter: notAfter})
		if err != nil {
			t.Fatal(err)
		}
		return ck
	}
	subject := pkix.Name{CommonName: "alice", Organization: []string{"developers", "qa"}}
	good := issue("alice", false, until, "qa", "developers")
	if _, err := checkIssued(good.Cert, good.Key, subject, until, signerLeeway); err != nil {
		t.Fatalf("the certificate asked for (groups in another order): %v", err)
	}
	other := issue("alice", false, until, "developers", "qa")
	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"another key's certificate", other.Cert, good.Key, "not for the key k3kcli made"},
		{"another user", nil, nil, `names user "mallory"`},
		{"a group more", nil, nil, "admins"},
		{"a serving certificate", nil, nil, "not a client certificate"},
		{"longer than asked", nil, nil, "after the"},
		{"the CA itself", ca.Cert, ca.Key, "not a client certificate"},
	} {
		if tc.cert == nil {
			var ck *testenv.CertKey
			switch tc.name {
			case "another user":
				ck = issue("mallory", false, until, "developers", "qa")
			case "a group more":
				ck = issue("alice", false, until, "developers", "qa", "admins")
			case "a serving certificate":
				ck = issue("alice", true, until, "developers", "qa")
			case "longer than asked":
				ck = issue("alice", false, until.Add(time.Hour), "developers", "qa")
			}
			tc.cert, tc.key = ck.Cert, ck.Key
		}
		if _, err := checkIssued(tc.cert, tc.key, subject, until, signerLeeway); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
