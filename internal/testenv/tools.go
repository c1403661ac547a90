package testenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// ToolsDir is where the upstream binaries are cached: $K3K_TOOLS_DIR, else
// $KUBEBUILDER_ASSETS (the Makefile points both at the same place), else
// ~/.cache/k3k/tools.
func ToolsDir() string {
	for _, env := range []string{"K3K_TOOLS_DIR", "KUBEBUILDER_ASSETS"} {
		if dir := os.Getenv(env); dir != "" {
			return dir
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "k3k", "tools")
}

// Binary returns the path of an upstream command in ToolsDir, or an error that
// names the make target which builds it.
func Binary(name string) (string, error) {
	path := filepath.Join(ToolsDir(), name)
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s not found in %s: run `make tools` (or set K3K_TOOLS_DIR)", name, ToolsDir())
	}
	return path, nil
}
