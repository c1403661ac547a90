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

// AdminKubeconfig is a k3s-style admin kubeconfig with the CA and client
// certificate behind it.
type AdminKubeconfig struct {
	Data  []byte
	CA    *CertKey
	Admin *CertKey
}

// NewAdminKubeconfig makes a new CA, an admin client certificate (group
// system:masters) and the kubeconfig k3s would write for server.
func NewAdminKubeconfig(server string) (*AdminKubeconfig, error) {
	ca, err := NewCA("k3s-server-ca")
	if err != nil {
		return nil, err
	}
	admin, err := ca.Issue(CertSpec{CommonName: "system:admin", Organization: []string{"system:masters"}})
	if err != nil {
		return nil, err
	}
	data, err := K3sKubeconfig(server, ca.Cert, admin)
	if err != nil {
		return nil, err
	}
	return &AdminKubeconfig{Data: data, CA: ca, Admin: admin}, nil
}
