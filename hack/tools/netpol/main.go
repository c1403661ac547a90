// Command netpol enforces NetworkPolicy on the end-to-end host cluster
// (hack/hostcluster): it runs kube-router's network policy controller, and
// nothing else of kube-router, from the fork k3s embeds, the way k3s's
// pkg/agent/netpol does. The host cluster's bridge CNI enforces no policy by
// itself, so without this a NetworkPolicy test would pass whether or not the
// policy is right.
//
// The controller writes iptables chains (KUBE-ROUTER-*, KUBE-NWPLCY-*,
// KUBE-POD-FW-*) and ipsets (KUBE-SRC-*, KUBE-DST-*); -cleanup removes them
// all and exits, which hostcluster.sh down runs after stopping the controller.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/cloudnativelabs/kube-router/v2/pkg/utils"
	"github.com/coreos/go-iptables/iptables"
	v1core "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the host cluster")
	node := flag.String("node", "", "name of the Node this runs on (its addresses must be set)")
	serviceCIDR := flag.String("service-cidr", "", "the host cluster's Service CIDR")
	nodePorts := flag.String("node-port-range", "30000:32767", "the host cluster's node port range")
	syncPeriod := flag.Duration("sync-period", 5*time.Minute, "full resync of the iptables rules, besides the one every change triggers")
	cleanup := flag.Bool("cleanup", false, "remove every chain and ipset the controller made, then exit")
	flag.Parse()

	if *cleanup {
		// Cleanup only needs iptables and ipset, not the API.
		(&netpol.NetworkPolicyController{}).Cleanup()
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *node, *serviceCIDR, *nodePorts, *syncPeriod); err != nil {
		fmt.Fprintln(os.Stderr, "netpol:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, node, serviceCIDR, nodePorts string, syncPeriod time.Duration) error {
	if node == "" || serviceCIDR == "" {
		return fmt.Errorf("-node and -service-cidr are required")
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	// The controller reads the node's addresses once, at construction: wait
	// until the Node exists and is Ready, as k3s does.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			klog.Infof("waiting for Node %s: %v", node, err)
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1core.NodeReady && c.Status == v1core.ConditionTrue {
				return len(n.Status.Addresses) > 0, nil
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("waiting for Node %s to be Ready: %w", node, err)
	}

	cfg := options.NewKubeRouterConfig()
	cfg.ClusterIPCIDRs = []string{serviceCIDR}
	cfg.EnableIPv4 = true
	cfg.EnableIPv6 = false
	cfg.NodePortRange = nodePorts
	cfg.HostnameOverride = node
	cfg.IPTablesSyncPeriod = syncPeriod
	cfg.RunFirewall = true
	cfg.RunRouter = false
	cfg.RunServiceProxy = false
	cfg.MetricsEnabled = false

	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return fmt.Errorf("iptables: %w", err)
	}
	set, err := utils.NewIPSet(false)
	if err != nil {
		return fmt.Errorf("ipset: %w", err)
	}
	if err := set.Save(); err != nil {
		return fmt.Errorf("ipset unusable here: %w", err)
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	policies := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	npc, err := netpol.NewNetworkPolicyController(client, cfg, pods, policies, namespaces, &sync.Mutex{}, nil,
		map[v1core.IPFamily]utils.IPTablesHandler{v1core.IPv4Protocol: ipt},
		map[v1core.IPFamily]utils.IPSetHandler{v1core.IPv4Protocol: set})
	if err != nil {
		return fmt.Errorf("creating the network policy controller: %w", err)
	}
	if _, err := pods.AddEventHandler(npc.PodEventHandler); err != nil {
		return err
	}
	if _, err := namespaces.AddEventHandler(npc.NamespaceEventHandler); err != nil {
		return err
	}
	if _, err := policies.AddEventHandler(npc.NetworkPolicyEventHandler); err != nil {
		return err
	}

	// The controller reports heartbeats; the health controller consumes them
	// (without serving them: nothing here asks).
	hc, err := healthcheck.NewHealthController(cfg)
	if err != nil {
		return err
	}
	hc.SetAlive()
	health := make(chan *healthcheck.ControllerHeartbeat)
	var wg sync.WaitGroup
	wg.Add(2)
	go hc.RunCheck(health, ctx.Done(), &wg)
	go npc.Run(health, ctx.Done(), &wg)
	klog.Infof("network policy controller running for node %s", node)
	<-ctx.Done()
	wg.Wait()
	return nil
}
