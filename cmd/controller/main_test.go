package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
				if o.cfg.DefaultDatastore != v1beta1.SQLiteDatastore || o.cfg.DefaultPersistence != v1beta1.DynamicPersistence || o.cfg.PullPolicy != corev1.PullIfNotPresent || !o.leaderElect {
					t.Fatalf("defaults %+v", o.cfg)
				}
			},
		},
		{
			name: "chart values reach the config",
			args: []string{"--default-datastore-type=etcd", "--default-persistence-type=ephemeral", "--image-pull-policy=Never", "--image-pull-secrets=a, b,", "--watch-namespaces=x,y", "--default-storage-class=fast", "--zap-log-level=debug"},
			check: func(t *testing.T, o *options) {
				if o.cfg.DefaultDatastore != v1beta1.EtcdDatastore || o.cfg.DefaultPersistence != v1beta1.EphemeralPersistence || o.cfg.PullPolicy != corev1.PullNever || o.cfg.DefaultStorageClass != "fast" {
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
		{name: "an unknown pull policy is refused", args: []string{"--image-pull-policy=Sometimes"}, wantErr: `--image-pull-policy "Sometimes": want Always, IfNotPresent or Never`},
		{name: "external is not a default datastore", args: []string{"--default-datastore-type=external"}, wantErr: `--default-datastore-type "external": want sqlite or etcd`},
		{name: "an unknown persistence is refused", args: []string{"--default-persistence-type=static"}, wantErr: `--default-persistence-type "static": want dynamic or ephemeral`},
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
