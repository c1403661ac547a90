package cluster

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/kubeconfig"
	"github.com/k3k-io/k3k/pkg/layout"
)

// createCluster saves c and fails the test on error.
func createCluster(t *testing.T, c *v1beta1.Cluster) *v1beta1.Cluster {
	t.Helper()
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatalf("creating Cluster: %v", err)
	}
	return c
}

// get reads one object of c's namespace into obj, failing the test on error.
func get(t *testing.T, c *v1beta1.Cluster, name string, obj client.Object) {
	t.Helper()
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: c.Namespace, Name: name}, obj); err != nil {
		t.Fatalf("getting %T %s: %v", obj, name, err)
	}
}

// ownedObjects are the host objects of a sqlite Cluster, keyed by kind/name.
func ownedObjects(c *v1beta1.Cluster) map[string]client.Object {
	n := layout.NamesFor(c)
	return map[string]client.Object{
		"Secret/" + n.Token:                          &corev1.Secret{},
		"Secret/" + n.Kubeconfig:                     &corev1.Secret{},
		"ConfigMap/" + n.ServerConfig:                &corev1.ConfigMap{},
		"Service/" + n.Service:                       &corev1.Service{},
		"Service/" + n.Headless:                      &corev1.Service{},
		"StatefulSet/" + n.StatefulSet:               &appsv1.StatefulSet{},
		"ServiceAccount/" + n.ServiceAccount:         &corev1.ServiceAccount{},
		"Role/" + n.ServiceAccount:                   &rbacv1.Role{},
		"RoleBinding/" + n.ServiceAccount:            &rbacv1.RoleBinding{},
		"ServiceAccount/" + layout.AgentName(c.Name): &corev1.ServiceAccount{},
		"RoleBinding/" + layout.AgentName(c.Name):    &rbacv1.RoleBinding{},
		"Deployment/" + layout.AgentName(c.Name):     &appsv1.Deployment{},
	}
}

// resourceVersions reads the resourceVersion of the Cluster and of every owned
// object; any write to one of them changes it.
func resourceVersions(t *testing.T, c *v1beta1.Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for key, obj := range ownedObjects(c) {
		get(t, c, nameOf(key), obj)
		out[key] = obj.GetResourceVersion()
	}
	cl := &v1beta1.Cluster{}
	get(t, c, c.Name, cl)
	out["Cluster/"+c.Name] = cl.ResourceVersion
	return out
}

func condition(t *testing.T, c *v1beta1.Cluster, typ string) metav1.Condition {
	t.Helper()
	cl := &v1beta1.Cluster{}
	get(t, c, c.Name, cl)
	cond := meta.FindStatusCondition(cl.Status.Conditions, typ)
	if cond == nil {
		t.Fatalf("condition %s not set; status: %+v", typ, cl.Status)
	}
	return *cond
}

// validKubeconfig is a kubeconfig in the shape the publisher writes.
func validKubeconfig(t *testing.T, server string) []byte {
	t.Helper()
	kc, err := testenv.NewAdminKubeconfig(server)
	if err != nil {
		t.Fatal(err)
	}
	return kc.Data
}

func TestReconcileCreatesTheServerObjects(t *testing.T) {
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "alpha", func(c *v1beta1.Cluster) {
		c.Spec.TLSSANs = []string{"alpha.example.com"}
		c.Spec.ServerArgs = []string{"--kube-apiserver-arg=v=2"}
	}))
	reconcileOnce(t, r, c)
	get(t, c, c.Name, c)
	n := layout.NamesFor(c)

	token := &corev1.Secret{}
	get(t, c, n.Token, token)
	if raw, err := hex.DecodeString(string(token.Data[layout.SecretKeyToken])); err != nil || len(raw) != 32 {
		t.Fatalf("token is not 32 random bytes in hex (len %d, err %v)", len(token.Data[layout.SecretKeyToken]), err)
	}
	kc := &corev1.Secret{}
	get(t, c, n.Kubeconfig, kc)
	if len(kc.Data) != 0 {
		t.Fatalf("the pre-created kubeconfig Secret must be empty, has keys %v", kc.Data)
	}

	role := &rbacv1.Role{}
	get(t, c, n.ServiceAccount, role)
	if len(role.Rules) != 1 || !equalStrings(role.Rules[0].ResourceNames, []string{n.Kubeconfig, n.Token}) ||
		!equalStrings(role.Rules[0].Verbs, []string{"get", "update", "patch"}) {
		t.Fatalf("server Role is not limited to its two Secrets: %+v", role.Rules)
	}

	svc := &corev1.Service{}
	get(t, c, n.Service, svc)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.IntValue() != 6443 {
		t.Fatalf("API Service: type %s ports %+v", svc.Spec.Type, svc.Spec.Ports)
	}
	headless := &corev1.Service{}
	get(t, c, n.Headless, headless)
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("headless Service: clusterIP %q publishNotReadyAddresses %v", headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}

	settings, err := Resolve(c, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	wantConfig, err := ServerConfig(c, settings)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	get(t, c, n.ServerConfig, cm)
	if cm.Data[layout.ConfigMapKeyConfig] != string(wantConfig.Data) {
		t.Fatalf("k3s config differs:\n got: %s\nwant: %s", cm.Data[layout.ConfigMapKeyConfig], wantConfig.Data)
	}

	sts := &appsv1.StatefulSet{}
	get(t, c, n.StatefulSet, sts)
	pod := sts.Spec.Template.Spec
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].RestartPolicy == nil || *pod.InitContainers[0].RestartPolicy != corev1.ContainerRestartPolicyAlways || pod.InitContainers[0].StartupProbe == nil {
		t.Fatalf("the datastore is not a native sidecar with a startup probe: %+v", pod.InitContainers)
	}
	if !equalStrings(pod.InitContainers[0].Command, DatastoreArgs()) {
		t.Fatalf("datastore command %v", pod.InitContainers[0].Command)
	}
	if want := []string{"/bin/k3s", "server", "--config=/etc/k3k/config/config.yaml", "--kube-apiserver-arg=v=2"}; !equalStrings(pod.Containers[0].Command, want) {
		t.Fatalf("k3s command %v, want %v", pod.Containers[0].Command, want)
	}
	if pod.Containers[0].Image != "rancher/k3s:v1.34.3-k3s1" {
		t.Fatalf("k3s image %s", pod.Containers[0].Image)
	}
	if !equalStrings(pod.Containers[1].Command, PublisherArgs(c)) {
		t.Fatalf("publisher command %v", pod.Containers[1].Command)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || !sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage].Equal(resource.MustParse("2Gi")) {
		t.Fatalf("volume claim templates %+v", sts.Spec.VolumeClaimTemplates)
	}
	if sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("claims are not deleted with the cluster by default")
	}

	for key, obj := range ownedObjects(c) {
		get(t, c, nameOf(key), obj)
		if !metav1.IsControlledBy(obj, c) {
			t.Errorf("%s is not controlled by the Cluster", key)
		}
	}

	if got := condition(t, c, v1beta1.ConditionKubeconfigPublished); got.Reason != v1beta1.ReasonWaiting {
		t.Fatalf("KubeconfigPublished reason %s, want %s", got.Reason, v1beta1.ReasonWaiting)
	}
	if got := condition(t, c, v1beta1.ConditionTokenReady); got.Status != metav1.ConditionTrue {
		t.Fatalf("TokenReady %+v", got)
	}
	get(t, c, c.Name, c)
	if c.Status.Phase != v1beta1.PhaseProvisioning || c.Status.Endpoint != "https://k3k-alpha-service."+c.Namespace+".svc:443" {
		t.Fatalf("phase %s endpoint %s", c.Status.Phase, c.Status.Endpoint)
	}
}

func nameOf(key string) string {
	for i := range key {
		if key[i] == '/' {
			return key[i+1:]
		}
	}
	return key
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// makeReady makes the observed world look like a running server: the
// StatefulSet reports a ready replica, a server pod's datastore sidecar is
// ready and the publisher has filled the kubeconfig Secret.
func makeReady(t *testing.T, c *v1beta1.Cluster) {
	t.Helper()
	ctx := context.Background()
	n := layout.NamesFor(c)
	sts := &appsv1.StatefulSet{}
	get(t, c, n.StatefulSet, sts)
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1, CurrentReplicas: 1, AvailableReplicas: 1}
	if err := k8s.Status().Update(ctx, sts); err != nil {
		t.Fatalf("setting StatefulSet status: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: n.StatefulSet + "-0", Labels: sts.Spec.Template.Labels},
		Spec:       *sts.Spec.Template.Spec.DeepCopy(),
	}
	// As the StatefulSet controller does: the claim template becomes a volume.
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: layout.DataVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: layout.DataVolume + "-" + pod.Name},
	}})
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatalf("creating server pod: %v", err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "datastore", Ready: true, Image: "x", ImageID: "x"}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatalf("setting pod status: %v", err)
	}
	kc := &corev1.Secret{}
	get(t, c, n.Kubeconfig, kc)
	kc.Data = map[string][]byte{layout.SecretKeyKubeconfig: validKubeconfig(t, layout.Endpoint(c))}
	if err := k8s.Update(ctx, kc); err != nil {
		t.Fatalf("publishing kubeconfig: %v", err)
	}
}

// TestSteadyStateReconcilesWriteNothing is the rule that an unchanged Cluster
// causes no writes: counted at the client and confirmed by the resourceVersion
// of every owned object and of the Cluster, both while provisioning and once
// ready.
func TestSteadyStateReconcilesWriteNothing(t *testing.T) {
	r, writes := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "steady"))

	check := func(stage string) {
		t.Helper()
		reconcileOnce(t, r, c) // settles status after the change that led here
		before := resourceVersions(t, c)
		start := writes.count()
		for i := 2; i <= 3; i++ {
			reconcileOnce(t, r, c)
			if n := writes.count() - start; n != 0 {
				t.Fatalf("%s: reconcile %d of an unchanged Cluster made %d writes", stage, i, n)
			}
		}
		after := resourceVersions(t, c)
		for key, rv := range before {
			if after[key] != rv {
				t.Errorf("%s: %s changed from resourceVersion %s to %s", stage, key, rv, after[key])
			}
		}
		t.Logf("%s: 0 writes over 2 steady-state reconciles, %d objects unchanged", stage, len(before))
	}

	check("provisioning")
	if got := condition(t, c, v1beta1.ConditionReady); got.Status != metav1.ConditionFalse {
		t.Fatalf("Ready while provisioning: %+v", got)
	}
	makeReady(t, c)
	check("ready")
	cl := &v1beta1.Cluster{}
	get(t, c, c.Name, cl)
	if cl.Status.Phase != v1beta1.PhaseReady || cl.Status.ReadyServers != 1 {
		t.Fatalf("phase %s readyServers %d, want Ready and 1; conditions %+v", cl.Status.Phase, cl.Status.ReadyServers, cl.Status.Conditions)
	}
}

func TestDeletedObjectsAreRecreated(t *testing.T) {
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "phoenix"))
	reconcileOnce(t, r, c)
	n := layout.NamesFor(c)
	ctx := context.Background()
	for _, key := range []string{"Service/" + n.Service, "Service/" + n.Headless, "StatefulSet/" + n.StatefulSet, "Secret/" + n.Kubeconfig, "Role/" + n.ServiceAccount, "ConfigMap/" + n.ServerConfig} {
		obj := ownedObjects(c)[key]
		get(t, c, nameOf(key), obj)
		oldUID := obj.GetUID()
		if err := k8s.Delete(ctx, obj); err != nil {
			t.Fatalf("deleting %s: %v", key, err)
		}
		reconcileOnce(t, r, c)
		fresh := ownedObjects(c)[key]
		get(t, c, nameOf(key), fresh)
		if fresh.GetUID() == oldUID {
			t.Fatalf("%s was not deleted and recreated", key)
		}
	}
}

// TestTokenIsNeverReplacedOnceTheServerHasData: after the server started (its
// kubeconfig was published) a deleted token Secret comes back as an empty
// placeholder for the server's publisher to restore, never as a new random
// token; once restored, the original token is in use again.
func TestTokenIsNeverReplacedOnceTheServerHasData(t *testing.T) {
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "keeper"))
	reconcileOnce(t, r, c)
	makeReady(t, c)
	reconcileOnce(t, r, c)
	n := layout.NamesFor(c)
	ctx := context.Background()
	token := &corev1.Secret{}
	get(t, c, n.Token, token)
	original := string(token.Data[layout.SecretKeyToken])
	if err := k8s.Delete(ctx, token); err != nil {
		t.Fatal(err)
	}

	reconcileOnce(t, r, c)
	placeholder := &corev1.Secret{}
	get(t, c, n.Token, placeholder)
	if len(placeholder.Data) != 0 {
		t.Fatalf("the controller minted a new token for a server that has data")
	}
	if got := condition(t, c, v1beta1.ConditionTokenReady); got.Status != metav1.ConditionFalse || got.Reason != v1beta1.ReasonTokenAwaitingRestore {
		t.Fatalf("TokenReady %+v, want False/%s", got, v1beta1.ReasonTokenAwaitingRestore)
	}
	reconcileOnce(t, r, c)
	get(t, c, n.Token, placeholder)
	if len(placeholder.Data) != 0 {
		t.Fatalf("a second reconcile minted a token")
	}

	// What the publisher does: restore the server's own copy.
	placeholder.Data = map[string][]byte{layout.SecretKeyToken: []byte(original)}
	if err := k8s.Update(ctx, placeholder); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	if got := condition(t, c, v1beta1.ConditionTokenReady); got.Status != metav1.ConditionTrue {
		t.Fatalf("TokenReady after restore: %+v", got)
	}
	get(t, c, n.Token, placeholder)
	if string(placeholder.Data[layout.SecretKeyToken]) != original {
		t.Fatalf("token changed after restore")
	}
}

// TestTokenIsGeneratedForAClusterWithoutData: before a server ever stored data,
// losing the token loses nothing, so a new one is generated.
func TestTokenIsGeneratedForAClusterWithoutData(t *testing.T) {
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "fresh"))
	reconcileOnce(t, r, c)
	n := layout.NamesFor(c)
	token := &corev1.Secret{}
	get(t, c, n.Token, token)
	first := string(token.Data[layout.SecretKeyToken])
	if err := k8s.Delete(context.Background(), token); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	get(t, c, n.Token, token)
	if second := string(token.Data[layout.SecretKeyToken]); len(second) != 64 || second == first {
		t.Fatalf("want a new 64-hex-digit token, got %d chars (same as before: %v)", len(second), second == first)
	}
}

// TestVolumeClaimCountsAsData: a server volume that exists means the server
// may hold data even before it published a kubeconfig.
func TestVolumeClaimCountsAsData(t *testing.T) {
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "volume"))
	reconcileOnce(t, r, c)
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "data-k3k-volume-server-0", Labels: serverLabels(c)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
	}
	if err := k8s.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	token := &corev1.Secret{}
	get(t, c, layout.NamesFor(c).Token, token)
	if err := k8s.Delete(ctx, token); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	get(t, c, layout.NamesFor(c).Token, token)
	if len(token.Data) != 0 {
		t.Fatalf("a token was minted although a server volume exists")
	}
}

func TestUserTokenSecret(t *testing.T) {
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "byo", func(c *v1beta1.Cluster) {
		c.Spec.TokenSecretRef = &v1beta1.TokenSecretReference{Name: "my-token"}
	}))
	res := reconcileOnce(t, r, c)
	if res.RequeueAfter != tokenRetry {
		t.Fatalf("a missing user token Secret must be retried after %s, got %+v", tokenRetry, res)
	}
	if got := condition(t, c, v1beta1.ConditionTokenReady); got.Reason != v1beta1.ReasonTokenSecretNotFound {
		t.Fatalf("TokenReady %+v", got)
	}
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).StatefulSet}, &appsv1.StatefulSet{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("servers must not start without their token; get StatefulSet: %v", err)
	}

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "my-token"}, Data: map[string][]byte{"token": []byte("s3cret")}}
	if err := k8s.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	sts := &appsv1.StatefulSet{}
	get(t, c, layout.NamesFor(c).StatefulSet, sts)
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == layout.TokenVolume && v.Secret.SecretName != "my-token" {
			t.Fatalf("token volume uses %s", v.Secret.SecretName)
		}
	}
	role := &rbacv1.Role{}
	get(t, c, layout.NamesFor(c).ServiceAccount, role)
	if !equalStrings(role.Rules[0].ResourceNames, []string{"k3k-byo-kubeconfig", "my-token"}) {
		t.Fatalf("role resourceNames %v", role.Rules[0].ResourceNames)
	}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: c.Namespace, Name: "k3k-byo-token"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a token Secret was generated although tokenSecretRef is set: %v", err)
	}
}

// TestDefaultsTheSpecCannotMeet: admission cannot know the controller's default
// datastore, so servers: 3 with it unset is refused by the controller.
func TestDefaultsTheSpecCannotMeet(t *testing.T) {
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "three", func(c *v1beta1.Cluster) { c.Spec.Servers = 3 }))
	reconcileOnce(t, r, c)
	got := condition(t, c, v1beta1.ConditionReady)
	if got.Reason != v1beta1.ReasonInvalidSpec {
		t.Fatalf("Ready %+v, want reason %s", got, v1beta1.ReasonInvalidSpec)
	}
	get(t, c, c.Name, c)
	if c.Status.Phase != v1beta1.PhaseFailed {
		t.Fatalf("phase %s", c.Status.Phase)
	}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).Token}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("nothing should be created for an invalid spec: %v", err)
	}
}

// TestManagerRestoresDeletedObjects runs the reconciler in a real manager, with
// the production cache settings, to prove the watches bring deleted objects
// back without anyone calling Reconcile.
func TestManagerRestoresDeletedObjects(t *testing.T) {
	ns := newNamespace(t)
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:  scheme,
		Cache:   cache.Options{ByObject: CacheByObject(), DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Metrics: metricsserver.Options{BindAddress: "0"},
		// go test -count=N runs this test N times in one process; controller
		// names are otherwise required to be unique per process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Config: testConfig, ValidateKubeconfig: kubeconfig.Validate}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
	ctx := context.Background()

	c := createCluster(t, newCluster(ns, "watched"))
	n := layout.NamesFor(c)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	uidOf := func(obj client.Object, name string) types.UID {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
			return ""
		}
		return obj.GetUID()
	}
	waitFor("the StatefulSet", func() bool { return uidOf(&appsv1.StatefulSet{}, n.StatefulSet) != "" })
	for _, tc := range []struct {
		name string
		obj  func() client.Object
	}{
		{n.Service, func() client.Object { return &corev1.Service{} }},
		{n.StatefulSet, func() client.Object { return &appsv1.StatefulSet{} }},
		{n.Kubeconfig, func() client.Object { return &corev1.Secret{} }},
	} {
		old := tc.obj()
		oldUID := uidOf(old, tc.name)
		if oldUID == "" {
			t.Fatalf("%s does not exist", tc.name)
		}
		if err := k8s.Delete(ctx, old); err != nil {
			t.Fatal(err)
		}
		waitFor(tc.name+" to come back", func() bool {
			uid := uidOf(tc.obj(), tc.name)
			return uid != "" && uid != oldUID
		})
	}
}

// TestSpecChangesAreApplied: a changed spec updates exactly the objects it
// affects, keeps what the API server allocated, and the next reconcile is
// again free of writes.
func TestSpecChangesAreApplied(t *testing.T) {
	r, writes := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "changing"))
	reconcileOnce(t, r, c)
	reconcileOnce(t, r, c)
	n := layout.NamesFor(c)
	sts := &appsv1.StatefulSet{}
	get(t, c, n.StatefulSet, sts)
	oldHash := sts.Spec.Template.Annotations[AnnotationConfigHash]
	svc := &corev1.Service{}
	get(t, c, n.Service, svc)
	clusterIP := svc.Spec.ClusterIP

	get(t, c, c.Name, c)
	c.Spec.TLSSANs = []string{"changed.example.com"}
	c.Spec.ServerArgs = []string{"--kube-apiserver-arg=v=4"}
	c.Spec.Expose = &v1beta1.ExposeConfig{NodePort: &v1beta1.NodePortConfig{}}
	if err := k8s.Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)

	get(t, c, n.StatefulSet, sts)
	if got := sts.Spec.Template.Annotations[AnnotationConfigHash]; got == oldHash {
		t.Fatalf("a new TLS SAN did not change the pod template's config hash")
	}
	if cmd := sts.Spec.Template.Spec.Containers[0].Command; cmd[len(cmd)-1] != "--kube-apiserver-arg=v=4" {
		t.Fatalf("serverArgs not applied: %v", cmd)
	}
	get(t, c, n.Service, svc)
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].NodePort == 0 || svc.Spec.ClusterIP != clusterIP {
		t.Fatalf("Service: type %s nodePort %d clusterIP %s (was %s)", svc.Spec.Type, svc.Spec.Ports[0].NodePort, svc.Spec.ClusterIP, clusterIP)
	}
	nodePort := svc.Spec.Ports[0].NodePort

	start := writes.count()
	reconcileOnce(t, r, c)
	reconcileOnce(t, r, c)
	if n := writes.count() - start; n != 0 {
		t.Fatalf("%d writes after the change was applied", n)
	}
	get(t, c, n.Service, svc)
	if svc.Spec.Ports[0].NodePort != nodePort {
		t.Fatalf("the allocated node port changed from %d to %d", nodePort, svc.Spec.Ports[0].NodePort)
	}
}

// TestKubeconfigConditionFollowsTheSecret: the condition is derived from the
// Secret's content as it is now: empty → Waiting, garbage → Invalid with a
// reason that quotes no content, valid → Published.
func TestKubeconfigConditionFollowsTheSecret(t *testing.T) {
	r, _ := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "kc"))
	reconcileOnce(t, r, c)
	ctx := context.Background()
	secret := &corev1.Secret{}
	for _, tc := range []struct {
		data       []byte
		wantReason string
	}{
		{nil, v1beta1.ReasonWaiting},
		{[]byte("apiVersion: v1\nkind: Config\nclusters: [oops"), v1beta1.ReasonInvalid},
		{validKubeconfig(t, "https://k3k-kc-service."+c.Namespace+".svc:443"), v1beta1.ReasonPublished},
		{[]byte("  \n"), v1beta1.ReasonWaiting},
	} {
		get(t, c, layout.NamesFor(c).Kubeconfig, secret)
		secret.Data = map[string][]byte{layout.SecretKeyKubeconfig: tc.data}
		if err := k8s.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		reconcileOnce(t, r, c)
		got := condition(t, c, v1beta1.ConditionKubeconfigPublished)
		if got.Reason != tc.wantReason {
			t.Fatalf("content %.20q: reason %s (%s), want %s", tc.data, got.Reason, got.Message, tc.wantReason)
		}
		if got.Reason == v1beta1.ReasonInvalid && strings.Contains(got.Message, "oops") {
			t.Fatalf("the condition quotes the Secret's content: %s", got.Message)
		}
	}
}
