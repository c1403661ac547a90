package cluster

import (
	"net"
	"sort"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/layout"
)

// Isolation on the host (docs/security.md): pure builders for a Cluster's
// ResourceQuota, LimitRange and NetworkPolicies. Like desired.go, nothing here
// touches a client; reconcileIsolation applies what they return.

// Labels of the host pods the agent makes for the virtual cluster's
// workloads (pkg/agent/translate.hostMeta). The value differs from the
// controller's own managed-by value, which is how the policies tell a tenant's
// workloads from the cluster's servers and agent.
const (
	agentManagedByValue = "k3k-kubelet"
)

// IsolationDefaults are the controller's defaults for spec.quota, spec.limits
// and spec.networkPolicy, set through the chart. The zero value makes
// NetworkPolicies and no quota or LimitRange.
type IsolationDefaults struct {
	// QuotaHard are the default ResourceQuota hard limits; a Cluster's
	// spec.quota.hard replaces them name by name. Empty (with an empty spec)
	// makes no ResourceQuota.
	QuotaHard corev1.ResourceList
	// LimitDefaultRequest, LimitDefault and LimitMax are the defaults of
	// spec.limits.defaultRequest, .default and .max, resource by resource.
	// All empty (with an empty spec) make no LimitRange.
	LimitDefaultRequest, LimitDefault, LimitMax corev1.ResourceList
	// DisableNetworkPolicy turns the NetworkPolicies off for Clusters that
	// leave spec.networkPolicy.enabled unset.
	DisableNetworkPolicy bool
	// EgressCIDRs are the addresses outside the host's pod network that a
	// virtual cluster's pods, servers and agent may reach (for example
	// 0.0.0.0/0 for the internet); empty means none.
	EgressCIDRs []string
	// EgressExcept are cut out of EgressCIDRs: the host's pod and Service
	// networks, or a CIDR of EgressCIDRs would let one tenant reach another.
	EgressExcept []string
	// ControllerNamespace is where the controller runs: the only namespace
	// whose pods may open the etcd client port of a server (membership
	// management). Empty allows every namespace (etcd still wants a client
	// certificate).
	ControllerNamespace string
}

// IsolationNames names the isolation objects of c.
type IsolationNames struct {
	Quota, LimitRange, WorkloadPolicy, ServerPolicy, AgentPolicy string
}

// IsolationNamesFor returns the names of c's isolation objects.
func IsolationNamesFor(c *v1beta1.Cluster) IsolationNames {
	p := "k3k-" + c.Name
	return IsolationNames{
		Quota:          p + "-quota",
		LimitRange:     p + "-limits",
		WorkloadPolicy: p + "-workloads",
		ServerPolicy:   p + "-server",
		AgentPolicy:    p + "-agent",
	}
}

// mergeResources returns defaults with over's entries replacing theirs.
func mergeResources(defaults, over corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range defaults {
		out[k] = v.DeepCopy()
	}
	for k, v := range over {
		out[k] = v.DeepCopy()
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// DesiredQuota is c's ResourceQuota, or nil when neither the spec nor the
// defaults set a hard limit. A ResourceQuota cannot select pods by label, so
// it bounds the whole namespace, the cluster's servers and agent included:
// one Cluster per namespace makes it a per-cluster bound (docs/security.md).
func DesiredQuota(c *v1beta1.Cluster, d IsolationDefaults) *corev1.ResourceQuota {
	var spec corev1.ResourceList
	if c.Spec.Quota != nil {
		spec = c.Spec.Quota.Hard
	}
	hard := mergeResources(d.QuotaHard, spec)
	if len(hard) == 0 {
		return nil
	}
	return &corev1.ResourceQuota{
		ObjectMeta: objectMeta(c, IsolationNamesFor(c).Quota),
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	}
}

// DesiredLimitRange is c's LimitRange for containers, or nil when neither the
// spec nor the defaults set anything. It applies to every container of the
// namespace: the server containers have their own requests, and the k3s
// container takes spec.serverResources, so a default limit reaches it only
// where serverResources sets none.
func DesiredLimitRange(c *v1beta1.Cluster, d IsolationDefaults) *corev1.LimitRange {
	var spec v1beta1.LimitsConfig
	if c.Spec.Limits != nil {
		spec = *c.Spec.Limits
	}
	item := corev1.LimitRangeItem{
		Type:           corev1.LimitTypeContainer,
		DefaultRequest: mergeResources(d.LimitDefaultRequest, spec.DefaultRequest),
		Default:        mergeResources(d.LimitDefault, spec.Default),
		Max:            mergeResources(d.LimitMax, spec.Max),
	}
	if len(item.DefaultRequest)+len(item.Default)+len(item.Max) == 0 {
		return nil
	}
	return &corev1.LimitRange{
		ObjectMeta: objectMeta(c, IsolationNamesFor(c).LimitRange),
		Spec:       corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{item}},
	}
}

// NetworkPolicyEnabled says whether c gets its NetworkPolicies.
func NetworkPolicyEnabled(c *v1beta1.Cluster, d IsolationDefaults) bool {
	if c.Spec.NetworkPolicy != nil && c.Spec.NetworkPolicy.Enabled != nil {
		return *c.Spec.NetworkPolicy.Enabled
	}
	return !d.DisableNetworkPolicy
}

// workloadLabels select the host pods the agent runs for c's workloads.
func workloadLabels(c *v1beta1.Cluster) map[string]string {
	return map[string]string{v1beta1.LabelManagedBy: agentManagedByValue, v1beta1.LabelCluster: c.Name}
}

// clusterPodLabels select every pod of c, whatever made it: its servers and
// agent (commonLabels) and its workloads' host pods (workloadLabels) all
// carry LabelCluster.
func clusterPodLabels(c *v1beta1.Cluster) map[string]string {
	return map[string]string{v1beta1.LabelCluster: c.Name}
}

func podPeer(labels map[string]string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: labels}}
}

func policyPorts(proto corev1.Protocol, ports ...int32) []networkingv1.NetworkPolicyPort {
	out := make([]networkingv1.NetworkPolicyPort, 0, len(ports))
	for _, p := range ports {
		out = append(out, networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt32(p))})
	}
	return out
}

// nodePorts is the range of node ports the agent serves (TCP).
func nodePorts() []networkingv1.NetworkPolicyPort {
	return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(layout.NodePortMin)), EndPort: ptr.To[int32](layout.NodePortMax)}}
}

// DesiredNetworkPolicies are c's NetworkPolicies, or nil when they are turned
// off. Policies only ever allow, and a pod selected by one is denied what
// none allows, so three policies split the namespace's pods by role:
//
//   - workloads (the agent's host pods for c): talk to each other, reach
//     their API server (the server pods' API port, behind the API Service)
//     and their DNS (the agent's DNS port, behind the DNS Service), and the
//     configured outside addresses; nothing else — not another tenant's pods,
//     not the host API, not a server's datastore, health or metrics ports.
//     They accept traffic from their own workloads and servers only.
//   - servers: anyone may reach the API port (users, agents, ingress);
//     the etcd client and peer ports are open to the cluster's own servers
//     and the controller's namespace; the datastore health and metrics and
//     the publisher health ports to nobody (the node's kubelet probes them,
//     and node traffic is not subject to policy). A virtual API server
//     connects wherever a tenant points it (node, pod and service proxies,
//     webhooks, APIServices), so its egress is closed too but for: every pod
//     of c (etcd peers, the agent's kubelet port, the workloads behind
//     webhooks, APIServices and proxies), DNS, the host API's endpoints (the
//     publisher and the datastore sidecar), an external datastore's
//     addresses, and the configured outside addresses.
//   - the agent: its kubelet port to c's servers and workloads (logs, exec,
//     metrics), its DNS port to c's workloads. Out: the host API's
//     endpoints (its host client; exec, attach, port-forward and logs go
//     through the host API too), c's servers' API port (the virtual API,
//     behind the API Service), DNS (its DNS server's upstreams), and the
//     configured outside addresses.
//
// t are the addresses the reconcile observed; with t.HostAPI empty the
// servers and agent would lose the host API, which reconcileIsolation never
// lets happen.
func DesiredNetworkPolicies(c *v1beta1.Cluster, d IsolationDefaults, t EgressTargets) []*networkingv1.NetworkPolicy {
	if !NetworkPolicyEnabled(c, d) {
		return nil
	}
	n := IsolationNamesFor(c)
	workloads, servers, agent := podPeer(workloadLabels(c)), podPeer(serverLabels(c)), podPeer(agentLabels(c))
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	withOutside := func(rules []networkingv1.NetworkPolicyEgressRule) []networkingv1.NetworkPolicyEgressRule {
		if outside := egressBlocks(d.EgressCIDRs, d.EgressExcept); len(outside) > 0 {
			rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: outside})
		}
		return rules
	}

	workloadPolicy := &networkingv1.NetworkPolicy{
		ObjectMeta: objectMeta(c, n.WorkloadPolicy),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: workloadLabels(c)},
			PolicyTypes: both,
			// The agent relays its node ports to the workloads (through
			// the Services' host copies).
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{workloads, servers, agent}}},
			Egress: withOutside([]networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{workloads}},
				{To: []networkingv1.NetworkPolicyPeer{servers}, Ports: policyPorts(corev1.ProtocolTCP, layout.APIPort)},
				{To: []networkingv1.NetworkPolicyPeer{agent}, Ports: append(policyPorts(corev1.ProtocolUDP, layout.AgentDNSPort), policyPorts(corev1.ProtocolTCP, layout.AgentDNSPort)...)},
				{To: []networkingv1.NetworkPolicyPeer{agent}, Ports: nodePorts()},
			}),
		},
	}

	etcdFrom := []networkingv1.NetworkPolicyPeer{servers}
	controller := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}}
	if d.ControllerNamespace != "" {
		controller.NamespaceSelector.MatchLabels = map[string]string{corev1.LabelMetadataName: d.ControllerNamespace}
	}
	serverEgress := []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{podPeer(clusterPodLabels(c))}}, dnsRule()}
	serverEgress = append(serverEgress, endpointRules(t.HostAPI)...)
	serverEgress = append(serverEgress, endpointRules(t.Datastore)...)
	serverPolicy := &networkingv1.NetworkPolicy{
		ObjectMeta: objectMeta(c, n.ServerPolicy),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: serverLabels(c)},
			PolicyTypes: both,
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: policyPorts(corev1.ProtocolTCP, layout.APIPort)},
				{From: etcdFrom, Ports: policyPorts(corev1.ProtocolTCP, layout.DatastoreClientPort, layout.DatastorePeerPort)},
				{From: []networkingv1.NetworkPolicyPeer{controller}, Ports: policyPorts(corev1.ProtocolTCP, layout.DatastoreClientPort)},
			},
			Egress: withOutside(serverEgress),
		},
	}

	agentEgress := []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{servers}, Ports: policyPorts(corev1.ProtocolTCP, layout.APIPort)},
		{To: []networkingv1.NetworkPolicyPeer{workloads}}, // node ports, relayed
		dnsRule(),
	}
	agentPolicy := &networkingv1.NetworkPolicy{
		ObjectMeta: objectMeta(c, n.AgentPolicy),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: agentLabels(c)},
			PolicyTypes: both,
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: []networkingv1.NetworkPolicyPeer{servers, workloads}, Ports: policyPorts(corev1.ProtocolTCP, layout.AgentKubeletPort)},
				{From: []networkingv1.NetworkPolicyPeer{workloads}, Ports: append(policyPorts(corev1.ProtocolUDP, layout.AgentDNSPort), policyPorts(corev1.ProtocolTCP, layout.AgentDNSPort)...)},
				{From: []networkingv1.NetworkPolicyPeer{workloads}, Ports: nodePorts()},
			},
			Egress: withOutside(append(agentEgress, endpointRules(t.HostAPI)...)),
		},
	}
	return []*networkingv1.NetworkPolicy{workloadPolicy, serverPolicy, agentPolicy}
}

// egressBlocks turns the configured egress CIDRs into peers, each with the
// excepted CIDRs that lie inside it (the API server refuses an except outside
// its block). Unparsable entries were refused when the flags were parsed.
func egressBlocks(cidrs, except []string) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for _, c := range cidrs {
		_, block, err := net.ParseCIDR(c)
		if err != nil {
			continue
		}
		ones, _ := block.Mask.Size()
		var inside []string
		for _, e := range except {
			_, ex, err := net.ParseCIDR(e)
			if err != nil {
				continue
			}
			exOnes, _ := ex.Mask.Size()
			if block.Contains(ex.IP) && exOnes > ones && len(ex.IP) == len(block.IP) {
				inside = append(inside, ex.String())
			}
		}
		sort.Strings(inside)
		out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: block.String(), Except: inside}})
	}
	return out
}
