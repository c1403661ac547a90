package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Host StorageClasses shown in a virtual cluster. A shared-mode Cluster's
// claims may name the host classes of spec.storageClasses, and the host's
// default (by leaving the class unset, or by its name). The agent shows
// them as StorageClasses in the virtual cluster (pkg/agent/classsync), so
// that `kubectl get storageclass` lists them, a chart finds the default, and
// a claim may grow where the host class allows it. The agent may not read
// the host's classes (they are cluster-scoped; it is bound in one
// namespace), so the controller reads them and passes what the agent shows:
// the default's name and which classes allow expansion.

// readsStorageClasses is whether the controller reads the host's
// StorageClasses: for the agents' copies, unless the host administrator
// turned them off (the chart then grants no reading).
func (c Config) readsStorageClasses() bool {
	return c.AgentImage != "" && !c.Agent.DisableStorageClassCopies
}

// Annotations that mark the host's default class; the API server's
// DefaultStorageClass admission reads both.
const (
	annotationDefaultClass     = "storageclass.kubernetes.io/is-default-class"
	annotationBetaDefaultClass = "storageclass.beta.kubernetes.io/is-default-class"
)

// hostDefaultStorageClass is the host's default class as the API server's
// DefaultStorageClass admission picks it: of the classes marked default, the
// newest, then the first by name. Empty when none is marked.
func hostDefaultStorageClass(classes []storagev1.StorageClass) string {
	var best *storagev1.StorageClass
	for i := range classes {
		c := &classes[i]
		if c.Annotations[annotationDefaultClass] != "true" && c.Annotations[annotationBetaDefaultClass] != "true" {
			continue
		}
		if best == nil || c.CreationTimestamp.After(best.CreationTimestamp.Time) ||
			(c.CreationTimestamp.Equal(&best.CreationTimestamp) && c.Name < best.Name) {
			best = c
		}
	}
	if best == nil {
		return ""
	}
	return best.Name
}

// storageClassArgs are the agent flags that describe the host classes a
// Cluster's claims may name (allowed, its spec.storageClasses): the host's
// default by name, and which of those classes allow expansion on the host.
// A class the host does not have allows none.
func storageClassArgs(allowed []string, classes []storagev1.StorageClass) []string {
	var args []string
	def := hostDefaultStorageClass(classes)
	if def != "" {
		args = append(args, "--default-storage-class="+def)
	}
	var expandable []string
	for _, c := range classes {
		if ptr.Deref(c.AllowVolumeExpansion, false) && (c.Name == def || slices.Contains(allowed, c.Name)) {
			expandable = append(expandable, c.Name)
		}
	}
	if len(expandable) > 0 {
		sort.Strings(expandable)
		args = append(args, "--expandable-storage-classes="+strings.Join(expandable, ","))
	}
	return args
}

// CheckStorageClassAccess says, before the manager starts, whether the
// controller may read the host's StorageClasses when it is to (as
// CheckUserNamespacesAccess does for Nodes): without list and watch the
// informer never syncs and reconciles wait on it.
func CheckStorageClassAccess(ctx context.Context, c client.Client, cfg Config) error {
	if !cfg.readsStorageClasses() {
		return nil
	}
	denied, err := deniedListWatch(ctx, c, storagev1.GroupName, "storageclasses")
	if err != nil {
		return fmt.Errorf("asking whether this controller may read StorageClasses (--agent-storage-class-copies reads them): %w", err)
	}
	if len(denied) > 0 {
		return fmt.Errorf("--agent-storage-class-copies reads the host's StorageClasses, but this controller may not %s them: "+
			"grant it get, list and watch on storageclasses.storage.k8s.io (the chart's ClusterRole <release>-storage-classes, made with rbac.create and sharedAgent.storageClassCopies), "+
			"or set --agent-storage-class-copies=false (sharedAgent.storageClassCopies)", strings.Join(denied, " or "))
	}
	return nil
}
