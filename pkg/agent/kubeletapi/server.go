package kubeletapi

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// Config is what the kubelet API needs: the handler (NewHandler) and the
// server around it (Serve).
type Config struct {
	// NodeName is the node whose API this is; authorization is for it, and
	// Serve's serving certificate names it.
	NodeName string
	// NodeIPs are the node's addresses (its InternalIP) that Serve's serving
	// certificate names besides NodeName; the handler does not use them.
	NodeIPs []net.IP
	// Translator maps virtual pods to host pods.
	Translator *translate.Translator
	// Host reads host pod logs.
	Host kubernetes.Interface
	// HostConfig is the host client's configuration, used to forward exec,
	// attach and port-forward to the host pods; nil answers them 501.
	HostConfig *rest.Config
	// Virtual returns the current virtual cluster client, nil while there is
	// none; credentials rotate, so it is asked on every request.
	Virtual func() kubernetes.Interface
	// CARefresh is how long the client CA read from the virtual cluster is
	// trusted before it is read again. Default one minute.
	CARefresh time.Duration
}

// Handler serves the kubelet API subset.
type Handler struct {
	cfg     Config
	streams *streamProxy // nil without Config.HostConfig

	mu       sync.Mutex
	pool     *x509.CertPool
	poolFrom kubernetes.Interface
	poolAt   time.Time
}

// NewHandler checks cfg.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.NodeName == "" || cfg.Translator == nil || cfg.Host == nil || cfg.Virtual == nil {
		return nil, errors.New("kubeletapi: node name, translator, host client and virtual client are required")
	}
	if cfg.CARefresh <= 0 {
		cfg.CARefresh = time.Minute
	}
	h := &Handler{cfg: cfg}
	if cfg.HostConfig != nil {
		var err error
		if h.streams, err = newStreamProxy(cfg.HostConfig); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// ServeHTTP authenticates, authorizes and routes one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	virtual := h.cfg.Virtual()
	if virtual == nil {
		http.Error(w, "the agent has no virtual cluster credentials yet", http.StatusServiceUnavailable)
		return
	}
	user, groups, err := h.authenticate(r, virtual)
	if err != nil {
		http.Error(w, "Unauthorized: "+err.Error(), http.StatusUnauthorized)
		return
	}
	if err := h.authorize(r.Context(), virtual, r, user, groups); err != nil {
		http.Error(w, "Forbidden: "+err.Error(), http.StatusForbidden)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && len(parts) == 4 && parts[0] == "containerLogs":
		h.containerLogs(w, r, virtual, parts[1], parts[2], parts[3])
	case streamKinds[parts[0]] != "" && h.streams != nil:
		hostPod, sub, q, ok := hostStreamRequest(h.cfg.Translator, parts, r.URL.Query())
		if !ok {
			http.NotFound(w, r)
			return
		}
		if _, no := h.hostPodOf(r.Context(), virtual, parts[1], parts[2]); no != nil {
			http.Error(w, no.msg, no.code)
			return
		}
		h.streams.serve(w, r, h.cfg.Translator.Config().HostNamespace, hostPod, parts[2], sub, q)
	case streamKinds[parts[0]] != "" || parts[0] == "run":
		http.Error(w, parts[0]+" is not supported by this k3k shared-mode agent", http.StatusNotImplemented)
	default:
		http.NotFound(w, r)
	}
}

// authenticate verifies the client certificate against the virtual
// apiserver's client CA; the user is its common name, the groups its
// organizations, as kube-apiserver reads them.
func (h *Handler) authenticate(r *http.Request, virtual kubernetes.Interface) (string, []string, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", nil, errors.New("a client certificate is required")
	}
	pool, err := h.clientCAs(r.Context(), virtual)
	if err != nil {
		return "", nil, err
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", nil, errors.New("the client certificate is not signed by the virtual cluster's client CA")
	}
	return leaf.Subject.CommonName, leaf.Subject.Organization, nil
}

// clientCAs reads and caches the virtual apiserver's client CA.
func (h *Handler) clientCAs(ctx context.Context, virtual kubernetes.Interface) (*x509.CertPool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pool != nil && h.poolFrom == virtual && time.Since(h.poolAt) < h.cfg.CARefresh {
		return h.pool, nil
	}
	cm, err := virtual.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the virtual cluster's client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data["client-ca-file"])) {
		return nil, errors.New("the virtual cluster publishes no client CA")
	}
	h.pool, h.poolFrom, h.poolAt = pool, virtual, time.Now()
	return pool, nil
}

// authorize asks the virtual cluster, as a kubelet in webhook mode does:
// container logs are the nodes/proxy subresource of this node.
func (h *Handler) authorize(ctx context.Context, virtual kubernetes.Interface, r *http.Request, user string, groups []string) error {
	verb := "get"
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		verb = "create"
	}
	sar, err := virtual.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "nodes", Subresource: "proxy", Name: h.cfg.NodeName},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("asking the virtual cluster: %w", err)
	}
	if !sar.Status.Allowed {
		return fmt.Errorf("user %q may not %s nodes/proxy on %s", user, verb, h.cfg.NodeName)
	}
	return nil
}

// refusal is why a request about a pod is not served: an HTTP status and a
// message that names the virtual pod only, never a host object.
type refusal struct {
	code int
	msg  string
}

// hostPodOf is the name of the host pod that serves the virtual pod
// namespace/name's logs and streams, after checking that it is this agent's
// copy of that very pod: the virtual pod exists and is bound to this node,
// and the host pod under its derived name carries this agent's labels
// (managed by k3k-kubelet, this cluster) and the annotations naming the
// virtual pod, its UID included. The host namespace is shared with the
// cluster's server pods and possibly other clusters, and a name alone does
// not say whose pod it is; the UID keeps a host pod left from an earlier
// pod of the same name (a StatefulSet pod recreated) from answering for the
// new one. Anything else is a 404 about the virtual pod.
func (h *Handler) hostPodOf(ctx context.Context, virtual kubernetes.Interface, namespace, name string) (string, *refusal) {
	pod := namespace + "/" + name
	notHere := &refusal{http.StatusNotFound, fmt.Sprintf("pod %s is not running on node %s", pod, h.cfg.NodeName)}
	vp, err := virtual.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", &refusal{http.StatusNotFound, fmt.Sprintf("pod %s not found", pod)}
	case err != nil:
		return "", &refusal{http.StatusServiceUnavailable, fmt.Sprintf("reading pod %s from the virtual cluster: %s", pod, reasonOf(err))}
	case vp.Spec.NodeName != h.cfg.NodeName || vp.UID == "":
		return "", notHere
	}
	hostName := h.cfg.Translator.HostName(translate.KindPod, namespace, name)
	hp, err := h.cfg.Host.CoreV1().Pods(h.cfg.Translator.Config().HostNamespace).Get(ctx, hostName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", notHere
	case err != nil:
		return "", &refusal{http.StatusBadGateway, fmt.Sprintf("reading the host side of pod %s: %s", pod, reasonOf(err))}
	case !h.cfg.Translator.IsCopyOf(hp, translate.KindPod, namespace, name) || hp.Annotations[translate.AnnotationUID] != string(vp.UID):
		return "", notHere
	}
	return hostName, nil
}

// reasonOf is what a caller is told of an API error: its reason alone. The
// message of a host error names the host pod, namespace and the agent's
// identity, and a transport error the address it dialed.
func reasonOf(err error) string {
	if reason := apierrors.ReasonForError(err); reason != metav1.StatusReasonUnknown {
		return string(reason)
	}
	return "no answer"
}

// containerLogs streams the host pod's container log.
func (h *Handler) containerLogs(w http.ResponseWriter, r *http.Request, virtual kubernetes.Interface, ns, pod, container string) {
	opts, err := logOptions(r, container)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	hostPod, no := h.hostPodOf(r.Context(), virtual, ns, pod)
	if no != nil {
		http.Error(w, no.msg, no.code)
		return
	}
	hostNS := h.cfg.Translator.Config().HostNamespace
	stream, err := h.cfg.Host.CoreV1().Pods(hostNS).GetLogs(hostPod, opts).Stream(r.Context())
	if err != nil {
		code := http.StatusInternalServerError
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Code != 0 {
			code = int(status.Status().Code)
		}
		// The host's message names the host pod; say the virtual pod instead.
		http.Error(w, strings.ReplaceAll(err.Error(), hostPod, pod), code)
		return
	}
	defer stream.Close()
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32*1024)
	for {
		n, err := stream.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return // io.EOF at the end of the log; otherwise the caller went away
		}
	}
}

// logOptions reads the query the apiserver sends to a kubelet's containerLogs
// (the pod log options, by their JSON names).
func logOptions(r *http.Request, container string) (*corev1.PodLogOptions, error) {
	q := r.URL.Query()
	opts := &corev1.PodLogOptions{Container: container}
	boolean := func(name string) bool { v := q.Get(name); return v == "true" || v == "1" }
	opts.Follow, opts.Previous, opts.Timestamps = boolean("follow"), boolean("previous"), boolean("timestamps")
	for name, dst := range map[string]**int64{"tailLines": &opts.TailLines, "limitBytes": &opts.LimitBytes, "sinceSeconds": &opts.SinceSeconds} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			*dst = &n
		}
	}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, fmt.Errorf("sinceTime: %w", err)
		}
		mt := metav1.NewTime(t)
		opts.SinceTime = &mt
	}
	return opts, nil
}
