package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/k3k-io/k3k/api/v1beta1"
)

func TestParseFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		check   func(t *testing.T, o *options)
		wantErr string
	}{
		{
			name: "defaults give sqlite on dynamic volumes",
			args: nil,
			check: func(t *testing.T, o *options) {
				if o.cfg.DefaultDatastore != v1beta1.SQLiteDatastore || o.cfg.DefaultPersistence != v1beta1.DynamicPersistence || o.cfg.PullPolicy != corev1.PullIfNotPresent || !o.leaderElect ||
					o.cfg.DefaultServerSpread != v1beta1.SpreadPreferred {
					t.Fatalf("defaults %+v", o.cfg)
				}
			},
		},
		{
			name: "chart values reach the config",
			args: []string{"--default-datastore-type=etcd", "--default-persistence-type=ephemeral", "--image-pull-policy=Never", "--image-pull-secrets=a, b,", "--watch-namespaces=x,y", "--default-storage-class=fast", "--zap-log-level=debug", "--default-server-spread=Required"},
			check: func(t *testing.T, o *options) {
				if o.cfg.DefaultDatastore != v1beta1.EtcdDatastore || o.cfg.DefaultPersistence != v1beta1.EphemeralPersistence || o.cfg.PullPolicy != corev1.PullNever || o.cfg.DefaultStorageClass != "fast" ||
					o.cfg.DefaultServerSpread != v1beta1.SpreadRequired {
					t.Fatalf("config %+v", o.cfg)
				}
				if diff := cmp.Diff([]string{"a", "b"}, o.cfg.PullSecrets); diff != "" {
					t.Fatalf("pull secrets (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"x", "y"}, splitList(o.watchNamespaces)); diff != "" {
					t.Fatalf("namespaces (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "isolation defaults reach the config",
			args: []string{"--default-quota=pods=10,requests.cpu=2", "--default-limit-request=memory=64Mi", "--default-limit-max=memory=4Gi",
				"--network-policy=false", "--network-policy-egress-cidrs=0.0.0.0/0", "--network-policy-egress-except=10.244.0.0/16,10.96.0.0/16", "--controller-namespace=k3k-system"},
			check: func(t *testing.T, o *options) {
				d := o.cfg.Isolation
				if d.QuotaHard.Pods().Value() != 10 || d.LimitDefaultRequest.Memory().String() != "64Mi" || d.LimitMax.Memory().String() != "4Gi" ||
					len(d.LimitDefault) != 0 || !d.DisableNetworkPolicy || d.ControllerNamespace != "k3k-system" {
					t.Fatalf("isolation %+v", d)
				}
				if diff := cmp.Diff([]string{"10.244.0.0/16", "10.96.0.0/16"}, d.EgressExcept); diff != "" {
					t.Fatalf("egress except (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "network policies are on by default",
			check: func(t *testing.T, o *options) {
				if o.cfg.Isolation.DisableNetworkPolicy || len(o.cfg.Isolation.QuotaHard) != 0 {
					t.Fatalf("isolation defaults %+v", o.cfg.Isolation)
				}
			},
		},
		{
			name: "agents get their built-in defaults unless the chart says otherwise",
			check: func(t *testing.T, o *options) {
				a := o.cfg.Agent
				if a.DisableSeccompDefault || len(a.SeccompLocalhostProfiles) != 0 || len(a.AppArmorLocalhostProfiles) != 0 || len(a.DefaultRequests) != 0 || len(a.DefaultLimits) != 0 || a.HostClusterDomain != "cluster.local" ||
					a.DisableAlwaysPullImages || a.AllowRegistryAddresses || a.DisableStorageClassCopies || a.PriorityClasses != nil {
					t.Fatalf("agent defaults %+v", a)
				}
			},
		},
		{
			name: "priority classes and storage class copies reach the config",
			args: []string{"--agent-priority-classes=critical=tenant-critical, batch=tenant-batch", "--agent-storage-class-copies=false"},
			check: func(t *testing.T, o *options) {
				a := o.cfg.Agent
				if diff := cmp.Diff(map[string]string{"critical": "tenant-critical", "batch": "tenant-batch"}, a.PriorityClasses); diff != "" || !a.DisableStorageClassCopies {
					t.Fatalf("priority classes (-want +got):\n%s; storage class copies off: %v", diff, a.DisableStorageClassCopies)
				}
			},
		},
		{name: "a priority class pair without a host class is refused", args: []string{"--agent-priority-classes=critical"}, wantErr: `--agent-priority-classes: "critical": want virtual=host`},
		{name: "a priority class name of the wrong form is refused", args: []string{"--agent-priority-classes=critical=Tenant_Critical"}, wantErr: `"Tenant_Critical" is not a PriorityClass name`},
		{name: "a virtual priority class mapped twice is refused", args: []string{"--agent-priority-classes=a=x,a=y"}, wantErr: `a mapped twice`},
		{
			name: "agent defaults reach the config",
			args: []string{"--agent-seccomp-default=false", "--agent-seccomp-localhost-profiles=profiles/a.json, b.json", "--agent-apparmor-localhost-profiles=k3k-a,k3k-b", "--agent-default-requests=cpu=50m,memory=64Mi",
				"--agent-default-limits=memory=1Gi", "--host-cluster-domain=corp.internal", "--agent-always-pull-images=false", "--agent-allow-registry-addresses"},
			check: func(t *testing.T, o *options) {
				a := o.cfg.Agent
				if !a.DisableSeccompDefault || a.DefaultRequests.Cpu().String() != "50m" || a.DefaultRequests.Memory().String() != "64Mi" ||
					a.DefaultLimits.Memory().String() != "1Gi" || len(a.DefaultLimits) != 1 || a.HostClusterDomain != "corp.internal" ||
					!a.DisableAlwaysPullImages || !a.AllowRegistryAddresses {
					t.Fatalf("agent defaults %+v", a)
				}
				if diff := cmp.Diff([]string{"profiles/a.json", "b.json"}, a.SeccompLocalhostProfiles); diff != "" {
					t.Fatalf("seccomp profiles (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"k3k-a", "k3k-b"}, a.AppArmorLocalhostProfiles); diff != "" {
					t.Fatalf("AppArmor profiles (-want +got):\n%s", diff)
				}
			},
		},
		{name: "an agent default request that is no quantity is refused", args: []string{"--agent-default-requests=cpu=lots"}, wantErr: `--agent-default-requests: "cpu=lots"`},
		{name: "a negative agent default limit is refused", args: []string{"--agent-default-limits=memory=-1Gi"}, wantErr: `--agent-default-limits: "memory=-1Gi": negative`},
		{name: "a host Service network is normalised", args: []string{"--host-service-cidr=10.96.0.0/12"},
			check: func(t *testing.T, o *options) {
				if o.cfg.HostServiceCIDR != "10.96.0.0/12" {
					t.Fatalf("host Service network %q", o.cfg.HostServiceCIDR)
				}
			}},
		{name: "a host Service network with host bits is refused", args: []string{"--host-service-cidr=10.96.0.1/12"}, wantErr: `--host-service-cidr "10.96.0.1/12": want an IPv4 network`},
		{name: "an IPv6 host Service network is refused", args: []string{"--host-service-cidr=fd00::/108"}, wantErr: `--host-service-cidr "fd00::/108": want an IPv4 network`},
		{name: "a host cluster domain that is no DNS name is refused", args: []string{"--host-cluster-domain=Cluster Local"}, wantErr: `--host-cluster-domain "Cluster Local"`},
		{name: "an empty host cluster domain is refused", args: []string{"--host-cluster-domain="}, wantErr: `--host-cluster-domain ""`},
		{
			name: "leader election tolerates a slow API server by default",
			check: func(t *testing.T, o *options) {
				if o.lease != defaultLease || o.lease.duration != time.Minute {
					t.Fatalf("lease timings %+v, want %+v", o.lease, defaultLease)
				}
			},
		},
		{name: "a renew deadline as long as the lease is refused", args: []string{"--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=30s"},
			wantErr: "--leader-elect-lease-duration 30s: want more than --leader-elect-renew-deadline (30s)"},
		{name: "a renew deadline inside the retry jitter is refused", args: []string{"--leader-elect-renew-deadline=6s", "--leader-elect-retry-period=5s"},
			wantErr: "--leader-elect-renew-deadline 6s: want more than 6s (1.2 × --leader-elect-retry-period)"},
		{name: "no retry period is refused", args: []string{"--leader-elect-retry-period=0s"}, wantErr: "--leader-elect-retry-period 0s: want more than 0"},
		{name: "a quota that is no quantity is refused", args: []string{"--default-quota=pods=lots"}, wantErr: `--default-quota: "pods=lots"`},
		{name: "an egress CIDR that is no CIDR is refused", args: []string{"--network-policy-egress-cidrs=internet"}, wantErr: `--network-policy-egress-cidrs: "internet" is not a CIDR`},
		{name: "an unknown pull policy is refused", args: []string{"--image-pull-policy=Sometimes"}, wantErr: `--image-pull-policy "Sometimes": want Always, IfNotPresent or Never`},
		{name: "external is not a default datastore", args: []string{"--default-datastore-type=external"}, wantErr: `--default-datastore-type "external": want sqlite or etcd`},
		{name: "an unknown persistence is refused", args: []string{"--default-persistence-type=static"}, wantErr: `--default-persistence-type "static": want dynamic or ephemeral`},
		{name: "an unknown server spread is refused", args: []string{"--default-server-spread=preferred"}, wantErr: `--default-server-spread "preferred": want Preferred or Required`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, &zap.Options{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

// TestLogLevelTakesTheChartsValues: the chart passes logLevel as
// --zap-log-level; every value its schema admits must set the level the
// logger is built with, and anything else must stop the controller at start.
func TestLogLevelTakesTheChartsValues(t *testing.T) {
	cases := []struct {
		value           string
		enabled, silent zapcore.Level
		wantErr         bool
	}{
		{value: "info", enabled: zapcore.InfoLevel, silent: zapcore.DebugLevel},
		{value: "debug", enabled: zapcore.DebugLevel, silent: zapcore.Level(-2)},
		{value: "error", enabled: zapcore.ErrorLevel, silent: zapcore.WarnLevel},
		{value: "3", enabled: zapcore.Level(-3), silent: zapcore.Level(-4)},
		{value: "verbose", wantErr: true},
		{value: "0", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.value, func(t *testing.T) {
			opts := zap.Options{}
			_, err := parseFlags([]string{"--zap-log-level=" + tc.value}, &opts)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("--zap-log-level=%s accepted", tc.value)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opts.Level == nil || !opts.Level.Enabled(tc.enabled) || opts.Level.Enabled(tc.silent) {
				t.Errorf("--zap-log-level=%s: level %v, want %v logged and %v not", tc.value, opts.Level, tc.enabled, tc.silent)
			}
		})
	}
}
