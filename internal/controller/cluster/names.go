package cluster

// Annotations the controller keeps on the objects it writes.
const (
	// AnnotationInputHash records the hash of the desired object the controller
	// last wrote, so an unchanged Cluster causes no writes (see apply.go).
	AnnotationInputHash = "k3k.io/input-hash"
	// AnnotationConfigHash on the pod template rolls the servers when their
	// generated k3s configuration changes.
	AnnotationConfigHash = "k3k.io/config-hash"
)

// MaxServers is the most servers admission allows; the member certificate
// names every ordinal below it, so scaling never waits for a new certificate.
const MaxServers = 7
