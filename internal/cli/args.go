package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
)

// maxNameLength keeps every object name derived from a cluster name valid: the
// server StatefulSet k3k-NAME-server gets pods whose controller-revision-hash
// label is the StatefulSet name plus 11 characters, and labels end at 63.
const maxNameLength = 63 - len("k3k--server") - 11

// noArgs rejects positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("run "+cmd.CommandPath()+" --help", "unexpected argument %q", args[0])
	}
	return nil
}

// oneName requires exactly one argument: a valid cluster name.
func oneName(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usageErr("usage: "+cmd.UseLine(), "missing the cluster NAME")
	case len(args) > 1:
		return usageErr("usage: "+cmd.UseLine(), "expected one cluster NAME, got %d arguments", len(args))
	}
	return validateName(args[0])
}

func validateName(name string) error {
	if msgs := validation.IsDNS1035Label(name); len(msgs) > 0 {
		return usageErr("use lower-case letters, digits and '-', starting with a letter, e.g. dev-1",
			"invalid cluster name %q: %s", name, strings.Join(msgs, "; "))
	}
	if len(name) > maxNameLength {
		return usageErr(fmt.Sprintf("use at most %d characters", maxNameLength),
			"cluster name %q is too long: the names k3k derives from it would exceed Kubernetes' 63-character limit", name)
	}
	return nil
}

// isCobraUsage reports whether err is one of cobra's own usage errors, which
// are plain errors without a type.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown command", "unknown flag", "unknown shorthand", "required flag", "invalid argument", "accepts ", "requires "} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}
