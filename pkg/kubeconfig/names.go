package kubeconfig

import "fmt"

// SecretKey is the key of the published kubeconfig in its Secret. The CLI, users and
// agents all read this key.
const SecretKey = "kubeconfig.yaml"

// SecretName is the name of the Secret that holds cluster's published kubeconfig.
func SecretName(cluster string) string {
	return "k3k-" + cluster + "-kubeconfig"
}

// ServiceURL is the address of cluster's API inside the host cluster: its Service,
// which the controller also lists among the server's --tls-san names so that TLS
// verification succeeds against it.
func ServiceURL(cluster, namespace string) string {
	return fmt.Sprintf("https://k3k-%s-service.%s.svc:443", cluster, namespace)
}
