package cli

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
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
virtual cluster grants the user or its groups: nothing until a RoleBinding or
ClusterRoleBinding names them. Printed, written with mode 0600 by
--output-kubeconfig, or merged with --merge, under the context
k3k-NAMESPACE-NAME-USER.

A client certificate cannot be revoked before it expires: keep --expires short, and
grant rights to a group, whose bindings can be deleted. Names that begin with
"system:" belong to Kubernetes itself and are refused (the group system:masters
would bypass RBAC, with no way to take it back).`,
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

// checkSubjectName refuses a name Kubernetes reserves for its own
// components (system:masters bypasses authorization altogether, others
// impersonate nodes, controllers or service accounts) and one that is empty.
func checkSubjectName(flag, name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return usageErr("give a name", "%s is empty", flag)
	case strings.HasPrefix(strings.ToLower(name), "system:"):
		return usageErr("for an administrator, bind the user or a group to the cluster-admin ClusterRole: a binding can be deleted, a certificate's name cannot be taken back",
			"%s %q is refused: names beginning with system: are Kubernetes' own", flag, name)
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
	issued, err := checkIssued(certPEM, subject)
	if err != nil {
		return &Error{Code: ExitError, Msg: fmt.Sprintf("the certificate cluster %s/%s signed for %s", c.Namespace, c.Name, f.user), Err: err}
	}
	user := userKubeconfig(rc.creds, certPEM, keyPEM)
	ctxName := contextName(c) + "-" + f.user
	out, err := user.MarshalAs(ctxName)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Err, "certificate for user %q%s, valid until %s\n", f.user, groupsNote(f.groups), issued.NotAfter.UTC().Format(time.RFC3339))
	// A minute's leeway: the certificate was signed a moment ago.
	if want := time.Now().Add(f.expires); issued.NotAfter.Before(want.Add(-time.Minute)) {
		fmt.Fprintf(o.Err, "note: the cluster's signer capped the lifetime: --expires asked until %s\n", want.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(o.Err, "it may do what RBAC in the cluster grants it; nothing until a binding names %s\n", bindingSubjects(f.user, f.groups))
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

// checkIssued parses the signed certificate and checks that it names
// subject: a signer must not hand out another identity than the one asked.
func checkIssued(certPEM []byte, subject pkix.Name) (*x509.Certificate, error) {
	certs, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("not a certificate: %w", err)
	}
	got := certs[0].Subject
	// The encoding may reorder the groups (a set in DER): compare them as one.
	sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
	if got.CommonName != subject.CommonName || !slices.Equal(sorted(got.Organization), sorted(subject.Organization)) {
		return nil, fmt.Errorf("it names user %q groups %v, not user %q groups %v", got.CommonName, got.Organization, subject.CommonName, subject.Organization)
	}
	return certs[0], nil
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
