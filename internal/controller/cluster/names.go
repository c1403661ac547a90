package cluster

// Annotations the controller keeps on the objects it writes. They look like
// one idea twice but are not folded into one: AnnotationInputHash sits on an
// object's metadata and only saves a write, while a StatefulSet rolls its pods
// only when its pod template changes, so the config hash has to live in the
// template. Renaming it to the input-hash key, or putting the input hash in
// the template instead, would change the pod template of every existing
// Cluster and roll all their servers on upgrade for no change of theirs.
const (
	// AnnotationInputHash records the hash of the desired object the controller
	// last wrote, so an unchanged Cluster causes no writes (see apply.go).
	AnnotationInputHash = "k3k.io/input-hash"
	// AnnotationConfigHash on the pod template rolls the servers when their
	// generated k3s configuration changes.
	AnnotationConfigHash = "k3k.io/config-hash"
	// AnnotationRosterHash on a server pod is the input hash of the etcd
	// roster the controller last told that pod's kubelet about
	// (nudgeRosterReaders).
	AnnotationRosterHash = "k3k.io/etcd-roster-hash"
)

// MaxServers is the most servers admission allows; the member certificate
// names every ordinal below it, so scaling never waits for a new certificate.
const MaxServers = 7
