{{/* Names, labels and image references shared by the templates. */}}

{{/* name is the chart's name, or nameOverride; it is the app.kubernetes.io/name
label, part of the Deployment's (immutable) selector. */}}
{{- define "k3k.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* fullname names every object of the release, and prefixes the ones that need
more than one name: fullnameOverride as given, else the release name, or
RELEASE-NAME when the release name does not already say NAME; objects of two
releases never collide. */}}
{{- define "k3k.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "k3k.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* metricsService names the Service in front of the controller's metrics port. */}}
{{- define "k3k.metricsService" -}}
{{- printf "%s-metrics" (include "k3k.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "k3k.selectorLabels" -}}
app.kubernetes.io/name: {{ include "k3k.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "k3k.labels" -}}
{{ include "k3k.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: k3k
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "k3k.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "k3k.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository prefixes an image repository with global.imageRegistry.
Call with (dict "repository" REPO "root" $). */}}
{{- define "k3k.repository" -}}
{{- $registry := .root.Values.global.imageRegistry | trimSuffix "/" -}}
{{- if $registry -}}
{{- printf "%s/%s" $registry .repository -}}
{{- else -}}
{{- .repository -}}
{{- end -}}
{{- end -}}

{{/* image is REGISTRY/REPOSITORY:TAG for one image block; the tag defaults to the
chart's appVersion. Call with (dict "image" IMAGE "root" $). */}}
{{- define "k3k.image" -}}
{{- $repo := include "k3k.repository" (dict "repository" .image.repository "root" .root) -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* pullSecretNames is the list of pull secret names, whether given as
{name: X} or as bare strings. */}}
{{- define "k3k.pullSecretNames" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets -}}
{{- if kindIs "string" . -}}
{{- $names = append $names . -}}
{{- else -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{/* deployedPullPolicy is the one pull policy the controller applies to every
image it deploys. The controller has a single --image-pull-policy flag, so the
three images it deploys must agree rather than one silently winning. */}}
{{- define "k3k.deployedPullPolicy" -}}
{{- $ds := .Values.datastore.image.pullPolicy -}}
{{- $agent := .Values.sharedAgent.image.pullPolicy -}}
{{- $k3s := .Values.k3sServer.image.pullPolicy -}}
{{- if or (ne $ds $agent) (ne $ds $k3s) -}}
{{- fail (printf "datastore.image.pullPolicy (%s), sharedAgent.image.pullPolicy (%s) and k3sServer.image.pullPolicy (%s) must be equal: the controller applies one pull policy to every image it deploys" $ds $agent $k3s) -}}
{{- end -}}
{{- $ds -}}
{{- end -}}

{{/* controllerRules are the rights the controller needs in every namespace it
watches. Each rule says which code path needs it (internal/controller/cluster).
Delete only where a spec change must remove an object before the Cluster goes
(isolation, backup): otherwise owner references let the garbage collector
remove what a Cluster owned, and the StatefulSet's claim retention policy its
volumes. */}}
{{/* nodeLoss is "true" when node-loss handling is on (nodeLossTimeout not 0),
empty otherwise. */}}
{{- define "k3k.nodeLoss" -}}
{{- if ne (toString .Values.nodeLossTimeout) "0" }}true{{ end -}}
{{- end -}}

{{/* agentClusterRole names the ClusterRole holding the shared-mode agent's rights
(internal/controller/cluster.AgentRules; templates/agent-clusterrole.yaml). */}}
{{- define "k3k.agentClusterRole" -}}
{{- printf "%s-agent" (include "k3k.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* backupExecClusterRole names the ClusterRole that lets a Cluster's backup Job
exec into pods (internal/controller/cluster.BackupExecRules;
templates/backup-clusterrole.yaml), bound in the cluster's namespace only. */}}
{{- define "k3k.backupExecClusterRole" -}}
{{- printf "%s-backup-exec" (include "k3k.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* agentGuard names the admission policy and binding that hold the agents to
their own objects (internal/controller/cluster.DesiredAgentGuard). */}}
{{- define "k3k.agentGuard" -}}
{{- printf "%s-agent-guard" (include "k3k.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* policyGuard names the admission policy and binding that hold Clusters to
their namespace's VirtualClusterPolicy (internal/controller/cluster.DesiredPolicyGuard). */}}
{{- define "k3k.policyGuard" -}}
{{- printf "%s-policy-guard" (include "k3k.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* pairs renders a map of strings as the controller's k=v,… flag value, in
key order; resourceList is the same for a map of resource quantities
(name=quantity,…). */}}
{{- define "k3k.resourceList" -}}{{ include "k3k.pairs" . }}{{- end -}}
{{- define "k3k.pairs" -}}
{{- $m := . | default dict -}}
{{- $out := list -}}
{{- range $k := keys $m | sortAlpha -}}
{{- $out = append $out (printf "%s=%s" $k (index $m $k)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{- define "k3k.controllerRules" -}}
# Clusters are the reconciler's input (For); it writes only their status.
- apiGroups: ["k3k.io"]
  resources: ["clusters"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["k3k.io"]
  resources: ["clusters/status"]
  verbs: ["update"]
# Owner references with blockOwnerDeletion need update on the owner's
# finalizers where the OwnerReferencesPermissionEnforcement admission plugin runs.
- apiGroups: ["k3k.io"]
  resources: ["clusters/finalizers"]
  verbs: ["update"]
# Secrets: the token and kubeconfig Secrets are created and kept (Owns, cached
# by label); a user's tokenSecretRef Secret is read uncached (get). get, update
# and patch are also what each server's Role grants its publisher on two Secrets,
# and RBAC only lets the controller grant rights it holds.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# The k3s config (ConfigMap), the API and headless Services and the server
# ServiceAccount are created and kept in line with the Cluster (Owns).
- apiGroups: [""]
  resources: ["configmaps", "services", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# Server pods are observed for readiness (Watches, by label, read from the
# cache). With datastore.type etcd the controller also patches their
# finalizers (k3k.io/etcd-member), so a server pod is let go only once its
# etcd member was removed safely; nothing else of a pod is written.
# delete, with nodeLossTimeout: a server pod on a lost node is deleted
# (force) once that is safe (nodeloss.go).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"{{ if include "k3k.nodeLoss" . }}, "delete"{{ end }}]
# Scheduled snapshots (spec.backup): each Cluster's backup Role grants its
# backup Job get/list on pods (the server pods are found by label), and RBAC
# only lets the controller grant rights it holds.
# The backup CronJob (Owns; delete when spec.backup is removed) and its Jobs,
# read back for status.backup (Watches, by label). The restore Job
# (spec.restoreFrom) is created once and never changed or deleted: it goes
# with the Cluster through its owner reference.
- apiGroups: ["batch"]
  resources: ["cronjobs"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create"]
# The server pods' PodDisruptionBudget (Owns), kept while two or more servers
# run with etcd or an external datastore; delete: it goes when the Cluster
# shrinks to one server or pauses (disruption.go).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Server volume claims are observed (whether a server holds data) and patched
# to grow them when spec.persistence.storageRequestSize grows. The backup
# claim (spec.backup.claimName, the user's) is read uncached (get) to check
# that it exists and is not a server volume; it is never written. delete,
# with nodeLossTimeout: the volume claim of an etcd member on a lost node goes
# with its pod, so that the pod starts elsewhere on a new volume.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "patch"{{ if include "k3k.nodeLoss" . }}, "delete"{{ end }}]
# The publisher's Role and RoleBinding (rights on two named Secrets only), and
# the backup Job's (see pods/exec). delete: removing spec.backup removes the
# backup Role, RoleBinding and ServiceAccount; the controller deletes only
# objects the Cluster controls.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["delete"]
# The servers' StatefulSet (Owns).
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# The Ingress of spec.expose.ingress (Owns).
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# The shared-mode agent's Deployment (Owns).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# Each cluster's agent is granted the agent ClusterRole in the cluster's namespace
# by a RoleBinding the controller makes. "bind" on that one ClusterRole is all it
# takes: the controller never holds the agent's pod rights itself.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  verbs: ["bind"]
  resourceNames: [{{ include "k3k.agentClusterRole" . | quote }}]
# Each backup Job is granted exec into pods (templates/backup-clusterrole.yaml)
# in its cluster's namespace the same way: the controller never holds exec.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  verbs: ["bind"]
  resourceNames: [{{ include "k3k.backupExecClusterRole" . | quote }}]
# Each Cluster's isolation (spec.quota, spec.limits, spec.networkPolicy): its
# ResourceQuota, LimitRange and NetworkPolicies (Owns). delete, here only: a
# Cluster whose spec or the chart turns one off must lose it (the garbage
# collector removes them only with the Cluster), and the controller deletes
# only objects the Cluster controls.
- apiGroups: [""]
  resources: ["resourcequotas", "limitranges"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Events on each Cluster (every condition that appears or changes, e.g.
# ServerVolumePending; etcd recovery: Recovering, Recovered, RecoveryRefused),
# written with the events.k8s.io API. Without this they were refused on a real
# node ("cannot create resource events in API group events.k8s.io").
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# The events of a server volume claim that stays Pending, read uncached
# (list with a field selector on the claim) to name the cause in the
# ServersReady condition (e.g. ProvisioningFailed).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["list"]
{{- end -}}
