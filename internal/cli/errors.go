package cli

import (
	"errors"
	"fmt"
	"net"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/clientcmd"
)

// Exit codes. They are part of the CLI's interface: scripts match on them.
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitError: the command failed, e.g. the API server refused or could not
	// be reached, or the cluster does not exist.
	ExitError = 1
	// ExitUsage: bad arguments, flags or values; nothing was changed.
	ExitUsage = 2
	// ExitTimeout: the cluster was created but did not become ready in --timeout.
	// It keeps starting in the background.
	ExitTimeout = 3
	// ExitClusterFailed: the controller reported the cluster as Failed.
	ExitClusterFailed = 4
)

// Error is a failure the user can act on: what went wrong, a hint of what to do
// about it, and the exit code.
type Error struct {
	Code int
	Msg  string
	Hint string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// usageErr is a bad argument, flag or value.
func usageErr(hint, format string, args ...any) *Error {
	return &Error{Code: ExitUsage, Msg: fmt.Sprintf(format, args...), Hint: hint}
}

// ExitCode is the process exit code for err: the Error's code, ExitOK for nil,
// ExitError otherwise.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitError
}

// FormatError renders err as the single line k3kcli prints: the message, then
// the hint when there is one. Line breaks inside messages are folded so the
// result is always one line.
func FormatError(err error) string {
	msg := "error: " + err.Error()
	var e *Error
	if errors.As(err, &e) && e.Hint != "" {
		msg += " (hint: " + e.Hint + ")"
	}
	return strings.Join(strings.Fields(msg), " ")
}

// apiErr turns an error from the API server into an Error with a hint. action
// says what was being done ("creating cluster default/demo").
func apiErr(err error, action string) error {
	if err == nil {
		return nil
	}
	e := &Error{Code: ExitError, Msg: action, Err: err}
	var status apierrors.APIStatus
	switch {
	case meta.IsNoMatchError(err):
		e.Err = errors.New("the API server does not know clusters.k3k.io")
		e.Hint = "install k3k first: helm install k3k charts/k3k -n k3k-system --create-namespace"
	case apierrors.IsNotFound(err):
		e.Hint = "list clusters with: k3kcli cluster list -A"
	case apierrors.IsAlreadyExists(err):
		e.Hint = "choose another name, or fetch the existing cluster's kubeconfig with: k3kcli kubeconfig get NAME"
	case apierrors.IsInvalid(err):
		e.Code = ExitUsage
		if errors.As(err, &status) {
			e.Err = errors.New(invalidCauses(status))
		}
		e.Hint = "fix the rejected value; the command's --help lists its flags"
	case apierrors.IsForbidden(err):
		e.Hint = "your kubeconfig's user lacks the rights; ask an admin or use --kubeconfig/--context for another user"
	case apierrors.IsUnauthorized(err):
		e.Hint = "your credentials were refused; refresh them or pick another --kubeconfig/--context"
	case isUnreachable(err):
		e.Hint = "check that the host cluster is reachable with this kubeconfig (--kubeconfig, --context, $KUBECONFIG)"
	}
	return e
}

// invalidCauses lists what admission rejected, without the object dump some
// API errors carry.
func invalidCauses(status apierrors.APIStatus) string {
	s := status.Status()
	if s.Details == nil || len(s.Details.Causes) == 0 {
		return s.Message
	}
	parts := make([]string, 0, len(s.Details.Causes))
	for _, c := range s.Details.Causes {
		if c.Field != "" && !strings.Contains(c.Message, c.Field+":") {
			parts = append(parts, c.Field+": "+c.Message)
		} else {
			parts = append(parts, c.Message)
		}
	}
	return strings.Join(parts, "; ")
}

func isUnreachable(err error) bool {
	var netErr net.Error
	var opErr *net.OpError
	return errors.As(err, &netErr) || errors.As(err, &opErr) || strings.Contains(err.Error(), "connection refused")
}

// configErr explains a kubeconfig that could not be loaded. The error from
// clientcmd names files and contexts, never credentials.
func configErr(err error) error {
	e := &Error{Code: ExitError, Msg: "loading the host cluster's kubeconfig", Err: err}
	if clientcmd.IsEmptyConfig(err) {
		e.Err = errors.New("no kubeconfig found")
		e.Hint = "pass --kubeconfig PATH or set $KUBECONFIG to the host cluster's kubeconfig"
	} else {
		e.Hint = "check --kubeconfig, --context and $KUBECONFIG"
	}
	return e
}
