package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DefaultConfigFile is where k3s looks for its config when --config is not given.
const DefaultConfigFile = "/etc/rancher/k3s/config.yaml"

// Config is what a `k3s server` invocation asks for, after the config file and
// the command line are merged.
type Config struct {
	// DatastoreEndpoint lists the etcd-API endpoints (http or https), comma separated.
	DatastoreEndpoint string
	// DatastoreCAFile, DatastoreCertFile and DatastoreKeyFile secure an https
	// datastore endpoint.
	DatastoreCAFile, DatastoreCertFile, DatastoreKeyFile string
	// DisableAgent must be true: the stand-in has no agent.
	DisableAgent bool
	// WriteKubeconfig is where the admin kubeconfig is written; empty means
	// <data-dir>/server/cred/admin.kubeconfig only.
	WriteKubeconfig string
	// WriteKubeconfigMode is the written kubeconfig's file mode (octal in k3s's flag).
	WriteKubeconfigMode fs.FileMode
	// TLSSANs are extra names and addresses in the apiserver's serving certificate.
	TLSSANs []string
	// TokenFile holds the cluster token; empty means generate one on first start.
	TokenFile string
	// DataDir is k3s's state directory; the CA and token live under server/.
	DataDir string
	// ClusterCIDR is the pod network the controller-manager allocates node ranges from.
	ClusterCIDR string
	// ServiceCIDR is the service network.
	ServiceCIDR string
	// ClusterDNS is the DNS service address (validated; the stand-in runs no CoreDNS).
	ClusterDNS string
	// HTTPSListenPort is the port the Kubernetes API is served on.
	HTTPSListenPort int
	// Disable and EgressSelectorMode are accepted for compatibility and ignored.
	Disable            []string
	EgressSelectorMode string
}

// defaults are k3s's own defaults for the options the stand-in knows.
func defaults() Config {
	return Config{
		DataDir:             "/var/lib/rancher/k3s",
		ClusterCIDR:         "10.42.0.0/16",
		ServiceCIDR:         "10.43.0.0/16",
		ClusterDNS:          "10.43.0.10",
		HTTPSListenPort:     6443,
		WriteKubeconfigMode: 0o600,
		EgressSelectorMode:  "agent",
	}
}

type kind int

const (
	scalar  kind = iota
	list         // repeatable; values from the file, then the command line, accumulate
	boolean      // may be given as a bare --flag
)

type option struct {
	kind kind
	set  func(c *Config, v string) error
}

func str(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

// options are the accepted k3s server flags, by name (without the leading --), which
// is also their config-file key.
var options = map[string]option{
	"datastore-endpoint": {scalar, str(func(c *Config) *string { return &c.DatastoreEndpoint })},
	"datastore-cafile":   {scalar, str(func(c *Config) *string { return &c.DatastoreCAFile })},
	"datastore-certfile": {scalar, str(func(c *Config) *string { return &c.DatastoreCertFile })},
	"datastore-keyfile":  {scalar, str(func(c *Config) *string { return &c.DatastoreKeyFile })},
	"disable-agent": {boolean, func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.DisableAgent = b
		return err
	}},
	"write-kubeconfig": {scalar, str(func(c *Config) *string { return &c.WriteKubeconfig })},
	"write-kubeconfig-mode": {scalar, func(c *Config, v string) error {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o777 {
			return fmt.Errorf("%q is not an octal file mode", v)
		}
		c.WriteKubeconfigMode = fs.FileMode(m)
		return nil
	}},
	"tls-san":      {list, func(c *Config, v string) error { c.TLSSANs = append(c.TLSSANs, v); return nil }},
	"token-file":   {scalar, str(func(c *Config) *string { return &c.TokenFile })},
	"data-dir":     {scalar, str(func(c *Config) *string { return &c.DataDir })},
	"cluster-cidr": {scalar, str(func(c *Config) *string { return &c.ClusterCIDR })},
	"service-cidr": {scalar, str(func(c *Config) *string { return &c.ServiceCIDR })},
	"cluster-dns":  {scalar, str(func(c *Config) *string { return &c.ClusterDNS })},
	"https-listen-port": {scalar, func(c *Config, v string) error {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("%q is not a port number", v)
		}
		c.HTTPSListenPort = p
		return nil
	}},
	"disable": {list, func(c *Config, v string) error { c.Disable = append(c.Disable, v); return nil }},
	"egress-selector-mode": {scalar, func(c *Config, v string) error {
		if !slices.Contains([]string{"agent", "cluster", "pod", "disabled"}, v) {
			return fmt.Errorf("%q is not one of agent, cluster, pod, disabled", v)
		}
		c.EgressSelectorMode = v
		return nil
	}},
}

// acceptedNames lists the accepted option names for error messages.
func acceptedNames() string {
	names := []string{"config"}
	for n := range options {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// ParseArgs reads `server [--flag[=value]]…` the way k3s does: the config file
// (--config, else DefaultConfigFile when it exists) first, then the command line,
// where a later scalar wins and list values accumulate. Unknown flags and keys are
// errors. Error messages name options, never their values, except for values that
// failed to parse (none of which is a secret: tokens come only from token-file).
func ParseArgs(args []string, readFile func(string) ([]byte, error)) (Config, error) {
	cfg := defaults()
	if len(args) == 0 || args[0] != "server" {
		return cfg, errors.New("usage: k3s server [--config FILE] [--flag=value]... (the stand-in only runs `server`)")
	}
	flags, err := splitFlags(args[1:])
	if err != nil {
		return cfg, err
	}

	configFile, explicit := DefaultConfigFile, false
	for _, f := range flags {
		if f.name == "config" {
			configFile, explicit = f.value, true
		}
	}
	data, err := readFile(configFile)
	switch {
	case err == nil:
		if err := applyFile(&cfg, configFile, data); err != nil {
			return cfg, err
		}
	case explicit || !errors.Is(err, fs.ErrNotExist):
		return cfg, fmt.Errorf("reading config file: %w", err)
	}

	for _, f := range flags {
		if f.name == "config" {
			continue
		}
		if err := apply(&cfg, f.name, f.value); err != nil {
			return cfg, fmt.Errorf("flag --%s: %w", f.name, err)
		}
	}
	return cfg, cfg.validate()
}

type flagValue struct{ name, value string }

// splitFlags turns `--a=b --c d --bool` into name/value pairs.
func splitFlags(args []string) ([]flagValue, error) {
	var out []flagValue
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if !strings.HasPrefix(arg, "--") || len(arg) == 2 {
			return nil, fmt.Errorf("unexpected argument %q: the stand-in takes only --flag=value options", arg)
		}
		name, value, hasValue := strings.Cut(arg[2:], "=")
		opt, known := options[name]
		if !known && name != "config" {
			return nil, fmt.Errorf("unknown flag --%s: the k3s stand-in accepts only %s", name, acceptedNames())
		}
		if !hasValue {
			if known && opt.kind == boolean {
				value = "true"
			} else {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("flag --%s needs a value", name)
				}
				i++
				value = args[i]
			}
		}
		out = append(out, flagValue{name, value})
	}
	return out, nil
}

// apply sets one option from a command-line value. A list flag's value may hold
// several comma-separated items, as with k3s.
func apply(cfg *Config, name, value string) error {
	opt, ok := options[name]
	if !ok {
		return fmt.Errorf("unknown option: the k3s stand-in accepts only %s", acceptedNames())
	}
	if opt.kind != list {
		return opt.set(cfg, value)
	}
	for _, item := range strings.Split(value, ",") {
		if item = strings.TrimSpace(item); item != "" {
			if err := opt.set(cfg, item); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyFile applies a k3s config file: a YAML mapping of flag names to scalars, or
// to sequences of scalars for list flags. Scalars are taken as written, so
// `write-kubeconfig-mode: 0600` means octal 600 as on the command line.
func applyFile(cfg *Config, path string, data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("parsing config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file configures nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s: want a mapping of option names to values", path)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i].Value, root.Content[i+1]
		opt, ok := options[key]
		if !ok {
			return fmt.Errorf("config file %s: unknown key %q: the k3s stand-in accepts only %s", path, key, acceptedNames())
		}
		var values []string
		switch {
		case val.Kind == yaml.ScalarNode:
			values = []string{val.Value}
		case val.Kind == yaml.SequenceNode && opt.kind == list:
			for _, item := range val.Content {
				if item.Kind != yaml.ScalarNode {
					return fmt.Errorf("config file %s: key %q: list items must be plain values", path, key)
				}
				values = append(values, item.Value)
			}
		default:
			return fmt.Errorf("config file %s: key %q takes a single value", path, key)
		}
		for _, v := range values {
			if err := apply(cfg, key, v); err != nil {
				return fmt.Errorf("config file %s: key %q: %w", path, key, err)
			}
		}
	}
	return nil
}

// validate checks what the stand-in can actually run.
func (c *Config) validate() error {
	if !c.DisableAgent {
		return errors.New("disable-agent must be true: the stand-in runs no agent")
	}
	if c.DatastoreEndpoint == "" {
		return errors.New("datastore-endpoint is required: the stand-in has no embedded datastore")
	}
	for _, ep := range strings.Split(c.DatastoreEndpoint, ",") {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// The endpoint may be a DSN with a password: never echo it.
			return errors.New("datastore-endpoint must be etcd endpoints (http:// or https://): the stand-in does not run kine")
		}
	}
	if c.DataDir == "" {
		return errors.New("data-dir must not be empty")
	}
	_, clusterNet, err := net.ParseCIDR(c.ClusterCIDR)
	if err != nil || clusterNet.IP.To4() == nil {
		return fmt.Errorf("cluster-cidr %q is not an IPv4 CIDR", c.ClusterCIDR)
	}
	_, serviceNet, err := net.ParseCIDR(c.ServiceCIDR)
	if err != nil || serviceNet.IP.To4() == nil {
		return fmt.Errorf("service-cidr %q is not an IPv4 CIDR", c.ServiceCIDR)
	}
	if dns := net.ParseIP(c.ClusterDNS); dns == nil || !serviceNet.Contains(dns) {
		return fmt.Errorf("cluster-dns %q is not an address in service-cidr %s", c.ClusterDNS, c.ServiceCIDR)
	}
	return nil
}

// FirstServiceIP is the address of the `kubernetes` Service: the service range's first host.
func (c *Config) FirstServiceIP() net.IP {
	_, n, err := net.ParseCIDR(c.ServiceCIDR)
	if err != nil {
		return nil
	}
	ip := slices.Clone(n.IP.To4())
	ip[3]++
	return ip
}
