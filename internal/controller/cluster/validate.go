package cluster

import (
	"errors"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// ValidateKubeconfig checks that data is a kubeconfig whose current context has a
// server, a CA and a client certificate and key. Its errors never quote content.
func ValidateKubeconfig(data []byte, _ time.Time) error {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return errors.New("the kubeconfig Secret does not hold a parseable kubeconfig")
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		return errors.New("the kubeconfig has no current context")
	}
	cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	switch {
	case cl == nil || cl.Server == "":
		return errors.New("the kubeconfig's current context has no server")
	case len(cl.CertificateAuthorityData) == 0:
		return errors.New("the kubeconfig's cluster has no certificate-authority-data")
	case user == nil || len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0:
		return errors.New("the kubeconfig's user has no client certificate and key")
	}
	return nil
}
