//go:build !cgo

package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"sync"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"modernc.org/libc"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/k3k-io/k3k/pkg/datastore/stmtcache"
)

// reuseStatements gives kine a database handle whose connections keep their
// prepared statements (stmtcache) and plan them once (planOnce), in place of
// the one kine's driver opened and set the schema up with. Measured on kine's
// insert with the pure-Go SQLite: 200 µs prepared anew, 120 µs reused.
//
// The connections are opened with the settings kine's own get (moderncDSN),
// and the pool is sized as kine sizes its own.
func reuseStatements(ctx context.Context, wg *sync.WaitGroup, dialect *generic.Generic, cfg *drivers.Config) error {
	dsn, err := moderncDSN(cfg.DataSourceName)
	if err != nil {
		return err
	}
	base, err := msqlite.NewConnector(dsn)
	if err != nil {
		return err
	}
	db := sql.OpenDB(&stmtcache.Connector{Base: base, OnConnect: planOnce})
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return err
	}
	pool := cfg.ConnectionPoolConfig
	if pool.MaxIdle == 0 {
		pool.MaxIdle = kineMaxIdleConns
	}
	db.SetMaxIdleConns(max(pool.MaxIdle, 0))
	db.SetMaxOpenConns(pool.MaxOpen)
	db.SetConnMaxLifetime(pool.MaxLifetime)
	db.SetConnMaxIdleTime(pool.MaxIdleTime)

	kines := dialect.DB
	// Nothing has used kine's handle since its schema set-up; kine closes it
	// again when ctx ends, which does nothing the second time.
	if err := kines.Close(); err != nil {
		_ = db.Close()
		return err
	}
	// kine registered the pool statistics of its handle (go_sql_*, db_name
	// "kine"); they describe this one from now on. Unregister finds kine's
	// collector by its metric descriptions, which a collector of the same
	// name has too.
	if reg := cfg.MetricsRegisterer; reg != nil {
		reg.Unregister(collectors.NewDBStatsCollector(kines, "kine"))
		if err := reg.Register(collectors.NewDBStatsCollector(db, "kine")); err != nil {
			_ = db.Close()
			return fmt.Errorf("registering the database pool metrics: %w", err)
		}
	}
	dialect.DB = db
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		_ = db.Close()
	}()
	return nil
}

// kineMaxIdleConns is kine's default for idle connections kept open.
const kineMaxIdleConns = 20

// moderncDSN turns the DSN kine's SQLite driver is given (see kineParams) into
// the modernc.org/sqlite DSN for our connections, with the same settings as
// kine's own. modernc.org/sqlite takes mattn/go-sqlite3's parameter names
// itself (kine rewrites them as _pragma values, in random order); given as
// they are, busy_timeout is applied before any other setting, so that setting
// the journal mode on a new connection waits for a lock instead of failing. A
// parameter it does not know is an error, so that a new one in kineParams
// cannot be silently left out.
func moderncDSN(kineDSN string) (string, error) {
	path, params, _ := strings.Cut(kineDSN, "?")
	in, err := url.ParseQuery(params)
	if err != nil {
		return "", fmt.Errorf("parsing the database parameters: %w", err)
	}
	out := url.Values{}
	for key, vals := range in {
		switch {
		case key == "_journal_mode" || key == "_synchronous" || key == "_busy_timeout" || key == "_pragma" || key == "_txlock":
			out[key] = vals
		case strings.HasPrefix(key, "_kine_"):
			// kine's own switches, not SQLite's.
		default:
			return "", fmt.Errorf("database parameter %q has no translation for modernc.org/sqlite", key)
		}
	}
	return "file:" + path + "?" + out.Encode(), nil
}

// planOnce turns on SQLite's query planner stability guarantee
// (SQLITE_DBCONFIG_ENABLE_QPSG) on conn. Without it SQLite marks several of
// kine's statements, every one with `(SELECT MAX(id) FROM kine WHERE name =
// ?)` among them, to be planned again whenever a new value is bound: a kept
// statement would then be parsed on every run all the same. With it a
// statement keeps the plan made without bound values.
// TestTheQueryPlansStayTheSame checks that kine's queries get the same plans.
func planOnce(conn driver.Conn) error {
	_, err := dbConfig(conn, sqlite3.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
	return err
}

// errNoHandle: the connection is not the modernc.org/sqlite one this was
// written against.
var errNoHandle = errors.New("the SQLite handle of the connection is not reachable (modernc.org/sqlite changed its connection type?)")

// dbConfig calls sqlite3_db_config(db, op, onoff, &result) on the SQLite
// handle of conn and returns result (the setting after the call; onoff -1
// only reads it). modernc.org/sqlite keeps the handle in its unexported
// connection type and offers no way to reach this call, so the handle and
// the C runtime state are read by reflection. The fields are checked by name
// and type; when they change, every connection fails to open with
// errNoHandle, which the tests catch before a release does.
func dbConfig(conn driver.Conn, op, onoff int32) (int32, error) {
	v := reflect.ValueOf(conn)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0, errNoHandle
	}
	db, tlsField := v.Elem().FieldByName("db"), v.Elem().FieldByName("tls")
	if !db.IsValid() || db.Kind() != reflect.Uintptr || !tlsField.IsValid() || tlsField.Type() != reflect.TypeFor[*libc.TLS]() {
		return 0, errNoHandle
	}
	tls := (*libc.TLS)(tlsField.UnsafePointer())
	// The variadic arguments (int onoff, int *result) go in a C va_list, one
	// 8-byte slot each; result gets 4 bytes of its own after them.
	buf := libc.Xmalloc(tls, 24)
	if buf == 0 {
		return 0, errors.New("sqlite3_db_config: out of memory")
	}
	defer libc.Xfree(tls, buf)
	result := buf + 16
	if rc := sqlite3.Xsqlite3_db_config(tls, uintptr(db.Uint()), op, libc.VaList(buf, onoff, result)); rc != sqlite3.SQLITE_OK {
		return 0, fmt.Errorf("sqlite3_db_config(%d): result code %d", op, rc)
	}
	return int32(binary.NativeEndian.Uint32(libc.GoBytes(result, 4))), nil
}
