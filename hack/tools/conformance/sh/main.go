// Command sh is /bin/sh of the conformance suite's busybox stand-in image
// (hack/conformance.sh): busybox's ash, as in upstream's busybox image, so
// that its messages are the ones the suite expects ("/bin/sh: can't create
// /file: Read-only file system"), except when the environment holds a
// variable whose name is not a shell identifier (data-1, from envFrom).
// Debian's busybox 1.35 ash drops those before it runs anything; upstream's
// image keeps them, and the suite checks with `sh -c env`. bash keeps them
// too, so bash runs then.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

func main() {
	path := "/bin/busybox" // its applet is chosen by argv[0]'s base name: sh
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !identifier(name) {
			path = "/bin/bash"
			break
		}
	}
	// argv[0] stays as called, so messages begin with it, as a shell's do.
	argv := append([]string{os.Args[0]}, os.Args[1:]...)
	if strings.HasSuffix(path, "busybox") && !strings.HasSuffix(os.Args[0], "sh") {
		argv[0] = "sh"
	}
	err := syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "sh: %s: %v\n", path, err)
	os.Exit(127)
}

// identifier says whether name is a shell variable name.
func identifier(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		if r != '_' && !('a' <= r && r <= 'z') && !('A' <= r && r <= 'Z') && (i == 0 || !('0' <= r && r <= '9')) {
			return false
		}
	}
	return true
}
