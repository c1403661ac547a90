package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"

	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

// A user kubeconfig is a client certificate of the virtual cluster, signed by
// the virtual cluster itself: k3kcli sends a CertificateSigningRequest for
// the signer kubernetes.io/kube-apiserver-client to the virtual API server
// with the cluster's admin kubeconfig, approves it, and waits for the
// certificate k3s's controller manager signs with the cluster's client CA.
// The private key never leaves this machine, and k3kcli never holds the CA's
// key: it stays in the server pod. Kubernetes has no revocation of client
// certificates, so the certificate's lifetime is the bound on a leaked file;
// what its user and groups may do is RBAC's, which can be taken back at any
// time (docs/cli.md, "User kubeconfigs").

// Bounds on --expires: the API's minimum for a CertificateSigningRequest's
// expirationSeconds, and the default.
const (
	minUserCertLifetime     = 10 * time.Minute
	defaultUserCertLifetime = 30 * 24 * time.Hour
)

// csrAnnotation marks the CertificateSigningRequests k3kcli makes.
const csrAnnotation = "k3k.io/requested-by"

type generateFlags struct {
	user    string
	groups  []string
	expires time.Duration
	output  string
	server  string
	mergeFlags
}

func newKubeconfigGenerateCommand(o Options, g *globalFlags) *cobra.Command {
	f := &generateFlags{}
	cmd := &cobra.Command{
		Use:   "generate NAME",
		Short: "Make a kubeconfig for a user of a virtual cluster, with its own identity and expiry",
		Long: `Make a kubeconfig whose client certificate names --user and its --group values, valid
for --expires, signed by the virtual cluster's own client CA through a
CertificateSigningRequest (k3kcli approves it with the cluster's admin credentials;
the private key is made here and never sent). The user can do only what RBAC in the
virtual cluster grants the user or its groups; k3kcli lists the bindings that
already name them. Printed, written with mode 0600 by --output-kubeconfig, or merged
with --merge, under the context USER@k3k-NAMESPACE-NAME.

A client certificate cannot be revoked before it expires: keep --expires short, and
grant rights to a group, whose bindings can be deleted. Names that begin with
"system:" belong to Kubernetes itself, and kube-apiserver and names that begin with
"k3s-" to k3s's own components: they are refused (the group system:masters would
bypass RBAC, the user kube-apiserver may exec into every pod, with no way to take
either back).`,
		Example: `  k3kcli kubeconfig generate dev -n tenants --user alice --group developers --expires 72h --output-kubeconfig alice.yaml
  kubectl --kubeconfig alice.yaml auth whoami
  # as the cluster's admin: what the group may do
  kubectl create rolebinding developers-edit --clusterrole edit --group developers -n app`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(); err != nil {
				return err
			}
			s, err := g.connect()
			if err != nil {
				return err
			}
			return runGenerate(cmd.Context(), o, s, f, args[0])
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&f.user, "user", "", "the user name the certificate names (its common name); required")
	cmd.Flags().StringArrayVar(&f.groups, "group", nil, "a group of the user (the certificate's organization); repeat for more")
	cmd.Flags().DurationVar(&f.expires, "expires", defaultUserCertLifetime, "how long the certificate is valid (at least 10m; the cluster's signer may cap it)")
	cmd.Flags().StringVar(&f.output, "output-kubeconfig", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	cmd.Flags().StringVar(&f.server, "server", "", "server URL to put in the kubeconfig instead of the one k3kcli works out")
	return cmd
}

// validate checks the flags before anything is asked of a cluster.
func (f *generateFlags) validate() error {
	if f.output != "" && f.wanted() {
		return usageErr("choose one", "--output-kubeconfig and --merge both say where the kubeconfig goes")
	}
	if strings.TrimSpace(f.user) == "" {
		return usageErr("e.g. --user alice", "--user is required: the name the virtual cluster knows this user by")
	}
	if err := checkSubjectName("--user", f.user); err != nil {
		return err
	}
	for _, grp := range f.groups {
		if err := checkSubjectName("--group", grp); err != nil {
			return err
		}
	}
	if f.expires < minUserCertLifetime {
		return usageErr("e.g. --expires 24h", "--expires %s is shorter than %s, the least a certificate signing request may ask for", f.expires, minUserCertLifetime)
	}
	if f.server != "" {
		if err := checkServerURL(f.server); err != nil {
			return err
		}
	}
	return nil
}

// checkSubjectName refuses an empty name and one that Kubernetes or k3s
// reserve for their own components: system:masters bypasses authorization
// altogether, other system: names stand for nodes, controllers or service
// accounts, and k3s binds its kube-apiserver identity (the kubelet client)
// to system:kubelet-api-admin and names its components k3s-….
func checkSubjectName(flag, name string) error {
	hint := "for an administrator, bind the user or a group to the cluster-admin ClusterRole: a binding can be deleted, a certificate's name cannot be taken back"
	lower := strings.ToLower(name)
	switch {
	case strings.TrimSpace(name) == "":
		return usageErr("give a name", "%s is empty", flag)
	case strings.HasPrefix(lower, "system:"):
		return usageErr(hint, "%s %q is refused: names beginning with system: are Kubernetes' own", flag, name)
	case lower == "kube-apiserver" || strings.HasPrefix(lower, "k3s-"):
		return usageErr(hint, "%s %q is refused: k3s's own components go by kube-apiserver and names beginning with k3s-", flag, name)
	}
	return nil
}

func runGenerate(ctx context.Context, o Options, s *session, f *generateFlags, name string) error {
	c, err := s.getCluster(ctx, name)
	if err != nil {
		return err
	}
	rc, err := fetchKubeconfig(ctx, s, c, f.server)
	if err != nil {
		return noKubeconfigYet(c, err)
	}
	// The admin credentials reach the virtual API where the kubeconfig
	// points, or, for a cluster reachable only inside the host cluster,
	// through a port-forward to a server pod for as long as this takes.
	admin := *rc.creds
	if rc.access.inClusterOnly {
		pod, err := readyServerPod(ctx, s, c)
		if err != nil {
			return err
		}
		if pod == nil {
			return &Error{Code: ExitError, Msg: fmt.Sprintf("cluster %s/%s has no ready server pod to ask for a certificate", c.Namespace, c.Name),
				Hint: fmt.Sprintf("wait until it is ready: k3kcli cluster list -n %s", c.Namespace)}
		}
		fw, err := newForwarder(s)
		if err != nil {
			return err
		}
		fwd, err := fw.start(ctx, c.Namespace, pod.Name, 0)
		if err != nil {
			return &Error{Code: ExitError, Msg: fmt.Sprintf("forwarding to server pod %s/%s", c.Namespace, pod.Name), Err: err,
				Hint: "your host credentials need create on pods/portforward, or pass --server with an address of the cluster's API you can reach"}
		}
		defer fwd.stop()
		admin.Server = "https://" + net.JoinHostPort(connectAddress, strconv.Itoa(fwd.port))
	}
	virtual, err := kubernetes.NewForConfig(admin.RESTConfig())
	if err != nil {
		return apiErr(err, "connecting to the virtual cluster")
	}
	subject := pkix.Name{CommonName: f.user, Organization: f.groups}
	certPEM, keyPEM, err := requestUserCert(ctx, virtual, subject, f.expires)
	if err != nil {
		return &Error{Code: ExitError, Msg: fmt.Sprintf("getting a certificate for %s from cluster %s/%s", f.user, c.Namespace, c.Name), Err: err,
			Hint: "k3kcli asks the virtual API server with the cluster's admin kubeconfig; check that the cluster is Ready (k3kcli cluster list)"}
	}
	want := time.Now().Add(f.expires)
	leeway := min(signerLeeway, f.expires/10)
	issued, err := checkIssued(certPEM, keyPEM, subject, want, leeway)
	if err != nil {
		return &Error{Code: ExitError, Msg: fmt.Sprintf("the certificate cluster %s/%s signed for %s", c.Namespace, c.Name, f.user), Err: err,
			Hint: "nothing was written; a certificate that is not the one asked for is not handed out"}
	}
	bound, err := bindingsNaming(ctx, virtual, f.user, f.groups)
	if err != nil {
		return apiErr(err, "listing the virtual cluster's role bindings")
	}
	user := userKubeconfig(rc.creds, certPEM, keyPEM)
	ctxName := f.user + "@" + contextName(c)
	out, err := user.MarshalAs(ctxName)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Err, "certificate for user %q%s, valid until %s\n", f.user, groupsNote(f.groups), issued.NotAfter.UTC().Format(time.RFC3339))
	if issued.NotAfter.Before(want.Add(-leeway)) {
		fmt.Fprintf(o.Err, "note: the cluster's signer capped the lifetime: --expires asked until %s\n", want.UTC().Format(time.RFC3339))
	}
	if len(bound) == 0 {
		fmt.Fprintf(o.Err, "it may do what RBAC in the cluster grants it: nothing yet, no binding names %s\n", bindingSubjects(f.user, f.groups))
	} else {
		fmt.Fprintf(o.Err, "it may do what RBAC in the cluster grants it, now: %s\n", strings.Join(bound, "; "))
	}
	access := rc.access
	if access.inClusterOnly {
		// cluster connect would hand out the admin's kubeconfig, not this one.
		access.note = fmt.Sprintf("the cluster is not exposed, so %s works only inside the host cluster; to use the kubeconfig from elsewhere, expose the cluster, or forward a port (kubectl -n %s port-forward svc/%s 16443:%d) and generate it with --server https://127.0.0.1:16443",
			access.server, c.Namespace, layout.NamesFor(c).Service, layout.ServicePort)
	}
	urc := &readyCluster{cluster: c, kubeconfig: out, creds: user, context: ctxName, access: access}
	noteBeside(o, &f.mergeFlags, f.output, urc)
	return handOut(o, s.paths, &f.mergeFlags, f.output, urc)
}

// requestUserCert makes a key pair, asks the virtual API server to sign a
// client certificate for subject valid for lifetime, approves the request
// with the admin credentials virtual carries, and returns the certificate
// and the key, PEM-encoded.
func requestUserCert(ctx context.Context, virtual kubernetes.Interface, subject pkix.Name, lifetime time.Duration) (certPEM, keyPEM []byte, err error) {
	keyPEM, err = keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, nil, err
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, err
	}
	request, err := cert.MakeCSR(key, &subject, nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("making the signing request: %w", err)
	}
	obj := userCSR(subject.CommonName, request, lifetime)
	api := virtual.CertificatesV1().CertificateSigningRequests()
	made, err := api.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("creating the CertificateSigningRequest: %w", err)
	}
	made.Status.Conditions = append(made.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
		Reason: "K3kcliKubeconfigGenerate", Message: "approved by k3kcli kubeconfig generate with the cluster's admin credentials",
	})
	if _, err := api.UpdateApproval(ctx, made.Name, made, metav1.UpdateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("approving CertificateSigningRequest %s: %w", made.Name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	certPEM, err = csr.WaitForCertificate(wctx, virtual, made.Name, made.UID)
	if err != nil {
		return nil, nil, fmt.Errorf("waiting for CertificateSigningRequest %s to be signed (the cluster's controller manager signs it): %w", made.Name, err)
	}
	return certPEM, keyPEM, nil
}

// userCSR is the CertificateSigningRequest for a client certificate of user
// (request is the PEM-encoded PKCS#10 request). Pure.
func userCSR(user string, request []byte, lifetime time.Duration) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "k3kcli-kubeconfig-",
			Annotations:  map[string]string{csrAnnotation: "k3kcli kubeconfig generate --user " + user},
		},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           request,
			SignerName:        certificatesv1.KubeAPIServerClientSignerName,
			ExpirationSeconds: csr.DurationToExpirationSeconds(lifetime),
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}

// signerLeeway is the most a certificate's end may differ from what was
// asked without k3kcli calling its lifetime capped or refusing it: Kubernetes'
// signer backdates a certificate of 8 h or more by 5 minutes, ending it that
// much earlier, and the clocks of this machine and the server pod may differ.
// A short lifetime gets a tenth of itself.
const signerLeeway = 10 * time.Minute

// checkIssued parses the signed certificate and checks that it is the one
// asked for: for keyPEM's key (anyone allowed to write the request's status,
// e.g. the virtual cluster's own admin, could put another there), naming
// subject, a client certificate and no CA, ending no later than notAfter
// and leeway. Pure.
func checkIssued(certPEM, keyPEM []byte, subject pkix.Name, notAfter time.Time, leeway time.Duration) (*x509.Certificate, error) {
	certs, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("not a certificate: %w", err)
	}
	c := certs[0]
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("it is not for the key k3kcli made: %w", err)
	}
	if c.IsCA || !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return nil, errors.New("it is not a client certificate (a CA, or without client authentication)")
	}
	// The encoding may reorder the groups (a set in DER): compare them as one.
	sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
	if c.Subject.CommonName != subject.CommonName || !slices.Equal(sorted(c.Subject.Organization), sorted(subject.Organization)) {
		return nil, fmt.Errorf("it names user %q groups %v, not user %q groups %v", c.Subject.CommonName, c.Subject.Organization, subject.CommonName, subject.Organization)
	}
	if c.NotAfter.After(notAfter.Add(leeway)) {
		return nil, fmt.Errorf("it is valid until %s, after the %s asked", c.NotAfter.UTC().Format(time.RFC3339), notAfter.UTC().Format(time.RFC3339))
	}
	return c, nil
}

// bindingsNaming lists the RoleBindings and ClusterRoleBindings of the
// virtual cluster that already name user or one of groups, as "kind
// name (role)": what the new kubeconfig may do from its first request.
func bindingsNaming(ctx context.Context, virtual kubernetes.Interface, user string, groups []string) ([]string, error) {
	names := func(subjects []rbacv1.Subject) bool {
		for _, sub := range subjects {
			if (sub.Kind == rbacv1.UserKind && sub.Name == user) || (sub.Kind == rbacv1.GroupKind && slices.Contains(groups, sub.Name)) {
				return true
			}
		}
		return false
	}
	var out []string
	crbs, err := virtual.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range crbs.Items {
		if names(b.Subjects) {
			out = append(out, fmt.Sprintf("ClusterRoleBinding %s (%s %s)", b.Name, b.RoleRef.Kind, b.RoleRef.Name))
		}
	}
	rbs, err := virtual.RbacV1().RoleBindings(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range rbs.Items {
		if names(b.Subjects) {
			out = append(out, fmt.Sprintf("RoleBinding %s/%s (%s %s)", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name))
		}
	}
	return out, nil
}

// userKubeconfig is admin's cluster (server, CA, TLS server name) with the
// user's certificate and key. Pure.
func userKubeconfig(admin *kubeconfig.Kubeconfig, certPEM, keyPEM []byte) *kubeconfig.Kubeconfig {
	k := *admin
	k.CertData, k.KeyData = certPEM, keyPEM
	return &k
}

func groupsNote(groups []string) string {
	if len(groups) == 0 {
		return " (no groups)"
	}
	return fmt.Sprintf(" in groups %s", strings.Join(groups, ", "))
}

// bindingSubjects says whom a RoleBinding would name.
func bindingSubjects(user string, groups []string) string {
	s := fmt.Sprintf("the user %s", user)
	for _, grp := range groups {
		s += fmt.Sprintf(" or the group %s", grp)
	}
	return s
}
