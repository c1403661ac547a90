// Package external checks that an external datastore (PostgreSQL, MySQL, etcd,
// NATS), given as the endpoint k3s takes in --datastore-endpoint, accepts a
// connection, and says why when it does not: unreachable, credentials refused,
// TLS failed, or an endpoint k3s cannot use. The server pod runs the check
// before k3s starts (`datastore check-external`), so a wrong password or a
// database that is down becomes a reason on the Cluster, never a k3s crash
// loop, and an empty endpoint never reaches k3s, which would fall back to a
// SQLite file of its own.
//
// Nothing this package returns or prints contains the endpoint's password or
// the endpoint as given: errors name the host and port and the server's own
// words (PostgreSQL and MySQL error messages name the user, never the
// password), with any password found in them replaced.
package external

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Reason says why a check failed. The values are CamelCase, stable, and used
// as condition reasons on the Cluster (prefixed there with ExternalDatastore).
type Reason string

const (
	// Unreachable: no connection (refused, no route, name not found, timeout).
	Unreachable Reason = "Unreachable"
	// AuthFailed: the server refused the credentials.
	AuthFailed Reason = "AuthFailed"
	// TLSFailed: the TLS handshake or certificate verification failed, or
	// the TLS files could not be used.
	TLSFailed Reason = "TLSFailed"
	// InvalidEndpoint: the endpoint is empty or not one k3s can use.
	InvalidEndpoint Reason = "InvalidEndpoint"
	// Failed: anything else (the message says what).
	Failed Reason = "Failed"
)

// Exit codes of `datastore check-external`, one per Reason, so the controller
// can read the reason from the container's status. 0 is success.
var exitCodes = map[Reason]int32{Failed: 10, Unreachable: 11, AuthFailed: 12, TLSFailed: 13, InvalidEndpoint: 14}

// ExitCode is the check command's exit code for r.
func ExitCode(r Reason) int32 {
	if c, ok := exitCodes[r]; ok {
		return c
	}
	return exitCodes[Failed]
}

// ReasonForExitCode maps an exit code back; ok is false for codes the check
// never uses (e.g. a container killed by a signal).
func ReasonForExitCode(code int32) (Reason, bool) {
	for r, c := range exitCodes {
		if c == code {
			return r, true
		}
	}
	return "", false
}

// Error is a failed check.
type Error struct {
	Reason Reason
	// Message is safe to show: no password, no full endpoint.
	Message string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Message }

// Target is what to check: the endpoint and TLS files k3s is given.
type Target struct {
	// Endpoint as in k3s's --datastore-endpoint.
	Endpoint string
	// CAFile, CertFile, KeyFile: k3s's --datastore-cafile/-certfile/-keyfile;
	// empty when not given.
	CAFile, CertFile, KeyFile string
	// Timeout bounds each connection attempt. Default 5s.
	Timeout time.Duration
}

// Check connects to t once. It returns nil when the datastore accepted the
// connection (for SQL databases: logged in, and either the database exists or
// the user may reach the server's default database, from which k3s creates
// it), or an *Error.
func Check(ctx context.Context, t Target) error {
	if t.Timeout <= 0 {
		t.Timeout = 5 * time.Second
	}
	endpoint := t.Endpoint
	if strings.TrimSpace(endpoint) == "" {
		return &Error{InvalidEndpoint, "the endpoint is empty: k3s would fall back to a SQLite file inside the server pod"}
	}
	if strings.ContainsAny(endpoint, " \t\r\n") {
		// k3s takes the value as it is; a Secret written with `echo` ends in
		// a newline that becomes part of the database name.
		return &Error{InvalidEndpoint, "the endpoint contains white space (a trailing newline?)"}
	}
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok || rest == "" {
		return &Error{InvalidEndpoint, "the endpoint has no scheme: k3s would take it as a SQLite file inside the server pod"}
	}
	var err error
	switch scheme {
	case "postgres", "postgresql":
		err = checkPostgres(ctx, t, "postgres://"+rest)
	case "mysql":
		err = checkMySQL(ctx, t, rest)
	case "http", "https":
		err = checkEtcd(ctx, t, endpoint)
	case "nats":
		err = checkTCP(ctx, t, rest)
	default:
		return &Error{InvalidEndpoint, fmt.Sprintf("scheme %q is not an external datastore k3k supports (postgres, postgresql, mysql, http, https, nats)", scheme)}
	}
	if err == nil {
		return nil
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Failed, err.Error()}
	}
	e.Message = redact(e.Message, endpoint)
	return e
}

// checkPostgres opens the connection the way kine does (pkg/drivers/pgsql):
// database "kubernetes" when the URL names none, lower-cased; TLS files as
// sslrootcert/sslcert/sslkey with sslmode verify-full unless the URL says
// otherwise.
func checkPostgres(ctx context.Context, t Target, dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return &Error{InvalidEndpoint, "the postgres endpoint is not a URL"}
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/kubernetes"
	}
	u.Path = strings.ToLower(u.Path)
	q := u.Query()
	tlsParam := func(key, file string) {
		if file != "" && !q.Has(key) {
			q.Set(key, file)
			if !q.Has("sslmode") {
				q.Set("sslmode", "verify-full")
			}
		}
	}
	tlsParam("sslrootcert", t.CAFile)
	tlsParam("sslcert", t.CertFile)
	tlsParam("sslkey", t.KeyFile)
	u.RawQuery = q.Encode()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		if hasTLSFile(t) && strings.Contains(err.Error(), "ssl") {
			return &Error{TLSFailed, "the TLS files cannot be used: " + err.Error()}
		}
		return &Error{InvalidEndpoint, "the postgres endpoint cannot be parsed: " + err.Error()}
	}
	where := fmt.Sprintf("PostgreSQL at %s", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)))
	err = pgPing(ctx, cfg, t.Timeout)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "3D000" {
		// The database does not exist yet: kine creates it from the server's
		// default database, so reaching that one is enough.
		admin := cfg.Copy()
		admin.Database = "postgres"
		err = pgPing(ctx, admin, t.Timeout)
	}
	if err == nil {
		return nil
	}
	if errors.As(err, &pgErr) {
		reason := Failed
		// Class 28: invalid authorization specification (28000, 28P01).
		if strings.HasPrefix(pgErr.Code, "28") {
			reason = AuthFailed
		}
		return &Error{reason, fmt.Sprintf("%s: %s (SQLSTATE %s)", where, pgErr.Message, pgErr.Code)}
	}
	return classify(where, err)
}

func pgPing(ctx context.Context, cfg *pgx.ConnConfig, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// checkMySQL opens the connection as kine does (pkg/drivers/mysql): the DSN
// after mysql://, database "kubernetes" when it names none, TLS from the files.
func checkMySQL(ctx context.Context, t Target, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return &Error{InvalidEndpoint, "the mysql endpoint cannot be parsed (user:password@tcp(host:port)/database)"}
	}
	if cfg.DBName == "" {
		cfg.DBName = "kubernetes"
	}
	if hasTLSFile(t) {
		tc, err := tlsConfig(t)
		if err != nil {
			return err
		}
		tc.ServerName, _, _ = net.SplitHostPort(cfg.Addr)
		if err := mysql.RegisterTLSConfig("k3k-check", tc); err != nil {
			return &Error{TLSFailed, "the TLS files cannot be used: " + err.Error()}
		}
		cfg.TLSConfig = "k3k-check"
	}
	cfg.Timeout = t.Timeout
	where := "MySQL at " + cfg.Addr
	ping := func(c *mysql.Config) error {
		connector, err := mysql.NewConnector(c)
		if err != nil {
			return err
		}
		db := sql.OpenDB(connector)
		defer db.Close()
		ctx, cancel := context.WithTimeout(ctx, t.Timeout)
		defer cancel()
		return db.PingContext(ctx)
	}
	err = ping(cfg)
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == 1049 {
		// Unknown database: kine creates it once connected without one.
		noDB := cfg.Clone()
		noDB.DBName = ""
		err = ping(noDB)
	}
	if err == nil {
		return nil
	}
	if errors.As(err, &myErr) {
		reason := Failed
		if myErr.Number == 1045 || myErr.Number == 1044 {
			reason = AuthFailed
		}
		return &Error{reason, fmt.Sprintf("%s: %s (error %d)", where, myErr.Message, myErr.Number)}
	}
	return classify(where, err)
}

// checkEtcd asks the endpoints for their member list, as k3s's etcd client
// would connect.
func checkEtcd(ctx context.Context, t Target, endpoints string) error {
	eps := strings.Split(endpoints, ",")
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: t.Timeout, Logger: zap.NewNop()}
	if hasTLSFile(t) || strings.HasPrefix(endpoints, "https://") {
		tc, err := tlsConfig(t)
		if err != nil {
			return err
		}
		cfg.TLS = tc
	}
	where := "etcd at " + hostsOf(eps)
	if cfg.TLS != nil {
		// etcd's client retries a failed handshake until its deadline and
		// then only says so; one handshake of our own says why.
		if err := handshake(ctx, eps, cfg.TLS, t.Timeout); err != nil {
			return classify(where, err)
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return classify(where, err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	if _, err := cli.MemberList(ctx); err != nil {
		if strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "permission denied") {
			return &Error{AuthFailed, where + ": " + err.Error()}
		}
		if strings.Contains(err.Error(), "x509") || strings.Contains(err.Error(), "tls:") {
			return &Error{TLSFailed, where + ": " + err.Error()}
		}
		return classify(where, err)
	}
	return nil
}

// handshake completes a TLS handshake with the first endpoint that answers;
// it returns the last error when none does.
func handshake(ctx context.Context, endpoints []string, tc *tls.Config, timeout time.Duration) error {
	var last error
	for _, e := range endpoints {
		u, err := url.Parse(strings.TrimSpace(e))
		if err != nil {
			last = &Error{InvalidEndpoint, "an etcd endpoint is not a URL"}
			continue
		}
		c := tc.Clone()
		if c.ServerName == "" {
			c.ServerName = u.Hostname()
		}
		c.NextProtos = []string{"h2"}
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: c}
		conn, err := d.DialContext(ctx, "tcp", u.Host)
		if err == nil {
			return conn.Close()
		}
		last = err
	}
	return last
}

// checkTCP only dials: enough to tell a NATS server that is not there.
func checkTCP(ctx context.Context, t Target, rest string) error {
	host := rest
	if at := strings.LastIndex(host, "@"); at >= 0 {
		host = host[at+1:]
	}
	host, _, _ = strings.Cut(host, "/")
	host, _, _ = strings.Cut(host, "?")
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "4222")
	}
	d := net.Dialer{Timeout: t.Timeout}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return classify("NATS at "+host, err)
	}
	return conn.Close()
}

// classify sorts the errors every driver shares: the network and TLS.
func classify(where string, err error) error {
	var (
		dnsErr   *net.DNSError
		opErr    *net.OpError
		unknown  x509.UnknownAuthorityError
		hostErr  x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		recHdr   tls.RecordHeaderError
		alertErr tls.AlertError
	)
	switch {
	case errors.As(err, &dnsErr):
		return &Error{Unreachable, fmt.Sprintf("%s: the name %s does not resolve", where, dnsErr.Name)}
	case errors.As(err, &unknown), errors.As(err, &hostErr), errors.As(err, &invalid), errors.As(err, &verify),
		errors.As(err, &recHdr), errors.As(err, &alertErr):
		return &Error{TLSFailed, fmt.Sprintf("%s: %v", where, innermost(err))}
	case errors.As(err, &opErr):
		return &Error{Unreachable, fmt.Sprintf("%s: %v", where, opErr)}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return &Error{Unreachable, fmt.Sprintf("%s: no answer in time", where)}
	}
	return &Error{Failed, fmt.Sprintf("%s: %v", where, err)}
}

// innermost is the last error in err's chain: the cause without the drivers'
// wrappings, which may name the user and database.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

func hasTLSFile(t Target) bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// tlsConfig builds the client TLS of the etcd and MySQL checks from the files.
func tlsConfig(t Target) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &Error{TLSFailed, "reading the CA file: " + err.Error()}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &Error{TLSFailed, "the CA file holds no PEM certificate"}
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, &Error{TLSFailed, "loading the client certificate and key: " + err.Error()}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func hostsOf(endpoints []string) string {
	var hosts []string
	for _, e := range endpoints {
		if u, err := url.Parse(strings.TrimSpace(e)); err == nil {
			hosts = append(hosts, u.Host)
		}
	}
	return strings.Join(hosts, ",")
}

// redact removes the endpoint and any password in it from msg.
func redact(msg, endpoint string) string {
	if endpoint != "" {
		msg = strings.ReplaceAll(msg, endpoint, "<endpoint>")
	}
	for _, pw := range passwords(endpoint) {
		msg = strings.ReplaceAll(msg, pw, "<redacted>")
	}
	return msg
}

// passwords finds the password of a URL-style endpoint (postgres://u:p@h)
// and of a MySQL DSN (mysql://u:p@tcp(h)/db), raw and URL-decoded.
func passwords(endpoint string) []string {
	_, rest, ok := strings.Cut(endpoint, "://")
	if !ok {
		return nil
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return nil
	}
	_, pw, ok := strings.Cut(rest[:at], ":")
	if !ok || pw == "" {
		return nil
	}
	out := []string{pw}
	if dec, err := url.PathUnescape(pw); err == nil && dec != pw {
		out = append(out, dec)
	}
	return out
}
