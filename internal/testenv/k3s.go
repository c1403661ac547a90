package testenv

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// K3sKubeconfig renders an admin kubeconfig the way k3s --write-kubeconfig does:
// cluster, user and context all named "default", the CA, client certificate and key
// embedded, server as given (k3s writes https://127.0.0.1:6443).
func K3sKubeconfig(server string, ca []byte, client *CertKey) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["default"] = &clientcmdapi.AuthInfo{ClientCertificateData: client.Cert, ClientKeyData: client.Key}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: "default"}
	cfg.CurrentContext = "default"
	return clientcmd.Write(*cfg)
}
