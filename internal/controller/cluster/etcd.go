package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/etcd"
	"github.com/k3k-io/k3k/pkg/layout"
	"github.com/k3k-io/k3k/pkg/pki"
)

// The controller half of datastore.type etcd. Each reconcile of an etcd
// cluster: keep the CA and the member certificate; publish the first roster
// (member 0 alone, bootstrapping) once, for a cluster that never held data;
// observe the members; publish the roster from what was observed; add or
// release the server pods' finalizers; perform at most one membership step
// (etcd.Plan). The StatefulSet is sized after that (StatefulSetReplicas), so a
// member is always removed from etcd before its pod is deleted.

// Requeue intervals of an etcd cluster: soon after a membership step, to see
// its effect; a little later while Plan waits for something; and a periodic
// health look otherwise (it writes nothing while nothing changed).
const (
	etcdRequeueAfterStep = 2 * time.Second
	etcdRequeueWaiting   = 10 * time.Second
	etcdRequeueInSync    = 60 * time.Second
)

// etcdState is what one reconcile saw and did for an etcd cluster.
type etcdState struct {
	// tls is the controller's client configuration; nil until the CA and the
	// member certificate are in place.
	tls *tls.Config
	// pkiProblem says why the certificates are not usable (the CA Secret is
	// unreadable; k3k does not overwrite it).
	pkiProblem string
	// rosterProblem says why no roster could be published.
	rosterProblem string
	observed      *etcd.Observed
	action        etcd.Action
	actionErr     error
	// held lists the server pods whose deletion waits, with the reason.
	held []string
	// hold: the spec is invalid; only the finalizers are kept (no membership
	// step), with the running server pods as the desired members.
	hold bool
	// recovery is the EtcdRecovery condition; nil when none was asked for.
	recovery *condResult
	// handledRequest is the recovery request done or refused now.
	handledRequest string
}

// reconcileEtcdPKI keeps the etcd CA (created once, never overwritten) and the
// member certificate every server pod mounts (issued again only when it is
// missing, unreadable, not from the CA, names the wrong hosts or is close to
// expiry; members read the new files on their next TLS handshake).
func (r *Reconciler) reconcileEtcdPKI(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	if o.settings.Datastore != v1beta1.EtcdDatastore {
		return ctrl.Result{}, nil
	}
	n := layout.NamesFor(c)
	now := r.now()
	ca, problem, err := r.etcdCA(ctx, c, now)
	if err != nil || problem != "" {
		o.etcd.pkiProblem = problem
		return ctrl.Result{}, err
	}

	live := &corev1.Secret{}
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: n.EtcdMember}, live)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("getting etcd member Secret: %w", err)
	}
	missing := apierrors.IsNotFound(err)
	pair := pki.KeyPair{CertPEM: live.Data[SecretKeyTLSCert], KeyPEM: live.Data[SecretKeyTLSKey]}
	spec := EtcdMemberCertSpec(c)
	if renew := pki.NeedsRenewal(ca, pair, spec.DNSNames, now, pki.DefaultRenewBefore); missing || renew.Renew {
		if pair, err = pki.Issue(ca, spec, now); err != nil {
			return ctrl.Result{}, fmt.Errorf("issuing the etcd member certificate: %w", err)
		}
		if !missing {
			log.FromContext(ctx).Info("issuing the etcd member certificate again", "secret", n.EtcdMember, "why", renew.Reason)
		}
	}
	if err := ensure(ctx, r.Client, c, DesiredEtcdMemberSecret(c, ca.CertPEM, pair), func(live, d *corev1.Secret) {
		live.Data = d.Data
	}); err != nil {
		return ctrl.Result{}, err
	}
	o.etcd.tls, err = clientTLS(ca.CertPEM, pair)
	return ctrl.Result{}, err
}

// etcdCA returns the cluster's etcd CA, creating it when its Secret does not
// exist. An unreadable CA is reported, not replaced: it may be the user's.
func (r *Reconciler) etcdCA(ctx context.Context, c *v1beta1.Cluster, now time.Time) (pki.KeyPair, string, error) {
	name := layout.NamesFor(c).EtcdCA
	s := &corev1.Secret{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s)
	switch {
	case apierrors.IsNotFound(err):
		ca, err := pki.NewCA(name, now, 0)
		if err != nil {
			return pki.KeyPair{}, "", fmt.Errorf("creating the etcd CA: %w", err)
		}
		if err := ensure(ctx, r.Client, c, DesiredEtcdCASecret(c, ca), func(_, _ *corev1.Secret) {}); err != nil {
			return pki.KeyPair{}, "", err
		}
		log.FromContext(ctx).Info("created the etcd CA", "secret", name)
		return ca, "", nil
	case err != nil:
		return pki.KeyPair{}, "", fmt.Errorf("getting etcd CA Secret: %w", err)
	}
	ca := pki.KeyPair{CertPEM: s.Data[SecretKeyTLSCert], KeyPEM: s.Data[SecretKeyTLSKey]}
	if _, err := tls.X509KeyPair(ca.CertPEM, ca.KeyPEM); err != nil {
		return pki.KeyPair{}, fmt.Sprintf("Secret %s does not hold a usable CA (%v); k3k does not overwrite it: fix it, or delete it to have a new CA made (every member certificate is then issued again)", name, err), nil
	}
	return ca, "", nil
}

// clientTLS is the controller's etcd client configuration: the member
// certificate (it has client usage) and the cluster CA as the only root.
func clientTLS(caPEM []byte, pair pki.KeyPair) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("reading the etcd member certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("reading the etcd CA certificate: no certificate found")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// reconcileEtcdRoster publishes the first roster, member 0 alone and
// bootstrapping, for a cluster that never held data, or whose data is the
// SQLite file of a migration to etcd (Settings.Migrating): its volume holds
// no etcd data dir, and member 0 must bootstrap to load the SQLite data
// (migration.go). A missing roster for a
// cluster that has data is published from observation (reconcileEtcdMembers),
// never as "new": that could bootstrap a second cluster next to the first.
func (r *Reconciler) reconcileEtcdRoster(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	if o.settings.Datastore != v1beta1.EtcdDatastore {
		return ctrl.Result{}, nil
	}
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).EtcdRoster}, cm)
	switch {
	case err == nil:
		return ctrl.Result{}, nil
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, fmt.Errorf("getting etcd member roster: %w", err)
	}
	hasData, err := r.serverHasData(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	if hasData && !o.settings.Migrating {
		o.etcd.rosterProblem = fmt.Sprintf("ConfigMap %s is missing and the servers already hold data: it is published again once a member answers (members with data start without it)", layout.NamesFor(c).EtcdRoster)
		return ctrl.Result{}, nil
	}
	desired, err := DesiredEtcdRosterConfigMap(c, etcd.InitialRoster(EtcdClusterToken(c), EtcdPeer(c, 0)))
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, ensure(ctx, r.Client, c, desired, func(live, d *corev1.ConfigMap) { live.Data = d.Data })
}

// reconcileEtcdMembers observes the members, publishes the roster, keeps the
// server pods' finalizers and performs at most one membership step.
//
// A sqlite cluster's server pods hold no etcd finalizer: one left on a pod
// of a migration to etcd that was undone before its switch (the pod of etcd
// member 0 replaced by the SQLite one) is dropped, or the pod would never go.
func (r *Reconciler) reconcileEtcdMembers(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	if o.settings.Datastore == v1beta1.SQLiteDatastore {
		return ctrl.Result{}, r.releaseEtcdPods(ctx, c.Namespace, c.Name)
	}
	if o.settings.Datastore != v1beta1.EtcdDatastore || o.etcd.tls == nil {
		return ctrl.Result{}, nil
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(serverLabels(c))); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing server pods: %w", err)
	}
	lost := map[string]uint64{}
	for i := range pods.Items {
		if id := lostMemberID(&pods.Items[i]); id != 0 {
			lost[pods.Items[i].Name] = id
		}
	}
	servers := o.settings.Servers
	if o.etcd.hold {
		sts := &appsv1.StatefulSet{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).StatefulSet}, sts)
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("getting the server StatefulSet: %w", err)
		}
		servers = ptr.Deref(sts.Spec.Replicas, 0)
	}
	desired := EtcdDesired(c, servers, lost)
	// Pods above spec.servers (being scaled away) are asked too: with every
	// desired member down they may be the only ones that answer. Observe asks
	// each endpoint once.
	asked := desired.Endpoints()
	for _, p := range pods.Items {
		if i := ServerOrdinal(c, p.Name); i >= 0 {
			asked = append(asked, EtcdPeer(c, i).ClientURL)
		}
	}

	cl := etcd.NewClient(etcd.ClientConfig{TLS: o.etcd.tls, DialTimeout: 2 * time.Second, CallTimeout: 2 * time.Second, DialContext: r.EtcdDial})
	defer cl.Close()
	observed := etcd.Observe(ctx, cl, asked)
	o.etcd.observed = &observed
	// The member of a pod on a lost node is replaced as one that lost its
	// data is (nodeloss.go): removed first, while the others keep quorum.
	onLostNodes, err := r.observeNodeLoss(ctx, c, o, pods.Items)
	if err != nil {
		return ctrl.Result{}, err
	}
	if lostEtcdMembers(c, lost, onLostNodes.pods, observed) {
		desired = EtcdDesired(c, servers, lost)
	}

	if o.settings.Migrating {
		r.observeMigration(ctx, c, cl, observed, pods.Items, o)
	}
	recovering, err := r.reconcileEtcdRecovery(ctx, c, observed, o)
	if err != nil {
		return ctrl.Result{}, err
	}
	if roster, ok := etcd.RosterFor(EtcdClusterToken(c), observed, desired); ok && !recovering {
		cm, err := DesiredEtcdRosterConfigMap(c, roster)
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := ensure(ctx, r.Client, c, cm, func(live, d *corev1.ConfigMap) { live.Data = d.Data }); err != nil {
			return ctrl.Result{}, err
		}
		o.etcd.rosterProblem = ""
	}

	for i := range pods.Items {
		if err := r.keepFinalizer(ctx, c, &pods.Items[i], observed, desired, o); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.nudgeRosterReaders(ctx, c, pods.Items); err != nil {
		return ctrl.Result{}, err
	}

	if o.etcd.hold {
		return ctrl.Result{RequeueAfter: etcdRequeueWaiting}, nil
	}
	o.etcd.action = etcd.Plan(observed, desired)
	if err := etcd.Execute(ctx, cl, o.etcd.action); err != nil {
		// EtcdMembership says StepNotDone either way. etcd saying "not yet"
		// (a learner still catching up, a member not healthy long enough) is
		// part of every scale-up, a wait like Plan's own WaitingForLearner:
		// look again soon and let the later steps run. Anything else is a
		// failed step: the error reaches Ready and retries with back-off.
		o.etcd.actionErr = err
		if errors.Is(err, etcd.ErrLearnerNotReady) || errors.Is(err, etcd.ErrUnhealthy) {
			log.FromContext(ctx).Info("etcd membership step not done yet", "action", o.etcd.action.Type, "error", err.Error())
			return ctrl.Result{RequeueAfter: etcdRequeueWaiting}, nil
		}
		return ctrl.Result{}, fmt.Errorf("etcd membership step %s: %w", o.etcd.action.Type, err)
	}
	if o.etcd.action.Type != etcd.ActionNone {
		log.FromContext(ctx).Info("etcd membership step", "action", o.etcd.action.Type, "reason", o.etcd.action.Reason, "message", o.etcd.action.Message)
		return ctrl.Result{RequeueAfter: etcdRequeueAfterStep}, nil
	}
	if o.settings.Migrating && !o.migration.switched {
		return ctrl.Result{RequeueAfter: migrationRequeue}, nil
	}
	if o.etcd.action.Reason != etcd.ReasonInSync || len(o.etcd.held) > 0 {
		return ctrl.Result{RequeueAfter: etcdRequeueWaiting}, nil
	}
	return ctrl.Result{RequeueAfter: etcdRequeueInSync}, nil
}

// reconcileEtcdRecovery acts on v1beta1.AnnotationEtcdRecover. While quorum is lost it
// publishes the last roster with the recovery (etcd.PlanRecovery) added: the
// survivor's sidecar restarts it with --force-new-cluster. Once members
// confirm a quorum again the request is done; until then it is under way
// whatever answers (nothing does while the survivor restarts), and the named
// survivor is never changed. A request not yet under way is refused unless
// quorum is lost and a voter answers. A done or refused request is recorded
// as handled. It reports whether the roster must not be replaced yet: while
// the recovery is under way, and in the reconcile that finds it done, so that
// the roster keeps naming the request until the status records it as handled
// (seen on a real node: a reconcile that found it done republished the
// roster, then failed on a pod update before writing status, and the next one
// refused the request it had done; the status is now written on every exit,
// but that write can fail too).
func (r *Reconciler) reconcileEtcdRecovery(ctx context.Context, c *v1beta1.Cluster, observed etcd.Observed, o *observation) (bool, error) {
	request := c.Annotations[v1beta1.AnnotationEtcdRecover]
	if request == "" || o.etcd.hold || (c.Status.Datastore != nil && c.Status.Datastore.RecoveryRequest == request) {
		return false, nil
	}
	// Read uncached: whether the request is under way is in the roster this
	// controller wrote a moment ago, and a cache that has not seen that write
	// yet (CI of 2026-12-05, a loaded node) made the next reconcile, with the
	// survivor restarting and nothing answering, refuse the recovery it had
	// started (the survivor rebuilt the cluster; the status said refused).
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).EtcdRoster}, cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("getting etcd member roster: %w", err)
	}
	var last etcd.Roster
	if raw := cm.Data[layout.ConfigMapKeyRoster]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &last); err != nil {
			return false, fmt.Errorf("parsing the published etcd member roster: %w", err)
		}
	}
	rec, ok, msg := etcd.PlanRecovery(observed, request)
	underWay := last.Recover != nil && last.Recover.Request == request
	switch {
	case underWay && observed.AnyReachable() && !observed.QuorumLost():
		msg = fmt.Sprintf("quorum is back: the cluster was rebuilt from member %s (%s); the other members are added again as new members", last.Recover.Name, last.Recover.ID)
		o.etcd.recovery = &condResult{true, etcd.ReasonRecovered, msg}
		r.event(c, corev1.EventTypeNormal, etcd.ReasonRecovered, "RecoverEtcd", msg)
		o.etcd.handledRequest = request
		return true, nil
	case underWay:
		// The survivor was named; its sidecar is restarting it with
		// --force-new-cluster, and while it does nothing may answer (a
		// reconcile in that window used to refuse the recovery it had
		// started; the envtest reconciles there). The survivor is never
		// changed once named: a second member rebuilding from its own log
		// would be a second cluster.
		state := "quorum is not back yet"
		if !observed.AnyReachable() {
			state = "no member answers while it restarts"
		}
		o.etcd.recovery = &condResult{false, etcd.ReasonRecovering, fmt.Sprintf("waiting for member %s (%s) to rebuild the cluster with --force-new-cluster: %s", last.Recover.Name, last.Recover.ID, state)}
		return true, nil
	case ok && len(last.Members) == 0:
		msg = fmt.Sprintf("ConfigMap %s holds no roster to add the recovery to; %s", layout.NamesFor(c).EtcdRoster, msg)
	case ok:
		o.etcd.recovery = &condResult{false, etcd.ReasonRecovering, msg}
		last.Recover = &rec
		desired, err := DesiredEtcdRosterConfigMap(c, last)
		if err != nil {
			return false, err
		}
		if err := ensure(ctx, r.Client, c, desired, func(live, d *corev1.ConfigMap) { live.Data = d.Data }); err != nil {
			return false, err
		}
		r.event(c, corev1.EventTypeWarning, etcd.ReasonRecovering, "RecoverEtcd", msg)
		log.FromContext(ctx).Info("recovering etcd from quorum loss", "member", rec.Name, "id", rec.ID, "request", request)
		return true, nil
	}
	msg = "recovery refused: " + msg
	o.etcd.recovery = &condResult{false, etcd.ReasonRecoveryRefused, msg}
	r.event(c, corev1.EventTypeWarning, etcd.ReasonRecoveryRefused, "RecoverEtcd", msg)
	o.etcd.handledRequest = request
	return false, nil
}

// event records an Event about c when the Reconciler has a recorder.
func (r *Reconciler) event(c *v1beta1.Cluster, eventType, reason, action, note string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(c, nil, eventType, reason, action, "%s", note)
	}
}

// keepFinalizer adds the etcd finalizer to a live server pod and removes it
// from a deleted one once etcd.CanReleasePod allows.
func (r *Reconciler) keepFinalizer(ctx context.Context, c *v1beta1.Cluster, pod *corev1.Pod, o etcd.Observed, d etcd.Desired, obs *observation) error {
	i := ServerOrdinal(c, pod.Name)
	if i < 0 {
		return nil
	}
	if pod.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(pod, v1beta1.FinalizerEtcdMember) {
			return nil
		}
		return patchFinalizer(ctx, r.Client, pod, true)
	}
	if !controllerutil.ContainsFinalizer(pod, v1beta1.FinalizerEtcdMember) {
		return nil
	}
	peer := EtcdPeer(c, i)
	peer.LostMemberID = lostMemberID(pod)
	ok, reason := etcd.CanReleasePod(o, d, peer)
	if !ok {
		obs.etcd.held = append(obs.etcd.held, pod.Name+": "+reason)
		return nil
	}
	log.FromContext(ctx).Info("releasing server pod", "pod", pod.Name, "reason", reason)
	return patchFinalizer(ctx, r.Client, pod, false)
}

// nudgeRosterReaders makes every live server pod's kubelet refresh the
// mounted roster as soon as it changes. A kubelet rewrites a mounted
// ConfigMap only when it syncs the pod, which it does on its own about once a
// minute, and a member waiting to be added reads the roster from that mount:
// each member of a new three-server cluster waited 80 to 100 s for it (CI of
// 2026-12-07). Any change to the pod object makes the kubelet sync the pod at
// once, so the roster's input hash is written onto each pod as an annotation
// when it differs; an unchanged roster writes nothing.
func (r *Reconciler) nudgeRosterReaders(ctx context.Context, c *v1beta1.Cluster, pods []corev1.Pod) error {
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).EtcdRoster}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting etcd member roster: %w", err)
	}
	hash := cm.Annotations[AnnotationInputHash]
	if hash == "" {
		return nil
	}
	for i := range pods {
		p := &pods[i]
		if !p.DeletionTimestamp.IsZero() || p.Annotations[AnnotationRosterHash] == hash {
			continue
		}
		before := p.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationRosterHash] = hash
		if err := r.Client.Patch(ctx, p, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("annotating server pod %s with the roster's hash: %w", p.Name, err)
		}
	}
	return nil
}

// releaseEtcdPods drops the etcd finalizer from every server pod of the
// Cluster named name: the Cluster is being deleted (or is gone), its members
// go with it, and nothing may hold its pods.
func (r *Reconciler) releaseEtcdPods(ctx context.Context, namespace, name string) error {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{
		v1beta1.LabelManagedBy: v1beta1.ManagedByValue, v1beta1.LabelCluster: name, v1beta1.LabelComponent: v1beta1.ComponentServer,
	}); err != nil {
		return fmt.Errorf("listing server pods: %w", err)
	}
	for i := range pods.Items {
		if controllerutil.ContainsFinalizer(&pods.Items[i], v1beta1.FinalizerEtcdMember) {
			if err := patchFinalizer(ctx, r.Client, &pods.Items[i], false); err != nil {
				return err
			}
		}
	}
	return nil
}

// patchFinalizer adds or removes the etcd finalizer with an optimistic lock,
// so that other finalizers added meanwhile are never lost.
func patchFinalizer(ctx context.Context, cl client.Client, pod *corev1.Pod, add bool) error {
	before := pod.DeepCopy()
	if add {
		controllerutil.AddFinalizer(pod, v1beta1.FinalizerEtcdMember)
	} else {
		controllerutil.RemoveFinalizer(pod, v1beta1.FinalizerEtcdMember)
	}
	err := cl.Patch(ctx, pod, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("updating the finalizers of pod %s: %w", pod.Name, err)
	}
	return nil
}

// lostMemberID is the member whose data the pod's etcd sidecar reports lost
// (etcd.DataLostReport, its termination message), or 0. Only a sidecar that is
// not running now reports anything: once it runs again the message left in its
// last state is history, and must not get the member that replaced the lost
// one removed the first time it misses a probe. The report names the member,
// so that Plan acts on that member alone.
func lostMemberID(pod *corev1.Pod) uint64 {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name != "datastore" || s.State.Running != nil {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
			if t == nil {
				continue
			}
			if id, ok := etcd.ParseDataLostReport(t.Message); ok {
				return id
			}
		}
	}
	return 0
}

// EtcdDialer opens connections to etcd members; see Reconciler.EtcdDial.
type EtcdDialer = func(ctx context.Context, addr string) (net.Conn, error)
