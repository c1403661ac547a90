package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/k3k-io/k3k/api/v1beta1"
)

func namespaceLabel(t *testing.T, ns string) string {
	t.Helper()
	n := &corev1.Namespace{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: ns}, n); err != nil {
		t.Fatal(err)
	}
	return n.Labels[v1beta1.LabelPolicyName]
}

func TestPolicyCreateBindDescribeAndDelete(t *testing.T) {
	name := fmt.Sprintf("team-%d", nsCounter.Add(1))
	a, b := newNamespace(t), newNamespace(t)
	r := k3kcli(t, "policy", "create", name, "--datastores", "sqlite,etcd", "--max-servers", "3", "--pod-security-level", "restricted",
		"--quota", "requests.cpu=4,pods=50", "--max-limits", "memory=2Gi", "--storage-classes", "fast",
		"--max-termination-grace-period-seconds", "60", "--bind", a)
	if r.code != ExitOK {
		t.Fatalf("create: exit %d: %s", r.code, r.errOut)
	}
	p := &v1beta1.VirtualClusterPolicy{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	if !slices.Equal(s.AllowedDatastores, []v1beta1.DatastoreType{"sqlite", "etcd"}) || *s.MaxServers != 3 || s.PodSecurityLevel != v1beta1.PodSecurityRestricted ||
		quantity(s.Quota.Hard, "pods") != "50" || quantity(s.MaxLimits, "memory") != "2Gi" ||
		!slices.Equal(s.StorageClasses, []string{"fast"}) || *s.MaxTerminationGracePeriodSeconds != 60 || s.AllowedMode != "" {
		t.Errorf("created spec %+v", s)
	}
	if got := namespaceLabel(t, a); got != name {
		t.Errorf("--bind %s: label %q", a, got)
	}

	// A namespace bound to another policy stays so without --overwrite.
	other := fmt.Sprintf("other-%d", nsCounter.Add(1))
	if r := k3kcli(t, "policy", "create", other, "--bind", b); r.code != ExitOK {
		t.Fatalf("create %s: exit %d", other, r.code)
	}
	r = k3kcli(t, "policy", "bind", name, b)
	if r.code != ExitError || !strings.Contains(r.errOut, "namespace "+b+" is bound to VirtualClusterPolicy "+other) || !strings.Contains(r.errOut, "--overwrite") {
		t.Errorf("bind over another policy: exit %d: %s", r.code, r.errOut)
	}
	if got := namespaceLabel(t, b); got != other {
		t.Errorf("refused bind changed the label to %q", got)
	}
	if r := k3kcli(t, "policy", "bind", name, b, "--overwrite"); r.code != ExitOK || namespaceLabel(t, b) != name {
		t.Errorf("bind --overwrite: exit %d, label %q", r.code, namespaceLabel(t, b))
	}
	// create --bind of a namespace bound elsewhere creates nothing.
	third := fmt.Sprintf("third-%d", nsCounter.Add(1))
	if r := k3kcli(t, "policy", "create", third, "--bind", b); r.code != ExitError || !strings.Contains(r.errOut, "nothing changed") {
		t.Errorf("create --bind of a bound namespace: exit %d: %s", r.code, r.errOut)
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: third}, &v1beta1.VirtualClusterPolicy{}); err == nil {
		t.Errorf("policy %s was created though its --bind was refused", third)
	}
	if r := k3kcli(t, "policy", "bind", "no-such-policy", b); r.code != ExitError || !strings.Contains(r.errOut, "not found") {
		t.Errorf("binding to a policy that does not exist: exit %d: %s", r.code, r.errOut)
	}

	r = k3kcli(t, "policy", "list")
	if r.code != ExitOK || !strings.Contains(r.out, name) || !strings.Contains(r.out, strings.Join([]string{a, b}, ",")) {
		t.Errorf("list: exit %d:\n%s", r.code, r.out)
	}

	// A Cluster of a bound namespace with what the controller reported.
	if r := k3kcli(t, "cluster", "create", "web", "-n", a, "--wait=false"); r.code != ExitOK {
		t.Fatalf("cluster create: exit %d", r.code)
	}
	web := getCluster(t, a, "web")
	setStatus(t, web, v1beta1.PhaseReady, metav1.Condition{Type: v1beta1.ConditionPolicy, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonPolicyApplied,
		Message: `VirtualClusterPolicy "` + name + `": tightened podSecurityLevel baseline → restricted`})
	r = k3kcli(t, "policy", "describe", name)
	for _, want := range []string{"Max servers:\t3", "Pod Security level:\trestricted", "Quota:\tpods=50,requests.cpu=4", "Max container limits:\tmemory=2Gi",
		"Namespaces:\t" + a + "," + b, "Cluster " + a + "/web:\tTrue PolicyApplied: VirtualClusterPolicy \"" + name + "\": tightened podSecurityLevel baseline → restricted"} {
		if !strings.Contains(strings.Join(strings.Fields(r.out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("describe lacks %q", want)
		}
	}

	// Deleting a policy that binds namespaces would loosen their Clusters.
	r = k3kcli(t, "policy", "delete", name)
	if r.code != ExitError || !strings.Contains(r.errOut, "binds namespaces "+a+", "+b) {
		t.Errorf("delete while bound: exit %d: %s", r.code, r.errOut)
	}
	if r := k3kcli(t, "policy", "unbind", a); r.code != ExitOK || namespaceLabel(t, a) != "" {
		t.Errorf("unbind: exit %d, label %q", r.code, namespaceLabel(t, a))
	}
	if r := k3kcli(t, "policy", "delete", name, "--unbind"); r.code != ExitOK {
		t.Errorf("delete --unbind: exit %d: %s", r.code, r.errOut)
	}
	if got := namespaceLabel(t, b); got != "" {
		t.Errorf("delete --unbind left %s bound to %q", b, got)
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, p); err == nil {
		t.Errorf("policy still there after delete")
	}
	_ = k3kcli(t, "policy", "delete", other)
}

func TestPolicyCreateRefusesBadValuesAndCreatesNothing(t *testing.T) {
	name := fmt.Sprintf("bad-%d", nsCounter.Add(1))
	for _, args := range [][]string{
		{"--mode", "virtual"},
		{"--datastores", "mysql"},
		{"--max-servers", "9"},
		{"--max-servers", "0"},
		{"--pod-security-level", "lax"},
		{"--quota", "cpu=lots"},
		{"--max-limits", "memory=-1Gi"},
		{"--max-termination-grace-period-seconds", "7200"},
	} {
		r := k3kcli(t, append([]string{"policy", "create", name}, args...)...)
		if r.code != ExitUsage || !strings.Contains(r.errOut, args[0]) {
			t.Errorf("%v: exit %d: %s", args, r.code, r.errOut)
		}
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, &v1beta1.VirtualClusterPolicy{}); err == nil {
		t.Errorf("a policy was created from bad values")
	}
}

func quantity(l map[corev1.ResourceName]resource.Quantity, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "(none)"
	}
	return q.String()
}
