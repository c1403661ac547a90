//go:build tools

// Package controllergen only records which generator this module pins.
package controllergen

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
