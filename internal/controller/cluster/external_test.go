package cluster

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/external"
	"github.com/k3k-io/k3k/pkg/layout"
)

func externalCluster(secret string) *v1beta1.Cluster {
	c := sampleCluster()
	c.Spec.Datastore = v1beta1.DatastoreConfig{Type: v1beta1.ExternalDatastore, External: &v1beta1.ExternalDatastoreConfig{Endpoint: "postgres://db.example:5432/k3s"}}
	if secret != "" {
		c.Spec.Datastore.External.SecretRef = &corev1.LocalObjectReference{Name: secret}
	}
	return c
}

// TestExternalDatastorePassesOnlyWhatTheSecretHolds renders the k3s config
// and the server pod for each shape of external datastore Secret: the
// endpoint never lands in the ConfigMap when the Secret holds it, only the TLS
// files the Secret holds are named, the check runs before k3s with the same
// endpoint and files, and k3s's own SQLite file is blocked.
func TestExternalDatastorePassesOnlyWhatTheSecretHolds(t *testing.T) {
	fromSecret := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "endpoint"}}
	cases := []struct {
		name       string
		secret     string
		keys       ExternalSecretKeys
		wantConfig map[string]string // k3s config keys of the datastore; absent = ""
		wantEnv    *corev1.EnvVar    // the endpoint in k3s's environment, nil: none
		wantCheck  []string          // the check's flags after check-external
		wantSecret bool              // the Secret is mounted
	}{
		{
			name:       "no Secret: the spec's endpoint in the config, nothing else",
			wantConfig: map[string]string{"datastore-endpoint": "postgres://db.example:5432/k3s"},
			wantCheck:  []string{"--endpoint-env=K3S_DATASTORE_ENDPOINT"},
		},
		{
			name: "a Secret with a DSN only: no TLS file is named", secret: "db", keys: ExternalSecretKeys{Endpoint: true},
			wantConfig: map[string]string{},
			wantEnv:    &corev1.EnvVar{Name: "K3S_DATASTORE_ENDPOINT", ValueFrom: fromSecret},
			wantCheck:  []string{"--endpoint-env=K3S_DATASTORE_ENDPOINT"},
			wantSecret: true,
		},
		{
			name: "a Secret with a CA only: the spec's endpoint, the CA file", secret: "db", keys: ExternalSecretKeys{CA: true},
			wantConfig: map[string]string{"datastore-endpoint": "postgres://db.example:5432/k3s", "datastore-cafile": "/etc/k3k/datastore/ca.crt"},
			wantCheck:  []string{"--endpoint-env=K3S_DATASTORE_ENDPOINT", "--cafile=/etc/k3k/datastore/ca.crt"},
			wantSecret: true,
		},
		{
			name: "a Secret with everything", secret: "db", keys: ExternalSecretKeys{Endpoint: true, CA: true, Cert: true, Key: true},
			wantConfig: map[string]string{"datastore-cafile": "/etc/k3k/datastore/ca.crt", "datastore-certfile": "/etc/k3k/datastore/tls.crt", "datastore-keyfile": "/etc/k3k/datastore/tls.key"},
			wantEnv:    &corev1.EnvVar{Name: "K3S_DATASTORE_ENDPOINT", ValueFrom: fromSecret},
			wantCheck:  []string{"--endpoint-env=K3S_DATASTORE_ENDPOINT", "--cafile=/etc/k3k/datastore/ca.crt", "--certfile=/etc/k3k/datastore/tls.crt", "--keyfile=/etc/k3k/datastore/tls.key"},
			wantSecret: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := externalCluster(tc.secret)
			s, err := Resolve(c, testConfig)
			if err != nil {
				t.Fatal(err)
			}
			s.ExternalSecret = tc.keys
			config, err := ServerConfig(c, s)
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := yaml.Unmarshal(config.Data, &cfg); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"datastore-endpoint", "datastore-cafile", "datastore-certfile", "datastore-keyfile"} {
				got, _ := cfg[k].(string)
				if got != tc.wantConfig[k] {
					t.Errorf("config %s = %q, want %q", k, got, tc.wantConfig[k])
				}
			}

			pod := DesiredStatefulSet(c, s, testConfig, 1, config.Hash).Spec.Template.Spec
			if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != layout.ExternalCheckContainer {
				t.Fatalf("init containers %v, want only the datastore check", pod.InitContainers)
			}
			check := pod.InitContainers[0]
			if diff := cmp.Diff(append([]string{"/usr/local/bin/datastore", "check-external"}, tc.wantCheck...), check.Command); diff != "" {
				t.Errorf("check command (-want +got):\n%s", diff)
			}
			if check.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
				t.Errorf("the check's reason is not kept as its termination message")
			}
			server := pod.Containers[0]
			var endpointEnv *corev1.EnvVar
			for i, e := range server.Env {
				if e.Name == layout.ExternalEndpointEnv {
					endpointEnv = &server.Env[i]
				}
			}
			if diff := cmp.Diff(tc.wantEnv, endpointEnv); diff != "" {
				t.Errorf("k3s's endpoint variable (-want +got):\n%s", diff)
			}
			if tc.wantEnv != nil && tc.wantEnv.ValueFrom.SecretKeyRef.Optional != nil {
				t.Errorf("the endpoint key is optional: a Secret without it would start k3s on SQLite")
			}
			checkEnv := check.Env[0]
			if tc.wantEnv != nil {
				if diff := cmp.Diff(*tc.wantEnv, checkEnv); diff != "" {
					t.Errorf("the check reads another endpoint than k3s (-want +got):\n%s", diff)
				}
			} else if checkEnv.Value != c.Spec.Datastore.External.Endpoint {
				t.Errorf("the check's endpoint %+v, want the spec's", checkEnv)
			}
			if !hasMount(server, layout.K3sDBGuardVolume, "/var/lib/rancher/k3s/server/db/state.db", true) {
				t.Errorf("k3s's SQLite file is not blocked by a read-only directory: %+v", server.VolumeMounts)
			}
			secretMounted := hasMount(server, layout.DatastoreSecretVolume, layout.DatastoreSecretDir, true)
			if secretMounted != tc.wantSecret || hasMount(check, layout.DatastoreSecretVolume, layout.DatastoreSecretDir, true) != tc.wantSecret {
				t.Errorf("Secret mounted in k3s: %v, in the check: %v; want %v", secretMounted, !secretMounted, tc.wantSecret)
			}
			for _, v := range pod.Volumes {
				if v.Secret != nil && v.Name == layout.DatastoreSecretVolume && v.Secret.Optional != nil && *v.Secret.Optional {
					t.Errorf("the datastore Secret volume is optional")
				}
			}
		})
	}
}

func hasMount(c corev1.Container, volume, path string, readOnly bool) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == volume && m.MountPath == path && m.ReadOnly == readOnly {
			return true
		}
	}
	return false
}

func TestExternalSecretKeysOf(t *testing.T) {
	cases := []struct {
		name        string
		data        map[string]string
		want        ExternalSecretKeys
		wantProblem string
	}{
		{"a DSN only", map[string]string{"endpoint": "postgres://u:p@db/k3s"}, ExternalSecretKeys{Endpoint: true}, ""},
		{"TLS files only", map[string]string{"ca.crt": "x", "tls.crt": "x", "tls.key": "x"}, ExternalSecretKeys{CA: true, Cert: true, Key: true}, ""},
		{"an empty endpoint would mean SQLite", map[string]string{"endpoint": " \n"}, ExternalSecretKeys{}, `empty key "endpoint"`},
		{"a certificate without its key", map[string]string{"endpoint": "x", "tls.crt": "x"}, ExternalSecretKeys{Endpoint: true, Cert: true}, `only one of "tls.crt" and "tls.key"`},
		{"nothing at all is the spec's endpoint", map[string]string{}, ExternalSecretKeys{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &corev1.Secret{Data: map[string][]byte{}}
			for k, v := range tc.data {
				s.Data[k] = []byte(v)
			}
			got, problem := ExternalSecretKeysOf(s)
			if got != tc.want || !strings.Contains(problem, tc.wantProblem) || (tc.wantProblem == "") != (problem == "") {
				t.Fatalf("ExternalSecretKeysOf = %+v, %q; want %+v, ...%s...", got, problem, tc.want, tc.wantProblem)
			}
			if strings.Contains(problem, "postgres://") {
				t.Fatalf("the problem shows the endpoint: %q", problem)
			}
		})
	}
}

// TestExternalDatastoreCondition: DatastoreReady says which failure the check
// saw, from its exit code and termination message.
func TestExternalDatastoreCondition(t *testing.T) {
	checkPod := func(name string, st corev1.ContainerStatus) corev1.Pod {
		st.Name = layout.ExternalCheckContainer
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{st}}}
	}
	failed := func(r external.Reason, msg string, restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: external.ExitCode(r), Message: msg}},
			RestartCount:         restarts,
		}
	}
	done := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}
	settings := Settings{Datastore: v1beta1.ExternalDatastore, Servers: 1}
	cases := []struct {
		name       string
		o          observation
		wantOK     bool
		wantReason string
		wantIn     string
	}{
		{"the Secret is missing", observation{settings: settings, external: externalState{true, v1beta1.ReasonExternalSecretNotFound, "Secret db not found"}}, false, v1beta1.ReasonExternalSecretNotFound, "Secret db not found"},
		{"no pod yet", observation{settings: settings}, false, v1beta1.ReasonExternalChecking, "0/1"},
		{"the check is running", observation{settings: settings, serverPods: []corev1.Pod{checkPod("s-0", corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})}}, false, v1beta1.ReasonExternalChecking, "checking"},
		{"a wrong password", observation{settings: settings, serverPods: []corev1.Pod{checkPod("s-0", failed(external.AuthFailed, `AuthFailed: PostgreSQL at 10.0.0.5:5432: password authentication failed for user "k3s" (SQLSTATE 28P01)`, 2))}}, false, "ExternalDatastoreAuthFailed", "server pod s-0: AuthFailed: PostgreSQL at 10.0.0.5:5432: password authentication failed"},
		{"a database that is down", observation{settings: settings, serverPods: []corev1.Pod{checkPod("s-0", failed(external.Unreachable, "Unreachable: PostgreSQL at 10.0.0.5:5432: connection refused", 0))}}, false, "ExternalDatastoreUnreachable", "connection refused"},
		{"a failure right now, before the restart", observation{settings: settings, serverPods: []corev1.Pod{checkPod("s-0", corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: external.ExitCode(external.TLSFailed)}}})}}, false, "ExternalDatastoreTLSFailed", "TLSFailed"},
		{"an exit code the check never uses", observation{settings: settings, serverPods: []corev1.Pod{checkPod("s-0", corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}})}}, false, "ExternalDatastoreFailed", "137 (OOMKilled)"},
		{"the check passed", observation{settings: settings, serverPods: []corev1.Pod{checkPod("s-0", done)}}, true, v1beta1.ReasonExternalReachable, "1/1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := externalDatastoreCondition(tc.o)
			if got.ok != tc.wantOK || got.reason != tc.wantReason || !strings.Contains(got.message, tc.wantIn) {
				t.Fatalf("condition = %+v; want ok=%v reason=%s with ...%s...", got, tc.wantOK, tc.wantReason, tc.wantIn)
			}
		})
	}
}

// TestExternalSecretGatesTheServers reconciles an external-datastore Cluster
// against the real API server: no server StatefulSet while its Secret is
// missing (DatastoreReady says why), then one that passes exactly the keys the
// Secret holds; a Secret that loses its endpoint holds the servers as they
// were; a second reconcile of an unchanged Cluster writes nothing.
func TestExternalSecretGatesTheServers(t *testing.T) {
	ctx := context.Background()
	r, writes := newReconciler(t)
	c := createCluster(t, newCluster(newNamespace(t), "ext", func(c *v1beta1.Cluster) {
		c.Spec.Datastore = v1beta1.DatastoreConfig{Type: v1beta1.ExternalDatastore, External: &v1beta1.ExternalDatastoreConfig{
			Endpoint: "postgres://db.example:5432/k3s", SecretRef: &corev1.LocalObjectReference{Name: "db"},
		}}
	}))
	res := reconcileOnce(t, r, c)
	if res.RequeueAfter != externalRetry {
		t.Fatalf("a missing external Secret must be retried after %s, got %+v", externalRetry, res)
	}
	if got := condition(t, c, v1beta1.ConditionDatastoreReady); got.Status != metav1.ConditionFalse || got.Reason != v1beta1.ReasonExternalSecretNotFound || !strings.Contains(got.Message, "Secret db not found") {
		t.Fatalf("DatastoreReady %+v", got)
	}
	sts := &appsv1.StatefulSet{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: layout.NamesFor(c).StatefulSet}, sts); !apierrors.IsNotFound(err) {
		t.Fatalf("servers started without their datastore Secret: %v", err)
	}

	const dsn = "postgres://k3s:pa55@db.example:5432/k3s"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "db"}, Data: map[string][]byte{"endpoint": []byte(dsn)}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, c)
	get(t, c, layout.NamesFor(c).StatefulSet, sts)
	cm := &corev1.ConfigMap{}
	get(t, c, layout.NamesFor(c).ServerConfig, cm)
	if cfg := cm.Data[layout.ConfigMapKeyConfig]; strings.Contains(cfg, "datastore-") || strings.Contains(cfg, "pa55") {
		t.Fatalf("the config names the datastore although the Secret holds only a DSN:\n%s", cfg)
	}
	pod := sts.Spec.Template.Spec
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != layout.ExternalCheckContainer {
		t.Fatalf("init containers %+v, want the datastore check", pod.InitContainers)
	}
	if got := condition(t, c, v1beta1.ConditionDatastoreReady); got.Reason != v1beta1.ReasonExternalChecking {
		t.Fatalf("DatastoreReady %+v, want %s until a pod's check passed", got, v1beta1.ReasonExternalChecking)
	}
	reconcileOnce(t, r, c)
	before := writes.count()
	reconcileOnce(t, r, c)
	if n := writes.count() - before; n != 0 {
		t.Fatalf("an unchanged Cluster caused %d writes", n)
	}

	// The endpoint key emptied: k3s would fall back to SQLite; the servers
	// are held as they are and the condition says why.
	secret.Data["endpoint"] = []byte("")
	if err := k8s.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	generation := sts.Generation
	reconcileOnce(t, r, c)
	get(t, c, layout.NamesFor(c).StatefulSet, sts)
	if sts.Generation != generation {
		t.Fatalf("the StatefulSet changed (generation %d → %d) from a Secret without an endpoint", generation, sts.Generation)
	}
	if got := condition(t, c, v1beta1.ConditionDatastoreReady); got.Reason != v1beta1.ReasonExternalSecretInvalid || strings.Contains(got.Message, "pa55") {
		t.Fatalf("DatastoreReady %+v", got)
	}
}
