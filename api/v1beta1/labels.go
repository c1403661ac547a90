package v1beta1

// Labels every host object made for a Cluster carries; pods add the component.
const (
	// LabelManagedBy with ManagedByValue marks k3k's objects; the controller
	// caches only objects that carry it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy on k3k's objects.
	ManagedByValue = "k3k"
	// LabelCluster names the Cluster an object was made for.
	LabelCluster = "k3k.io/cluster"
	// LabelComponent tells a Cluster's server pods from its agent pods.
	LabelComponent = "k3k.io/component"
	// ComponentServer is the LabelComponent value of the server pods.
	ComponentServer = "server"
	// ComponentAgent is the LabelComponent value of the agent's pods.
	ComponentAgent = "agent"
	// ComponentBackup is the LabelComponent value of the backup CronJob, its
	// Jobs and their pods.
	ComponentBackup = "backup"
	// ComponentRestore is the LabelComponent value of the restore Job
	// (spec.restoreFrom), its pod and its rights.
	ComponentRestore = "restore"
)

// LabelBackupFor on a PersistentVolumeClaim hands it to the scheduled
// snapshots of the Cluster its value names (spec.backup.claimName): whoever
// may label the claim consents to the backup Job mounting it, writing
// snapshots onto it and, through fsGroup, changing the group of what it
// holds. Without it a Cluster's creator could point the Job at any claim of
// the namespace.
const LabelBackupFor = "k3k.io/backup-for"

// LabelRestoreFor on a PersistentVolumeClaim hands it, for reading, to the
// restore Job of the Cluster it names (spec.restoreFrom). A label of its own
// rather than LabelBackupFor: a claim is read into a new cluster of another
// name while it stays the backup claim of the old one, and reading is less
// than what LabelBackupFor hands over (writing, fsGroup), which also serves.
const LabelRestoreFor = "k3k.io/restore-for"

// AnnotationEtcdRecover on a Cluster asks for a recovery from etcd quorum
// loss (`k3kcli cluster recover NAME` sets it; the value identifies the
// request). The controller rebuilds the cluster from the most advanced
// surviving member only while quorum is lost, reports it in the EtcdRecovery
// condition and in Events, and records the request as handled when done or
// refused (status.datastore.recoveryRequest), so a request never acts later
// on its own.
const AnnotationEtcdRecover = "k3k.io/etcd-recover"

// AnnotationRestorePending on a new Cluster says that its data is being
// restored from a snapshot (k3kcli cluster create --restore-from sets it
// before the Cluster exists and removes it when done). Until then the
// cluster is treated as one that holds data: no token is generated (the
// snapshot's token is written into the Secret after its data), and the
// servers start, their datastores empty and k3s waiting for the token, so
// that the data can be loaded into the datastore before k3s first starts. It
// changes nothing for a cluster whose token Secret holds a token.
//
// k3kcli cluster restore (in place) sets it too, with a value starting
// "in-place/", and sets it on the token Secret as well, whose token it has
// moved out of the key the pods mount: a server pod's publisher restores no
// token into a Secret so annotated, so k3s stays stopped while the
// datastore's data is replaced.
const AnnotationRestorePending = "k3k.io/restore-pending"

// FinalizerEtcdMember holds an etcd server pod until its member has been
// removed from the cluster, or may stay.
const FinalizerEtcdMember = "k3k.io/etcd-member"

// LabelPolicyName on a Namespace binds it to the VirtualClusterPolicy its
// value names (upstream k3k's label): every Cluster of the namespace is held
// to that policy.
const LabelPolicyName = "policy.k3k.io/policy-name"
