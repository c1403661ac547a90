//go:build !cgo

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	kinesqlite "github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/query"
	"github.com/prometheus/client_golang/prometheus"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/k3k-io/k3k/pkg/datastore/sqlite/batchlog"
	"github.com/k3k-io/k3k/pkg/datastore/stmtcache"
)

// kineDialect runs kine's own SQLite driver on a new database in a temporary
// dir, with the DSN our server gives it, and returns kine's dialect (whose DB
// is kine's own handle) and the DSN our connections to it use (moderncDSN).
func kineDialect(t *testing.T) (*generic.Generic, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wg := &sync.WaitGroup{}
	t.Cleanup(func() { cancel(); wg.Wait() })
	cfg, err := Config{DataDir: t.TempDir()}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	dsn := filepath.Join(cfg.DataDir, DatabaseFile) + "?" + kineParams(cfg)
	_, dialect, err := kinesqlite.NewVariant(ctx, wg, "sqlite3", &drivers.Config{DataSourceName: dsn})
	if err != nil {
		t.Fatal(err)
	}
	ours, err := moderncDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return dialect, ours
}

// openPlain opens dsn with the pure-Go driver as it is, without stmtcache.
func openPlain(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func pragmas(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, p := range []string{"journal_mode", "synchronous", "busy_timeout", "wal_autocheckpoint", "temp_store", "cache_size", "mmap_size"} {
		var v string
		if err := db.QueryRow("PRAGMA " + p).Scan(&v); err != nil {
			t.Fatalf("PRAGMA %s: %v", p, err)
		}
		got[p] = v
	}
	return got
}

func TestOurConnectionsAreSetUpLikeKines(t *testing.T) {
	dialect, ours := kineDialect(t)
	db := openPlain(t, ours)
	want, got := pragmas(t, dialect.DB), pragmas(t, db)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("our connection's settings %v, kine's %v", got, want)
	}
	// The settings kineParams asks for did arrive (not both at a default).
	if want["temp_store"] != "2" || want["wal_autocheckpoint"] != "0" || want["journal_mode"] != "wal" {
		t.Errorf("kine's connection lacks the settings of kineParams: %v", want)
	}
	// _txlock=immediate: a transaction takes the write lock at BEGIN.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	other, err := dialect.DB.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(context.Background(), "PRAGMA busy_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(context.Background(), `INSERT INTO kine (name) VALUES ('x')`); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Errorf("a write beside our open transaction: %v, want database is locked", err)
	}
}

func TestAnUnknownDatabaseParameterIsRefused(t *testing.T) {
	if _, err := moderncDSN("/db?_foreign_keys=1"); err == nil || !strings.Contains(err.Error(), "_foreign_keys") {
		t.Errorf("got %v, want an error naming _foreign_keys", err)
	}
}

func TestPlanOnceTurnsTheGuaranteeOn(t *testing.T) {
	base, err := msqlite.NewConnector("file:" + filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := base.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	read := func() int32 {
		v, err := dbConfig(conn, sqlite3.SQLITE_DBCONFIG_ENABLE_QPSG, -1)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if read() != 0 {
		t.Fatal("a new connection already has the guarantee on: the test shows nothing")
	}
	if err := planOnce(conn); err != nil {
		t.Fatal(err)
	}
	if read() != 1 {
		t.Error("planOnce left the guarantee off")
	}
	if _, err := dbConfig(&stmtcache.Conn{}, 0, 0); err != errNoHandle {
		t.Errorf("another connection type: %v, want errNoHandle", err)
	}
}

// kineQueries are every query text kine's SQLite dialect holds, by field name.
func kineQueries(d *generic.Generic) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(d).Elem()
	for i := range v.NumField() {
		if q, ok := v.Field(i).Interface().(*query.Named); ok && q != nil {
			out[v.Type().Field(i).Name] = q.Query
		}
	}
	return out
}

// TestTheQueryPlansStayTheSame compares, for every kine query, SQLite's plan
// with the planner's stability guarantee on and off, with the same values
// bound (keys, revisions and all-integer), so that planOnce cannot make a
// query slower by planning it without its values.
func TestTheQueryPlansStayTheSame(t *testing.T) {
	dialect, ours := kineDialect(t)
	ctx := context.Background()
	plain := openPlain(t, ours)
	base, err := msqlite.NewConnector(ours)
	if err != nil {
		t.Fatal(err)
	}
	once := sql.OpenDB(&stmtcache.Connector{Base: base, OnConnect: planOnce})
	defer once.Close()
	for i := range 200 {
		if _, err := plain.Exec(`INSERT INTO kine (name, created, deleted, create_revision, prev_revision, lease, value, old_value)
			VALUES (?, 1, 0, 0, ?, 0, 'v', '')`, fmt.Sprintf("/registry/pods/p%d", i%50), i); err != nil {
			t.Fatal(err)
		}
	}
	plan := func(db *sql.DB, q string, args []any) string {
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		return strings.Join(lines, "\n")
	}
	queries := kineQueries(dialect)
	if len(queries) < 20 {
		t.Fatalf("found %d kine queries, want the dialect's two dozen", len(queries))
	}
	// The v2 backend's own statements run through the same connections.
	for name, q := range batchlog.Statements(dialect) {
		queries[name] = q
	}
	for name, q := range queries {
		n := strings.Count(q, "?")
		for _, vals := range [][]any{{"/registry/pods/p1", int64(7)}, {int64(1)}, {"compact_rev_key", int64(0)}} {
			args := make([]any, n)
			for i := range args {
				args[i] = vals[i%len(vals)]
			}
			if a, b := plan(plain, q, args), plan(once, q, args); a != b {
				t.Errorf("%s with %v: plan changes with planOnce\nwithout:\n%s\nwith:\n%s", name, vals, a, b)
			}
		}
	}
}

// kine's pool statistics must describe the handle kine's queries use, not
// the one closed after its set-up.
func TestThePoolMetricsDescribeTheHandleInUse(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := openT(t, Config{DataDir: t.TempDir(), MetricsRegisterer: reg})
	ctx := testContext(t)
	c := etcdClient(t, s.Endpoint())
	for i := range 5 {
		if err := create(ctx, c, fmt.Sprintf("/registry/m%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "go_sql_open_connections" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "db_name" && l.GetValue() == "kine" {
					if v := m.GetGauge().GetValue(); v < 1 {
						t.Errorf("go_sql_open_connections{db_name=kine} = %v after five writes, want at least 1", v)
					}
					return
				}
			}
		}
	}
	t.Fatal("no go_sql_open_connections{db_name=kine}")
}
