// Package stmtcache keeps the prepared statements of a database/sql
// connection for reuse.
//
// database/sql prepares a statement anew for every DB.ExecContext or
// DB.QueryContext that is not given a *sql.Stmt, and kine runs every query
// that way. With SQLite, parsing and planning kine's statements costs more
// than running them (an insert into kine's table: about 80 of 200 µs). A
// Connector from this package hands out connections that prepare each query
// text once and then run the prepared statement again, so code written
// against plain ExecContext/QueryContext gets the saving without changing.
package stmtcache

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
)

// DefaultSize bounds the statements kept per connection. kine uses about
// two dozen query texts; texts with a literal LIMIT can add more.
const DefaultSize = 64

// rawConn is what a connection must offer to be wrapped: the context-aware
// forms of everything database/sql calls.
type rawConn interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// Connector wraps base: each connection it opens keeps up to Size prepared
// statements (DefaultSize when 0). OnConnect, when set, runs on every new
// connection before it is used, e.g. to configure it.
type Connector struct {
	Base      driver.Connector
	Size      int
	OnConnect func(driver.Conn) error
}

var _ driver.Connector = (*Connector)(nil)

// Connect opens a connection through Base and wraps it.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	raw, ok := conn.(rawConn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("stmtcache: connection type %T lacks a context-aware method database/sql needs", conn)
	}
	if c.OnConnect != nil {
		if err := c.OnConnect(conn); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	size := c.Size
	if size <= 0 {
		size = DefaultSize
	}
	return &Conn{raw: raw, size: size, byQuery: map[string]*list.Element{}, lru: list.New()}, nil
}

// Driver is the base connector's driver.
func (c *Connector) Driver() driver.Driver { return c.Base.Driver() }

// Conn is one connection with its statements. Like every driver connection
// it is used by one goroutine at a time; database/sql sees to that.
type Conn struct {
	raw     rawConn
	size    int
	byQuery map[string]*list.Element // of *entry, most recently used in front
	lru     *list.List
	// prepares counts the statements this connection prepared for reuse.
	prepares int
}

// entry is one kept statement. busy is set while rows of a query are open
// on it: the statement is the cursor, so it cannot serve another call until
// those rows are closed.
type entry struct {
	query string
	stmt  driver.Stmt
	busy  bool
	// evicted: dropped from the cache while busy; closed when released.
	evicted bool
}

var (
	_ driver.Conn               = (*Conn)(nil)
	_ driver.ConnPrepareContext = (*Conn)(nil)
	_ driver.ConnBeginTx        = (*Conn)(nil)
	_ driver.ExecerContext      = (*Conn)(nil)
	_ driver.QueryerContext     = (*Conn)(nil)
	_ driver.Pinger             = (*Conn)(nil)
	_ driver.SessionResetter    = (*Conn)(nil)
	_ driver.Validator          = (*Conn)(nil)
)

// statement returns the kept statement for query, preparing it on first
// use; nil when the kept one is busy.
func (c *Conn) statement(ctx context.Context, query string) (*entry, error) {
	if el, ok := c.byQuery[query]; ok {
		e := el.Value.(*entry)
		if e.busy {
			return nil, nil
		}
		c.lru.MoveToFront(el)
		return e, nil
	}
	stmt, err := c.raw.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.prepares++
	e := &entry{query: query, stmt: stmt}
	c.byQuery[query] = c.lru.PushFront(e)
	if c.lru.Len() > c.size {
		c.evict(c.lru.Back())
	}
	return e, nil
}

// evict drops the statement of el from the cache, closing it unless rows
// are still open on it.
func (c *Conn) evict(el *list.Element) {
	e := el.Value.(*entry)
	c.lru.Remove(el)
	delete(c.byQuery, e.query)
	if e.busy {
		e.evicted = true
		return
	}
	_ = e.stmt.Close()
}

// ExecContext runs query through its kept statement.
func (c *Conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, err := c.statement(ctx, query)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return c.raw.ExecContext(ctx, query, args)
	}
	exec, ok := e.stmt.(driver.StmtExecContext)
	if !ok {
		return nil, errors.New("stmtcache: prepared statement lacks ExecContext")
	}
	return exec.ExecContext(ctx, args)
}

// QueryContext runs query through its kept statement; while the rows are
// open, the same query on this connection is prepared separately.
func (c *Conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	e, err := c.statement(ctx, query)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return c.raw.QueryContext(ctx, query, args)
	}
	q, ok := e.stmt.(driver.StmtQueryContext)
	if !ok {
		return nil, errors.New("stmtcache: prepared statement lacks QueryContext")
	}
	rows, err := q.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	e.busy = true
	return &releasingRows{Rows: rows, e: e}, nil
}

// releasingRows frees its statement for the next call when closed. It
// passes on the column type methods of the driver's rows, so that
// sql.Rows.ColumnTypes answers as it does without the cache.
type releasingRows struct {
	driver.Rows
	e      *entry
	closed bool
}

var (
	_ driver.RowsColumnTypeScanType         = (*releasingRows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*releasingRows)(nil)
	_ driver.RowsColumnTypeLength           = (*releasingRows)(nil)
	_ driver.RowsColumnTypeNullable         = (*releasingRows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*releasingRows)(nil)
)

// The answers without the method are database/sql's own defaults.

func (r *releasingRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *releasingRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *releasingRows) ColumnTypeLength(i int) (int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *releasingRows) ColumnTypeNullable(i int) (bool, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *releasingRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *releasingRows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.Rows.Close()
	r.e.busy = false
	if r.e.evicted {
		err = errors.Join(err, r.e.stmt.Close())
	}
	return err
}

// Close closes every kept statement, then the connection. database/sql
// closes a connection only after every Rows from it is closed (a pooled
// connection is free, a Tx or sql.Conn waits for its rows), so no statement
// is busy here; one that were would be left to the driver's Close.
func (c *Conn) Close() error {
	var errs []error
	for el := c.lru.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*entry); !e.busy {
			errs = append(errs, e.stmt.Close())
		}
	}
	c.byQuery, c.lru = map[string]*list.Element{}, list.New()
	return errors.Join(append(errs, c.raw.Close())...)
}

// The rest passes straight through.

func (c *Conn) Prepare(query string) (driver.Stmt, error) { return c.raw.Prepare(query) }

func (c *Conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.raw.PrepareContext(ctx, query)
}

// Begin is required by driver.Conn; database/sql calls BeginTx.
func (c *Conn) Begin() (driver.Tx, error) { return c.raw.Begin() }

func (c *Conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.raw.BeginTx(ctx, opts)
}

func (c *Conn) Ping(ctx context.Context) error { return c.raw.Ping(ctx) }

func (c *Conn) ResetSession(ctx context.Context) error { return c.raw.ResetSession(ctx) }

func (c *Conn) IsValid() bool { return c.raw.IsValid() }
