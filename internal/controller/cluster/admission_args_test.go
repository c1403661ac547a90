package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// TestAdmissionRefusesServerArgsThatOverrideK3k sends each way of overriding
// what k3k generates through spec.serverArgs to the real kube-apiserver: every
// name and alias k3s accepts for the flag (pkg/cli/cmds in the k3s source),
// with one or two dashes, with and without a value, and the API server flags
// that would move its storage behind k3s's back. Each must be refused with a
// message naming serverArgs and the flag, and never echoing a value.
func TestAdmissionRefusesServerArgsThatOverrideK3k(t *testing.T) {
	ns := newNamespace(t)
	const managed = "is set by k3k and cannot be overridden"
	cases := []struct {
		name   string
		args   []string
		wantIn string
	}{
		{"the short alias -t replaces the token", []string{"-t", "stolen"}, "serverArgs: -t " + managed},
		{"--token= replaces the token", []string{"--token=stolen"}, "serverArgs: --token " + managed},
		{"-token with one dash is the same flag to k3s", []string{"-token=stolen"}, "serverArgs: -token " + managed},
		{"--t with two dashes is the same alias", []string{"--t=stolen"}, "serverArgs: --t " + managed},
		{"--token-file reads another token", []string{"--token-file=/etc/k3k/datastore/tls.key"}, "serverArgs: --token-file " + managed},
		{"--agent-token adds a second secret", []string{"--agent-token", "x"}, "serverArgs: --agent-token " + managed},
		{"--agent-token-file adds a second secret", []string{"--agent-token-file=/tmp/x"}, "serverArgs: --agent-token-file " + managed},
		{"the short alias -s joins another server", []string{"-s", "https://elsewhere:6443"}, "serverArgs: -s " + managed},
		{"--server joins another server", []string{"--server=https://elsewhere:6443"}, "serverArgs: --server " + managed},
		{"the short alias -c replaces the config file", []string{"-c", "/dev/null"}, "serverArgs: -c " + managed},
		{"--config replaces the config file", []string{"--config=/tmp/mine.yaml"}, "serverArgs: --config " + managed},
		{"the short alias -d moves the data dir", []string{"-d", "/tmp"}, "serverArgs: -d " + managed},
		{"--data-dir moves the data dir", []string{"--data-dir=/tmp"}, "serverArgs: --data-dir " + managed},
		{"--datastore-endpoint moves the datastore", []string{"--datastore-endpoint=postgres://elsewhere"}, "serverArgs: --datastore-endpoint " + managed},
		{"--datastore-cafile changes datastore trust", []string{"--datastore-cafile=/tmp/ca"}, "serverArgs: --datastore-cafile " + managed},
		{"--datastore-certfile changes datastore identity", []string{"--datastore-certfile=/tmp/c"}, "serverArgs: --datastore-certfile " + managed},
		{"--datastore-keyfile changes datastore identity", []string{"--datastore-keyfile=/tmp/k"}, "serverArgs: --datastore-keyfile " + managed},
		{"--kine-tls changes the datastore socket", []string{"--kine-tls"}, "serverArgs: --kine-tls " + managed},
		{"the short alias -o moves the kubeconfig", []string{"-o", "/tmp/kc"}, "serverArgs: -o " + managed},
		{"--write-kubeconfig moves the kubeconfig", []string{"--write-kubeconfig=/tmp/kc"}, "serverArgs: --write-kubeconfig " + managed},
		{"--write-kubeconfig-mode opens the kubeconfig", []string{"--write-kubeconfig-mode=0644"}, "serverArgs: --write-kubeconfig-mode " + managed},
		{"--write-kubeconfig-group opens the kubeconfig", []string{"--write-kubeconfig-group=users"}, "serverArgs: --write-kubeconfig-group " + managed},
		{"--cluster-init starts embedded etcd", []string{"--cluster-init"}, "serverArgs: --cluster-init " + managed},
		{"--cluster-reset forgets the members", []string{"--cluster-reset"}, "serverArgs: --cluster-reset " + managed},
		{"--cluster-reset-restore-path restores a snapshot", []string{"--cluster-reset-restore-path=/tmp/s"}, "serverArgs: --cluster-reset-restore-path " + managed},
		{"--disable-agent=false starts a kubelet in the server pod", []string{"--disable-agent=false"}, "serverArgs: --disable-agent " + managed},
		{"-disable-agent=false with one dash", []string{"-disable-agent=false"}, "serverArgs: -disable-agent " + managed},
		{"--disable-apiserver stops the API", []string{"--disable-apiserver"}, "serverArgs: --disable-apiserver " + managed},
		{"--disable-etcd is k3k's choice", []string{"--disable-etcd"}, "serverArgs: --disable-etcd " + managed},
		{"--disable-controller-manager stops the controllers", []string{"--disable-controller-manager"}, "serverArgs: --disable-controller-manager " + managed},
		{"--disable-cloud-controller=false brings back the cloud controller", []string{"--disable-cloud-controller=false"}, "serverArgs: --disable-cloud-controller " + managed},
		{"--https-listen-port moves the API port", []string{"--https-listen-port=7443"}, "serverArgs: --https-listen-port " + managed},
		{"--supervisor-port moves the supervisor", []string{"--supervisor-port=7443"}, "serverArgs: --supervisor-port " + managed},
		{"--apiserver-port moves the API server", []string{"--apiserver-port=7444"}, "serverArgs: --apiserver-port " + managed},
		{"--apiserver-bind-address moves the API server", []string{"--apiserver-bind-address=127.0.0.2"}, "serverArgs: --apiserver-bind-address " + managed},
		{"--bind-address moves the listener", []string{"--bind-address=127.0.0.1"}, "serverArgs: --bind-address " + managed},
		{"--advertise-address changes the advertised address", []string{"--advertise-address=10.0.0.1"}, "serverArgs: --advertise-address " + managed},
		{"--advertise-port changes the advertised port", []string{"--advertise-port=1"}, "serverArgs: --advertise-port " + managed},
		{"the short alias -i of --node-ip changes the advertised address", []string{"-i", "10.0.0.1"}, "serverArgs: -i " + managed},
		{"--node-external-ip changes the advertised address", []string{"--node-external-ip=10.0.0.1"}, "serverArgs: --node-external-ip " + managed},
		{"--tls-san adds names outside spec.tlsSANs", []string{"--tls-san=evil.example"}, "serverArgs: --tls-san " + managed},
		{"--cluster-cidr adds a second pod network", []string{"--cluster-cidr=10.99.0.0/16"}, "serverArgs: --cluster-cidr " + managed},
		{"--service-cidr adds a second service network", []string{"--service-cidr=10.98.0.0/16"}, "serverArgs: --service-cidr " + managed},
		{"--cluster-dns points at another DNS", []string{"--cluster-dns=10.43.0.99"}, "serverArgs: --cluster-dns " + managed},
		{"--cluster-domain breaks the agent's DNS", []string{"--cluster-domain=corp.local"}, "serverArgs: --cluster-domain " + managed},
		{"--egress-selector-mode changes how the API reaches pods", []string{"--egress-selector-mode=agent"}, "serverArgs: --egress-selector-mode " + managed},
		{"--help makes k3s exit", []string{"--help"}, "serverArgs: --help " + managed},
		{"an attack after a benign flag is still found", []string{"--kube-apiserver-arg=v=2", "--debug", "-t=x"}, "serverArgs: -t " + managed},
		{"--kube-apiserver-arg with a separate value cannot be checked", []string{"--kube-apiserver-arg", "etcd-servers=http://elsewhere:2379"}, "serverArgs: write --kube-apiserver-arg=<flag>=<value> as one item"},
		{"the API server's etcd-servers moves its storage", []string{"--kube-apiserver-arg=etcd-servers=http://elsewhere:2379"}, "serverArgs: --kube-apiserver-arg may not set etcd-*"},
		{"the API server's etcd-servers-overrides moves part of its storage", []string{"--kube-apiserver-arg=--etcd-servers-overrides=/secrets#http://elsewhere:2379"}, "serverArgs: --kube-apiserver-arg may not set etcd-*"},
		{"the API server's etcd-prefix hides the data", []string{"--kube-apiserver-arg=etcd-prefix+=/other"}, "serverArgs: --kube-apiserver-arg may not set etcd-*"},
		{"the API server's storage-backend", []string{"-kube-apiserver-arg=storage-backend=etcd2"}, "serverArgs: --kube-apiserver-arg may not set etcd-*"},
		{"the API server's secure-port", []string{"--kube-apiserver-arg=secure-port=1"}, "secure-port or bind-address"},
		{"a space before the API server flag (k3s trims it)", []string{"--kube-apiserver-arg= etcd-servers=http://elsewhere:2379"}, "must start with the flag's name"},
		{"a tab before the API server flag (k3s trims it)", []string{"--kube-apiserver-arg=\t--etcd-servers=http://elsewhere:2379"}, "must start with the flag's name"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(ns, fmt.Sprintf("args-%d", i), func(c *v1beta1.Cluster) { c.Spec.ServerArgs = tc.args })
			err := k8s.Create(context.Background(), c)
			if err == nil {
				t.Fatalf("created a Cluster with serverArgs %q; want an error containing %q", tc.args, tc.wantIn)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("error does not name the problem:\n got: %v\nwant: ...%s...", err, tc.wantIn)
			}
			if strings.Contains(err.Error(), "stolen") {
				t.Fatalf("the error echoes the flag's value: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestAdmissionRefusesServerEnvsThatOverrideK3k tries the environment
// variables through which k3s takes its flags (every K3S_* flag has one, and
// K3S_CONFIG_FILE even beats --config), others that redirect k3s, and value
// sources that read Secrets.
func TestAdmissionRefusesServerEnvsThatOverrideK3k(t *testing.T) {
	ns := newNamespace(t)
	const notAllowed = "is not allowed: only HTTP_PROXY, HTTPS_PROXY, NO_PROXY"
	secretRef := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "k3k-other-token"}, Key: "token",
	}}
	cases := []struct {
		name   string
		envs   []v1beta1.ServerEnvVar
		wantIn string
	}{
		{"K3S_CONFIG_FILE replaces k3k's config file", []v1beta1.ServerEnvVar{{Name: "K3S_CONFIG_FILE", Value: "/dev/null"}}, "serverEnvs: K3S_CONFIG_FILE " + notAllowed},
		{"K3S_TOKEN sets the token", []v1beta1.ServerEnvVar{{Name: "K3S_TOKEN", Value: "stolen"}}, "serverEnvs: K3S_TOKEN " + notAllowed},
		{"K3S_DATASTORE_ENDPOINT moves the datastore", []v1beta1.ServerEnvVar{{Name: "K3S_DATASTORE_ENDPOINT", Value: "postgres://elsewhere"}}, "serverEnvs: K3S_DATASTORE_ENDPOINT " + notAllowed},
		{"K3S_DATA_DIR moves the data dir", []v1beta1.ServerEnvVar{{Name: "K3S_DATA_DIR", Value: "/tmp"}}, "serverEnvs: K3S_DATA_DIR " + notAllowed},
		{"K3S_URL joins another server", []v1beta1.ServerEnvVar{{Name: "K3S_URL", Value: "https://elsewhere:6443"}}, "serverEnvs: K3S_URL " + notAllowed},
		{"K3S_KUBECONFIG_MODE opens the kubeconfig", []v1beta1.ServerEnvVar{{Name: "K3S_KUBECONFIG_MODE", Value: "0644"}}, "serverEnvs: K3S_KUBECONFIG_MODE " + notAllowed},
		{"K3S_CLUSTER_RESET forgets the members", []v1beta1.ServerEnvVar{{Name: "K3S_CLUSTER_RESET", Value: "true"}}, "serverEnvs: K3S_CLUSTER_RESET " + notAllowed},
		{"K3S_DEBUG is a flag too: use serverArgs", []v1beta1.ServerEnvVar{{Name: "K3S_DEBUG", Value: "true"}}, "serverEnvs: K3S_DEBUG " + notAllowed},
		{"KUBECONFIG redirects k3s's clients", []v1beta1.ServerEnvVar{{Name: "KUBECONFIG", Value: "/tmp/kc"}}, "serverEnvs: KUBECONFIG " + notAllowed},
		{"KINE_SCHEMA_MIGRATION alters the database", []v1beta1.ServerEnvVar{{Name: "KINE_SCHEMA_MIGRATION", Value: "2"}}, "serverEnvs: KINE_SCHEMA_MIGRATION " + notAllowed},
		{"LD_PRELOAD", []v1beta1.ServerEnvVar{{Name: "LD_PRELOAD", Value: "/tmp/x.so"}}, "serverEnvs: LD_PRELOAD " + notAllowed},
		{"a lower-case k3s variable is refused as well", []v1beta1.ServerEnvVar{{Name: "k3s_token", Value: "x"}}, "serverEnvs: k3s_token " + notAllowed},
		{"a refused name after an allowed one is still found", []v1beta1.ServerEnvVar{{Name: "TZ", Value: "UTC"}, {Name: "K3S_TOKEN_FILE", Value: "/x"}}, "serverEnvs: K3S_TOKEN_FILE " + notAllowed},
		{"an allowed name may not read a Secret", []v1beta1.ServerEnvVar{{Name: "HTTPS_PROXY", ValueFrom: secretRef}}, "serverEnvs: valueFrom may only use fieldRef or resourceFieldRef"},
		{"an allowed name may not read a ConfigMap", []v1beta1.ServerEnvVar{{Name: "NO_PROXY", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "k3k-demo-server-config"}, Key: "config.yaml",
		}}}}, "serverEnvs: valueFrom may only use fieldRef or resourceFieldRef"},
		{"an allowed name may not read a file", []v1beta1.ServerEnvVar{{Name: "NO_PROXY", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{
			VolumeName: "token", Path: "token", Key: "token",
		}}}}, "serverEnvs: valueFrom may only use fieldRef or resourceFieldRef"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(ns, fmt.Sprintf("envs-%d", i), func(c *v1beta1.Cluster) { c.Spec.ServerEnvs = tc.envs })
			err := k8s.Create(context.Background(), c)
			if err == nil {
				t.Fatalf("created a Cluster with serverEnvs %v; want an error containing %q", tc.envs, tc.wantIn)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("error does not name the problem:\n got: %v\nwant: ...%s...", err, tc.wantIn)
			}
			if strings.Contains(err.Error(), "stolen") {
				t.Fatalf("the error echoes the variable's value: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestAdmissionAcceptsBenignServerArgsAndEnvs is the other side: settings
// that leave k3k's choices alone get through, including flags whose names
// start like a refused one and values that mention one.
func TestAdmissionAcceptsBenignServerArgsAndEnvs(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name string
		spec func(*v1beta1.Cluster)
	}{
		{"API server and controller flags", func(c *v1beta1.Cluster) {
			c.Spec.ServerArgs = []string{"--kube-apiserver-arg=v=2", "--kube-apiserver-arg=audit-log-maxage=7", "--kube-controller-manager-arg=node-monitor-grace-period=20s"}
		}},
		{"names that start like refused ones", func(c *v1beta1.Cluster) {
			c.Spec.ServerArgs = []string{"--tls-san-security=false", "--service-node-port-range=30000-30100", "--disable-scheduler=false", "--disable-helm-controller"}
		}},
		{"a separate value that is not a flag", func(c *v1beta1.Cluster) {
			c.Spec.ServerArgs = []string{"--node-label", "team=a", "--debug", "-v=2", "--disable=traefik"}
		}},
		{"an API server flag whose value mentions etcd", func(c *v1beta1.Cluster) {
			c.Spec.ServerArgs = []string{"--kube-apiserver-arg=audit-log-path=/var/lib/rancher/k3s/etcd-servers.log"}
		}},
		{"every allowed variable, literal and from the downward API", func(c *v1beta1.Cluster) {
			c.Spec.ServerEnvs = []v1beta1.ServerEnvVar{
				{Name: "HTTP_PROXY", Value: "http://proxy:3128"}, {Name: "HTTPS_PROXY", Value: "http://proxy:3128"}, {Name: "NO_PROXY", Value: ".corp"},
				{Name: "http_proxy", Value: "http://proxy:3128"}, {Name: "https_proxy", Value: "http://proxy:3128"}, {Name: "no_proxy", Value: ".corp"},
				{Name: "GOMAXPROCS", Value: "2"}, {Name: "GOGC", Value: "50"}, {Name: "TZ", Value: "UTC"},
				{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "k3s", Resource: "limits.memory"}}},
			}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(ns, fmt.Sprintf("benign-%d", i), tc.spec)
			if err := k8s.Create(context.Background(), c); err != nil {
				t.Fatalf("refused a benign Cluster: %v", err)
			}
		})
	}
}
