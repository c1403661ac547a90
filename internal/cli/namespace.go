package cli

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/k3k-io/k3k/api/v1beta1"
)

// getCluster reads the named cluster of the session's namespace. A cluster
// that is not found because its namespace does not exist says so, rather than
// sending the user to look for the cluster elsewhere.
func (s *session) getCluster(ctx context.Context, name string) (*v1beta1.Cluster, error) {
	c := &v1beta1.Cluster{}
	err := s.client.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: name}, c)
	if err == nil {
		return c, nil
	}
	if apierrors.IsNotFound(err) {
		if missing, _ := s.namespaceMissing(ctx); missing {
			return nil, &Error{Code: ExitError, Msg: fmt.Sprintf("getting cluster %s/%s: namespace %q does not exist", s.namespace, name, s.namespace),
				Hint: "check -n (default: the context's namespace); k3kcli cluster list -A lists the clusters of every namespace"}
		}
	}
	return nil, apiErr(err, fmt.Sprintf("getting cluster %s/%s", s.namespace, name))
}

// namespaceMissing reports whether the session's namespace is known not to
// exist. A user who may not read namespaces gets false: nothing is known.
func (s *session) namespaceMissing(ctx context.Context) (bool, error) {
	err := s.client.Get(ctx, types.NamespacedName{Name: s.namespace}, &corev1.Namespace{})
	return apierrors.IsNotFound(err), err
}

// ensureNamespace creates the session's namespace unless it exists
// (--create-namespace); it says so when it made it.
func (s *session) ensureNamespace(ctx context.Context, o Options) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.namespace}}
	err := s.client.Create(ctx, ns)
	switch {
	case err == nil:
		fmt.Fprintf(o.Out, "namespace %s created\n", s.namespace)
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	}
	return apiErr(err, "creating namespace "+s.namespace)
}

// missingNamespaceErr explains a create refused because the namespace does
// not exist.
func missingNamespaceErr(c *v1beta1.Cluster) error {
	return &Error{Code: ExitError, Msg: fmt.Sprintf("creating cluster %s/%s: namespace %q does not exist", c.Namespace, c.Name, c.Namespace),
		Hint: "add --create-namespace, or pick an existing namespace with -n"}
}
