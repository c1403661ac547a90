package stmtcache

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	msqlite "modernc.org/sqlite"
)

// open returns a pool of one connection to a new SQLite database through a
// Connector of the given size, with table t(k TEXT PRIMARY KEY, v INTEGER).
func open(t *testing.T, size int) (*sql.DB, *sql.Conn) {
	t.Helper()
	base, err := msqlite.NewConnector("file:" + filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(&Connector{Base: base, Size: size})
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)`); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return db, conn
}

// prepares is how many statements the connection behind conn prepared.
func prepares(t *testing.T, conn *sql.Conn) int {
	t.Helper()
	var n int
	if err := conn.Raw(func(c any) error { n = c.(*Conn).prepares; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// drain reads rows of one text column to the end, closes them (which for a
// statement pushed out of the cache also closes it) and returns the values
// joined by commas.
func drain(t *testing.T, rows *sql.Rows) string {
	t.Helper()
	var got []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := rows.Close(); err != nil {
		t.Fatalf("closing rows: %v", err)
	}
	return strings.Join(got, ",")
}

func exec(t *testing.T, conn *sql.Conn, query string, args ...any) {
	t.Helper()
	if _, err := conn.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func TestAQueryIsPreparedOnceAndRunAgainWithNewArguments(t *testing.T) {
	_, conn := open(t, 0)
	ctx := context.Background()
	before := prepares(t, conn)
	for i, k := range []string{"a", "b", "c"} {
		exec(t, conn, `INSERT INTO t (k, v) VALUES (?, ?)`, k, i)
	}
	for i, k := range []string{"a", "b", "c"} {
		var v int
		if err := conn.QueryRowContext(ctx, `SELECT v FROM t WHERE k = ?`, k).Scan(&v); err != nil || v != i {
			t.Fatalf("v of %s = %d (%v), want %d", k, v, err, i)
		}
	}
	if got := prepares(t, conn) - before; got != 2 {
		t.Errorf("prepared %d statements for two query texts run three times each, want 2", got)
	}
}

func TestTheSameQueryRunsWhileItsRowsAreStillOpen(t *testing.T) {
	_, conn := open(t, 0)
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		exec(t, conn, `INSERT INTO t (k, v) VALUES (?, 1)`, k)
	}
	const q = `SELECT k FROM t WHERE v = ? ORDER BY k`
	outer, err := conn.QueryContext(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for outer.Next() {
		var k string
		if err := outer.Scan(&k); err != nil {
			t.Fatal(err)
		}
		// The kept statement is the outer cursor: this one must be another.
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM (`+q+`)`, 1).Scan(&n); err != nil || n != 2 {
			t.Fatalf("count inside = %d (%v)", n, err)
		}
		inner, err := conn.QueryContext(ctx, q, 1)
		if err != nil {
			t.Fatal(err)
		}
		if inside := drain(t, inner); inside != "a,b" {
			t.Fatalf("inner rows = %s, want a,b", inside)
		}
		got = append(got, k)
	}
	if err := outer.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Fatalf("outer rows = %v, want a,b", got)
	}
	// Released: the next run uses the kept statement again.
	before := prepares(t, conn)
	rows, err := conn.QueryContext(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = rows.Close()
	if prepares(t, conn) != before {
		t.Error("the statement was prepared again after its rows were closed")
	}
}

func TestTheLeastRecentlyUsedStatementGoes(t *testing.T) {
	_, conn := open(t, 2)
	a, b, c := `SELECT 1`, `SELECT 2`, `SELECT 3`
	start := prepares(t, conn)
	for _, q := range []string{a, b, a, c} { // c pushes out b, not a
		exec(t, conn, q)
	}
	if got := prepares(t, conn) - start; got != 3 {
		t.Fatalf("prepared %d, want 3", got)
	}
	exec(t, conn, a)
	if got := prepares(t, conn) - start; got != 3 {
		t.Errorf("a was prepared again: it was used more recently than b")
	}
	exec(t, conn, b)
	if got := prepares(t, conn) - start; got != 4 {
		t.Errorf("b was not prepared again after it was pushed out")
	}
}

func TestAStatementPushedOutWhileItsRowsAreOpenStaysReadable(t *testing.T) {
	_, conn := open(t, 1)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		exec(t, conn, `INSERT INTO t (k, v) VALUES (?, 1)`, k)
	}
	rows, err := conn.QueryContext(ctx, `SELECT k FROM t ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, conn, `SELECT 42`) // pushes the open query's statement out
	if got := drain(t, rows); got != "a,b,c" {
		t.Fatalf("rows = %s, want a,b,c", got)
	}
}

func TestKeptStatementsRunInsideTransactions(t *testing.T) {
	db, _ := open(t, 0)
	ctx := context.Background()
	count := func() int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, commit := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO t (k, v) VALUES (?, 1)`, "x"); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 0, true: 1}[commit]; count() != want {
			t.Fatalf("commit=%v: %d rows, want %d", commit, count(), want)
		}
	}
}

func TestErrorsPassThroughAndLeaveTheStatementUsable(t *testing.T) {
	_, conn := open(t, 0)
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, `INSERT INTO nowhere VALUES (1)`); err == nil || !strings.Contains(err.Error(), "no such table") {
		t.Fatalf("a statement that does not prepare: %v, want no such table", err)
	}
	const ins = `INSERT INTO t (k, v) VALUES (?, 1)`
	exec(t, conn, ins, "a")
	if _, err := conn.ExecContext(ctx, ins, "a"); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Fatalf("a duplicate key: %v, want a UNIQUE constraint error", err)
	}
	exec(t, conn, ins, "b") // the same kept statement, after its error
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2", n, err)
	}
}

func TestColumnTypesAnswerAsWithoutTheCache(t *testing.T) {
	_, conn := open(t, 0)
	ctx := context.Background()
	exec(t, conn, `INSERT INTO t (k, v) VALUES ('a', 1)`)
	const q = `SELECT k, v FROM t`
	kept, err := conn.QueryContext(ctx, q) // the kept statement
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	plain, err := conn.QueryContext(ctx, q) // busy: the driver's own rows
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	names := func(rows *sql.Rows) string {
		types, err := rows.ColumnTypes()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ct := range types {
			out = append(out, ct.Name()+":"+ct.DatabaseTypeName()+":"+ct.ScanType().String())
		}
		return strings.Join(out, ",")
	}
	got, want := names(kept), names(plain)
	if got != want || !strings.Contains(want, "TEXT") {
		t.Errorf("column types through the cache %q, without %q", got, want)
	}
}
