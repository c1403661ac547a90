//go:build tools

// Package helm only records which Helm CLI this module pins.
package helm

import _ "helm.sh/helm/v3/cmd/helm"
