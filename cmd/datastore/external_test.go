package main

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckExternalExitsWithTheReason runs the built binary as the server
// pod's init container runs it: the endpoint in the environment, the reason
// as exit code and termination message, the password nowhere.
func TestCheckExternalExitsWithTheReason(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	const password = "hunter2-secret"
	cases := []struct {
		name     string
		endpoint string
		wantCode int
		wantIn   string
	}{
		{"no endpoint: k3s would use SQLite", "", 14, "InvalidEndpoint: the endpoint is empty"},
		{"a database that is not there", "postgres://k3s:" + password + "@" + closed + "/k3s?sslmode=disable", 11, "Unreachable: PostgreSQL at " + closed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			term := filepath.Join(t.TempDir(), "termination-log")
			cmd := exec.Command(binary, "check-external", "--retry-for=0s", "--timeout=2s", "--termination-log="+term)
			cmd.Env = append(os.Environ(), "K3S_DATASTORE_ENDPOINT="+tc.endpoint)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != tc.wantCode {
				t.Fatalf("exit %v, want code %d; output:\n%s", err, tc.wantCode, out)
			}
			msg, err := os.ReadFile(term)
			if err != nil {
				t.Fatalf("no termination message: %v", err)
			}
			if !strings.HasPrefix(string(msg), tc.wantIn) {
				t.Fatalf("termination message %q, want it to start with %q", msg, tc.wantIn)
			}
			if strings.Contains(string(out)+string(msg), password) {
				t.Fatalf("the password is shown:\n%s\n%s", out, msg)
			}
		})
	}
}
