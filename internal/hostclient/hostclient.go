// Package hostclient loads the host cluster's client configuration for the
// binaries that run in the host cluster's pods (the datastore's publisher, the
// shared-mode agent): the pod's ServiceAccount, or a kubeconfig file when run
// outside a pod for tests and debugging. Callers set their own timeouts,
// rates and user agent.
package hostclient

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config reads kubeconfigPath, or the in-cluster configuration when it is empty.
func Config(kubeconfigPath string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfigPath != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("loading host cluster client configuration: %w", err)
	}
	return cfg, nil
}
