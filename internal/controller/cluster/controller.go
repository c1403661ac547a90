package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// tokenRetry is how often a Cluster whose user-provided token Secret is missing
// is looked at again: that Secret is not watched (it carries none of our labels).
const tokenRetry = 30 * time.Second

// Reconciler turns a Cluster into its host objects (see docs/architecture.md,
// "What one Cluster becomes") and reports what it observes in the Cluster's status.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads uncached; used for Secrets the user names, which the
	// cache (restricted to objects with our labels) does not hold.
	APIReader client.Reader
	// Config is what to deploy and which defaults to apply.
	Config Config
	// ValidateKubeconfig judges the content of the kubeconfig Secret; nil only
	// checks that it is present.
	ValidateKubeconfig func(data []byte, now time.Time) error
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// EtcdDial, when set, opens the connections to etcd members (by their DNS
	// names) instead of the system resolver; tests point it at loopback.
	EtcdDial EtcdDialer
	// Recorder records Events (an etcd recovery); nil records none.
	Recorder events.EventRecorder
	// LookupHost resolves an external datastore's host name, for its
	// servers' NetworkPolicy; nil uses the system resolver. Tests, where no
	// DNS answers, give a fake.
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// Workers is how many Clusters are reconciled at once (one Cluster is
	// never reconciled by two at a time); 0 means 1. A reconcile mostly waits
	// on the API server, so a few workers shorten a controller's cold start
	// with many Clusters: `make bench-controller` measures it.
	Workers int
}

// step is one ordered part of a reconcile. It writes only what differs and
// never waits: anything not ready yet is picked up again by the watches.
type step func(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error)

// namedStep is a step with the name a failure of it is reported under.
type namedStep struct {
	name string
	run  step
}

// Reconcile brings one Cluster's host objects in line with its spec, then
// records what it observed. Every exit after the Cluster was read observes
// and writes the status (writeStatus, deferred), so a step that fails shows
// on Ready (ReconcileError, naming the step) as well as being returned.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, err error) {
	c := &v1beta1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone already (deleted in the background): its etcd server pods,
			// deleted by the garbage collector, must not wait for it.
			setBackupMetrics(req.Namespace, req.Name, nil)
			return ctrl.Result{}, r.releaseEtcdPods(ctx, req.Namespace, req.Name)
		}
		return ctrl.Result{}, err
	}
	o := &observation{}
	o.settings, o.settingsErr = Resolve(c, r.Config)
	defer func() { err = r.writeStatus(ctx, c, o, err) }()

	// Owned objects are removed by the garbage collector through their owner
	// references, volumes by the StatefulSet's claim retention policy. The
	// Cluster itself carries no finalizer; only etcd server pods do, released
	// here so that a member leaves the cluster before its pod goes.
	if !c.DeletionTimestamp.IsZero() {
		o.deleting = true
		return ctrl.Result{}, o.fail("releasing etcd server pods", r.releaseEtcdPods(ctx, c.Namespace, c.Name))
	}
	// From here c's spec is the one its namespace's policy leaves; only
	// the status is ever written back. Not for a deleted Cluster: a policy
	// that cannot be read must not hold its etcd pods.
	if err := r.holdToPolicy(ctx, c, o); err != nil {
		o.policyErr = true
		return ctrl.Result{}, o.fail("VirtualClusterPolicy", err)
	}
	for _, s := range r.steps(o) {
		res, err := s.run(ctx, c, o)
		if err != nil {
			return ctrl.Result{}, o.fail(s.name, err)
		}
		result = earliest(result, res)
	}
	return result, nil
}

// steps are the ordered steps of this reconcile: none for an invalid spec,
// except with etcd, whose server pods' finalizers must still be let go, or
// deleted pods hang (o.etcd.hold: the invalid spec changes nothing else).
func (r *Reconciler) steps(o *observation) []namedStep {
	if o.settingsErr != nil {
		if o.settings.Datastore != v1beta1.EtcdDatastore {
			return nil
		}
		o.etcd.hold = true
		return []namedStep{{"etcd certificates", r.reconcileEtcdPKI}, {"etcd members", r.reconcileEtcdMembers}}
	}
	return []namedStep{
		{"token", r.reconcileToken},
		{"restore", r.reconcileRestore},
		{"kubeconfig Secret", r.reconcileKubeconfigSecret},
		{"server RBAC", r.reconcileRBAC},
		// Before isolation: the servers' NetworkPolicy allows the
		// datastore endpoint the Secret holds.
		{"external datastore Secret", r.reconcileExternalSecret},
		{"isolation", r.reconcileIsolation},
		{"Services", r.reconcileServices},
		{"etcd certificates", r.reconcileEtcdPKI},
		{"etcd roster", r.reconcileEtcdRoster},
		{"etcd members", r.reconcileEtcdMembers},
		{"servers on lost nodes", r.reconcileNodeLoss},
		{"servers", r.reconcileServers},
		{"volume size", r.reconcileVolumeSize},
		{"agent", r.reconcileAgent},
		{"backup", r.reconcileBackup},
	}
}

// reconcileToken makes sure the cluster token exists, generating it only for a
// cluster that has never stored data. A server that already started keeps its
// token on its volume and its publisher restores the Secret from there;
// minting a new random token would lock that server out of its own data. Requeues
// after tokenRetry while a user-provided Secret is missing.
func (r *Reconciler) reconcileToken(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	name := layout.NamesFor(c).Token
	if c.Spec.TokenSecretRef != nil {
		s := &corev1.Secret{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && len(s.Data[layout.SecretKeyToken]) == 0):
			o.token = tokenState{false, v1beta1.ReasonTokenSecretNotFound, fmt.Sprintf("tokenSecretRef: Secret %s with a non-empty key %q not found in namespace %s", name, layout.SecretKeyToken, c.Namespace)}
			return ctrl.Result{RequeueAfter: tokenRetry}, nil
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("getting token Secret %s: %w", name, err)
		}
		o.token = tokenState{true, v1beta1.ReasonTokenAvailable, "using the Secret named by tokenSecretRef"}
		return ctrl.Result{}, nil
	}

	s := &corev1.Secret{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("getting token Secret %s: %w", name, err)
	}
	exists := err == nil
	if exists && len(s.Data[layout.SecretKeyToken]) > 0 {
		o.token = tokenState{true, v1beta1.ReasonTokenAvailable, "generated token Secret " + name}
		return ctrl.Result{}, nil
	}
	hasData, err := r.serverHasData(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	if hasData || restorePending(c) || c.Spec.RestoreFrom != nil {
		o.token = tokenState{false, v1beta1.ReasonTokenAwaitingRestore, tokenAwaitingRestoreMessage(c, name)}
		if !exists {
			// An empty placeholder, so the publisher needs only update rights.
			if err := ensure(ctx, r.Client, c, DesiredTokenSecret(c, ""), func(_, _ *corev1.Secret) {}); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}
	token, err := newToken()
	if err != nil {
		return ctrl.Result{}, err
	}
	if exists {
		s.Data = map[string][]byte{layout.SecretKeyToken: []byte(token)}
		if err := r.Client.Update(ctx, s); err != nil {
			return ctrl.Result{}, fmt.Errorf("filling empty token Secret %s: %w", name, err)
		}
	} else if err := ensure(ctx, r.Client, c, DesiredTokenSecret(c, token), func(_, _ *corev1.Secret) {}); err != nil {
		return ctrl.Result{}, err
	}
	log.FromContext(ctx).Info("generated cluster token", "secret", name)
	o.token = tokenState{true, v1beta1.ReasonTokenAvailable, "generated token Secret " + name}
	return ctrl.Result{}, nil
}

// serverHasData reports whether a server of c may already hold state: the
// kubeconfig Secret was published (the server started) or a server volume exists.
func (r *Reconciler) serverHasData(ctx context.Context, c *v1beta1.Cluster) (bool, error) {
	kc := &corev1.Secret{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).Kubeconfig}, kc)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("getting kubeconfig Secret: %w", err)
	}
	if err == nil && len(kc.Data[layout.SecretKeyKubeconfig]) > 0 {
		return true, nil
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.Client.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels(serverLabels(c))); err != nil {
		return false, fmt.Errorf("listing server volumes: %w", err)
	}
	return len(claims.Items) > 0, nil
}

func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// reconcileKubeconfigSecret pre-creates the Secret the publisher fills. Its
// content belongs to the publisher and is never touched here.
func (r *Reconciler) reconcileKubeconfigSecret(ctx context.Context, c *v1beta1.Cluster, _ *observation) (ctrl.Result, error) {
	err := ensure(ctx, r.Client, c, DesiredKubeconfigSecret(c), func(_, _ *corev1.Secret) {})
	return ctrl.Result{}, err
}

// reconcileRBAC gives the server pod its ServiceAccount and its two-Secret Role.
func (r *Reconciler) reconcileRBAC(ctx context.Context, c *v1beta1.Cluster, _ *observation) (ctrl.Result, error) {
	if err := ensure(ctx, r.Client, c, DesiredServiceAccount(c), func(_, _ *corev1.ServiceAccount) {}); err != nil {
		return ctrl.Result{}, err
	}
	if err := ensure(ctx, r.Client, c, DesiredRole(c), func(live, d *rbacv1.Role) { live.Rules = d.Rules }); err != nil {
		return ctrl.Result{}, err
	}
	err := ensure(ctx, r.Client, c, DesiredRoleBinding(c), func(live, d *rbacv1.RoleBinding) { live.Subjects = d.Subjects })
	return ctrl.Result{}, err
}

// reconcileServices makes the API Service, the headless Service and, when asked
// for, the Ingress.
func (r *Reconciler) reconcileServices(ctx context.Context, c *v1beta1.Cluster, _ *observation) (ctrl.Result, error) {
	for _, svc := range []*corev1.Service{DesiredService(c), DesiredHeadlessService(c)} {
		if err := ensure(ctx, r.Client, c, svc, copyServiceSpec); err != nil {
			return ctrl.Result{}, err
		}
	}
	if ing := DesiredIngress(c); ing != nil {
		if err := ensure(ctx, r.Client, c, ing, func(live, d *networkingv1.Ingress) { live.Spec = d.Spec }); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// copyServiceSpec copies the fields k3k sets, keeping the cluster IP and any
// node port the API server allocated.
func copyServiceSpec(live, d *corev1.Service) {
	allocated := map[string]int32{}
	for _, p := range live.Spec.Ports {
		allocated[p.Name] = p.NodePort
	}
	ports := append([]corev1.ServicePort(nil), d.Spec.Ports...)
	if d.Spec.Type == corev1.ServiceTypeNodePort || d.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for i := range ports {
			if ports[i].NodePort == 0 {
				ports[i].NodePort = allocated[ports[i].Name]
			}
		}
	}
	live.Spec.Type = d.Spec.Type
	live.Spec.Ports = ports
	live.Spec.Selector = d.Spec.Selector
	live.Spec.PublishNotReadyAddresses = d.Spec.PublishNotReadyAddresses
}

// reconcileServers writes the k3s configuration and the server StatefulSet. A
// first StatefulSet waits for the token, so k3s never starts without one and
// invents its own, or for servers with data whose token they restore
// themselves (serversMayStart, retained.go), and with etcd also for the
// member certificate.
func (r *Reconciler) reconcileServers(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	sts := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).StatefulSet}, sts)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("getting server StatefulSet: %w", err)
	}
	exists := err == nil
	etcdMode := o.settings.Datastore == v1beta1.EtcdDatastore
	if !exists && (!serversMayStart(o) || (etcdMode && o.etcd.tls == nil)) {
		return ctrl.Result{}, nil
	}
	if o.external.hold {
		// The external datastore Secret is missing or incomplete: what the
		// servers would be given cannot be known, so nothing changes.
		return ctrl.Result{}, nil
	}
	config, err := ServerConfig(c, o.settings)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := ensure(ctx, r.Client, c, DesiredServerConfigMap(c, config.Data), func(live, d *corev1.ConfigMap) { live.Data = d.Data }); err != nil {
		return ctrl.Result{}, err
	}
	var live *appsv1.StatefulSet
	if exists {
		live = sts
	}
	replicas := serverReplicas(c, o, live)
	err = ensure(ctx, r.Client, c, DesiredStatefulSet(c, o.settings, r.Config, replicas, config.Hash), func(live, d *appsv1.StatefulSet) {
		// Selector, serviceName, podManagementPolicy and volumeClaimTemplates
		// are immutable; volume growth is reconcileVolumeSize's job.
		live.Spec.Replicas = d.Spec.Replicas
		live.Spec.Template = d.Spec.Template
		live.Spec.UpdateStrategy = d.Spec.UpdateStrategy
		live.Spec.PersistentVolumeClaimRetentionPolicy = d.Spec.PersistentVolumeClaimRetentionPolicy
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	if !exists && awaitingTokenRestore(o) {
		r.recordTokenRestoreStart(c)
	}
	return ctrl.Result{}, r.reconcileDisruptionBudget(ctx, c, o.settings.Datastore, replicas)
}

// reconcileVolumeSize grows existing server volumes to storageRequestSize
// (a StatefulSet's claim templates cannot change). It never shrinks one.
func (r *Reconciler) reconcileVolumeSize(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	if o.settings.Persistence != v1beta1.DynamicPersistence {
		return ctrl.Result{}, nil
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := r.Client.List(ctx, claims, client.InNamespace(c.Namespace), client.MatchingLabels(serverLabels(c))); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing server volumes: %w", err)
	}
	for i := range claims.Items {
		pvc := &claims.Items[i]
		current := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if current.Cmp(o.settings.StorageSize) >= 0 {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		if pvc.Spec.Resources.Requests == nil {
			pvc.Spec.Resources.Requests = corev1.ResourceList{}
		}
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = o.settings.StorageSize
		if err := r.Client.Patch(ctx, pvc, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("growing volume %s to %s: %w", pvc.Name, o.settings.StorageSize.String(), err)
		}
	}
	return ctrl.Result{}, nil
}

// reconcileAgent deploys the shared-mode agent (cmd/kubelet): its
// ServiceAccount, the RoleBinding to the agent ClusterRole, and its Deployment,
// which waits on its own for the kubeconfig Secret to be filled.
func (r *Reconciler) reconcileAgent(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	if r.Config.AgentImage == "" {
		return ctrl.Result{}, nil
	}
	if err := ensure(ctx, r.Client, c, DesiredAgentServiceAccount(c), func(_, _ *corev1.ServiceAccount) {}); err != nil {
		return ctrl.Result{}, err
	}
	if err := ensure(ctx, r.Client, c, DesiredAgentRoleBinding(c, r.Config.AgentClusterRole), func(live, d *rbacv1.RoleBinding) {
		live.Subjects = d.Subjects
	}); err != nil {
		return ctrl.Result{}, err
	}
	if err := ensure(ctx, r.Client, c, DesiredAgentDNSService(c), copyServiceSpec); err != nil {
		return ctrl.Result{}, err
	}
	userns, err := r.userNamespaces(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	o.userNamespaces = &userns
	host := AgentHost{UserNamespaces: userns.ok}
	if r.Config.readsStorageClasses() {
		list := &storagev1.StorageClassList{}
		if err := r.Client.List(ctx, list); err != nil {
			return ctrl.Result{}, fmt.Errorf("reading the host's StorageClasses, which the agent shows in the virtual cluster (sharedAgent.storageClassCopies): %w", err)
		}
		host.StorageClasses = list.Items
	}
	agent := DesiredAgentDeployment(c, r.Config, host)
	if paused(c, o.settings) {
		agent.Spec.Replicas = ptr.To(int32(0))
	}
	err = ensure(ctx, r.Client, c, agent, func(live, d *appsv1.Deployment) {
		// The selector is immutable.
		live.Spec.Replicas = d.Spec.Replicas
		live.Spec.Strategy = d.Spec.Strategy
		live.Spec.Template = d.Spec.Template
	})
	return ctrl.Result{}, err
}

// userNamespaces decides whether agents run their pods in user namespaces
// (userNamespacesCondition), reading the Nodes only for auto.
func (r *Reconciler) userNamespaces(ctx context.Context) (condResult, error) {
	var nodes []corev1.Node
	if r.Config.readsNodes() {
		list := &corev1.NodeList{}
		if err := r.Client.List(ctx, list); err != nil {
			return condResult{}, fmt.Errorf("reading the Nodes, whose runtimes tell whether workloads can run in user namespaces (sharedAgent.userNamespaces auto): %w", err)
		}
		nodes = list.Items
	}
	return userNamespacesCondition(r.Config.Agent.UserNamespaces, nodes), nil
}

// observe reads what the status is derived from.
func (r *Reconciler) observe(ctx context.Context, c *v1beta1.Cluster, o *observation) error {
	sts := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).StatefulSet}, sts)
	switch {
	case err == nil:
		o.statefulSet = sts
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("getting server StatefulSet: %w", err)
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(serverLabels(c))); err != nil {
		return fmt.Errorf("listing server pods: %w", err)
	}
	o.serverPods = pods.Items
	if err := r.observeClaims(ctx, c, o); err != nil {
		return err
	}
	kc := &corev1.Secret{}
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).Kubeconfig}, kc)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting kubeconfig Secret: %w", err)
	}
	o.kubeconfig = kc.Data[layout.SecretKeyKubeconfig]
	if err := r.observeBackup(ctx, c, o); err != nil {
		return err
	}
	if err := r.observeRestore(ctx, c, o); err != nil {
		return err
	}
	o.agentWanted = r.Config.AgentImage != ""
	if o.agentWanted {
		agent := &appsv1.Deployment{}
		err = r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.AgentName(c.Name)}, agent)
		switch {
		case err == nil:
			o.agent = agent
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("getting agent Deployment: %w", err)
		}
	}
	if len(o.kubeconfig) > 0 && r.ValidateKubeconfig != nil {
		o.kubeconfigErr = r.ValidateKubeconfig(o.kubeconfig, r.now())
	}
	return nil
}

// writeStatus observes and writes the status on the way out of Reconcile,
// and returns stepErr (the reconcile's own error) joined with any error of its
// own. A deleted Cluster is not observed: its status only says so. When
// observing fails nothing is written: a status derived from half an
// observation would report objects missing that are not.
func (r *Reconciler) writeStatus(ctx context.Context, c *v1beta1.Cluster, o *observation, stepErr error) error {
	if !o.deleting {
		if err := r.observe(ctx, c, o); err != nil {
			return errors.Join(stepErr, err)
		}
	}
	return errors.Join(stepErr, r.updateStatus(ctx, c, o))
}

// updateStatus writes the status only when it differs from the stored one.
func (r *Reconciler) updateStatus(ctx context.Context, c *v1beta1.Cluster, o *observation) error {
	st := computeStatus(c, *o)
	setBackupMetrics(c.Namespace, c.Name, st.Backup)
	if equality.Semantic.DeepEqual(c.Status, st) {
		return nil
	}
	before := c.Status
	c.Status = st
	if err := r.Client.Status().Update(ctx, c); err != nil {
		return fmt.Errorf("updating status: %w", err)
	}
	r.recordTransitions(c, before, st, o)
	r.recordMigrationEnd(c, before, st)
	r.recordBackupEvents(c, before.Backup, st.Backup)
	r.recordRestoreEvents(c, before.Conditions, st.Conditions)
	return nil
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// earliest combines two step results: the sooner requeue wins.
func earliest(a, b ctrl.Result) ctrl.Result {
	if a.RequeueAfter == 0 || (b.RequeueAfter > 0 && b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}

// CacheByObject restricts the manager's cache to objects carrying k3k's
// managed-by label, so the controller does not hold every Pod, Secret and
// volume claim of the host cluster in memory.
func CacheByObject() map[client.Object]cache.ByObject {
	selector := labels.SelectorFromSet(labels.Set{v1beta1.LabelManagedBy: v1beta1.ManagedByValue})
	out := map[client.Object]cache.ByObject{}
	for _, obj := range []client.Object{
		&corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.Secret{}, &corev1.ConfigMap{},
		&corev1.Service{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{},
		&appsv1.StatefulSet{}, &appsv1.Deployment{}, &networkingv1.Ingress{},
		&batchv1.CronJob{}, &batchv1.Job{},
		&corev1.ResourceQuota{}, &corev1.LimitRange{}, &networkingv1.NetworkPolicy{},
		&policyv1.PodDisruptionBudget{},
	} {
		out[obj] = cache.ByObject{Label: selector}
	}
	// Nodes, read for user namespace support (userns.go), trimmed to what
	// is read.
	out[&corev1.Node{}] = cache.ByObject{Transform: trimNode}
	// Namespaces, for the VirtualClusterPolicy each is bound to: names and
	// labels only.
	out[&corev1.Namespace{}] = cache.ByObject{Transform: trimNamespace}
	// The host API server's endpoints, which the server and agent
	// NetworkPolicies allow: its Service's EndpointSlices and nothing else
	// (the chart grants reading them in this one namespace).
	out[&discoveryv1.EndpointSlice{}] = cache.ByObject{
		Namespaces: map[string]cache.Config{hostAPIServiceNamespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: hostAPIServiceName}),
	}
	return out
}

// isHostAPISlice says whether obj is an EndpointSlice of the host API
// server's Service.
func isHostAPISlice(obj client.Object) bool {
	return obj.GetNamespace() == hostAPIServiceNamespace && obj.GetLabels()[discoveryv1.LabelServiceName] == hostAPIServiceName
}

// everyCluster maps a change of the host API's EndpointSlices to every
// Cluster: each one's server and agent NetworkPolicies allow those addresses.
func (r *Reconciler) everyCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	if !isHostAPISlice(obj) {
		return nil
	}
	return r.allClusters(ctx, "a change of the host API's endpoints")
}

// everyClusterForNode maps a Node that came, went or changed in what
// userNamespacesCondition or node-loss handling reads to every Cluster: each
// one's agent may run pods there, and its servers may.
func (r *Reconciler) everyClusterForNode(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.allClusters(ctx, "a change of a Node")
}

// nodeChanged passes the Node events that can change a user namespace
// decision, not the status updates every kubelet makes.
var nodeChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*corev1.Node)
		cur, okNew := e.ObjectNew.(*corev1.Node)
		return !okOld || !okNew || runsWorkloads(old) != runsWorkloads(cur) || supportsUserNamespaces(old) != supportsUserNamespaces(cur) ||
			readyChanged(old, cur) || outOfService(old) != outOfService(cur)
	},
}

// readyChanged says whether a Node's Ready condition changed status: node-loss
// handling counts from that moment (nodeloss.go).
func readyChanged(old, cur *corev1.Node) bool {
	a, readyA := notReadySince(old)
	b, readyB := notReadySince(cur)
	return readyA != readyB || !a.Equal(b)
}

// outOfService says whether n carries the taint that declares it off
// (nodeloss.go).
func outOfService(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	return false
}

// allClusters is a request for every Cluster, after why.
func (r *Reconciler) allClusters(ctx context.Context, why string) []reconcile.Request {
	list := &v1beta1.ClusterList{}
	if err := r.Client.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "listing Clusters after "+why)
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return out
}

// SetupWithManager registers the reconciler: Clusters, the objects they own,
// their server pods and volumes (owned by the StatefulSet, so mapped back
// by label), the host API's EndpointSlices (every Cluster), the
// VirtualClusterPolicies and the policy bindings of Namespaces, and, where
// they decide something, Nodes and StorageClasses (every Cluster).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	registerBackupMetrics()
	byClusterLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[v1beta1.LabelCluster]
		if name == "" || obj.GetLabels()[v1beta1.LabelManagedBy] != v1beta1.ManagedByValue {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("cluster").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		For(&v1beta1.Cluster{}).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&networkingv1.Ingress{}).
		Owns(&corev1.ResourceQuota{}).
		Owns(&corev1.LimitRange{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&batchv1.CronJob{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		// The CronJob owns its Jobs; they carry the Cluster's labels.
		Watches(&batchv1.Job{}, byClusterLabel).
		Watches(&corev1.Pod{}, byClusterLabel).
		Watches(&corev1.PersistentVolumeClaim{}, byClusterLabel).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.everyCluster)).
		Watches(&v1beta1.VirtualClusterPolicy{}, handler.EnqueueRequestsFromMapFunc(r.clustersOfPolicy)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.clustersOfNamespace), builder.WithPredicates(policyBindingChanged))
	// Nodes only where they decide something: the chart grants reading
	// them only for auto.
	if r.Config.watchesNodes() {
		b = b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.everyClusterForNode), builder.WithPredicates(nodeChanged))
	}
	if r.Config.readsStorageClasses() {
		b = b.Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			return r.allClusters(ctx, "a change of the host's StorageClasses")
		}))
	}
	return b.Complete(r)
}
