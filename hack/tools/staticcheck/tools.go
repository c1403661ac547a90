//go:build tools

// Package staticcheck only records which linter this module pins.
package staticcheck

import _ "honnef.co/go/tools/cmd/staticcheck"
