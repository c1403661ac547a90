// Command agent-bench measures the shared-mode agent's pod throughput with
// the isolation defaults of "Tenant isolation II" on (as shipped: seccomp
// RuntimeDefault, default requests and a memory limit, imagePullPolicy
// Always, registry addresses refused, grace periods capped, Memory emptyDirs
// sized, pods in user namespaces) and off (as before them). Per round and setting, N virtual pods
// bound to the agent's node are created at once and the clock runs until N
// host pods exist; pods per second is N over that time (make bench-agent).
//
// Everything is real but the node: a host and a virtual kube-apiserver on one
// etcd (envtest binaries), the agent running in this process as cmd/kubelet
// wires it, with the agent ServiceAccount's rights, under the agent guard the
// chart renders for that setting (so the guard's rules for the defaults are
// part of what "defaults on" costs). No kubelet runs the host pods, so this is the agent's and the two
// API servers' share of starting a pod, which is what the defaults can cost.
// The settings alternate within each round, so a machine that gets busier
// or an etcd that grows weighs on both alike; the table gives each setting's
// median and spread and the ratio of the medians. It is a measurement, not a
// test: nothing passes or fails on a number.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/internal/controller/cluster"
	"github.com/k3k-io/k3k/internal/testenv"
	"github.com/k3k-io/k3k/pkg/agent"
	"github.com/k3k-io/k3k/pkg/agent/node"
	"github.com/k3k-io/k3k/pkg/agent/translate"
	"github.com/k3k-io/k3k/pkg/layout"
)

const (
	guardName     = "k3k-agent-guard"
	hostNamespace = "tenant"
	clusterName   = "bench"
	nodeName      = "k3k-bench-kubelet"
)

// setting is one way the agent is configured.
type setting struct {
	name   string
	change func(*translate.Config)
}

var settings = []setting{
	// User namespaces are the controller's decision per Cluster (the agent's
	// default is off); on here as on a host whose nodes support them.
	{"defaults on", func(c *translate.Config) { c.UserNamespaces = true }},
	{"defaults off", func(c *translate.Config) {
		c.DisableSeccompDefault = true
		c.DefaultRequests, c.DefaultLimits = nil, nil
		c.AlwaysPullImages = false
		c.AllowRegistryAddresses = true
		c.MaxTerminationGracePeriodSeconds = 3600
	}},
}

func main() {
	pods := flag.Int("pods", 100, "virtual pods per run (at most the node's 110)")
	rounds := flag.Int("rounds", 9, "rounds; each runs every setting once")
	flag.Parse()
	if err := bench(*pods, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "agent-bench:", err)
		os.Exit(1)
	}
}

// env is the two API servers and what the agent needs of them.
type env struct {
	host, virtual *kubernetes.Clientset
	virtualConfig *rest.Config
	agentHost     *rest.Config
	cluster       *v1beta1.Cluster
	// probe is a host pod as the loosest setting makes it (no seccomp
	// profile): the guard of "defaults on" refuses it, that of "defaults
	// off" admits it, which tells when the guard for a setting is in effect.
	probe *corev1.Pod
}

func bench(pods, rounds int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "k3k-agent-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sub := func(name string) string {
		d := filepath.Join(dir, name)
		_ = os.MkdirAll(d, 0o755)
		return d
	}
	e, stop, err := start(ctx, sub)
	defer stop()
	if err != nil {
		return err
	}

	results := map[string][]float64{}
	for round := range rounds {
		order := slices.Clone(settings)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			secs, err := e.run(ctx, s, round, pods)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, s.name, err)
			}
			results[s.name] = append(results[s.name], float64(pods)/secs)
			fmt.Fprintf(os.Stderr, "round %d %-13s %d host pods in %.2fs (%.1f pods/s)\n", round+1, s.name, pods, secs, float64(pods)/secs)
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "setting\truns\tpods per run\tmedian pods/s\tmin\tmax\t\n")
	for _, s := range settings {
		r := slices.Sorted(slices.Values(results[s.name]))
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t\n", s.name, len(r), pods, median(r), r[0], r[len(r)-1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	on, off := slices.Sorted(slices.Values(results["defaults on"])), slices.Sorted(slices.Values(results["defaults off"]))
	fmt.Printf("\ndefaults on / off: %.2f (median over median; the worst and best pairs of runs give %.2f to %.2f)\n",
		median(on)/median(off), on[0]/off[len(off)-1], on[len(on)-1]/off[0])
	return nil
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// start runs etcd and the two API servers, and sets up the host side as the
// controller and the chart do: namespace, the agent's ServiceAccount, its
// ClusterRole and RoleBinding, and the agent guard.
func start(ctx context.Context, sub func(string) string) (*env, func(), error) {
	var stops []func()
	stop := func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	startCtx, startCancel := context.WithTimeout(ctx, 3*time.Minute)
	defer startCancel()
	etcd, err := testenv.StartEtcd(startCtx, testenv.EtcdConfig{Dir: sub("etcd")})
	if err != nil {
		return nil, stop, fmt.Errorf("starting etcd: %w", err)
	}
	stops = append(stops, func() { _ = etcd.Stop() })
	var wg sync.WaitGroup
	var hostAPI, virtualAPI *testenv.APIServer
	var hostErr, virtErr error
	wg.Go(func() {
		hostAPI, hostErr = testenv.StartAPIServer(startCtx, testenv.APIServerConfig{EtcdServers: []string{etcd.URL}, Dir: sub("host"), ExtraArgs: []string{"--etcd-prefix=/host"}})
	})
	wg.Go(func() {
		virtualAPI, virtErr = testenv.StartAPIServer(startCtx, testenv.APIServerConfig{EtcdServers: []string{etcd.URL}, Dir: sub("virtual"), ExtraArgs: []string{"--etcd-prefix=/virtual"}})
	})
	wg.Wait()
	for _, a := range []*testenv.APIServer{hostAPI, virtualAPI} {
		if a != nil {
			stops = append(stops, func() { _ = a.Stop() })
		}
	}
	if err := errors.Join(hostErr, virtErr); err != nil {
		return nil, stop, fmt.Errorf("starting the API servers: %w", err)
	}
	e := &env{
		host:          kubernetes.NewForConfigOrDie(hostAPI.RESTConfig()),
		virtual:       kubernetes.NewForConfigOrDie(virtualAPI.RESTConfig()),
		virtualConfig: virtualAPI.RESTConfig(),
		cluster:       &v1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: hostNamespace, UID: "bench-uid"}},
	}
	role := cluster.DesiredAgentClusterRole("k3k-agent")
	// Every setting's changes applied: the loosest agent, whose guard lets
	// every setting's pods through. run puts each setting's own in place.
	loosest := e.config()
	for _, s := range settings {
		s.change(&loosest)
	}
	tr, err := translate.New(loosest)
	if err != nil {
		return nil, stop, err
	}
	vprobe := benchPod("guard-probe")
	vprobe.Namespace, vprobe.UID = "probe", "guard-probe"
	if e.probe, err = tr.HostPod(vprobe); err != nil {
		return nil, stop, fmt.Errorf("the guard's probe pod: %w", err)
	}
	policy, binding := cluster.DesiredAgentGuard(guardName, cluster.PodDefaultsOf(loosest).CEL())
	for what, create := range map[string]func() error{
		"namespace": func() error {
			_, err := e.host.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostNamespace}}, metav1.CreateOptions{})
			return err
		},
		"cluster role": func() error {
			_, err := e.host.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		"guard": func() error {
			_, err := e.host.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{})
			return err
		},
		"guard binding": func() error {
			_, err := e.host.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil {
			return nil, stop, fmt.Errorf("%s: %w", what, err)
		}
	}
	if _, err := e.host.CoreV1().ServiceAccounts(hostNamespace).Create(ctx, cluster.DesiredAgentServiceAccount(e.cluster), metav1.CreateOptions{}); err != nil {
		return nil, stop, fmt.Errorf("service account: %w", err)
	}
	if _, err := e.host.RbacV1().RoleBindings(hostNamespace).Create(ctx, cluster.DesiredAgentRoleBinding(e.cluster, role.Name), metav1.CreateOptions{}); err != nil {
		return nil, stop, fmt.Errorf("role binding: %w", err)
	}
	e.agentHost = hostAPI.RESTConfig()
	e.agentHost.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + hostNamespace + ":" + layout.AgentName(clusterName),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + hostNamespace, "system:authenticated"},
	}
	return e, stop, nil
}

// config is the agent's translation with cmd/kubelet's flag defaults.
func (e *env) config() translate.Config {
	return translate.Config{
		ClusterName: clusterName, HostNamespace: hostNamespace, NodeName: nodeName,
		APIServer:        translate.APIServer{Host: "k3k-bench-service.tenant.svc", Port: 443, IP: "10.0.0.99"},
		OwnerReferences:  []metav1.OwnerReference{{APIVersion: "k3k.io/v1beta1", Kind: "Cluster", Name: clusterName, UID: e.cluster.UID}},
		DefaultRequests:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		DefaultLimits:    corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		AlwaysPullImages: true,
	}
}

// run starts an agent with setting s, creates pods virtual pods in a
// namespace of their own, and returns the seconds until all have host pods.
// The agent and the namespaces are removed again before it returns.
func (e *env) run(ctx context.Context, s setting, round, pods int) (float64, error) {
	tc := e.config()
	s.change(&tc)
	if err := e.holdGuardTo(ctx, tc); err != nil {
		return 0, err
	}
	a, err := agent.New(agent.Config{
		Translate:  tc,
		Node:       node.Config{InternalIP: "127.0.0.1", LeaseDuration: 10 * time.Second, StatusInterval: 30 * time.Second},
		Host:       kubernetes.NewForConfigOrDie(e.agentHost),
		HostConfig: e.agentHost,
		Resync:     30 * time.Second,
	})
	if err != nil {
		return 0, err
	}
	agentCtx, stopAgent := context.WithCancel(logr.NewContext(ctx, logr.Discard()))
	var wg sync.WaitGroup
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			stopAgent()
			wg.Wait()
		}
	}
	defer halt()
	wg.Go(func() { _ = a.Run(agentCtx, e.virtualConfig) })
	if err := waitFor(ctx, time.Minute, "the agent ready", a.Ready); err != nil {
		return 0, err
	}

	ns := fmt.Sprintf("r%d-%s", round, strings.ReplaceAll(s.name, " ", "-"))
	if _, err := e.virtual.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	// The controller-manager that would make it does not run here, and the
	// API server admits no pod without its ServiceAccount.
	if _, err := e.virtual.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	start := time.Now()
	errs := make(chan error, pods)
	for i := range pods {
		go func() {
			_, err := e.virtual.CoreV1().Pods(ns).Create(ctx, benchPod(fmt.Sprintf("p%d", i)), metav1.CreateOptions{})
			errs <- err
		}()
	}
	for range pods {
		if err := <-errs; err != nil {
			return 0, fmt.Errorf("creating a virtual pod: %w", err)
		}
	}
	sel := metav1.ListOptions{LabelSelector: "k3k.io/virtual-namespace=" + ns}
	var secs float64
	err = waitFor(ctx, 5*time.Minute, fmt.Sprintf("%d host pods", pods), func() error {
		list, err := e.host.CoreV1().Pods(hostNamespace).List(ctx, sel)
		if err != nil {
			return err
		}
		if len(list.Items) < pods {
			return fmt.Errorf("%d of %d", len(list.Items), pods)
		}
		secs = time.Since(start).Seconds()
		return nil
	})
	if err != nil {
		return 0, err
	}
	// Every run starts from empty namespaces on both sides: the agent
	// stops, then its virtual pods (no kubelet waits for their grace) and
	// their host pods are deleted. No namespace controller runs to clean up.
	halt()
	now := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}
	if err := e.virtual.CoreV1().Pods(ns).DeleteCollection(ctx, now, metav1.ListOptions{}); err != nil {
		return 0, err
	}
	if err := e.host.CoreV1().Pods(hostNamespace).DeleteCollection(ctx, now, sel); err != nil {
		return 0, err
	}
	return secs, nil
}

// holdGuardTo puts in place the agent guard the chart renders for an agent
// configured as tc, and waits until the host API server enforces it: the
// probe pod, sent as the agent in a dry run, is refused by the guard when tc
// has the seccomp default on and admitted when it is off.
func (e *env) holdGuardTo(ctx context.Context, tc translate.Config) error {
	want, _ := cluster.DesiredAgentGuard(guardName, cluster.PodDefaultsOf(tc).CEL())
	policies := e.host.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	current, err := policies.Get(ctx, guardName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	current.Spec = want.Spec
	if _, err := policies.Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating the guard: %w", err)
	}
	agentClient := kubernetes.NewForConfigOrDie(e.agentHost)
	refuse := !tc.DisableSeccompDefault
	return waitFor(ctx, time.Minute, "the guard for this setting in effect", func() error {
		_, err := agentClient.CoreV1().Pods(hostNamespace).Create(ctx, e.probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		refused := err != nil && strings.Contains(err.Error(), guardName)
		switch {
		case err != nil && !refused:
			return err
		case refused != refuse:
			return fmt.Errorf("the probe pod refused: %t, want %t", refused, refuse)
		}
		return nil
	})
}

// benchPod is a workload pod as a Deployment would make it, bound to the
// agent's node, setting none of what the defaults fill in.
func benchPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bench"}},
		Spec: corev1.PodSpec{
			NodeName:                     nodeName,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "web", Image: "registry.example.com/web:1",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
			Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
		},
	}
}

func waitFor(ctx context.Context, limit time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
