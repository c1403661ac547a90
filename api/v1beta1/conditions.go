package v1beta1

// Condition types on a Cluster. The etcd datastore adds EtcdHealthy and
// EtcdAlarm, named by its own package (pkg/datastore/etcd).
const (
	ConditionReady               = "Ready"
	ConditionTokenReady          = "TokenReady"
	ConditionDatastoreReady      = "DatastoreReady"
	ConditionServersReady        = "ServersReady"
	ConditionKubeconfigPublished = "KubeconfigPublished"
	// ConditionAgentsReady reports the shared-mode agent; it does not gate Ready.
	ConditionAgentsReady = "AgentsReady"
	// ConditionPaused is present while spec.paused is set: True once no
	// server or agent pod runs any more.
	ConditionPaused = "Paused"
	// ConditionEtcdMembership says whether the etcd membership matches
	// spec.servers, and otherwise what is being done or what blocks the change
	// (the membership plan's reason: ScaleUp, WaitingForLearner, QuorumAtRisk,
	// LastMember, ...).
	ConditionEtcdMembership = "EtcdMembership"
	// ConditionEtcdRecovery reports the last recovery from quorum loss an
	// operator asked for (AnnotationEtcdRecover).
	ConditionEtcdRecovery = "EtcdRecovery"
	// ConditionLastBackupSucceeded is present while spec.backup is set: True
	// when the newest finished backup Job wrote its snapshot, False with the
	// reason otherwise. It does not gate Ready.
	ConditionLastBackupSucceeded = "LastBackupSucceeded"
	// ConditionMigrating is present while a migration from SQLite to etcd
	// (spec.datastore.type changed from sqlite to etcd) is under way, True,
	// with the step it is at as its reason (ReasonMigration…); it goes once
	// every server asked for is ready after the switch, or when the
	// migration was undone before it. It does not gate Ready.
	ConditionMigrating = "Migrating"
	// ConditionRestored is present while spec.restoreFrom is set: whether the
	// snapshot was loaded and the cluster given its token (True Restored), is
	// being loaded (False RestorePending), failed (False RestoreFailed, or a
	// claim reason), or was ignored because the cluster holds data already.
	ConditionRestored = "Restored"
	// ConditionUserNamespaces is present on a Cluster with a shared-mode
	// agent: True when the agent runs its pods in user namespaces
	// (hostUsers: false), False with the reason otherwise. The agent guard
	// reads it: while True, the host API refuses an agent's pod that keeps
	// the node's users below the privileged level. It does not gate Ready.
	ConditionUserNamespaces = "UserNamespaces"
	// ConditionPolicy is present while the Cluster's namespace is bound to a
	// VirtualClusterPolicy (LabelPolicyName): True (PolicyApplied) when the
	// Cluster keeps to it, its message naming what the policy tightened;
	// False when the policy does not exist (PolicyNotFound) or the Cluster
	// breaks it where nothing can be tightened (PolicyBroken: a spec made
	// before the policy; the host API refuses the same for a new Cluster).
	// It does not gate Ready.
	ConditionPolicy = "Policy"
)

// Reasons of Policy.
const (
	ReasonPolicyApplied  = "PolicyApplied"
	ReasonPolicyNotFound = "PolicyNotFound"
	ReasonPolicyBroken   = "PolicyBroken"
)

// Reasons of Migrating: the step.
const (
	// ReasonMigrationLoadingEtcd: server pod 0 is made again with etcd
	// member 0, whose sidecar loads the SQLite data of the volume before k3s
	// starts; until the switch, datastore.type back to sqlite serves the
	// untouched SQLite data again.
	ReasonMigrationLoadingEtcd = "MigrationLoadingEtcd"
	// ReasonMigrationFailed: the sidecar's load failed; the message has its
	// termination message. The kubelet starts it again (a load is redone
	// from the start); the SQLite data is untouched.
	ReasonMigrationFailed = "MigrationFailed"
	// ReasonMigrationSwitched: the data is in etcd and member 0 serves it
	// (status.datastore.type etcd): no way back. The cluster grows to
	// spec.servers.
	ReasonMigrationSwitched = "MigrationSwitched"
)

// Reasons of Restored.
const (
	ReasonRestored = "Restored"
	// ReasonRestorePending: the restore Job has not finished.
	ReasonRestorePending = "RestorePending"
	// ReasonRestoreFailed: the restore Job failed; the message has its reason.
	// The token stays empty, so k3s never starts on the empty datastores.
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonRestoreClaimNotFound: restoreFrom.claimName names no claim of the
	// namespace; no Job runs until it exists.
	ReasonRestoreClaimNotFound = "RestoreClaimNotFound"
	// ReasonRestoreClaimRefused: the claim is not labelled for this cluster,
	// or is a k3k server volume.
	ReasonRestoreClaimRefused = "RestoreClaimRefused"
	// ReasonRestoreUnsupported: the datastore in effect is external.
	ReasonRestoreUnsupported = "RestoreUnsupported"
	// ReasonRestoreIgnored: server volumes of the cluster existed before any
	// restore began (kept volumes): they are served, the snapshot is not.
	ReasonRestoreIgnored = "RestoreIgnored"
)

// Reasons of LastBackupSucceeded.
const (
	ReasonBackupSucceeded = "BackupSucceeded"
	ReasonBackupFailed    = "BackupFailed"
	// ReasonBackupPending: no backup Job has finished yet.
	ReasonBackupPending = "BackupPending"
	// ReasonBackupClaimNotFound: spec.backup.claimName names no claim of the
	// namespace; the CronJob is not created until it exists.
	ReasonBackupClaimNotFound = "BackupClaimNotFound"
	// ReasonBackupClaimRefused: the claim is one of k3k's own (a server
	// volume), which snapshots must never fill.
	ReasonBackupClaimRefused = "BackupClaimRefused"
	// ReasonBackupUnsupported: the datastore in effect is external.
	ReasonBackupUnsupported = "BackupUnsupported"
)

// Condition reasons. CamelCase, stable: tools and people match on them.
const (
	ReasonReady       = "Ready"
	ReasonInvalidSpec = "InvalidSpec"
	ReasonNotReady    = "NotReady"
	// ReasonReconcileError on Ready says that a reconcile step failed; the
	// message names the step and its error. It clears on the next reconcile
	// that gets through every step.
	ReasonReconcileError       = "ReconcileError"
	ReasonTokenAvailable       = "TokenAvailable"
	ReasonTokenSecretNotFound  = "TokenSecretNotFound"
	ReasonTokenAwaitingRestore = "TokenAwaitingRestore"
	ReasonDatastoreServing     = "DatastoreServing"
	ReasonDatastoreStarting    = "DatastoreStarting"
	ReasonServersReady         = "ServersReady"
	ReasonServersStarting      = "ServersStarting"
	ReasonWaiting              = "Waiting"
	ReasonInvalid              = "Invalid"
	ReasonPublished            = "Published"
)

// Reasons of the ServersReady condition when a server pod is stuck on
// something that will not go away by waiting alone. The message names the pod
// and the cause.
const (
	// ReasonServerVolumePending: a server's PersistentVolumeClaim is not bound;
	// the message carries the claim's latest event (e.g. ProvisioningFailed).
	ReasonServerVolumePending = "ServerVolumePending"
	// ReasonServerUnschedulable: the scheduler found no node; the message is
	// the scheduler's.
	ReasonServerUnschedulable = "ServerUnschedulable"
	// ReasonServerImagePullFailing: a server container's image cannot be pulled.
	ReasonServerImagePullFailing = "ServerImagePullFailing"
	// ReasonServerCrashLooping: a server container keeps exiting; the message
	// has its last exit code.
	ReasonServerCrashLooping = "ServerCrashLooping"
	// ReasonServerNodeLost: a server pod is on a host node that has not been
	// Ready for the controller's node-loss timeout, or whose Node is gone;
	// the message says whether the controller replaces the pod (etcd, or a
	// node known to be off) or what the operator must do first.
	ReasonServerNodeLost = "ServerNodeLost"
)

// IsBlockingReason reports whether a condition reason names a cause that
// stops a server pod from starting (as opposed to one it is still working
// through). k3kcli shows the message of such conditions while it waits.
func IsBlockingReason(reason string) bool {
	switch reason {
	case ReasonServerVolumePending, ReasonServerUnschedulable, ReasonServerImagePullFailing, ReasonServerCrashLooping, ReasonServerNodeLost:
		return true
	}
	return false
}

// Reasons of DatastoreReady for datastore.type external. The check's
// failures are "ExternalDatastore" followed by its own reason, e.g.
// ExternalDatastoreUnreachable, ExternalDatastoreAuthFailed.
const (
	ReasonExternalSecretNotFound = "ExternalSecretNotFound"
	ReasonExternalSecretInvalid  = "ExternalSecretInvalid"
	ReasonExternalChecking       = "ExternalDatastoreChecking"
	ReasonExternalReachable      = "ExternalDatastoreReachable"
)

// Reasons of the etcd parts of the status.
const (
	ReasonQuorumHealthy = "QuorumHealthy"
	// ReasonQuorumConfirmed: a member confirmed a quorum (its linearizable
	// member list succeeded), so the datastore serves, though the controller
	// sees fewer healthy voters than a quorum needs (it is cut off from some;
	// EtcdHealthy names them). Not QuorumLost: nothing needs recovering.
	ReasonQuorumConfirmed = "QuorumConfirmed"
	// ReasonQuorumLost is also the membership plan's reason (etcd.ReasonQuorumLost
	// is this constant), so every condition says it under quorum loss.
	ReasonQuorumLost       = "QuorumLost"
	ReasonEtcdCAUnusable   = "EtcdCAUnusable"
	ReasonNotObserved      = "NotObserved"
	ReasonStepNotDone      = "StepNotDone"
	ReasonPodsWaitToLeave  = "PodsWaitToLeave"
	ReasonRosterNotWritten = "RosterNotWritten"
)

// Reasons of AgentsReady.
const (
	ReasonAgentsReady    = "AgentsReady"
	ReasonAgentsStarting = "AgentsStarting"
)

// Reasons of UserNamespaces.
const (
	// ReasonUserNamespacesRequired: the host administrator turned them on
	// (sharedAgent.userNamespaces true), whatever the nodes report.
	ReasonUserNamespacesRequired = "Required"
	// ReasonUserNamespacesSupported: turned on because every node the
	// workloads may run on reports support (sharedAgent.userNamespaces auto).
	ReasonUserNamespacesSupported = "Supported"
	// ReasonUserNamespacesDisabled: the host administrator turned them off.
	ReasonUserNamespacesDisabled = "Disabled"
	// ReasonUserNamespacesUnsupported: auto, and a node's runtime does not
	// support them (or no node could run the workloads).
	ReasonUserNamespacesUnsupported = "Unsupported"
)

// Reasons of the Paused condition (and of Ready while paused).
const (
	ReasonPaused           = "Paused"
	ReasonPausing          = "Pausing"
	ReasonPauseUnsupported = "PauseUnsupported"
)

// ReasonServersStartedToRestoreToken is the Event recorded when the servers
// of a cluster with data are started so that they restore the token Secret.
const ReasonServersStartedToRestoreToken = "ServersStartedToRestoreToken"
