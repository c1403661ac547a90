package charttest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// renderRelease runs helm template for a release of another name and
// namespace than the suite's, returning the manifests as text and as objects.
func renderRelease(t *testing.T, name, namespace string, extra ...string) (string, []*unstructured.Unstructured) {
	t.Helper()
	args := append([]string{"template", name, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}, extra...)
	out, stderr, err := helm(args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	objs, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	return out, objs
}

// TestFullnameOverrideRenamesEveryObject renders release "prod" (whose
// objects are prod-k3k…) with fullnameOverride ops: every object but the CRD
// is named ops or ops-…, no text of the manifests still says prod-k3k, and
// every name one object gives another (role refs, subjects, the policy a
// binding applies, the controller's --agent-cluster-role and its bind right)
// is an object of the release. The renamed RBAC is then created on the real
// API server, and its authorizer grants the renamed ServiceAccount bind on
// the renamed agent ClusterRole only.
func TestFullnameOverrideRenamesEveryObject(t *testing.T) {
	const ns = "ops-system"
	_, before := renderRelease(t, "prod", ns, "--include-crds", "--set", "metrics.serviceMonitor.enabled=true")
	text, after := renderRelease(t, "prod", ns, "--include-crds", "--set", "metrics.serviceMonitor.enabled=true", "--set", "fullnameOverride=ops")

	if find(before, "Deployment", ns, "prod-k3k") == nil {
		t.Fatalf("without an override the Deployment is not prod-k3k; the test proves nothing (kinds %v)", kinds(before))
	}
	if !maps.Equal(kinds(before), kinds(after)) {
		t.Errorf("the override changes what is rendered: %v, then %v", kinds(before), kinds(after))
	}
	names := map[string]bool{}
	for _, o := range after {
		if o.GetKind() == "CustomResourceDefinition" {
			continue
		}
		names[o.GetKind()+"/"+o.GetName()] = true
		if n := o.GetName(); n != "ops" && !strings.HasPrefix(n, "ops-") {
			t.Errorf("%s %s keeps a name of its own", o.GetKind(), n)
		}
	}
	if strings.Contains(text, "prod-k3k") {
		for i, line := range strings.Split(text, "\n") {
			if strings.Contains(line, "prod-k3k") {
				t.Errorf("line %d still says the old name: %s", i+1, strings.TrimSpace(line))
			}
		}
	}

	// Every name one object gives another is one of the release's objects.
	refs := map[string]string{} // what refers -> kind/name it refers to
	for _, o := range after {
		id := o.GetKind() + " " + o.GetName()
		switch o.GetKind() {
		case "ClusterRoleBinding", "RoleBinding":
			b := typed[rbacv1.RoleBinding](t, o)
			refs[id+" roleRef"] = b.RoleRef.Kind + "/" + b.RoleRef.Name
			for i, s := range b.Subjects {
				refs[fmt.Sprintf("%s subject %d", id, i)] = s.Kind + "/" + s.Name
			}
		case "ValidatingAdmissionPolicyBinding":
			p, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
			refs[id+" policyName"] = "ValidatingAdmissionPolicy/" + p
		case "ClusterRole", "Role":
			for _, r := range typed[rbacv1.ClusterRole](t, o).Rules {
				if slices.Contains(r.Verbs, "bind") {
					for i, n := range r.ResourceNames {
						refs[fmt.Sprintf("%s bind %d", id, i)] = "ClusterRole/" + n
					}
				}
			}
		case "Deployment":
			d := typed[appsv1.Deployment](t, o)
			refs[id+" serviceAccountName"] = "ServiceAccount/" + d.Spec.Template.Spec.ServiceAccountName
			for _, a := range d.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--agent-cluster-role="); ok {
					refs[id+" --agent-cluster-role"] = "ClusterRole/" + v
				}
			}
		}
	}
	for _, want := range []string{"ClusterRole/ops-agent", "ServiceAccount/ops", "ValidatingAdmissionPolicy/ops-agent-guard"} {
		if !slices.Contains(slices.Collect(maps.Values(refs)), want) {
			t.Errorf("nothing refers to %s; references: %v", want, refs)
		}
	}
	for from, to := range refs {
		if !names[to] {
			t.Errorf("%s names %s, which the release does not make", from, to)
		}
	}

	// The renamed RBAC, for real: the authorizer answers for the renamed names.
	ctx := context.Background()
	ensureNamespace(t, ns)
	for _, o := range after {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		o := o.DeepCopy()
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() {
			if err := k8s.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		})
	}
	sa := "system:serviceaccount:" + ns + ":ops"
	for _, tc := range []struct {
		role  string
		allow bool
	}{{"ops-agent", true}, {"prod-k3k-agent", false}, {agentRole, false}} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "tenant", Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: tc.role},
		}}
		if err := k8s.Create(ctx, review); err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != tc.allow {
			t.Errorf("%s may bind ClusterRole %s: %v, want %v", sa, tc.role, review.Status.Allowed, tc.allow)
		}
	}
}

// TestNameOverrideReplacesTheChartName: nameOverride takes the chart name's
// place in the full name and in the app.kubernetes.io/name label the
// Deployment selects its pods by.
func TestNameOverrideReplacesTheChartName(t *testing.T) {
	_, objs := renderRelease(t, "prod", releaseNS, "--set", "nameOverride=vc")
	d := deploymentNamed(t, objs, releaseNS, "prod-vc")
	if got := d.Spec.Selector.MatchLabels["app.kubernetes.io/name"]; got != "vc" {
		t.Errorf("selector app.kubernetes.io/name %q, want vc", got)
	}
	if find(objs, "ClusterRole", "", "prod-vc-agent") == nil || find(objs, "Service", releaseNS, "prod-vc-metrics") == nil {
		t.Errorf("the agent ClusterRole and metrics Service do not follow nameOverride; kinds %v", kinds(objs))
	}
}

// deploymentNamed is the rendered Deployment of that name, typed.
func deploymentNamed(t *testing.T, objs []*unstructured.Unstructured, namespace, name string) *appsv1.Deployment {
	t.Helper()
	u := find(objs, "Deployment", namespace, name)
	if u == nil {
		t.Fatalf("no Deployment %s/%s rendered; kinds: %v", namespace, name, kinds(objs))
	}
	return typed[appsv1.Deployment](t, u)
}
