package charttest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

// serviceAccountUser is how the API server names the chart's ServiceAccount.
var serviceAccountUser = "system:serviceaccount:" + releaseNS + ":" + release

// asControllerServiceAccount is restConfig impersonating the controller's
// ServiceAccount: requests get exactly the rights the chart's RBAC grants.
func asControllerServiceAccount() *rest.Config {
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceAccountUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
	}
	return cfg
}

// applyRendered creates every rendered object for real (except the
// Deployment: no kubelet runs here, the test runs the controller in-process).
func applyRendered(t *testing.T, values string) {
	t.Helper()
	ctx := context.Background()
	objs := render(t, values, "--include-crds")
	installCRDs(t, objs)
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Deployment" {
			continue
		}
		if ns := o.GetNamespace(); ns != "" {
			ensureNamespace(t, ns)
		}
		if err := k8s.Create(ctx, o.DeepCopy()); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
			live := o.DeepCopy()
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
				t.Fatal(err)
			}
			o.SetResourceVersion(live.GetResourceVersion())
			if err := k8s.Update(ctx, o.DeepCopy()); err != nil {
				t.Fatalf("updating %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
}

// removeRendered deletes the RBAC objects of a value set, so the next test
// starts from its own rights only.
func removeRendered(t *testing.T, values string) {
	t.Helper()
	for _, o := range render(t, values) {
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := k8s.Delete(context.Background(), o.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
}

// TestControllerRunsOnTheChartsRBAC runs the real reconciler in a manager with
// leader election and the production cache, authenticated as the chart's
// ServiceAccount, and requires it to build a whole Cluster: every list, watch
// and write it makes is allowed by the chart, including creating the Role it
// hands to the server pods (which RBAC allows only to holders of those rights).
func TestControllerRunsOnTheChartsRBAC(t *testing.T) {
	cases := []struct {
		name, values, clusterNS string
		watch                   []string
	}{
		{"cluster-wide", "", "tenant-cw", nil},
		{"watched namespaces", "watch-namespaces.yaml", "team-b", []string{"team-a", "team-b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			applyRendered(t, tc.values)
			t.Cleanup(func() { removeRendered(t, tc.values) })
			ensureNamespace(t, tc.clusterNS)
			runController(t, tc.watch)

			name := "rbac-" + tc.clusterNS
			// The backup claim, handed to the cluster as its owner would, and
			// for reading to its restore Job.
			claim := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "snapshots", Namespace: tc.clusterNS, Labels: map[string]string{v1beta1.LabelBackupFor: name, v1beta1.LabelRestoreFor: name}},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}
			if err := k8s.Create(context.Background(), claim); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), claim) })
			c := &v1beta1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tc.clusterNS},
				Spec: v1beta1.ClusterSpec{
					Expose:      &v1beta1.ExposeConfig{Ingress: &v1beta1.IngressConfig{Host: "vc.example.com"}},
					Backup:      &v1beta1.BackupConfig{Schedule: "@daily", Keep: 2, ClaimName: "snapshots"},
					RestoreFrom: &v1beta1.RestoreSource{ClaimName: "snapshots", File: "old.k3ksnap"},
				},
			}
			if err := k8s.Create(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			n, iso := layout.NamesFor(c), cluster.IsolationNamesFor(c)
			waitFor(t, "the controller to build the cluster as its ServiceAccount", func() error {
				for _, o := range []client.Object{
					&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.Token}},
					&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.Kubeconfig}},
					&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n.ServerConfig}},
					&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: n.Service}},
					&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: n.ServiceAccount}},
					&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: n.ServiceAccount}},
					&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: n.ServiceAccount}},
					&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: n.StatefulSet}},
					&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: n.Ingress}},
					// The agent: bound to the agent ClusterRole, which the
					// controller may bind but does not hold.
					&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: layout.AgentName(c.Name)}},
					&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: layout.AgentName(c.Name)}},
					&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: layout.AgentName(c.Name)}},
					// Isolation: quota, limits and the three policies; the
					// server and agent policies are written only once the
					// host API's EndpointSlices were read (Role in default).
					&corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: iso.Quota}},
					&corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: iso.LimitRange}},
					&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: iso.WorkloadPolicy}},
					&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: iso.ServerPolicy}},
					&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: iso.AgentPolicy}},
					// spec.backup: the Role (the controller holds what it
					// grants) and the binding to the exec ClusterRole (which it
					// may bind but does not hold).
					&batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: layout.BackupName(c.Name)}},
					&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: layout.BackupName(c.Name)}},
					&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: layout.BackupName(c.Name)}},
					&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: layout.BackupName(c.Name)}},
					&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: layout.BackupName(c.Name) + "-exec"}},
					// spec.restoreFrom: the Job, and a Role with update on
					// the token Secret (the controller holds it).
					&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: layout.RestoreName(c.Name)}},
					&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: layout.RestoreName(c.Name)}},
					&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: layout.RestoreName(c.Name)}},
					&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: layout.RestoreName(c.Name)}},
					&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: layout.RestoreName(c.Name) + "-exec"}},
				} {
					if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: o.GetName()}, o); err != nil {
						return fmt.Errorf("%T %s: %w", o, o.GetName(), err)
					}
				}
				got := &v1beta1.Cluster{}
				if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(c), got); err != nil {
					return err
				}
				if got.Status.ObservedGeneration != got.Generation || got.Status.Phase == "" {
					return fmt.Errorf("status not written (phase %q)", got.Status.Phase)
				}
				return nil
			})
			serverPolicy := &networkingv1.NetworkPolicy{}
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: iso.ServerPolicy}, serverPolicy); err != nil {
				t.Fatal(err)
			}
			if !allowsAnAddress(serverPolicy) {
				t.Errorf("server policy egress %+v allows no host API address", serverPolicy.Spec.Egress)
			}
			// Removing spec.backup removes its objects, as the ServiceAccount.
			if err := retryOnConflict(func() error {
				live := &v1beta1.Cluster{}
				if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(c), live); err != nil {
					return err
				}
				live.Spec.Backup = nil
				return k8s.Update(context.Background(), live)
			}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the controller to remove the backup objects as its ServiceAccount", func() error {
				for _, o := range []client.Object{&batchv1.CronJob{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
					if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: c.Namespace, Name: layout.BackupName(c.Name)}, o); !apierrors.IsNotFound(err) {
						return fmt.Errorf("%T %s still there: %v", o, layout.BackupName(c.Name), err)
					}
				}
				return nil
			})
			lease := &coordinationv1.Lease{}
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: "k3k-controller.k3k.io"}, lease); err != nil {
				t.Errorf("leader election Lease not taken: %v", err)
			} else if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
				t.Error("leader election Lease has no holder")
			}
		})
	}
}

// runController starts the manager as cmd/controller does, as the chart's
// ServiceAccount, until the test ends.
func runController(t *testing.T, watch []string) {
	t.Helper()
	cacheOpts := cache.Options{ByObject: cluster.CacheByObject()}
	if len(watch) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range watch {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(asControllerServiceAccount(), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Each subtest starts its own manager with the same controller name.
		Controller:                    config.Controller{SkipNameValidation: ptrTo(true)},
		LeaderElection:                true,
		LeaderElectionID:              "k3k-controller.k3k.io",
		LeaderElectionNamespace:       releaseNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptrTo(4 * time.Second),
		RenewDeadline:                 ptrTo(3 * time.Second),
		RetryPeriod:                   ptrTo(500 * time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &cluster.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ValidateKubeconfig: kubeconfig.Validate,
		Config: cluster.Config{
			ServerImage: "rancher/k3s", DefaultVersion: "v1.34.3-k3s1",
			DatastoreImage: "k3k-io/k3k-datastore:test", AgentImage: "k3k-io/k3k-kubelet:test", AgentClusterRole: agentRole,
			BackupExecClusterRole: backupExecRole, NodeLossTimeout: 5 * time.Minute,
			PullPolicy: corev1.PullIfNotPresent, DefaultPersistence: v1beta1.DynamicPersistence, DefaultDatastore: v1beta1.SQLiteDatastore,
			Isolation: cluster.IsolationDefaults{
				QuotaHard:           corev1.ResourceList{corev1.ResourcePods: resource.MustParse("20")},
				LimitDefaultRequest: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
		},
	}
	if err := cluster.CheckNodeLossAccess(context.Background(), mgr.GetClient(), r.Config); err != nil {
		t.Fatalf("the chart's RBAC with nodeLossTimeout: %v", err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
}

func ptrTo[T any](v T) *T { return &v }

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestChartGrantsNothingMore asks the API server's authorizer what the
// ServiceAccount may do: the rights an attacker would want from a controller
// must be refused.
func TestChartGrantsNothingMore(t *testing.T) {
	applyRendered(t, "watch-namespaces-no-node-loss.yaml")
	t.Cleanup(func() { removeRendered(t, "watch-namespaces-no-node-loss.yaml") })
	cases := []struct {
		name string
		attr authorizationv1.ResourceAttributes
	}{
		{"delete Secrets", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "delete", Resource: "secrets"}},
		{"read Secrets outside the watched namespaces", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "secrets"}},
		{"list Secrets cluster-wide", authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}},
		{"create pods", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Resource: "pods"}},
		{"exec into pods", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Resource: "pods", Subresource: "exec"}},
		// Reading Nodes is granted for userNamespaces auto (the default);
		// writing them, and their proxy (every kubelet's API), are not.
		{"update nodes", authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes"}},
		{"update node status", authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes", Subresource: "status"}},
		{"proxy to nodes", authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "proxy"}},
		{"create ClusterRoles", authorizationv1.ResourceAttributes{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}},
		{"bind cluster-admin", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "cluster-admin"}},
		{"delete pods", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "delete", Resource: "pods"}},
		{"escalate Roles", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "roles"}},
		{"delete Clusters", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "delete", Group: "k3k.io", Resource: "clusters"}},
		{"change Cluster specs", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "update", Group: "k3k.io", Resource: "clusters"}},
		{"delete volume claims", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "delete", Resource: "persistentvolumeclaims"}},
		// nodeLossTimeout 0: no node-loss handling, so no reading of volumes.
		{"read PersistentVolumes", authorizationv1.ResourceAttributes{Verb: "get", Resource: "persistentvolumes"}},
		{"delete NetworkPolicies outside the watched namespaces", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "delete", Group: "networking.k8s.io", Resource: "networkpolicies"}},
		{"delete ResourceQuotas outside the watched namespaces", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "delete", Resource: "resourcequotas"}},
		{"write CRDs", authorizationv1.ResourceAttributes{Verb: "update", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}},
		{"write the host API's EndpointSlices", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "update", Group: "discovery.k8s.io", Resource: "endpointslices", Name: "kubernetes"}},
		{"read EndpointSlices outside default", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices"}},
		{"read EndpointSlices cluster-wide", authorizationv1.ResourceAttributes{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices"}},
		{"read Services in default", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "services"}},
		// VirtualClusterPolicies and Namespaces are read (policy.go), never written.
		{"write VirtualClusterPolicies", authorizationv1.ResourceAttributes{Verb: "update", Group: "k3k.io", Resource: "virtualclusterpolicies"}},
		{"label Namespaces", authorizationv1.ResourceAttributes{Verb: "patch", Resource: "namespaces", Name: "team-a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               serviceAccountUser,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
				ResourceAttributes: &tc.attr,
			}}
			if err := k8s.Create(context.Background(), review); err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed {
				t.Errorf("the controller's ServiceAccount may %s", tc.name)
			}
		})
	}
	// And the ones it needs, so the test proves the reviews are answered at all.
	for _, attr := range []authorizationv1.ResourceAttributes{
		{Namespace: "team-a", Verb: "create", Resource: "secrets"},
		{Namespace: "default", Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices"},
	} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: serviceAccountUser, ResourceAttributes: &attr}}
		if err := k8s.Create(context.Background(), review); err != nil || !review.Status.Allowed {
			t.Errorf("the ServiceAccount may not %s %s in %s (err %v): the chart's rights are not in force", attr.Verb, attr.Resource, attr.Namespace, err)
		}
	}
}

// retryOnConflict runs f until it does not fail with a conflict.
func retryOnConflict(f func() error) error {
	for {
		err := f()
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// allowsAnAddress says whether p's egress allows a single address (/32 or
// /128) on a port: the host API's endpoints.
func allowsAnAddress(p *networkingv1.NetworkPolicy) bool {
	for _, r := range p.Spec.Egress {
		for _, peer := range r.To {
			if peer.IPBlock != nil && len(r.Ports) == 1 && (strings.HasSuffix(peer.IPBlock.CIDR, "/32") || strings.HasSuffix(peer.IPBlock.CIDR, "/128")) {
				return true
			}
		}
	}
	return false
}
