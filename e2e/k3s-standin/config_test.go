package main

import (
	"io/fs"
	"reflect"
	"strings"
	"testing"
)

// controllerConfig is the config file the k3k controller writes for a server pod.
const controllerConfig = `datastore-endpoint: http://127.0.0.1:2379
disable-agent: true
write-kubeconfig: /var/lib/k3k/kubeconfig/kubeconfig.yaml
write-kubeconfig-mode: "0600"
tls-san:
- k3k-c-service.ns.svc
- 10.43.12.34
token-file: /etc/k3k/token/token
data-dir: /var/lib/rancher/k3s
cluster-cidr: 10.44.0.0/16
service-cidr: 10.45.0.0/16
cluster-dns: 10.45.0.10
disable: [servicelb, traefik, metrics-server, local-storage]
egress-selector-mode: disabled
https-listen-port: 6443
`

func files(m map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if s, ok := m[name]; ok {
			return []byte(s), nil
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
}

func TestParseArgs(t *testing.T) {
	full := Config{
		DatastoreEndpoint:   "http://127.0.0.1:2379",
		DisableAgent:        true,
		WriteKubeconfig:     "/var/lib/k3k/kubeconfig/kubeconfig.yaml",
		WriteKubeconfigMode: 0o600,
		TLSSANs:             []string{"k3k-c-service.ns.svc", "10.43.12.34"},
		TokenFile:           "/etc/k3k/token/token",
		DataDir:             "/var/lib/rancher/k3s",
		ClusterCIDR:         "10.44.0.0/16",
		ServiceCIDR:         "10.45.0.0/16",
		ClusterDNS:          "10.45.0.10",
		HTTPSListenPort:     6443,
		Disable:             []string{"servicelb", "traefik", "metrics-server", "local-storage"},
		EgressSelectorMode:  "disabled",
	}
	with := func(f func(*Config)) Config {
		c := full
		c.TLSSANs = append([]string(nil), full.TLSSANs...)
		f(&c)
		return c
	}
	minimal := func(f func(*Config)) Config {
		c := defaults()
		c.DatastoreEndpoint, c.DisableAgent = "http://127.0.0.1:2379", true
		f(&c)
		return c
	}
	cfgFile := map[string]string{"/c.yaml": controllerConfig}

	tests := []struct {
		name    string
		args    []string
		files   map[string]string
		want    Config
		wantErr string
	}{
		{
			name:  "the controller's config file is read completely",
			args:  []string{"server", "--config", "/c.yaml"},
			files: cfgFile,
			want:  full,
		},
		{
			name:  "the --config=FILE form works too",
			args:  []string{"server", "--config=/c.yaml"},
			files: cfgFile,
			want:  full,
		},
		{
			name:  "a flag after the config file overrides a scalar key",
			args:  []string{"server", "--config=/c.yaml", "--https-listen-port=7443", "--data-dir=/d"},
			files: cfgFile,
			want:  with(func(c *Config) { c.HTTPSListenPort, c.DataDir = 7443, "/d" }),
		},
		{
			name:  "the later of two flags wins",
			args:  []string{"server", "--config=/c.yaml", "--cluster-dns=10.45.0.53", "--cluster-dns=10.45.0.54"},
			files: cfgFile,
			want:  with(func(c *Config) { c.ClusterDNS = "10.45.0.54" }),
		},
		{
			name:  "tls-san flags add to the file's list, and a flag value may hold several names",
			args:  []string{"server", "--config=/c.yaml", "--tls-san=a.example", "--tls-san", "b.example,10.0.0.9"},
			files: cfgFile,
			want: with(func(c *Config) {
				c.TLSSANs = append(c.TLSSANs, "a.example", "b.example", "10.0.0.9")
			}),
		},
		{
			name:  "an unquoted mode is octal, as on the command line",
			args:  []string{"server", "--config=/m.yaml"},
			files: map[string]string{"/m.yaml": "datastore-endpoint: http://127.0.0.1:2379\ndisable-agent: true\nwrite-kubeconfig-mode: 0644\n"},
			want:  minimal(func(c *Config) { c.WriteKubeconfigMode = 0o644 }),
		},
		{
			name:  "the default config file is read when it exists",
			args:  []string{"server"},
			files: map[string]string{DefaultConfigFile: "datastore-endpoint: http://127.0.0.1:2379\ndisable-agent: true\n"},
			want:  minimal(func(*Config) {}),
		},
		{
			name: "without any config file, flags alone suffice and k3s defaults apply",
			args: []string{"server", "--datastore-endpoint=http://127.0.0.1:2379", "--disable-agent"},
			want: minimal(func(*Config) {}),
		},
		{
			name:    "a bare boolean flag can be set false explicitly, which is refused",
			args:    []string{"server", "--datastore-endpoint=http://127.0.0.1:2379", "--disable-agent=false"},
			wantErr: "disable-agent must be true",
		},
		{
			name:    "an explicit config file that is missing is an error",
			args:    []string{"server", "--config=/missing.yaml", "--disable-agent"},
			wantErr: "reading config file",
		},
		{
			name:    "an unknown config key is an error naming the key",
			args:    []string{"server", "--config=/u.yaml"},
			files:   map[string]string{"/u.yaml": controllerConfig + "cluster-init: true\n"},
			wantErr: `unknown key "cluster-init"`,
		},
		{
			name:    "an unknown flag is an error naming the flag",
			args:    []string{"server", "--config=/c.yaml", "--flannel-backend=none"},
			files:   cfgFile,
			wantErr: "unknown flag --flannel-backend",
		},
		{
			name:    "a single-dash flag is refused",
			args:    []string{"server", "-c", "/c.yaml"},
			wantErr: `unexpected argument "-c"`,
		},
		{
			name:    "a stray positional argument is refused",
			args:    []string{"server", "--config=/c.yaml", "extra"},
			files:   cfgFile,
			wantErr: `unexpected argument "extra"`,
		},
		{
			name:    "a subcommand other than server is refused",
			args:    []string{"agent"},
			wantErr: "only runs `server`",
		},
		{
			name:    "a flag missing its value is an error",
			args:    []string{"server", "--config=/c.yaml", "--data-dir"},
			files:   cfgFile,
			wantErr: "--data-dir needs a value",
		},
		{
			name:    "a list for a scalar key is refused",
			args:    []string{"server", "--config=/l.yaml"},
			files:   map[string]string{"/l.yaml": "data-dir: [a, b]\n"},
			wantErr: `key "data-dir" takes a single value`,
		},
		{
			name:    "a bad mode is refused",
			args:    []string{"server", "--config=/c.yaml", "--write-kubeconfig-mode=0999"},
			files:   cfgFile,
			wantErr: "not an octal file mode",
		},
		{
			name:    "a bad port is refused",
			args:    []string{"server", "--config=/c.yaml", "--https-listen-port=70000"},
			files:   cfgFile,
			wantErr: "not a port number",
		},
		{
			name:    "an egress selector mode k3s does not know is refused",
			args:    []string{"server", "--config=/c.yaml", "--egress-selector-mode=sometimes"},
			files:   cfgFile,
			wantErr: "not one of agent, cluster, pod, disabled",
		},
		{
			name:    "a kine DSN is refused without echoing it",
			args:    []string{"server", "--disable-agent", "--datastore-endpoint=postgres://user:hunter2@db/k3s"},
			wantErr: "the stand-in does not run kine",
		},
		{
			name:    "no datastore endpoint is refused: there is no embedded datastore",
			args:    []string{"server", "--disable-agent"},
			wantErr: "datastore-endpoint is required",
		},
		{
			name:    "cluster-dns outside service-cidr is refused",
			args:    []string{"server", "--config=/c.yaml", "--cluster-dns=10.43.0.10"},
			files:   cfgFile,
			wantErr: "not an address in service-cidr",
		},
		{
			name:    "malformed YAML is an error",
			args:    []string{"server", "--config=/bad.yaml"},
			files:   map[string]string{"/bad.yaml": "tls-san: [a\n"},
			wantErr: "parsing config file",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseArgs(tc.args, files(tc.files))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error leaks a datastore password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("config mismatch\n got: %+v\nwant: %+v", got, tc.want)
			}
		})
	}
}

func TestSecretOf(t *testing.T) {
	tests := []struct {
		name, token, secret, hash string
		wantErr                   bool
	}{
		{name: "a bare token is its own secret", token: "abc123", secret: "abc123"},
		{name: "a full token yields its secret and CA hash", token: "K10deadbeef::server:abc123", secret: "abc123", hash: "deadbeef"},
		{name: "a token that merely starts with K10 is a bare token", token: "K10abc", secret: "K10abc"},
		{name: "a full token without a secret is an error", token: "K10deadbeef::server:", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			secret, hash, err := secretOf(tc.token)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if secret != tc.secret || hash != tc.hash {
				t.Fatalf("got (%q, %q), want (%q, %q)", secret, hash, tc.secret, tc.hash)
			}
		})
	}
}
