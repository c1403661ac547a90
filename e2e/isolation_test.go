//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientretry "k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// TestTenantIsolationDefaults tries, as a virtual cluster's admin would, the
// first moves that need no setting the hostile suite names (docs/security.md,
// "Defaults an attacker meets"): what a pod that says nothing about seccomp,
// limits or grace gets on the host; what the tenant's DNS tells about host
// names; where the virtual API server can be made to connect (fake Nodes, a
// pod status, hand-written Endpoints, a webhook URL); where a tenant pod can
// connect on the node; extended resources on a pod that skips the scheduler;
// and how long a pod that ignores SIGTERM outlives its virtual pod, its
// namespace and its Cluster. Every probe runs from inside a tenant pod or
// through the virtual API, and each "refused" has a control that reaches
// something, so a broken probe cannot pass.
func TestTenantIsolationDefaults(t *testing.T) {
	t.Parallel()
	v := createCluster(t, "iso")
	const grace = 20
	// One patch, one agent rollout: the grace cap, and Ingress sync with
	// the names this tenant may claim.
	patchClusterForAgent(t, v, fmt.Sprintf(`{"spec":{"maxTerminationGracePeriodSeconds":%d,"ingresses":{"enabled":true,"hosts":["shop.iso.example.com","*.shop.iso.example.com"]}}}`, grace),
		"--ingress-hosts=shop.iso.example.com,*.shop.iso.example.com")
	waitAgentNode(t, v)
	const ns = "intruder"
	createVirtualNamespace(t, v, ns)

	probePod := hostilePod(ns, "probe", func(p *corev1.Pod) {
		p.Spec.Containers[0].Name = "sh" // the name prober execs into (netpol_test.go)
		p.Spec.Volumes = []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "shm", MountPath: "/shm"}}
	})
	createVirtualPod(t, v, probePod)
	createVirtualPod(t, v, inNamespace(httpdPod("web"), ns))
	waitPodPhase(t, v, ns, "probe", corev1.PodRunning)
	waitPodPhase(t, v, ns, "web", corev1.PodRunning)
	rc := restConfig(t, v.kubeconfig)
	run := func(t *testing.T, script string) string {
		t.Helper()
		var out string
		eventually(t, time.Minute, "exec in the probe pod: "+script, func(ctx context.Context) (bool, error) {
			o, e, err := execIn(ctx, rc, ns, "probe", "sh", "", "sh", "-c", script+"; echo exit=$?")
			if err != nil || !strings.Contains(o, "exit=") {
				return false, fmt.Errorf("exec: %v (%q %q)", err, o, e)
			}
			out = o
			return true, nil
		})
		return out
	}
	hostProbe := hostCopy(t, v, "pods", ns, "probe").(*corev1.Pod)

	t.Run("a pod that names no seccomp profile runs under the runtime's default", func(t *testing.T) {
		if sp := hostProbe.Spec.SecurityContext.SeccompProfile; sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("host pod %s: pod seccompProfile %+v, want RuntimeDefault", hostProbe.Name, sp)
		}
		status := run(t, "grep '^Seccomp:' /proc/self/status")
		if !strings.Contains(status, "Seccomp:\t2") {
			t.Errorf("in the pod: %q, want Seccomp: 2 (filter)", status)
		}
		// The user-namespace door: unshare(CLONE_NEWUSER) is one of the calls
		// the runtime's default profile refuses without CAP_SYS_ADMIN.
		out := run(t, "unshare -U -r id 2>&1")
		if strings.Contains(out, "applet not found") {
			t.Fatalf("the toolbox has no unshare: the probe proves nothing (%q)", out)
		}
		if strings.Contains(out, "exit=0") || !strings.Contains(out, "Operation not permitted") {
			t.Errorf("unshare -U -r in a tenant pod: %q, want it refused (Operation not permitted)", out)
		}
		t.Logf("seccomp: %s; unshare -U -r: %s", strings.TrimSpace(status), firstLine(out))
	})

	t.Run("a pod runs in a user namespace of its own: root in it is no one on the node", func(t *testing.T) {
		// The e2e node's runtime (containerd 2.1, runc 1.4) supports them, so
		// the chart's auto turned them on for this Cluster and says why.
		cond := waitCondition(t, clusterClient(t), v, "UserNamespaces", metav1.ConditionTrue, "Supported", time.Minute)
		if hu := hostProbe.Spec.HostUsers; hu == nil || *hu {
			t.Errorf("host pod %s: hostUsers %v, want false", hostProbe.Name, hu)
		}
		// Root inside (the control: the probe runs as root), and the user
		// namespace maps it to an unprivileged range of the node.
		id := run(t, "id -u")
		uidMap, _, _ := strings.Cut(run(t, "cat /proc/self/uid_map"), "exit=")
		fields := strings.Fields(uidMap)
		if !strings.HasPrefix(id, "0\n") {
			t.Errorf("id -u in the probe: %q, want 0 (the image runs as root)", id)
		}
		if len(fields) < 3 || fields[0] != "0" || fields[1] == "0" || fields[2] == "4294967295" {
			t.Errorf("uid_map in the probe: %q, want root mapped to a range of the node that does not start at 0", uidMap)
		}
		// Opting out, as a tenant would to get the node's root back.
		createVirtualPod(t, v, hostilePod(ns, "host-users", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(true) }))
		waitPodPhase(t, v, ns, "host-users", corev1.PodFailed)
		p, err := v.client.CoreV1().Pods(ns).Get(context.Background(), "host-users", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Reason != "UnsupportedPod" || !strings.Contains(p.Status.Message, "hostUsers: true") {
			t.Errorf("hostUsers: true: %s: %s, want UnsupportedPod naming hostUsers", p.Status.Reason, p.Status.Message)
		}
		if _, ok := findHostCopy(context.Background(), v, "pods", ns, "host-users"); ok {
			t.Errorf("a host pod was made for the pod asking for the node's users")
		}
		t.Logf("UserNamespaces %s: %s; id -u %s, uid_map %q; hostUsers: true refused (%s)", cond.Reason, cond.Message, firstLine(id), strings.Join(fields, " "), p.Status.Message)
	})

	t.Run("a container that sets no resources gets requests, a memory limit, and its pod a pids bound", func(t *testing.T) {
		r := hostProbe.Spec.Containers[0].Resources
		for name, want := range map[string]struct {
			got  resource.Quantity
			want string
		}{
			"limits.memory":   {r.Limits[corev1.ResourceMemory], "512Mi"},
			"requests.memory": {r.Requests[corev1.ResourceMemory], "32Mi"},
			"requests.cpu":    {r.Requests[corev1.ResourceCPU], "10m"},
		} {
			if want.got.Cmp(resource.MustParse(want.want)) != 0 {
				t.Errorf("host container %s = %s, want %s", name, want.got.String(), want.want)
			}
		}
		mem := run(t, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")
		if !strings.Contains(mem, "536870912") {
			t.Errorf("the container's memory limit as the kernel sees it: %q, want 536870912", mem)
		}
		pids, err := podCgroupValue(hostProbe.UID, "pids", "pids.max")
		if err != nil {
			t.Fatal(err)
		}
		if pids == "max" || pids == "" {
			t.Errorf("the host pod's pids.max is %q: a fork bomb reaches the node's limit (kubelet podPidsLimit)", pids)
		}
		t.Logf("host container resources %v; memory limit in the pod %s; pod pids.max %s", r, strings.TrimSpace(strings.Split(mem, "exit=")[0]), pids)
	})

	t.Run("a Memory emptyDir without a size is sized to the pod's memory limit", func(t *testing.T) {
		var got *resource.Quantity
		for _, vol := range hostProbe.Spec.Volumes {
			if vol.Name == "shm" && vol.EmptyDir != nil {
				got = vol.EmptyDir.SizeLimit
			}
		}
		if got == nil || got.Cmp(resource.MustParse("512Mi")) != 0 {
			t.Errorf("host volume shm sizeLimit %v, want 512Mi", got)
		}
		df := run(t, "df -k /shm | tail -1")
		t.Logf("df /shm in the pod: %s", firstLine(df))
	})

	t.Run("the tenant's DNS names nothing of the host", func(t *testing.T) {
		createVirtualService(t, v, ns, "web", 8080)
		own := run(t, "nslookup web."+ns+".svc.cluster.local 2>&1")
		if strings.Contains(own, "can't find") || !strings.Contains(own, "Address") {
			t.Fatalf("control: the tenant's own Service does not resolve: %q", own)
		}
		hostDNS, err := host.CoreV1().Services("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hostAPI, err := host.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{
			"kube-dns.kube-system.svc.cluster.local",               // the host's DNS Service
			v.service() + "." + v.namespace + ".svc.cluster.local", // a cluster's API Service on the host
			"kubernetes.default.svc.cluster.local",                 // the host API's name: the agent answers it with the virtual API
		} {
			out := run(t, "nslookup "+name+" 2>&1")
			if strings.Contains(out, hostDNS.Spec.ClusterIP+"\n") || strings.Contains(out, hostAPI.Spec.ClusterIP+"\n") {
				t.Errorf("nslookup %s from a tenant pod answers a host address: %q", name, out)
			}
			if !strings.HasPrefix(name, "kubernetes.") && !strings.Contains(out, "NXDOMAIN") && !strings.Contains(out, "can't find") {
				t.Errorf("nslookup %s from a tenant pod: %q, want NXDOMAIN", name, out)
			}
			t.Logf("nslookup %s: %s", name, strings.Join(strings.Fields(strings.Split(out, "exit=")[0]), " "))
		}
		ptr := run(t, "nslookup "+hostDNS.Spec.ClusterIP+" 2>&1")
		if strings.Contains(ptr, "kube-dns") || strings.Contains(ptr, "kube-system") {
			t.Errorf("reverse lookup of the host DNS address names it: %q", ptr)
		}
	})

	// Host addresses a tenant would aim the virtual API server at.
	coredns := hostPodIP(t, "kube-system", "k8s-app=kube-dns")
	controller := hostPodIP(t, "k3k-system", "")
	proxy := newProxyProber(t, v)

	t.Run("the virtual API server reaches nothing of the host for a tenant", func(t *testing.T) {
		// Control: the proxy path works, to the tenant's own pod.
		eventually(t, 2*time.Minute, "pods/proxy to the tenant's own pod", func(ctx context.Context) (bool, error) {
			body, err := proxy.get(ctx, "/api/v1/namespaces/"+ns+"/pods/web:8080/proxy/")
			if err != nil || !strings.Contains(body, "hello") {
				return false, fmt.Errorf("%v: %q", err, body)
			}
			return true, nil
		})
		fakeNode(t, v, "fake-dns", coredns, 8080)
		fakeNode(t, v, "fake-controller", controller, 8080)
		fakeNode(t, v, "fake-node", cfg.nodeIP, 10250)
		decoy := "decoy"
		// Bound to a fake Node: the agent never runs it, and the virtual pod
		// garbage collector keeps pods of nodes that exist.
		createVirtualPod(t, v, hostilePod(ns, decoy, func(p *corev1.Pod) { p.Spec.NodeName = "fake-dns" }))
		if err := retry(func(ctx context.Context) error {
			return clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
				p, err := v.client.CoreV1().Pods(ns).Get(ctx, decoy, metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Status.Phase = corev1.PodRunning
				p.Status.PodIP, p.Status.PodIPs = coredns, []corev1.PodIP{{IP: coredns}}
				_, err = v.client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return err
			})
		}); err != nil {
			t.Fatalf("patching the decoy pod's status: %v", err)
		}
		// The API server's Service proxy goes only to addresses that name a
		// pod with that IP: the decoy, whose status now says so.
		handWrittenEndpoints(t, v, ns, "evil", coredns, 8080, decoy)

		for _, try := range []struct{ what, path, leak string }{
			{"the host DNS's health through a fake Node", "/api/v1/nodes/http:fake-dns:8080/proxy/health", "OK"},
			{"the k3k controller's metrics through a fake Node", "/api/v1/nodes/http:fake-controller:8080/proxy/metrics", "controller_runtime"},
			{"the host kubelet through a fake Node", "/api/v1/nodes/https:fake-node:10250/proxy/pods", ""},
			{"the host DNS's health through a pod status", "/api/v1/namespaces/" + ns + "/pods/http:" + decoy + ":8080/proxy/health", "OK"},
			{"the host DNS's health through hand-written Endpoints", "/api/v1/namespaces/" + ns + "/services/http:evil:8080/proxy/health", "OK"},
		} {
			var body string
			var err error
			// The API server's view of new Endpoints may lag a moment.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
				body, err = proxy.get(context.Background(), try.path)
				if !strings.Contains(fmt.Sprint(err, body), "no endpoints available") || time.Now().After(deadline) {
					break
				}
			}
			if !blockedByPolicy(fmt.Sprint(err, body)) || (try.leak != "" && strings.Contains(body, try.leak)) {
				t.Errorf("%s: reached (%v: %q), want the connection refused", try.what, err, firstLine(body))
				continue
			}
			t.Logf("escape %s: refused (%s)", try.what, firstLine(body))
		}

		// The policy is what refused them: without it the first one reaches
		// the host DNS (a TLS error is an answer: the API server dials the
		// "kubelet" with TLS whatever the scheme asked), then the policies
		// are put back and it is refused again.
		crc := clusterClient(t)
		setNetworkPolicy(t, crc, v, false)
		restored := false
		defer func() {
			if !restored {
				setNetworkPolicy(t, crc, v, true)
			}
		}()
		eventually(t, 2*time.Minute, "the host DNS reached through a fake Node with the policies off", func(ctx context.Context) (bool, error) {
			body, err := proxy.get(ctx, "/api/v1/nodes/http:fake-dns:8080/proxy/health")
			if answer := fmt.Sprint(err, body); blockedByPolicy(answer) {
				return false, errors.New(answer)
			}
			t.Logf("without the policies the fake Node reaches the host DNS: %v %q", err, firstLine(body))
			return true, nil
		})
		setNetworkPolicy(t, crc, v, true)
		restored = true
		eventually(t, 2*time.Minute, "the fake Node refused again with the policies back", func(ctx context.Context) (bool, error) {
			body, err := proxy.get(ctx, "/api/v1/nodes/http:fake-dns:8080/proxy/health")
			if answer := fmt.Sprint(err, body); !blockedByPolicy(answer) {
				return false, errors.New(answer)
			}
			return true, nil
		})

		msg := webhookCallTo(t, v, "https://"+coredns+":8080/health")
		if !blockedByPolicy(msg) {
			t.Errorf("a webhook aimed at the host DNS: %q, want the connection refused", msg)
		} else {
			t.Logf("escape a webhook URL at the host DNS: refused (%s)", msg)
		}
	})

	t.Run("a tenant pod reaches none of the node's addresses", func(t *testing.T) {
		api, err := host.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := prober{rc: rc, ns: ns, pod: "probe"}
		// Control: the virtual API, through the address the pod is given.
		apiSvc, err := host.CoreV1().Services(v.namespace).Get(context.Background(), v.service(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.expect(t, probe{what: "its own virtual API (control)", ip: apiSvc.Spec.ClusterIP, port: 443, path: "/"}, true)
		// A node port of the host's: the host DNS's health behind a NodePort
		// Service the test makes (the test itself reaches it, as the control).
		// The cluster's own API node port is left out: a pod reaches its own
		// API server whatever the address, which the policy allows.
		nodePort := hostNodePort(t, "kube-system", "k8s-app=kube-dns", 8080)
		eventually(t, time.Minute, "the host DNS's health on node port "+strconv.Itoa(int(nodePort))+" from the node (control)", func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/health", cfg.nodeIP, nodePort), nil)
			if err != nil {
				return false, err
			}
			resp, err := probeClient(3 * time.Second).Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
			if strings.TrimSpace(string(body)) != "OK" {
				return false, fmt.Errorf("%s: %q", resp.Status, body)
			}
			return true, nil
		})
		p.expectAll(t, []probe{
			{what: "the host API on the node", ip: cfg.nodeIP, port: 6443, path: "/"},
			{what: "the host kubelet", ip: cfg.nodeIP, port: 10250, path: "/"},
			{what: "the host etcd", ip: cfg.nodeIP, port: 2479, path: "/"},
			{what: "a node port of the host's", ip: cfg.nodeIP, port: int(nodePort), path: "/health"},
			{what: "the host API's ClusterIP", ip: api.Spec.ClusterIP, port: 443, path: "/"},
		}, false)
	})

	t.Run("a pod asking for a resource the node does not have is refused", func(t *testing.T) {
		node := "k3k-" + v.name + "-kubelet"
		createVirtualPod(t, v, hostilePod(ns, "gpu", func(p *corev1.Pod) {
			p.Spec.NodeName = node // skips the virtual scheduler
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}))
		waitPodPhase(t, v, ns, "gpu", corev1.PodFailed)
		p, err := v.client.CoreV1().Pods(ns).Get(context.Background(), "gpu", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Reason != "OutOfnvidia.com/gpu" {
			t.Errorf("reason %q (%s), want OutOfnvidia.com/gpu", p.Status.Reason, p.Status.Message)
		}
		if _, ok := findHostCopy(context.Background(), v, "pods", ns, "gpu"); ok {
			t.Errorf("a host pod was made for it")
		}
		t.Logf("escape extended-resource: refused (%s: %s)", p.Status.Reason, p.Status.Message)
	})

	t.Run("an image whose registry is an address of the node is refused", func(t *testing.T) {
		ctx := context.Background()
		// Pulled, it would make the node's containerd connect to its own
		// kubelet port and tell the tenant what answered.
		probeImage := fmt.Sprintf("%s:10250/probe:1", hostProbe.Status.HostIP)
		createVirtualPod(t, v, hostilePod(ns, "puller", func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = probeImage
			p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
		}))
		waitPodPhase(t, v, ns, "puller", corev1.PodFailed)
		p, err := v.client.CoreV1().Pods(ns).Get(ctx, "puller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Reason != "UnsupportedPod" || !strings.Contains(p.Status.Message, "names its registry by address") {
			t.Errorf("reason %q message %q, want UnsupportedPod naming the registry address", p.Status.Reason, p.Status.Message)
		}
		if _, ok := findHostCopy(ctx, v, "pods", ns, "puller"); ok {
			t.Errorf("a host pod was made for it")
		}
		t.Logf("escape registry-address: refused (%s: %s)", p.Status.Reason, p.Status.Message)

		// The same image as an update of a running pod: the host pod keeps
		// what it runs and the tenant gets a Warning Event.
		eventually(t, time.Minute, "the probe pod's image updated in the virtual cluster", func(ctx context.Context) (bool, error) {
			vp, err := v.client.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			vp.Spec.Containers[0].Image = "localhost:6443/probe:2"
			_, err = v.client.CoreV1().Pods(ns).Update(ctx, vp, metav1.UpdateOptions{})
			return err == nil, err
		})
		var said string
		eventually(t, time.Minute, "a Warning Event on the probe pod about the refused image", func(ctx context.Context) (bool, error) {
			evs, err := v.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=probe"})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "image update refused") {
					said = e.Message
					return true, nil
				}
			}
			return false, nil
		})
		hp, err := host.CoreV1().Pods(v.namespace).Get(ctx, hostProbe.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if hp.UID != hostProbe.UID || hp.Spec.Containers[0].Image != hostProbe.Spec.Containers[0].Image {
			t.Errorf("host pod %s (uid %s) runs %q, want the same pod with %q", hp.Name, hp.UID, hp.Spec.Containers[0].Image, hostProbe.Spec.Containers[0].Image)
		}
		t.Logf("escape registry-address-update: refused (%s)", said)
	})

	t.Run("an Ingress for another tenant's hostname, or for every hostname, is refused", func(t *testing.T) {
		ctx := context.Background()
		createVirtualService(t, v, ns, "web", 8080)
		prefix := networkingv1.PathTypePrefix
		toWeb := networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 8080}}}
		ingress := func(name string, change func(*networkingv1.IngressSpec)) {
			t.Helper()
			spec := networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "api.shop.iso.example.com",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: toWeb}}}}}}}
			change(&spec)
			if err := retry(func(ctx context.Context) error {
				_, err := v.client.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					return nil
				}
				return err
			}); err != nil {
				t.Fatalf("creating virtual Ingress %s: %v", name, err)
			}
		}
		ingress("own", func(*networkingv1.IngressSpec) {})
		attacks := []struct{ name, want string }{
			{"steal", `"bank.example.com" is not a hostname this cluster may claim`},
			{"certificate", `"login.example.com" is not a hostname this cluster may claim`},
			{"catchall", "a default backend would answer for every hostname"},
			{"hostless", "a rule without a host would answer for every hostname"},
			{"wildcardcert", "a TLS entry without hosts would serve its certificate for every hostname"},
		}
		ingress("steal", func(s *networkingv1.IngressSpec) { s.Rules[0].Host = "bank.example.com" })
		ingress("certificate", func(s *networkingv1.IngressSpec) {
			s.TLS = []networkingv1.IngressTLS{{Hosts: []string{"api.shop.iso.example.com", "login.example.com"}, SecretName: "shop-tls"}}
		})
		ingress("catchall", func(s *networkingv1.IngressSpec) { s.DefaultBackend, s.Rules = &toWeb, nil })
		ingress("hostless", func(s *networkingv1.IngressSpec) { s.Rules[0].Host = "" })
		// A TLS entry's hosts default to the controller's wildcard.
		ingress("wildcardcert", func(s *networkingv1.IngressSpec) { s.TLS = []networkingv1.IngressTLS{{SecretName: "shop-tls"}} })

		eventually(t, time.Minute, "the host copy of Ingress own", func(ctx context.Context) (bool, error) {
			list, err := host.NetworkingV1().Ingresses(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + v.name + ",k3k.io/virtual-namespace=" + ns})
			if err != nil {
				return false, err
			}
			var copied []string
			for _, i := range list.Items {
				copied = append(copied, i.Annotations["k3k.io/virtual-name"])
			}
			if len(copied) != 1 || copied[0] != "own" {
				return false, fmt.Errorf("host copies of %v, want own only", copied)
			}
			return true, nil
		})
		for _, a := range attacks {
			var said string
			eventually(t, time.Minute, "a Warning Event on Ingress "+a.name, func(ctx context.Context) (bool, error) {
				evs, err := v.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Ingress,involvedObject.name=" + a.name})
				if err != nil {
					return false, err
				}
				for _, e := range evs.Items {
					if e.Type == corev1.EventTypeWarning && e.Reason == "UnsupportedIngress" && strings.Contains(e.Message, a.want) {
						said = e.Message
						return true, nil
					}
				}
				return false, fmt.Errorf("events %d", len(evs.Items))
			})
			t.Logf("escape ingress-%s: refused (%s)", a.name, said)
		}
		// No host copy of any of them, a while after the Events.
		list, err := host.NetworkingV1().Ingresses(v.namespace).List(ctx, metav1.ListOptions{LabelSelector: "k3k.io/cluster=" + v.name})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Errorf("%d host Ingresses of the cluster, want the one of Ingress own", len(list.Items))
		}

		// A subverted agent, writing the host Ingress itself: the chart's guard.
		claim := list.Items[0].DeepCopy()
		claim.ObjectMeta = metav1.ObjectMeta{Name: "steal-" + claim.Name[len(claim.Name)-10:], Annotations: map[string]string{"k3k.io/virtual-name": "steal"}}
		claim.Spec.Rules[0].Host = "bank.example.com"
		_, err = asAgent(t, v).NetworkingV1().Ingresses(v.namespace).Create(ctx, claim, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may claim only the hostnames its Cluster allows") {
			t.Errorf("the agent's identity writing a host Ingress for bank.example.com: %v, want Forbidden by the guard", err)
		}
		t.Logf("escape ingress-agent-identity: refused (%v)", err)
	})

	// A pod that ignores SIGTERM, asks for a year of grace and sleeps in its
	// preStop hook: the host pod must be gone within the Cluster's cap.
	stubborn := func(name string) *corev1.Pod {
		return hostilePod(ns, name, func(p *corev1.Pod) {
			p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(31536000))
			p.Spec.Containers[0].Command = []string{"sh", "-c", "trap '' TERM; while true; do sleep 1; done"}
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "31536000"}}}}
		})
	}
	// gone waits until host pod hp is gone and asks that the host deleted it
	// with a grace of at most the cap: metadata.deletionGracePeriodSeconds is
	// the grace the kubelet is given, so that is the cap's proof. How long the
	// kubelet then takes to run out the preStop hook, kill the container and
	// remove the pod is its own pace (about 5 s past the cap on an idle
	// machine, 40 s and more on a loaded one): the wait allows minutes, far
	// from a year, and the log says where the time went. wantGrace: the
	// deletion must be graceful (a force-deleted virtual pod's host pod may
	// be removed at once, too fast to see).
	gone := func(t *testing.T, hp *corev1.Pod, since time.Time, wantGrace bool) {
		t.Helper()
		var deleting, stopped time.Duration
		var given *int64
		eventually(t, time.Duration(grace)*time.Second+3*time.Minute, "host pod "+hp.Name+" gone", func(ctx context.Context) (bool, error) {
			p, err := host.CoreV1().Pods(v.namespace).Get(ctx, hp.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && p.UID != hp.UID) {
				return true, nil
			}
			if err != nil {
				return false, err
			}
			if p.DeletionTimestamp != nil && deleting == 0 {
				deleting, given = time.Since(since), p.DeletionGracePeriodSeconds
			}
			if stopped == 0 && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Terminated != nil {
				stopped = time.Since(since)
			}
			return false, fmt.Errorf("still there (deleting after %s, grace %v, container stopped after %s)", deleting.Round(time.Second), ptr.Deref(given, -1), stopped.Round(time.Second))
		})
		switch {
		case given == nil && wantGrace:
			t.Errorf("host pod %s went before its deletion grace was seen", hp.Name)
		case given != nil && *given > grace:
			t.Errorf("host pod %s was deleted with a grace of %d s, over the cap %d", hp.Name, *given, grace)
		}
		t.Logf("host pod %s gone %s after the deletion (cap %ds; deleting after %s with grace %v s, container stopped after %s)",
			hp.Name, time.Since(since).Round(time.Second), grace, deleting.Round(time.Second), ptr.Deref(given, -1), stopped.Round(time.Second))
	}
	startStubborn := func(t *testing.T, name string) *corev1.Pod {
		t.Helper()
		createVirtualPod(t, v, stubborn(name))
		waitPodPhase(t, v, ns, name, corev1.PodRunning)
		hp := hostCopy(t, v, "pods", ns, name).(*corev1.Pod)
		if g := hp.Spec.TerminationGracePeriodSeconds; g == nil || *g != grace {
			t.Errorf("host pod %s terminationGracePeriodSeconds %v, want the cap %d", hp.Name, g, grace)
		}
		return hp
	}

	t.Run("a year-long grace period ends within the cap when the pod is deleted", func(t *testing.T) {
		hp := startStubborn(t, "stubborn")
		start := time.Now()
		if err := retry(func(ctx context.Context) error {
			return v.client.CoreV1().Pods(ns).Delete(ctx, "stubborn", metav1.DeleteOptions{})
		}); err != nil {
			t.Fatal(err)
		}
		gone(t, hp, start, true)
	})

	t.Run("and when its namespace is deleted and the virtual pod force-deleted", func(t *testing.T) {
		const other = "doomed"
		createVirtualNamespace(t, v, other)
		p := stubborn("stubborn")
		p.Namespace = other
		createVirtualPod(t, v, p)
		waitPodPhase(t, v, other, "stubborn", corev1.PodRunning)
		hp := hostCopy(t, v, "pods", other, "stubborn").(*corev1.Pod)
		start := time.Now()
		if err := retry(func(ctx context.Context) error {
			return v.client.CoreV1().Namespaces().Delete(ctx, other, metav1.DeleteOptions{})
		}); err != nil {
			t.Fatal(err)
		}
		if err := retry(func(ctx context.Context) error {
			err := v.client.CoreV1().Pods(other).Delete(ctx, "stubborn", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		gone(t, hp, start, false)
	})

	t.Run("and when the Cluster is deleted", func(t *testing.T) {
		hp := startStubborn(t, "stubborn-last")
		start := time.Now()
		k3kcli(t, "cluster", "delete", v.name, "-n", v.namespace)
		gone(t, hp, start, true)
	})
}

// createVirtualNamespace makes namespace ns in v (an existing one counts).
func createVirtualNamespace(t *testing.T, v *vcluster, ns string) {
	t.Helper()
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("creating virtual namespace %s: %v", ns, err)
	}
}

// createVirtualService makes a ClusterIP Service selecting app=name.
func createVirtualService(t *testing.T, v *vcluster, ns, name string, port int32) {
	t.Helper()
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Port: port}}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("creating virtual Service %s/%s: %v", ns, name, err)
	}
}

// hostPodIP is the IP of a Running host pod in ns matching selector.
func hostPodIP(t *testing.T, ns, selector string) string {
	t.Helper()
	pods, err := host.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && !p.Spec.HostNetwork {
			return p.Status.PodIP
		}
	}
	t.Fatalf("no Running pod in host namespace %s with %q", ns, selector)
	return ""
}

// hostNodePort makes a NodePort Service in host namespace ns selecting
// selector's pods on port, deleted with the test, and returns its node port.
func hostNodePort(t *testing.T, ns, selector string, port int32) int32 {
	t.Helper()
	sel := map[string]string{}
	for _, kv := range strings.Split(selector, ",") {
		k, v, _ := strings.Cut(kv, "=")
		sel[k] = v
	}
	svc, err := host.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-nodeport-"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel,
			Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(port)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("host NodePort Service in %s: %v", ns, err)
	}
	t.Cleanup(func() {
		if err := host.CoreV1().Services(ns).Delete(context.Background(), svc.Name, metav1.DeleteOptions{}); err != nil {
			t.Logf("deleting Service %s/%s: %v", ns, svc.Name, err)
		}
	})
	return svc.Spec.Ports[0].NodePort
}

// fakeNode registers a Node the tenant made up, whose address is ip and whose
// kubelet port is port.
func fakeNode(t *testing.T, v *vcluster, name, ip string, port int32) {
	t.Helper()
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		// The virtual controllers write new Nodes too (CIDRs, taints).
		return clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
			n, err := v.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
			n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
			_, err = v.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		})
	}); err != nil {
		t.Fatalf("fake node %s: %v", name, err)
	}
}

// handWrittenEndpoints makes a selector-less Service whose Endpoints and
// EndpointSlice point at ip:port, naming pod as the address's target.
func handWrittenEndpoints(t *testing.T, v *vcluster, ns, name, ip string, port int32, pod string) {
	t.Helper()
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: port}}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		// v1 Endpoints, which the API server's Service proxy reads, written
		// as the JSON a tenant would send (the Go types are deprecated).
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":%q},"subsets":[{"addresses":[{"ip":%q,"targetRef":{"kind":"Pod","namespace":%q,"name":%q}}],"ports":[{"name":"http","port":%d}]}]}`, name, ip, ns, pod, port)
		err = v.client.CoreV1().RESTClient().Post().Namespace(ns).Resource("endpoints").Body([]byte(body)).Do(ctx).Error()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		_, err = v.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-manual", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port)}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("hand-written endpoints %s: %v", name, err)
	}
}

// webhookCallTo installs a validating webhook with a URL, scoped to a
// namespace of its own, makes the virtual API server call it once (a
// ConfigMap create there) and returns what the API server said of the call.
func webhookCallTo(t *testing.T, v *vcluster, target string) string {
	t.Helper()
	const ns = "hook-target"
	if err := retry(func(ctx context.Context) error {
		_, err := v.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{"e2e.k3k.io/hook-target": "on"}}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		_, err = v.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-hook-target"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:         "target.e2e.k3k.io",
				ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(target)},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}},
				NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"e2e.k3k.io/hook-target": "on"}},
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				AdmissionReviewVersions: []string{"v1"},
				TimeoutSeconds:          ptr.To(int32(10)),
			}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("installing the webhook: %v", err)
	}
	var msg string
	eventually(t, time.Minute, "the API server's answer about the webhook", func(ctx context.Context) (bool, error) {
		_, err := v.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
		if err == nil {
			return false, errors.New("the create passed: the webhook was not called yet")
		}
		if !strings.Contains(err.Error(), "target.e2e.k3k.io") {
			return false, err
		}
		msg = err.Error()
		return true, nil
	})
	if err := retry(func(ctx context.Context) error {
		err := v.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "e2e-hook-target", metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		t.Errorf("removing the webhook: %v", err)
	}
	return msg
}

// blockedByPolicy says whether what the virtual API server answered (its
// error and body) is its failing to connect: the enforcer rejects
// ("connection refused") or drops (a timeout). An answer from the target
// itself says none of these.
func blockedByPolicy(answer string) bool {
	for _, s := range []string{"connection refused", "i/o timeout", "no route to host", "context deadline exceeded"} {
		if strings.Contains(answer, s) {
			return true
		}
	}
	return false
}

// proxyProber sends GETs through the virtual API with a timeout longer than
// the API server's own dial timeout, so a dropped connection reads as the
// API server's error rather than the client's.
type proxyProber struct{ c kubernetes.Interface }

func newProxyProber(t *testing.T, v *vcluster) proxyProber {
	rc := rest.CopyConfig(restConfig(t, v.kubeconfig))
	rc.Timeout = 90 * time.Second
	return proxyProber{c: kubernetes.NewForConfigOrDie(rc)}
}

func (p proxyProber) get(ctx context.Context, path string) (string, error) {
	body, err := p.c.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	return string(body), err
}

// podCgroupValue reads file of the host pod's cgroup (controller v1, or the
// unified hierarchy) on this node, where the tests run.
func podCgroupValue(uid types.UID, controller, file string) (string, error) {
	want := "pod" + string(uid)
	wantSystemd := "pod" + strings.ReplaceAll(string(uid), "-", "_")
	for _, root := range []string{"/sys/fs/cgroup/" + controller, "/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var found string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			switch {
			case err != nil && d != nil && d.IsDir():
				return filepath.SkipDir
			case err != nil || !d.IsDir():
				return nil
			case found != "":
				return filepath.SkipAll
			}
			if strings.Count(strings.TrimPrefix(path, root), "/") > 4 {
				return filepath.SkipDir
			}
			base := filepath.Base(path)
			if base == want || strings.Contains(base, wantSystemd) {
				if _, err := os.Stat(filepath.Join(path, file)); err == nil {
					found = filepath.Join(path, file)
				}
			}
			return nil
		})
		if found != "" {
			b, err := os.ReadFile(found)
			return strings.TrimSpace(string(b)), err
		}
	}
	return "", fmt.Errorf("no cgroup of pod %s with %s on this node", uid, file)
}
