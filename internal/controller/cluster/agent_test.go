package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

func TestAgentDeployment(t *testing.T) {
	c := sampleCluster()
	c.UID = "cluster-uid"
	c.Spec.NodeSelector = map[string]string{"pool": "tenants"}
	d := DesiredAgentDeployment(c, testConfig, AgentHost{})

	if d.Name != "k3k-demo-kubelet" || d.Namespace != "tenants" {
		t.Errorf("name = %s/%s", d.Namespace, d.Name)
	}
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("want exactly one agent at a time: replicas %d, strategy %s", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	pod := d.Spec.Template.Spec
	if diff := cmp.Diff(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels); diff != "" {
		t.Errorf("selector does not match the template (-selector +template):\n%s", diff)
	}
	if pod.ServiceAccountName != "k3k-demo-kubelet" || pod.NodeSelector["pool"] != "tenants" {
		t.Errorf("service account %q, node selector %v", pod.ServiceAccountName, pod.NodeSelector)
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("agent must run as non-root: %+v", sc)
	}
	want := []string{
		"/usr/local/bin/kubelet", "--cluster-name=demo", "--cluster-uid=cluster-uid", "--host-namespace=tenants",
		"--node-name=k3k-demo-kubelet", "--api-server-service=k3k-demo-service", "--dns-service=k3k-demo-dns", "--dns-port=5353",
		"--credentials-dir=/var/lib/k3k/credentials", "--health-address=:10248", "--kubelet-port=10250", "--pod-security-level=baseline",
	}
	ctr := pod.Containers[0]
	if diff := cmp.Diff(want, ctr.Command); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	if ctr.Image != testConfig.AgentImage {
		t.Errorf("image = %q", ctr.Image)
	}
	wantVolume := corev1.Volume{Name: "credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: "k3k-demo-kubeconfig", Items: []corev1.KeyToPath{{Key: "kubeconfig.yaml", Path: "kubeconfig.yaml"}},
	}}}
	if diff := cmp.Diff([]corev1.Volume{wantVolume}, pod.Volumes); diff != "" {
		t.Errorf("volumes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.VolumeMount{{Name: "credentials", MountPath: "/var/lib/k3k/credentials", ReadOnly: true}}, ctr.VolumeMounts); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v: AgentsReady depends on it", ctr.ReadinessProbe)
	}
}

func TestAgentDNSService(t *testing.T) {
	c := sampleCluster()
	svc := DesiredAgentDNSService(c)
	d := DesiredAgentDeployment(c, testConfig, AgentHost{})
	if svc.Name != "k3k-demo-dns" || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("service %s of type %s", svc.Name, svc.Spec.Type)
	}
	if diff := cmp.Diff(d.Spec.Template.Labels, svc.Spec.Selector); diff != "" {
		t.Errorf("the Service does not select the agent pods (-pod labels +selector):\n%s", diff)
	}
	// Port 53 of both protocols reaches a port the agent container declares.
	declared := map[string]bool{}
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		declared[fmt.Sprintf("%s/%d", p.Protocol, p.ContainerPort)] = true
	}
	protocols := map[corev1.Protocol]bool{}
	for _, p := range svc.Spec.Ports {
		protocols[p.Protocol] = true
		if p.Port != 53 || !declared[fmt.Sprintf("%s/%d", p.Protocol, p.TargetPort.IntVal)] {
			t.Errorf("port %s %d -> %s is not served by the agent container (declares %v)", p.Protocol, p.Port, p.TargetPort.String(), declared)
		}
	}
	if !protocols[corev1.ProtocolUDP] || !protocols[corev1.ProtocolTCP] {
		t.Errorf("DNS needs UDP and TCP (truncated answers are retried over TCP): %v", protocols)
	}
}

func TestAgentsCondition(t *testing.T) {
	cases := []struct {
		name string
		d    *appsv1.Deployment
		want condResult
	}{
		{"no Deployment yet", nil, condResult{false, v1beta1.ReasonAgentsStarting, "the agent Deployment does not exist yet"}},
		{"the agent is not ready", &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: 1},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: 1, UpdatedReplicas: 1},
		}, condResult{false, v1beta1.ReasonAgentsStarting, "0/1 agents ready"}},
		{"a new spec is rolling out", &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: 1, UpdatedReplicas: 1, ReadyReplicas: 1},
		}, condResult{false, v1beta1.ReasonAgentsStarting, "1/1 agents ready, rollout in progress"}},
		{"the agent is ready", &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: 2, UpdatedReplicas: 1, ReadyReplicas: 1},
		}, condResult{true, v1beta1.ReasonAgentsReady, "1/1 agents ready"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentsCondition(tc.d); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAgentRoleAgainstTheAPIServer binds the agent's Role in a namespace of the
// real API server and asks its authorizer what the agent may do: everything
// the agent needs, nothing that reads the cluster's Secrets or reaches beyond
// the namespace.
func TestAgentRoleAgainstTheAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := sampleCluster()
	c.Namespace = ns
	role := DesiredAgentClusterRole("k3k-agent-" + ns)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), role) })
	for _, obj := range []client.Object{DesiredAgentServiceAccount(c), role, DesiredAgentRoleBinding(c, role.Name)} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	n := layout.NamesFor(c)
	user := "system:serviceaccount:" + ns + ":" + layout.AgentName(c.Name)
	// The authorizer sees the RoleBinding through its own informer, a moment
	// after the write (a warm CI run asked first and was refused): wait until
	// it grants something the binding grants, then ask everything.
	deadline := time.Now().Add(30 * time.Second)
	for {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "pods"},
		}}
		if err := k8s.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's RoleBinding never took effect: %s", sar.Status.Reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cases := []struct {
		name                           string
		verb, resource, sub, obj, inNS string
		allowed                        bool
	}{
		{"it watches pods", "watch", "pods", "", "", ns, true},
		{"it creates host pods", "create", "pods", "", "", ns, true},
		{"it deletes host pods", "delete", "pods", "", "x", ns, true},
		{"it updates host pod images", "update", "pods", "", "x", ns, true},
		{"it reads host pod logs for kubectl logs", "get", "pods", "log", "x", ns, true},
		{"it creates Secret copies", "create", "secrets", "", "", ns, true},
		{"it updates Secret copies", "update", "secrets", "", "x", ns, true},
		{"it creates ConfigMap copies", "create", "configmaps", "", "", ns, true},
		{"it watches host Services", "watch", "services", "", "", ns, true},
		{"it creates host Service copies", "create", "services", "", "", ns, true},
		{"it updates host Service copies", "update", "services", "", "x", ns, true},
		{"it deletes host Service copies", "delete", "services", "", "x", ns, true},
		{"it watches EndpointSlices", "watch", "endpointslices", "", "", ns, true},
		{"it creates EndpointSlices for Service copies", "create", "endpointslices", "", "", ns, true},
		{"it updates EndpointSlices", "update", "endpointslices", "", "x", ns, true},
		{"it deletes EndpointSlices", "delete", "endpointslices", "", "x", ns, true},
		{"it cannot read the token Secret", "get", "secrets", "", n.Token, ns, false},
		{"it cannot read the kubeconfig Secret", "get", "secrets", "", n.Kubeconfig, ns, false},
		{"it cannot list Secrets", "list", "secrets", "", "", ns, false},
		{"it cannot watch Secrets", "watch", "secrets", "", "", ns, false},
		{"it cannot patch a Secret (a patch response returns the whole object)", "patch", "secrets", "", n.Token, ns, false},
		{"it cannot delete a Secret (a delete response returns the object)", "delete", "secrets", "", n.Token, ns, false},
		{"it cannot read the server configuration", "get", "configmaps", "", n.ServerConfig, ns, false},
		{"it cannot write pod status, the host kubelet's job", "update", "pods", "status", "x", ns, false},
		{"it may exec (the guard keeps it to its own pods)", "create", "pods", "exec", "x", ns, true},
		{"it may port-forward (the guard keeps it to its own pods)", "create", "pods", "portforward", "x", ns, true},
		{"it may exec over a websocket (a GET)", "get", "pods", "exec", "x", ns, true},
		{"it cannot touch another namespace", "list", "pods", "", "", "default", false},
		{"it cannot create Services in another namespace", "create", "services", "", "", "default", false},
		{"it cannot write core Endpoints", "create", "endpoints", "", "", ns, false},
		{"it cannot write Service status (no load balancers)", "update", "services", "status", "x", ns, false},
		{"it cannot change its own permissions", "update", "roles", "", layout.AgentName(c.Name), ns, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			group := ""
			switch tc.resource {
			case "roles":
				group = "rbac.authorization.k8s.io"
			case "endpointslices":
				group = "discovery.k8s.io"
			}
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: tc.inNS, Verb: tc.verb, Group: group, Resource: tc.resource, Subresource: tc.sub, Name: tc.obj,
				},
			}}
			if err := k8s.Create(ctx, sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != tc.allowed {
				t.Errorf("allowed = %v, want %v (%s)", sar.Status.Allowed, tc.allowed, sar.Status.Reason)
			}
		})
	}
}

func TestAgentPodSecurityLevel(t *testing.T) {
	cases := []struct {
		name  string
		level v1beta1.PodSecurityLevel
		allow bool
		want  v1beta1.PodSecurityLevel
	}{
		{"an empty level is baseline", "", false, v1beta1.PodSecurityBaseline},
		{"baseline stays", v1beta1.PodSecurityBaseline, true, v1beta1.PodSecurityBaseline},
		{"restricted is the Cluster's choice", v1beta1.PodSecurityRestricted, false, v1beta1.PodSecurityRestricted},
		{"privileged needs the host administrator's consent", v1beta1.PodSecurityPrivileged, false, v1beta1.PodSecurityBaseline},
		{"privileged where the chart allows it", v1beta1.PodSecurityPrivileged, true, v1beta1.PodSecurityPrivileged},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := sampleCluster()
			c.Spec.PodSecurityLevel = tc.level
			cfg := testConfig
			cfg.AllowPrivilegedPods = tc.allow
			if got := AgentPodSecurityLevel(c, cfg); got != tc.want {
				t.Errorf("level %q, want %q", got, tc.want)
			}
			args := AgentArgs(c, cfg, AgentHost{})
			if last := args[len(args)-1]; last != "--pod-security-level="+string(tc.want) {
				t.Errorf("agent argument %q", last)
			}
		})
	}
}

// TestAgentArgsPassOnlyWhatIsSet: the grace period cap and the host
// administrator's agent defaults reach the agent's command line when set,
// and nothing is added otherwise, so the Deployments of existing agents do
// not change on an upgrade.
func TestAgentArgsPassOnlyWhatIsSet(t *testing.T) {
	base := AgentArgs(sampleCluster(), testConfig, AgentHost{})
	cases := []struct {
		name    string
		cluster func(*v1beta1.Cluster)
		agent   AgentDefaults
		userns  bool
		want    []string
	}{
		{name: "nothing set adds nothing", want: nil},
		{name: "the default host cluster domain adds nothing", agent: AgentDefaults{HostClusterDomain: DefaultHostClusterDomain}, want: nil},
		{name: "a grace period cap", cluster: func(c *v1beta1.Cluster) { c.Spec.MaxTerminationGracePeriodSeconds = ptr.To(int64(60)) },
			want: []string{"--max-termination-grace-period-seconds=60"}},
		{name: "seccomp default off", agent: AgentDefaults{DisableSeccompDefault: true}, want: []string{"--seccomp-default=false"}},
		{name: "localhost seccomp profiles", agent: AgentDefaults{SeccompLocalhostProfiles: []string{"profiles/a.json", "b.json"}},
			want: []string{"--seccomp-localhost-profiles=profiles/a.json,b.json"}},
		{name: "localhost AppArmor profiles", agent: AgentDefaults{AppArmorLocalhostProfiles: []string{"k3k-a", "k3k-b"}},
			want: []string{"--apparmor-localhost-profiles=k3k-a,k3k-b"}},
		{name: "default requests and limits, sorted by name", agent: AgentDefaults{
			DefaultRequests: corev1.ResourceList{"memory": resource.MustParse("64Mi"), "cpu": resource.MustParse("0.05"), "cpu-x": resource.MustParse("1")},
			DefaultLimits:   corev1.ResourceList{"memory": resource.MustParse("1Gi")},
		}, want: []string{"--default-requests=cpu=50m,cpu-x=1,memory=64Mi", "--default-limits=memory=1Gi"}},
		{name: "images pulled as the tenant says", agent: AgentDefaults{DisableAlwaysPullImages: true}, want: []string{"--always-pull-images=false"}},
		{name: "registries by address", agent: AgentDefaults{AllowRegistryAddresses: true}, want: []string{"--allow-registry-addresses"}},
		{name: "priority classes, sorted by virtual name", agent: AgentDefaults{PriorityClasses: map[string]string{"critical": "tenant-critical", "batch": "tenant-batch"}},
			want: []string{"--priority-classes=batch=tenant-batch,critical=tenant-critical"}},
		{name: "storage class copies off", agent: AgentDefaults{DisableStorageClassCopies: true}, want: []string{"--storage-class-copies=false"}},
		{name: "another host cluster domain", agent: AgentDefaults{HostClusterDomain: "corp.internal"}, want: []string{"--host-cluster-domain=corp.internal"}},
		{name: "user namespaces decided on", userns: true, want: []string{"--user-namespaces"}},
		{name: "user namespaces auto, decided off", agent: AgentDefaults{UserNamespaces: UserNamespacesAuto}, want: nil},
		{name: "everything", cluster: func(c *v1beta1.Cluster) { c.Spec.MaxTerminationGracePeriodSeconds = ptr.To(int64(3600)) },
			agent: AgentDefaults{DisableSeccompDefault: true, SeccompLocalhostProfiles: []string{"a"}, DefaultLimits: corev1.ResourceList{"cpu": resource.MustParse("2")}, HostClusterDomain: "x.local"},
			want:  []string{"--max-termination-grace-period-seconds=3600", "--seccomp-default=false", "--seccomp-localhost-profiles=a", "--default-limits=cpu=2", "--host-cluster-domain=x.local"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := sampleCluster()
			if tc.cluster != nil {
				tc.cluster(c)
			}
			cfg := testConfig
			cfg.Agent = tc.agent
			got := AgentArgs(c, cfg, AgentHost{UserNamespaces: tc.userns})
			if diff := cmp.Diff(base, got[:min(len(base), len(got))]); diff != "" {
				t.Fatalf("the Cluster's own flags changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got[len(base):], cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("added flags (-want +got):\n%s", diff)
			}
		})
	}
}
