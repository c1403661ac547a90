package translate

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// A kubelet gives every container of a pod with enableServiceLinks (the
// default) variables for each Service of the pod's namespace, in the docker
// links style: REDIS_MASTER_SERVICE_HOST, REDIS_MASTER_SERVICE_PORT,
// REDIS_MASTER_PORT_6379_TCP_ADDR and so on (k8s.io/kubernetes
// pkg/kubelet/envvars). The host kubelet would give the host's Services, so
// the agent turns its links off and writes the virtual cluster's instead,
// with the addresses that route from host pods: the host copies' ClusterIPs,
// the ones the agent's DNS answers for the same names.

// ServiceLink is one Service as a pod's variables name it.
type ServiceLink struct {
	// Name is the Service's name.
	Name string
	// IP is the address the variables give: the host copy's ClusterIP.
	IP string
	// Ports are the Service's ports, the first one the default.
	Ports []corev1.ServicePort
}

// ServiceLinkEnv is the variables of links, ordered by Service name, as a
// kubelet writes them for Services of the pod's namespace.
func ServiceLinkEnv(links []ServiceLink) []corev1.EnvVar {
	links = slices.Clone(links)
	slices.SortFunc(links, func(a, b ServiceLink) int { return strings.Compare(a.Name, b.Name) })
	var env []corev1.EnvVar
	add := func(name, value string) { env = append(env, corev1.EnvVar{Name: name, Value: value}) }
	for _, l := range links {
		if l.IP == "" || len(l.Ports) == 0 {
			continue
		}
		prefix := envName(l.Name)
		add(prefix+"_SERVICE_HOST", l.IP)
		add(prefix+"_SERVICE_PORT", strconv.Itoa(int(l.Ports[0].Port)))
		for _, p := range l.Ports {
			if p.Name != "" {
				add(prefix+"_SERVICE_PORT_"+envName(p.Name), strconv.Itoa(int(p.Port)))
			}
		}
		// The docker links: the first port as NAME_PORT, then every port.
		first := l.Ports[0]
		add(prefix+"_PORT", linkURL(first, l.IP))
		for _, p := range l.Ports {
			key := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(string(protocol(p))))
			add(key, linkURL(p, l.IP))
			add(key+"_PROTO", strings.ToLower(string(protocol(p))))
			add(key+"_PORT", strconv.Itoa(int(p.Port)))
			add(key+"_ADDR", l.IP)
		}
	}
	return env
}

// AddServiceLinks gives every container of the host pod the variables of
// links, before its own, except those the container sets itself (its own
// win, as on a kubelet).
func AddServiceLinks(hpod *corev1.Pod, links []ServiceLink) {
	env := ServiceLinkEnv(links)
	if len(env) == 0 {
		return
	}
	forEachContainer(&hpod.Spec, func(c *corev1.Container) { prependEnv(c, env) })
}

// prependEnv puts env before c's own variables, leaving out those c sets
// itself: a container's own value wins, as on a kubelet, and its own
// variables can refer to the ones given with $(NAME).
func prependEnv(c *corev1.Container, env []corev1.EnvVar) {
	own := map[string]bool{}
	for _, e := range c.Env {
		own[e.Name] = true
	}
	var add []corev1.EnvVar
	for _, e := range env {
		if !own[e.Name] {
			add = append(add, e)
		}
	}
	c.Env = append(add, c.Env...)
}

// ServiceLinksEnabled says whether vpod asks for its namespace's Service
// variables (enableServiceLinks, true unless set false).
func ServiceLinksEnabled(vpod *corev1.Pod) bool {
	return vpod.Spec.EnableServiceLinks == nil || *vpod.Spec.EnableServiceLinks
}

// envName is a Service or port name as a variable name: upper case, dashes
// as underscores.
func envName(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func protocol(p corev1.ServicePort) corev1.Protocol {
	if p.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return p.Protocol
}

func linkURL(p corev1.ServicePort, ip string) string {
	return strings.ToLower(string(protocol(p))) + "://" + net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))
}
