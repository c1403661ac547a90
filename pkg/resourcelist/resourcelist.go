// Package resourcelist reads resource lists written as flags and values:
// the controller's --quota-hard and --limit-* flags, k3kcli policy create's
// --quota and --max-limits.
package resourcelist

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Parse parses "name=quantity,name=quantity" into a ResourceList; an empty
// string is an empty list. Negative quantities are refused.
func Parse(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("%q: want name=quantity", part)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%q: negative", part)
		}
		out[corev1.ResourceName(strings.TrimSpace(name))] = q
	}
	return out, nil
}
