package external

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestCheckSaysWhyWithoutTellingTheSecret runs each check against real
// sockets: a closed port, a name that does not resolve, a TLS server whose
// certificate the client cannot trust. The reasons differ; the password never
// appears in what is returned.
func TestCheckSaysWhyWithoutTellingTheSecret(t *testing.T) {
	closed := closedPort(t)
	tlsServer := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsServer.EnableHTTP2 = true // etcd's client speaks gRPC: h2 only
	tlsServer.StartTLS()
	defer tlsServer.Close()
	tlsAddr := strings.TrimPrefix(tlsServer.URL, "https://")
	const password = "s3cr3t-Pa55"

	cases := []struct {
		name       string
		endpoint   string
		wantReason Reason
		wantIn     string
	}{
		{"an empty endpoint would make k3s use SQLite", "", InvalidEndpoint, "k3s would fall back to a SQLite file"},
		{"blanks are empty too", "   ", InvalidEndpoint, "k3s would fall back to a SQLite file"},
		{"a trailing newline would be part of the database name", "postgres://k3s:" + password + "@" + closed + "/k3s\n", InvalidEndpoint, "white space"},
		{"no scheme is a SQLite path to k3s", "db.example:5432/k3s", InvalidEndpoint, "no scheme"},
		{"sqlite is not external", "sqlite:///var/lib/rancher/k3s/server/db/state.db", InvalidEndpoint, `scheme "sqlite"`},
		{"postgres on a closed port is unreachable", "postgres://k3s:" + password + "@" + closed + "/k3s?sslmode=disable", Unreachable, "PostgreSQL at " + closed},
		{"postgresql is the same driver", "postgresql://k3s:" + password + "@" + closed + "/k3s?sslmode=disable", Unreachable, "PostgreSQL at " + closed},
		{"postgres at a name that does not resolve is unreachable", "postgres://k3s:" + password + "@db.invalid:5432/k3s", Unreachable, "db.invalid"},
		{"mysql on a closed port is unreachable", "mysql://k3s:" + password + "@tcp(" + closed + ")/k3s", Unreachable, "MySQL at " + closed},
		{"a mysql DSN without tcp() cannot be parsed", "mysql://k3s:" + password + "@" + closed + "/k3s", InvalidEndpoint, "cannot be parsed"},
		{"etcd on a closed port is unreachable", "http://" + closed, Unreachable, "etcd at " + closed},
		{"etcd behind a certificate nobody signed fails TLS", "https://" + tlsAddr, TLSFailed, "etcd at " + tlsAddr},
		{"nats on a closed port is unreachable", "nats://" + closed, Unreachable, "NATS at " + closed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(context.Background(), Target{Endpoint: tc.endpoint, Timeout: 2 * time.Second})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Check = %v, want an *Error with reason %s", err, tc.wantReason)
			}
			if e.Reason != tc.wantReason || !strings.Contains(e.Message, tc.wantIn) {
				t.Fatalf("Check = %s: %q, want %s with ...%s...", e.Reason, e.Message, tc.wantReason, tc.wantIn)
			}
			if strings.Contains(e.Error(), password) || (tc.endpoint != "" && strings.TrimSpace(tc.endpoint) != "" && strings.Contains(e.Error(), tc.endpoint)) {
				t.Fatalf("the error gives the secret away: %q", e.Error())
			}
		})
	}
}

// TestCheckRefusesUnusableTLSFiles: files that are named but cannot be read
// are a TLS failure, found before any connection.
func TestCheckRefusesUnusableTLSFiles(t *testing.T) {
	err := Check(context.Background(), Target{Endpoint: "https://" + closedPort(t), CAFile: t.TempDir() + "/missing-ca.crt"})
	var e *Error
	if !errors.As(err, &e) || e.Reason != TLSFailed || !strings.Contains(e.Message, "reading the CA file") {
		t.Fatalf("Check = %v, want TLSFailed reading the CA file", err)
	}
}

// TestCheckDoesNotAcceptASilentListener: an open port is not a datastore. A
// listener that accepts and never answers is unreachable within the timeout,
// never accepted: the etcd check wants a member list.
func TestCheckDoesNotAcceptASilentListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	err = Check(context.Background(), Target{Endpoint: "http://" + l.Addr().String(), Timeout: time.Second})
	var e *Error
	if !errors.As(err, &e) || e.Reason != Unreachable {
		t.Fatalf("Check = %v, want Unreachable", err)
	}
}

// TestExitCodesRoundTrip: the controller reads the reason back from the
// init container's exit code.
func TestExitCodesRoundTrip(t *testing.T) {
	for _, r := range []Reason{Failed, Unreachable, AuthFailed, TLSFailed, InvalidEndpoint} {
		code := ExitCode(r)
		if code == 0 || code == 1 {
			t.Fatalf("%s has exit code %d, which other failures use", r, code)
		}
		if got, ok := ReasonForExitCode(code); !ok || got != r {
			t.Fatalf("ReasonForExitCode(%d) = %s, %v; want %s", code, got, ok, r)
		}
	}
	if _, ok := ReasonForExitCode(137); ok {
		t.Fatal("137 (killed) is not a check result")
	}
}
