package translate

import (
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// APIServer is how pods reach the virtual cluster's API from the host. The
// host kubelet sets KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT in
// every container to the host's own API, where a virtual ServiceAccount token
// means nothing; in-cluster clients of the virtual cluster (operators, and
// CoreDNS, which the virtual DNS depends on) would talk to the wrong cluster.
type APIServer struct {
	// Host is a name of the virtual API that its serving certificate covers,
	// typically the cluster's API Service "k3k-<name>-service.<ns>.svc".
	Host string
	// Port is the port on Host. Default 443.
	Port int32
	// IP, when set, is Host's address on the host (the API Service's
	// ClusterIP). It becomes a hostAliases entry, so Host resolves whatever
	// DNS the pod uses: CoreDNS runs with dnsPolicy Default, and pods pointed
	// at the virtual DNS cannot resolve host names.
	IP string
}

// Variables set in every container. Explicit container variables take
// precedence over the ones kubelet injects; a container that sets one itself
// keeps its own value.
const (
	EnvServiceHost      = "KUBERNETES_SERVICE_HOST"
	EnvServicePort      = "KUBERNETES_SERVICE_PORT"
	EnvServicePortHTTPS = "KUBERNETES_SERVICE_PORT_HTTPS"
)

// pointAtVirtualAPI rewrites the in-cluster API address of spec's containers
// to the virtual API, when one is configured.
func (t *Translator) pointAtVirtualAPI(spec *corev1.PodSpec) {
	a := t.cfg.APIServer
	if a.Host == "" {
		return
	}
	port := a.Port
	if port == 0 {
		port = 443
	}
	// Prepended, so that the container's own variables can refer to them
	// with $(KUBERNETES_SERVICE_HOST).
	env := []corev1.EnvVar{
		{Name: EnvServiceHost, Value: a.Host},
		{Name: EnvServicePort, Value: strconv.Itoa(int(port))},
		{Name: EnvServicePortHTTPS, Value: strconv.Itoa(int(port))},
	}
	forEachContainer(spec, func(c *corev1.Container) { prependEnv(c, env) })
	if a.IP != "" && net.ParseIP(a.Host) == nil {
		spec.HostAliases = append(spec.HostAliases, corev1.HostAlias{IP: a.IP, Hostnames: []string{a.Host}})
	}
}
