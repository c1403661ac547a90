package charttest

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/k3k-io/k3k/internal/controller/cluster"
)

func TestHelmLintPassesStrictlyForEveryValueSet(t *testing.T) {
	for _, values := range valueSets {
		args := []string{"lint", "--strict", chartDir, "--namespace", releaseNS, "--kube-version", kubeVersion}
		if values != "" {
			args = append(args, "--values", filepath.Join("testdata", "values", values))
		}
		if out, stderr, err := helm(args...); err != nil {
			t.Errorf("helm lint with %q: %v\n%s%s", values, err, out, stderr)
		}
	}
}

// args is the controller container's command line as a set of --flag=value.
func args(t *testing.T, d *appsv1.Deployment) []string {
	t.Helper()
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	return d.Spec.Template.Spec.Containers[0].Args
}

func wantArgs(t *testing.T, d *appsv1.Deployment, want ...string) {
	t.Helper()
	got := args(t, d)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("controller args lack %q; they are:\n  %s", w, strings.Join(got, "\n  "))
		}
	}
}

func TestTemplatePassesValuesToTheController(t *testing.T) {
	cases := []struct {
		values string
		check  func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment)
	}{{
		values: "",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			c := d.Spec.Template.Spec.Containers[0]
			if c.Image != "k3k-io/k3k-controller:v0.2.0" || c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("controller image %s (%s), want the appVersion tag", c.Image, c.ImagePullPolicy)
			}
			wantArgs(t, d,
				"--leader-elect=true", "--leader-election-namespace="+releaseNS,
				"--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=5s",
				"--server-image=rancher/k3s", "--default-version=v1.34.3-k3s1", "--server-gogc=25",
				"--datastore-image=k3k-io/k3k-datastore:v0.2.0", "--agent-image=k3k-io/k3k-kubelet:v0.2.0",
				"--image-pull-policy=IfNotPresent", "--image-pull-secrets=",
				"--default-persistence-type=dynamic", "--default-storage-class=", "--default-datastore-type=sqlite", "--default-server-spread=Preferred",
				"--watch-namespaces=", "--workers=4", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
				"--agent-cluster-role="+agentRole, "--controller-namespace="+releaseNS,
				"--default-quota=configmaps=200,count/endpointslices.discovery.k8s.io=200,count/ingresses.networking.k8s.io=50,persistentvolumeclaims=20,pods=100,requests.storage=100Gi,secrets=300,services=50",
				"--default-limit-request=", "--default-limit=", "--default-limit-max=",
				"--network-policy=true", "--network-policy-egress-cidrs=", "--network-policy-egress-except=",
				"--agent-seccomp-default=true", "--agent-seccomp-localhost-profiles=", "--agent-apparmor-localhost-profiles=", "--agent-default-requests=", "--agent-default-limits=",
				"--host-cluster-domain=cluster.local", "--host-service-cidr=", "--agent-always-pull-images=true", "--agent-allow-registry-addresses=false",
				"--agent-storage-class-copies=true", "--agent-priority-classes=", "--zap-log-level=info")
			hostAPIRole(t, objs)
			serviceCIDRRole(t, objs)
			storageClassRole(t, objs)
			if len(c.Env) != 0 {
				t.Errorf("controller env %v without extraEnv, want none", c.Env)
			}
			if find(objs, "ClusterRole", "", release) == nil || find(objs, "ClusterRoleBinding", "", release) == nil {
				t.Errorf("no ClusterRole and binding without watchNamespaces; kinds: %v", kinds(objs))
			}
			if find(objs, "Role", releaseNS, release+"-leader-election") == nil {
				t.Error("no leader election Role in the release namespace")
			}
			if find(objs, "ServiceAccount", releaseNS, release) == nil {
				t.Error("no ServiceAccount")
			}
			pod := d.Spec.Template.Spec
			sc := c.SecurityContext
			if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
				sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("controller is not non-root with a read-only root filesystem and no capabilities: pod %+v container %+v", pod.SecurityContext, sc)
			}
			if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Error("probes missing")
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Error("no default memory request and limit")
			}
		},
	}, {
		values: "registry.yaml",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			r := "registry.example.com:5000/mirror/"
			if got := d.Spec.Template.Spec.Containers[0].Image; got != r+"k3k-io/k3k-controller:v9.9.9" {
				t.Errorf("controller image %s", got)
			}
			wantArgs(t, d, "--server-image="+r+"rancher/k3s", "--datastore-image="+r+"k3k-io/k3k-datastore:v0.2.0",
				"--agent-image="+r+"k3k-io/k3k-kubelet:v0.2.0", "--image-pull-secrets=regcred,other-cred")
			want := []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "other-cred"}}
			if !slices.Equal(d.Spec.Template.Spec.ImagePullSecrets, want) {
				t.Errorf("pod pull secrets %v, want %v", d.Spec.Template.Spec.ImagePullSecrets, want)
			}
		},
	}, {
		values: "watch-namespaces.yaml",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			wantArgs(t, d, "--watch-namespaces=team-a,team-b")
			// Only the agent's and the backup Jobs' ClusterRoles, which grant
			// nothing until the controller binds them in a watched namespace,
			// reading Nodes (userNamespaces auto, the default), the host's
			// default ServiceCIDR (hostServiceCIDR empty) and StorageClasses
			// (storageClassCopies, the default), and VirtualClusterPolicies
			// and Namespaces, which are cluster-wide.
			if n := kinds(objs)["ClusterRole"] + kinds(objs)["ClusterRoleBinding"]; n != 10 || find(objs, "ClusterRole", "", agentRole) == nil || find(objs, "ClusterRole", "", backupExecRole) == nil ||
				find(objs, "ClusterRole", "", release+"-nodes") == nil || find(objs, "ClusterRoleBinding", "", release+"-nodes") == nil {
				t.Errorf("%d cluster-wide RBAC objects with watchNamespaces set, want only ClusterRoles %s, %s, %s-nodes, %s-service-cidr, %s-storage-classes and %s-policies (bound)", n, agentRole, backupExecRole, release, release, release, release)
			}
			readingRole(t, objs, "policies", []rbacv1.PolicyRule{
				{APIGroups: []string{"k3k.io"}, Resources: []string{"virtualclusterpolicies"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
			})
			serviceCIDRRole(t, objs)
			storageClassRole(t, objs)
			readingRole(t, objs, "nodes", []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
				// nodeLossTimeout (the default): can a lost server's volume move?
				{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get"}},
			})
			for _, ns := range []string{"team-a", "team-b"} {
				if find(objs, "Role", ns, release) == nil || find(objs, "RoleBinding", ns, release) == nil {
					t.Errorf("no Role and RoleBinding in watched namespace %s", ns)
				}
			}
			// The host API's EndpointSlices are in default, watched or not.
			hostAPIRole(t, objs)
		},
	}, {
		values: "agent.yaml",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			wantArgs(t, d, "--agent-seccomp-default=false", "--agent-seccomp-localhost-profiles=profiles/audit.json,strict.json", "--agent-apparmor-localhost-profiles=k3k-audited,tenant-web",
				"--agent-default-requests=cpu=50m,memory=64Mi", "--agent-default-limits=memory=1Gi", "--host-cluster-domain=corp.internal",
				"--agent-always-pull-images=false", "--agent-allow-registry-addresses=true", "--agent-user-namespaces=false", "--host-service-cidr=10.96.0.0/12",
				"--agent-storage-class-copies=false", "--agent-priority-classes=batch=tenant-batch,critical=tenant-critical", "--node-loss-timeout=0")
			// Nodes are read only to decide user namespaces (auto) or for
			// node-loss handling (nodeLossTimeout not 0), the
			// ServiceCIDR only when hostServiceCIDR does not name the network,
			// StorageClasses only for the agents' copies; VirtualClusterPolicies
			// and Namespaces always.
			if n := kinds(objs)["ClusterRoleBinding"]; n != 2 || find(objs, "ClusterRoleBinding", "", release+"-policies") == nil || find(objs, "ClusterRole", "", release+"-nodes") != nil || find(objs, "ClusterRole", "", release+"-service-cidr") != nil ||
				find(objs, "ClusterRole", "", release+"-storage-classes") != nil {
				t.Errorf("%d ClusterRoleBindings, the nodes ClusterRole %v, the service-cidr one %v: want only the controller's own binding and the policies' with userNamespaces false, nodeLossTimeout 0 and hostServiceCIDR set",
					n, find(objs, "ClusterRole", "", release+"-nodes") != nil, find(objs, "ClusterRole", "", release+"-service-cidr") != nil)
			}
		},
	}, {
		values: "defaults.yaml",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			wantArgs(t, d, "--default-datastore-type=etcd", "--default-server-spread=Required", "--default-persistence-type=ephemeral",
				"--default-storage-class=fast-ssd", "--default-version=v1.33.5-k3s1", "--node-loss-timeout=10m")
		},
	}, {
		values: "isolation.yaml",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			wantArgs(t, d, "--default-quota=", "--default-limit-request=cpu=100m,memory=128Mi",
				"--default-limit=memory=1Gi", "--default-limit-max=cpu=4,memory=8Gi", "--network-policy=false",
				"--network-policy-egress-cidrs=0.0.0.0/0", "--network-policy-egress-except=10.244.0.0/16,10.96.0.0/12")
		},
	}, {
		values: "scheduling.yaml",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			pod := d.Spec.Template.Spec
			if *d.Spec.Replicas != 2 || pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 ||
				pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || pod.PriorityClassName != "system-cluster-critical" {
				t.Errorf("scheduling values not applied: replicas %d, %+v", *d.Spec.Replicas, pod)
			}
			if got := pod.Containers[0].Resources.Limits.Cpu().String(); got != "1" {
				t.Errorf("cpu limit %s, want 1", got)
			}
			wantArgs(t, d, "--metrics-bind-address=0")
			for _, p := range pod.Containers[0].Ports {
				if p.Name == "metrics" {
					t.Error("metrics port exposed with metricsPort 0")
				}
			}
		},
	}, {
		values: "observability.yaml",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			wantArgs(t, d, "--zap-log-level=debug", "--metrics-bind-address=:8080")
			want := []corev1.EnvVar{
				{Name: "HTTPS_PROXY", Value: "http://proxy.example.com:3128"},
				{Name: "NO_PROXY", Value: "10.0.0.0/8,.svc,.cluster.local"},
				{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "controller", Resource: "limits.memory"}}},
			}
			if diff := cmp.Diff(want, d.Spec.Template.Spec.Containers[0].Env); diff != "" {
				t.Errorf("controller env (-want +got):\n%s", diff)
			}
		},
	}, {
		values: "images.yaml",
		check: func(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) {
			c := d.Spec.Template.Spec.Containers[0]
			if c.Image != "k3k-io/k3k-controller:dev" || c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("controller image %s (%s)", c.Image, c.ImagePullPolicy)
			}
			wantArgs(t, d, "--server-image=k3k-io/k3s", "--default-version=v1.34.3-k3s1", "--datastore-image=k3k-io/k3k-datastore:dev",
				"--agent-image=k3k-io/k3k-kubelet:dev", "--image-pull-policy=Never")
		},
	}}
	for _, tc := range cases {
		name := tc.values
		if name == "" {
			name = "chart defaults"
		}
		t.Run(name, func(t *testing.T) {
			objs := render(t, tc.values)
			tc.check(t, objs, deployment(t, objs))
		})
	}
}

// hostAPIRole checks that the controller may read EndpointSlices in
// namespace default, the host API's, and nothing else there.
func hostAPIRole(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	role, binding := find(objs, "Role", "default", release+"-host-api"), find(objs, "RoleBinding", "default", release+"-host-api")
	if role == nil || binding == nil {
		t.Fatalf("no Role and RoleBinding %s-host-api in namespace default; kinds: %v", release, kinds(objs))
	}
	var r rbacv1.Role
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &r); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}}
	if diff := cmp.Diff(want, r.Rules); diff != "" {
		t.Errorf("Role %s-host-api rules (-want +got):\n%s", release, diff)
	}
	var b rbacv1.RoleBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(binding.Object, &b); err != nil {
		t.Fatal(err)
	}
	if b.RoleRef.Name != r.Name || len(b.Subjects) != 1 || b.Subjects[0].Name != release || b.Subjects[0].Namespace != releaseNS {
		t.Errorf("RoleBinding %s-host-api binds %+v to %+v, want the Role to the controller's ServiceAccount", release, b.RoleRef, b.Subjects)
	}
}

// serviceCIDRRole checks the right to read the host's Service network: get,
// on the default ServiceCIDR alone, bound to the controller.
func serviceCIDRRole(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	readingRole(t, objs, "service-cidr", []rbacv1.PolicyRule{{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, ResourceNames: []string{cluster.DefaultServiceCIDRName}, Verbs: []string{"get"}}})
}

// storageClassRole checks the ClusterRole that lets the controller read the
// host's StorageClasses (for the agents' copies), and nothing else.
func storageClassRole(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	readingRole(t, objs, "storage-classes", []rbacv1.PolicyRule{{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}}})
}

// readingRole checks that ClusterRole <release>-<suffix> exists, is bound,
// and grants exactly want: one of the cluster-wide reading rights the
// controller holds beside its own ClusterRole.
func readingRole(t *testing.T, objs []*unstructured.Unstructured, suffix string, want []rbacv1.PolicyRule) {
	t.Helper()
	name := release + "-" + suffix
	o := find(objs, "ClusterRole", "", name)
	if o == nil || find(objs, "ClusterRoleBinding", "", name) == nil {
		t.Fatalf("no ClusterRole and binding %s", name)
	}
	var role rbacv1.ClusterRole
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("ClusterRole %s grants other than %v (-want +got):\n%s", name, want, diff)
	}
}

func TestRBACIsLeastPrivilege(t *testing.T) {
	for _, values := range []string{"", "watch-namespaces.yaml"} {
		agentRoles, backupRoles := 0, 0
		for _, o := range render(t, values) {
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			var rules struct {
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &rules); err != nil {
				t.Fatal(err)
			}
			if o.GetKind() == "ClusterRole" && o.GetName() == agentRole {
				// The agent's rights, bound per namespace: exactly what the
				// controller's builders say the agent needs. The template is
				// generated from them (hack/agentguard, make verify); this
				// checks what Helm renders from it.
				agentRoles++
				if diff := cmp.Diff(cluster.AgentRules(), rules.Rules); diff != "" {
					t.Errorf("ClusterRole %s differs from cluster.AgentRules (-want +got):\n%s", agentRole, diff)
				}
				continue
			}
			if o.GetKind() == "ClusterRole" && o.GetName() == backupExecRole {
				// Exec into pods, bound per namespace to the backup Jobs of
				// Clusters with spec.backup: exactly cluster.BackupExecRules.
				backupRoles++
				if diff := cmp.Diff(cluster.BackupExecRules(), rules.Rules); diff != "" {
					t.Errorf("ClusterRole %s differs from cluster.BackupExecRules (-want +got):\n%s", backupExecRole, diff)
				}
				continue
			}
			for _, r := range rules.Rules {
				all := slices.Concat(r.APIGroups, r.Resources, r.Verbs)
				if slices.Contains(all, "*") {
					t.Errorf("%s %s: wildcard in rule %+v", o.GetKind(), o.GetName(), r)
				}
				// bind is allowed on the agent's and the backup Jobs'
				// ClusterRoles alone, each by name.
				if slices.Contains(r.Verbs, "bind") && !(slices.Equal(r.Verbs, []string{"bind"}) && slices.Equal(r.Resources, []string{"clusterroles"}) &&
					(slices.Equal(r.ResourceNames, []string{agentRole}) || slices.Equal(r.ResourceNames, []string{backupExecRole}))) {
					t.Errorf("%s %s grants bind beyond ClusterRoles %s and %s: %+v", o.GetKind(), o.GetName(), agentRole, backupExecRole, r)
				}
				for _, v := range []string{"delete", "deletecollection", "escalate", "impersonate"} {
					// delete only on a Cluster's isolation, backup and
					// disruption budget objects, which a spec change must be
					// able to remove, and on the server pods and claims of a
					// lost node (templates/_helpers.tpl).
					if v == "delete" && (isolationRule(r) || backupRule(r) || disruptionRule(r) || nodeLossRule(r)) {
						continue
					}
					if slices.Contains(r.Verbs, v) {
						t.Errorf("%s %s grants %q on %v; the controller never needs it", o.GetKind(), o.GetName(), v, r.Resources)
					}
				}
			}
		}
		if agentRoles != 1 || backupRoles != 1 {
			t.Errorf("values %q: %d ClusterRoles %s and %d %s rendered, want 1 each", values, agentRoles, agentRole, backupRoles, backupExecRole)
		}
		for _, o := range render(t, values) {
			if o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "RoleBinding" {
				ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
				if ref == "cluster-admin" || ref == "admin" || ref == "edit" {
					t.Errorf("%s %s binds the built-in role %s", o.GetKind(), o.GetName(), ref)
				}
			}
		}
	}
}

func TestNotesSayWhatWasInstalled(t *testing.T) {
	// helm template does not render NOTES.txt; a server-side dry-run install
	// against the test API server does, and exercises helm's install path.
	// A second release in a cluster whose CRD is there already: crds.install=false.
	out, stderr, err := helm("install", "notes", chartDir, "--namespace", "notes-test", "--create-namespace", "--dry-run=server",
		"--kubeconfig", kubeconfigPath, "--values", filepath.Join("testdata", "values", "watch-namespaces.yaml"), "--set", "crds.install=false")
	if err != nil {
		t.Fatalf("helm install --dry-run=server: %v\n%s", err, stderr)
	}
	for _, want := range []string{"watches Clusters in team-a, team-b", "datastore.type    sqlite", "k3kcli cluster create demo -n team-a"} {
		if !strings.Contains(out, want) {
			t.Errorf("NOTES do not say %q:\n%s", want, out)
		}
	}
}

// backupRule reports whether r is about the objects a Cluster's
// spec.backup makes, which removing it must remove: the CronJob, and the
// Job's ServiceAccount, Role and RoleBindings.
func backupRule(r rbacv1.PolicyRule) bool {
	switch {
	case slices.Equal(r.APIGroups, []string{"batch"}):
		return slices.Equal(r.Resources, []string{"cronjobs"})
	case slices.Equal(r.APIGroups, []string{"rbac.authorization.k8s.io"}):
		return slices.Equal(r.Resources, []string{"roles", "rolebindings"})
	case slices.Equal(r.APIGroups, []string{""}):
		return slices.Equal(r.Resources, []string{"serviceaccounts"})
	}
	return false
}

// disruptionRule reports whether r is about the servers'
// PodDisruptionBudget only, which goes when a Cluster shrinks to one server
// or pauses.
func disruptionRule(r rbacv1.PolicyRule) bool {
	return slices.Equal(r.APIGroups, []string{"policy"}) && slices.Equal(r.Resources, []string{"poddisruptionbudgets"})
}

// nodeLossRule reports whether r is the pods or the volume claims rule,
// whose delete node-loss handling needs (nodeLossTimeout, the default).
func nodeLossRule(r rbacv1.PolicyRule) bool {
	return slices.Equal(r.APIGroups, []string{""}) &&
		(slices.Equal(r.Resources, []string{"pods"}) || slices.Equal(r.Resources, []string{"persistentvolumeclaims"}))
}

// isolationRule reports whether r is about a Cluster's ResourceQuota,
// LimitRange or NetworkPolicies only.
func isolationRule(r rbacv1.PolicyRule) bool {
	switch {
	case slices.Equal(r.APIGroups, []string{""}):
		return slices.Equal(r.Resources, []string{"resourcequotas", "limitranges"})
	case slices.Equal(r.APIGroups, []string{"networking.k8s.io"}):
		return slices.Equal(r.Resources, []string{"networkpolicies"})
	}
	return false
}
