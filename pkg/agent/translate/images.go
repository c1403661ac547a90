package translate

import (
	"fmt"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// A tenant's image is pulled by the host node's containerd: from the node's
// network, with the node's cache and credentials. Two defaults follow from
// that (Config.AllowRegistryAddresses, Config.AlwaysPullImages).

// ImageProblems lists the images of a pod (containers of every kind that
// runs on the host, and image volumes) whose registry is given as an address
// the node resolves to itself or its own network rather than to a registry:
// an IP literal (in any spelling a resolver accepts), localhost (and
// *.localhost), or a name of one label (/etc/hosts and the node's search
// domains: the node's own name among them). Pulling "127.0.0.1:10250/x"
// makes containerd connect to that port of the node, and its error, copied
// to the pod's status, tells the tenant what answered: a port scanner of the
// host's network. Unless Config.AllowRegistryAddresses. HostPod refuses such
// a pod; the agent checks a running pod's spec again before it carries an
// image change over (ephemeral containers are never run on the host, so
// their images are not checked).
//
// A DNS name that resolves to such an address is not caught here (the name
// is resolved by the node, later); the node's registry configuration
// (containerd's hosts.toml, a mirror) is the place to pin registries.
func (t *Translator) ImageProblems(spec *corev1.PodSpec) []string {
	if t.cfg.AllowRegistryAddresses {
		return nil
	}
	var r []string
	check := func(where, image string) {
		if host, ok := registryAddress(image); ok {
			r = append(r, fmt.Sprintf("%s: image %q names its registry by address (%s): pulling it would make the host node connect there (registries must be DNS names of more than one label)", where, image, host))
		}
	}
	forEachContainer(spec, func(c *corev1.Container) { check(fmt.Sprintf("container %q", c.Name), c.Image) })
	for _, v := range spec.Volumes {
		if v.Image != nil {
			check(fmt.Sprintf("volume %q", v.Name), v.Image.Reference)
		}
	}
	return r
}

// registryAddress returns the registry host of image and true when it is an
// address rather than a registry's DNS name (imageProblems). The registry is
// the reference's first path component when it has a dot or a port or is
// localhost, as Docker and containerd read references; otherwise the image
// is on Docker Hub.
func registryAddress(image string) (string, bool) {
	first, _, found := strings.Cut(image, "/")
	if !found {
		return "", false
	}
	lower := strings.ToLower(first)
	if !strings.ContainsAny(lower, ".:") && lower != "localhost" {
		return "", false
	}
	host := lower
	if strings.HasPrefix(host, "[") {
		if end := strings.Index(host, "]"); end > 0 {
			host = host[1:end]
		}
	} else if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	labels := strings.Split(host, ".")
	switch {
	case net.ParseIP(host) != nil,
		host == "localhost", strings.HasSuffix(host, ".localhost"),
		len(labels) == 1,
		numericLabel(labels[len(labels)-1]):
		return first, true
	}
	return "", false
}

// RegistryAddressPattern is registryAddress as one RE2 regular expression
// over the lowercased image: it matches exactly the images registryAddress
// finds an address in (TestRegistryAddressPatternAgrees compares the two on
// every string of up to five pieces of an alphabet of its parts). The agent
// guard (internal/controller/cluster) refuses such images in the agent's
// pods with it, in CEL, where the Go above cannot run. Its alternatives,
// by how the first path component is written:
//   - not in brackets: the host is what precedes the first colon; it is an
//     address when it has one label (a trailing dot, or a port, makes the
//     component a registry; "localhost" is one by itself), ends in
//     .localhost, or its last label is a number (IPv4 in every spelling);
//   - "[" without a "]": the host is the whole component, same tests;
//   - "[host]…": the host is what the brackets hold (IPv6: one label, or a
//     numeric last label for the IPv4-mapped forms), and the component is a
//     registry when it has a dot or a colon anywhere.
var RegistryAddressPattern = func() string {
	const num = `(0x[0-9a-f]+|[0-9]+)`
	alternatives := []string{
		`^([^\[/:.][^/:.]*)?\.(:[^/]*)?/`,
		`^([^\[/:.][^/:.]*)?:[^/]*/`,
		`^localhost/`,
		`^([^\[/:][^/:]*)?\.localhost\.?(:[^/]*)?/`,
		`^([^\[/:][^/:]*)?\.` + num + `\.?(:[^/]*)?/`,
		`^\[[^/\].]*\./`,
		`^\[[^/\].]*:[^/\].]*/`,
		`^\[[^/\]]*\.localhost\.?/`,
		`^\[[^/\]]*\.` + num + `\.?/`,
		`^\[[^\]/.]*:[^\]/.]*\][^/]*/`,
		`^\[[^\]/.]*\][^/]*[.:][^/]*/`,
		`^\[[^\]/.]*\.\][^/]*/`,
		`^\[[^\]/]*\.localhost\.?\][^/]*/`,
		`^\[[^\]/]*\.` + num + `\.?\][^/]*/`,
	}
	return "(" + strings.Join(alternatives, ")|(") + ")"
}()

// numericLabel says whether a name's last label is a number (decimal, or
// hex as 0x…): no top-level domain is, and a C resolver reads such names as
// IPv4 addresses in inet_aton's short and hex forms ("127.1", "0x7f.1").
func numericLabel(l string) bool {
	digits := strings.TrimPrefix(l, "0x")
	if digits == "" {
		return false
	}
	hex := digits != l
	for _, c := range digits {
		if !(c >= '0' && c <= '9') && !(hex && (c >= 'a' && c <= 'f')) {
			return false
		}
	}
	return true
}

// alwaysPull gives every container and image volume of the host pod the
// pull policy Always when Config.AlwaysPullImages: the node then asks the
// registry, with the pod's own pull Secrets, before it runs an image, so a
// tenant cannot run a private image another tenant's credentials brought
// into the node's cache by naming it with IfNotPresent or Never (what the
// AlwaysPullImages admission plugin does for a whole cluster).
func (t *Translator) alwaysPull(spec *corev1.PodSpec) {
	if !t.cfg.AlwaysPullImages {
		return
	}
	forEachContainer(spec, func(c *corev1.Container) { c.ImagePullPolicy = corev1.PullAlways })
	for i := range spec.Volumes {
		if v := spec.Volumes[i].Image; v != nil {
			v.PullPolicy = corev1.PullAlways
		}
	}
}

// pullFailureReasons are the waiting reasons of a container whose image the
// node failed to pull; their messages carry the node's error as it was.
var pullFailureReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "RegistryUnavailable": true, "ErrImageInspect": true,
}

// scrubPullMessages replaces the message of every container waiting on a
// failed pull with what kind of failure it was. The node's own message names
// the addresses it dialled and what answered ("dial tcp 10.0.0.1:5000:
// connect: connection refused", a TLS error, an HTTP status): a tenant who
// names a registry would read the host's network through it. The reason
// stays, and so does the image.
func scrubPullMessages(statuses []corev1.ContainerStatus) {
	for i := range statuses {
		w := statuses[i].State.Waiting
		if w == nil || !pullFailureReasons[w.Reason] || w.Message == "" {
			continue
		}
		w.Message = fmt.Sprintf("pulling image %q failed: %s (the host node's message is not shown)", statuses[i].Image, pullFailureKind(w.Message))
	}
}

// pullFailureKind sorts a node's pull error into what a tenant may know.
func pullFailureKind(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "not found") || strings.Contains(m, "manifest unknown"):
		return "not found"
	case strings.Contains(m, "unauthorized") || strings.Contains(m, "denied") ||
		strings.Contains(m, "authorization") || strings.Contains(m, "forbidden"):
		return "access denied (check the pod's imagePullSecrets)"
	default:
		return "the registry could not be reached or refused the request"
	}
}
