package kubeletapi

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/agent/translate"
)

// TestOnlyTheVirtualPodsOwnHostCopyIsServed sends logs, exec and
// port-forward requests, as the virtual apiserver would, about virtual pod
// shop/web-0, while the host namespace holds some pod under the name derived
// for it. Only this agent's copy of that very pod, bound to this node, is
// served; every other host pod under the derived name is refused with a 404
// that names the virtual pod and never the host pod. The clients are fakes:
// what is tested is the handler's decision, not the API servers.
func TestOnlyTheVirtualPodsOwnHostCopyIsServed(t *testing.T) {
	const (
		cluster, hostNS, node = "c1", "tenant", "k3k-c1-kubelet"
		vUID                  = "uid-web-0"
	)
	tr, err := translate.New(translate.Config{ClusterName: cluster, HostNamespace: hostNS, NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	hostName := tr.HostName(translate.KindPod, "shop", "web-0")

	// The copy the agent makes: its labels and annotations.
	copyOf := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: hostName, Namespace: hostNS,
			Labels: map[string]string{
				translate.LabelManagedBy: translate.ManagedByValue, translate.LabelCluster: cluster, translate.LabelVirtualNamespace: "shop",
			},
			Annotations: map[string]string{
				translate.AnnotationKind: string(translate.KindPod), translate.AnnotationNamespace: "shop",
				translate.AnnotationName: "web-0", translate.AnnotationUID: vUID,
			},
		}}
	}
	virtualPod := func(nodeName string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: vUID},
			Spec:       corev1.PodSpec{NodeName: nodeName},
		}
	}
	cases := []struct {
		name     string
		virtual  *corev1.Pod // nil: no such virtual pod
		host     func(*corev1.Pod)
		noHost   bool
		wantCode int
	}{
		{name: "this agent's copy of the pod is served", virtual: virtualPod(node), wantCode: http.StatusOK},
		{
			name: "a host pod of an earlier pod of the same name (another UID) is refused", virtual: virtualPod(node), wantCode: http.StatusNotFound,
			host: func(p *corev1.Pod) { p.Annotations[translate.AnnotationUID] = "uid-of-an-earlier-web-0" },
		},
		{
			name: "a host pod without the UID annotation is refused", virtual: virtualPod(node), wantCode: http.StatusNotFound,
			host: func(p *corev1.Pod) { delete(p.Annotations, translate.AnnotationUID) },
		},
		{
			name: "another cluster's host pod is refused", virtual: virtualPod(node), wantCode: http.StatusNotFound,
			host: func(p *corev1.Pod) { p.Labels[translate.LabelCluster] = "c2" },
		},
		{
			name: "a host pod the agent does not manage (a server pod, say) is refused", virtual: virtualPod(node), wantCode: http.StatusNotFound,
			host: func(p *corev1.Pod) { p.Labels[translate.LabelManagedBy] = "k3k" },
		},
		{
			name: "a host pod without labels or annotations is refused", virtual: virtualPod(node), wantCode: http.StatusNotFound,
			host: func(p *corev1.Pod) { p.Labels, p.Annotations = nil, nil },
		},
		{
			name: "a host pod whose annotations name another virtual pod is refused", virtual: virtualPod(node), wantCode: http.StatusNotFound,
			host: func(p *corev1.Pod) { p.Annotations[translate.AnnotationName] = "web-1" },
		},
		{
			name: "a host pod whose annotations name another kind is refused", virtual: virtualPod(node), wantCode: http.StatusNotFound,
			host: func(p *corev1.Pod) { p.Annotations[translate.AnnotationKind] = string(translate.KindPodIdentity) },
		},
		{name: "no host pod at all is a 404", virtual: virtualPod(node), noHost: true, wantCode: http.StatusNotFound},
		{name: "a virtual pod that does not exist is a 404, whatever the host holds", wantCode: http.StatusNotFound},
		{name: "a virtual pod bound to another node is a 404", virtual: virtualPod("another-node"), wantCode: http.StatusNotFound},
		{name: "a virtual pod not bound yet is a 404", virtual: virtualPod(""), wantCode: http.StatusNotFound},
	}

	ca, err := testenv.NewCA("virtual-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	caller := clientLeaf(t, ca, "kube-apiserver-kubelet-client")

	// The host API for streams: it records what it is asked.
	var mu sync.Mutex
	var streamed []string
	hostAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		streamed = append(streamed, r.URL.Path)
		mu.Unlock()
		_, _ = io.WriteString(w, "stream reached")
	}))
	defer hostAPI.Close()

	requests := []struct{ method, path, wantBody, wantHostPath string }{
		{http.MethodGet, "/containerLogs/shop/web-0/main", "fake logs", ""},
		{http.MethodPost, "/exec/shop/web-0/main?command=date&output=1", "stream reached", "/api/v1/namespaces/" + hostNS + "/pods/" + hostName + "/exec"},
		{http.MethodPost, "/attach/shop/web-0/main?output=1", "stream reached", "/api/v1/namespaces/" + hostNS + "/pods/" + hostName + "/attach"},
		{http.MethodPost, "/portForward/shop/web-0?port=80", "stream reached", "/api/v1/namespaces/" + hostNS + "/pods/" + hostName + "/portforward"},
	}
	for _, tc := range cases {
		for _, rq := range requests {
			t.Run(tc.name+" "+strings.SplitN(rq.path, "/", 3)[1], func(t *testing.T) {
				var hostObjs, virtObjs []runtime.Object
				if !tc.noHost {
					p := copyOf()
					if tc.host != nil {
						tc.host(p)
					}
					hostObjs = append(hostObjs, p)
				}
				if tc.virtual != nil {
					virtObjs = append(virtObjs, tc.virtual)
				}
				virt := virtualCluster(ca, virtObjs...)
				h, err := NewHandler(Config{
					NodeName: node, Translator: tr, Host: fake.NewClientset(hostObjs...),
					HostConfig: &rest.Config{Host: hostAPI.URL}, Virtual: func() kubernetes.Interface { return virt },
				})
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				streamed = nil
				mu.Unlock()

				req := httptest.NewRequest(rq.method, rq.path, nil)
				req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{caller}}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				body := rec.Body.String()

				if rec.Code != tc.wantCode {
					t.Fatalf("status %d (%q), want %d", rec.Code, body, tc.wantCode)
				}
				if strings.Contains(body, hostName) || strings.Contains(body, hostNS) {
					t.Errorf("the answer %q names the host pod or namespace", body)
				}
				mu.Lock()
				got := streamed
				mu.Unlock()
				if tc.wantCode != http.StatusOK {
					if !strings.Contains(body, "shop/web-0") {
						t.Errorf("refusal %q does not name the virtual pod", body)
					}
					if len(got) != 0 {
						t.Errorf("refused, yet the host API was asked %v", got)
					}
					return
				}
				if strings.TrimSpace(body) != rq.wantBody {
					t.Errorf("body %q, want %q", body, rq.wantBody)
				}
				if rq.wantHostPath != "" && (len(got) != 1 || got[0] != rq.wantHostPath) {
					t.Errorf("host API asked %v, want %s", got, rq.wantHostPath)
				}
			})
		}
	}
}

// virtualCluster is a fake virtual API: it publishes ca as the client CA,
// allows every SubjectAccessReview, and holds objs.
func virtualCluster(ca *testenv.CertKey, objs ...runtime.Object) *fake.Clientset {
	objs = append(objs, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication"},
		Data:       map[string]string{"client-ca-file": string(ca.Cert)},
	})
	c := fake.NewClientset(objs...)
	c.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	return c
}

// clientLeaf is a client certificate for user name, signed by ca.
func clientLeaf(t *testing.T, ca *testenv.CertKey, name string) *x509.Certificate {
	t.Helper()
	ck, err := ca.Issue(testenv.CertSpec{CommonName: name})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(ck.Cert)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// TestHostReadFailuresDoNotNameHostObjects: when the host API refuses the
// agent's read of the host pod, the caller learns the reason, not the host's
// message, which names the host pod, namespace and the agent's identity.
func TestHostReadFailuresDoNotNameHostObjects(t *testing.T) {
	tr, err := translate.New(translate.Config{ClusterName: "c1", HostNamespace: "tenant", NodeName: "k3k-c1-kubelet"})
	if err != nil {
		t.Fatal(err)
	}
	hostName := tr.HostName(translate.KindPod, "shop", "web-0")
	host := fake.NewClientset()
	host.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), hostName,
			errors.New(`User "system:serviceaccount:tenant:k3k-c1-kubelet" cannot get resource "pods" in the namespace "tenant"`))
	})
	ca, err := testenv.NewCA("virtual-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	virt := virtualCluster(ca, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "uid-web-0"},
		Spec:       corev1.PodSpec{NodeName: "k3k-c1-kubelet"},
	})
	h, err := NewHandler(Config{NodeName: "k3k-c1-kubelet", Translator: tr, Host: host, Virtual: func() kubernetes.Interface { return virt }})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/containerLogs/shop/web-0/main", nil)
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{clientLeaf(t, ca, "kube-apiserver-kubelet-client")}}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body := rec.Body.String()
	if rec.Code != http.StatusBadGateway || !strings.Contains(body, "shop/web-0") || !strings.Contains(body, "Forbidden") {
		t.Errorf("status %d %q, want 502 about shop/web-0 with the reason", rec.Code, body)
	}
	if strings.Contains(body, hostName) || strings.Contains(body, "tenant") || strings.Contains(body, "serviceaccount") {
		t.Errorf("the answer %q names host objects", body)
	}
}
