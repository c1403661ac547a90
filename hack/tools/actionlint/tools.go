//go:build tools

// Package actionlint only records that this module pins actionlint, which `make verify` runs over .github/workflows.
package actionlint

import _ "github.com/rhysd/actionlint/cmd/actionlint"
