package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/k3k-io/k3k/api/v1beta1"
	"github.com/k3k-io/k3k/pkg/datastore/external"
	"github.com/k3k-io/k3k/pkg/layout"
)

// datastore.type external: what k3s is given, and how a datastore that does
// not answer becomes a reason on the Cluster instead of a k3s crash loop.
//
//   - The endpoint goes into the k3s config when it comes from the spec, or
//     into the environment from the Secret's key "endpoint" (never optional:
//     a container whose key went missing does not start at all). k3s given no
//     endpoint would silently keep the cluster in a SQLite file of its own.
//   - Only the TLS files the Secret holds are passed to k3s, so a Secret with
//     a DSN alone (e.g. PostgreSQL without client certificates) works.
//   - An init container, `datastore check-external`, connects first with the
//     same endpoint and files; k3s starts only once the datastore accepted the
//     connection. Its exit code and termination message are the reason
//     (Unreachable, AuthFailed, TLSFailed, InvalidEndpoint) the controller puts
//     on DatastoreReady.
//   - <data-dir>/server/db/state.db, the SQLite file k3s would create, is an
//     empty read-only directory: a k3s that somehow got no endpoint cannot open
//     it ("unable to open database file: is a directory") and never serves an
//     empty cluster. (Not all of server/db: k3s writes server/db/etcd/name
//     whatever the datastore.)

// ExternalSecretKeys are the keys the external datastore Secret holds, as the
// controller observed them. They decide what the server pod is given.
type ExternalSecretKeys struct {
	Endpoint, CA, Cert, Key bool
}

// reasonExternalPrefix starts the reasons of the check's failures:
// "ExternalDatastore" + external.Reason, e.g. ExternalDatastoreUnreachable.
const reasonExternalPrefix = "ExternalDatastore"

// externalRetry is how often a Cluster whose external datastore Secret is
// missing or incomplete is looked at again (the Secret is not watched: it
// carries none of our labels).
const externalRetry = 30 * time.Second

// externalState is what the controller observed of the external datastore
// Secret. hold keeps the server StatefulSet as it is: servers are neither
// created nor changed from a Secret that is missing or incomplete.
type externalState struct {
	hold            bool
	reason, message string
}

// reconcileExternalSecret reads the Secret spec.datastore.external.secretRef
// names and records which keys it holds (never their values) in the settings,
// and the hosts of the endpoint it holds for the servers' NetworkPolicy
// (reconcileIsolation, the next step). Requeues after externalRetry while the
// Secret is missing or incomplete.
func (r *Reconciler) reconcileExternalSecret(ctx context.Context, c *v1beta1.Cluster, o *observation) (ctrl.Result, error) {
	if o.settings.Datastore != v1beta1.ExternalDatastore || c.Spec.Datastore.External == nil || c.Spec.Datastore.External.SecretRef == nil {
		return ctrl.Result{}, nil
	}
	name := c.Spec.Datastore.External.SecretRef.Name
	s := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s)
	switch {
	case apierrors.IsNotFound(err):
		o.external = externalState{true, v1beta1.ReasonExternalSecretNotFound, fmt.Sprintf(
			"datastore.external.secretRef: Secret %s not found in namespace %s; servers start once it exists", name, c.Namespace)}
		return ctrl.Result{RequeueAfter: externalRetry}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting external datastore Secret %s: %w", name, err)
	}
	keys, problem := ExternalSecretKeysOf(s)
	if problem != "" {
		o.external = externalState{true, v1beta1.ReasonExternalSecretInvalid, fmt.Sprintf("datastore.external.secretRef: Secret %s %s", name, problem)}
		return ctrl.Result{RequeueAfter: externalRetry}, nil
	}
	o.settings.ExternalSecret = keys
	if keys.Endpoint {
		hosts, err := ExternalEndpointHosts(string(s.Data[layout.ExternalKeyEndpoint]))
		o.externalHosts = &parsedHosts{hosts, err}
	}
	return ctrl.Result{}, nil
}

// parsedHosts is what ExternalEndpointHosts returned for an endpoint.
type parsedHosts struct {
	hosts []HostPort
	err   error
}

// ExternalSecretKeysOf says which keys s holds and, when they cannot be used
// together, why (a sentence fragment naming keys, never values).
func ExternalSecretKeysOf(s *corev1.Secret) (ExternalSecretKeys, string) {
	has := func(k string) bool { return len(strings.TrimSpace(string(s.Data[k]))) > 0 }
	keys := ExternalSecretKeys{Endpoint: has(layout.ExternalKeyEndpoint), CA: has(layout.ExternalKeyCA), Cert: has(layout.ExternalKeyCert), Key: has(layout.ExternalKeyKey)}
	if _, present := s.Data[layout.ExternalKeyEndpoint]; present && !keys.Endpoint {
		return keys, fmt.Sprintf("has an empty key %q: k3s would fall back to a SQLite file of its own; remove the key to use spec.datastore.external.endpoint", layout.ExternalKeyEndpoint)
	}
	if keys.Cert != keys.Key {
		return keys, fmt.Sprintf("holds only one of %q and %q: a client certificate needs both", layout.ExternalKeyCert, layout.ExternalKeyKey)
	}
	return keys, ""
}

// externalDatastoreConfig fills the datastore part of the k3s config.
func externalDatastoreConfig(cfg *k3sConfig, c *v1beta1.Cluster, s Settings) {
	ext := c.Spec.Datastore.External
	if ext == nil {
		return
	}
	// With the Secret's endpoint it comes from the environment (see
	// externalServerEnv) so credentials never land in the ConfigMap.
	if ext.SecretRef == nil || !s.ExternalSecret.Endpoint {
		cfg.DatastoreEndpoint = ext.Endpoint
	}
	if ext.SecretRef != nil {
		if s.ExternalSecret.CA {
			cfg.DatastoreCAFile = layout.DatastoreSecretDir + "/" + layout.ExternalKeyCA
		}
		if s.ExternalSecret.Cert && s.ExternalSecret.Key {
			cfg.DatastoreCertFile = layout.DatastoreSecretDir + "/" + layout.ExternalKeyCert
			cfg.DatastoreKeyFile = layout.DatastoreSecretDir + "/" + layout.ExternalKeyKey
		}
	}
}

// externalEndpointEnv is the endpoint as the check reads it, and as k3s reads
// it when it comes from the Secret.
func externalEndpointEnv(c *v1beta1.Cluster, s Settings) corev1.EnvVar {
	ext := c.Spec.Datastore.External
	if ext.SecretRef != nil && s.ExternalSecret.Endpoint {
		return corev1.EnvVar{Name: layout.ExternalEndpointEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: *ext.SecretRef, Key: layout.ExternalKeyEndpoint,
		}}}
	}
	return corev1.EnvVar{Name: layout.ExternalEndpointEnv, Value: ext.Endpoint}
}

// externalServerPod adds what datastore.type external needs to the server
// pod: the Secret's volume and endpoint, the check before k3s, the guard over
// k3s's SQLite directory.
func externalServerPod(c *v1beta1.Cluster, s Settings, cfg Config, server *corev1.Container) (initContainers []corev1.Container, volumes []corev1.Volume) {
	ext := c.Spec.Datastore.External
	if ext == nil {
		return nil, nil
	}
	check := corev1.Container{
		Name:            layout.ExternalCheckContainer,
		Image:           cfg.DatastoreImage,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         []string{"/usr/local/bin/datastore", "check-external", "--endpoint-env=" + layout.ExternalEndpointEnv},
		Env:             []corev1.EnvVar{externalEndpointEnv(c, s)},
		// The reason the check writes is what DatastoreReady says.
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          restrictedContext(true),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
		}},
	}
	server.VolumeMounts = append(server.VolumeMounts, mount(layout.K3sDBGuardVolume, layout.K3sSQLitePath, true, ""))
	volumes = append(volumes, corev1.Volume{Name: layout.K3sDBGuardVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptrQuantity("1Mi")},
	}})
	if ext.SecretRef != nil {
		if s.ExternalSecret.Endpoint {
			server.Env = append(server.Env, externalEndpointEnv(c, s))
		}
		files := map[string]bool{layout.ExternalKeyCA: s.ExternalSecret.CA, layout.ExternalKeyCert: s.ExternalSecret.Cert && s.ExternalSecret.Key, layout.ExternalKeyKey: s.ExternalSecret.Cert && s.ExternalSecret.Key}
		for _, f := range []struct{ key, flag string }{{layout.ExternalKeyCA, "--cafile="}, {layout.ExternalKeyCert, "--certfile="}, {layout.ExternalKeyKey, "--keyfile="}} {
			if files[f.key] {
				check.Command = append(check.Command, f.flag+layout.DatastoreSecretDir+"/"+f.key)
			}
		}
		m := mount(layout.DatastoreSecretVolume, layout.DatastoreSecretDir, true, "")
		server.VolumeMounts = append(server.VolumeMounts, m)
		check.VolumeMounts = append(check.VolumeMounts, m)
		volumes = append(volumes, corev1.Volume{Name: layout.DatastoreSecretVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: ext.SecretRef.Name},
		}})
	}
	return []corev1.Container{check}, volumes
}

func ptrQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// externalDatastoreCondition is DatastoreReady for datastore.type external:
// the Secret first, then what each server pod's check said.
func externalDatastoreCondition(o observation) condResult {
	if o.external.reason != "" {
		return condResult{false, o.external.reason, o.external.message}
	}
	ok := 0
	for _, p := range o.serverPods {
		r := externalCheckResult(p)
		switch {
		case r.ok:
			ok++
		case r.reason != "":
			return condResult{false, r.reason, fmt.Sprintf("server pod %s: %s", p.Name, r.message)}
		}
	}
	want := int(o.settings.Servers)
	if want > 0 && ok >= want {
		return condResult{true, v1beta1.ReasonExternalReachable, fmt.Sprintf("%d/%d server pods connected to the external datastore (checked as each starts)", ok, want)}
	}
	return condResult{false, v1beta1.ReasonExternalChecking, fmt.Sprintf("%d/%d server pods connected to the external datastore; checking", ok, want)}
}

// externalCheckResult reads the check container's status of one pod: ok once
// it succeeded; a reason while its last run failed.
func externalCheckResult(p corev1.Pod) condResult {
	for _, st := range p.Status.InitContainerStatuses {
		if st.Name != layout.ExternalCheckContainer {
			continue
		}
		if t := st.State.Terminated; t != nil && t.ExitCode == 0 {
			return condResult{ok: true}
		}
		t := st.State.Terminated
		if t == nil {
			t = st.LastTerminationState.Terminated
		}
		if t == nil || t.ExitCode == 0 {
			return condResult{}
		}
		reason, known := external.ReasonForExitCode(t.ExitCode)
		if !known {
			return condResult{false, reasonExternalPrefix + string(external.Failed), fmt.Sprintf("the datastore check exited with code %d (%s)", t.ExitCode, t.Reason)}
		}
		msg := strings.TrimSpace(t.Message)
		if msg == "" {
			msg = "the datastore check failed: " + string(reason)
		}
		if st.RestartCount > 0 {
			msg += fmt.Sprintf(" (%d attempts; retried with backoff, or delete the pod to retry now)", st.RestartCount+1)
		}
		return condResult{false, reasonExternalPrefix + string(reason), msg}
	}
	// A pod made before the check existed, or one whose status is not in yet.
	return condResult{}
}
