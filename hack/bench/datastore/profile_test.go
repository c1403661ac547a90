package main

import (
	"strings"
	"testing"
)

func TestSQLCountsAreSummedPerQueryOverErrorCodes(t *testing.T) {
	text := `# HELP kine_sql_total Total number of SQL operations
# TYPE kine_sql_total counter
kine_sql_total{error_code="",name="Insert"} 10
kine_sql_total{error_code="SQLITE_FULL",name="Insert"} 2
kine_sql_total{error_code="",name="GetSingleVal"} 3
kine_sql_time_seconds_bucket{error_code="",name="Insert",le="0.001"} 9
go_goroutines 12
`
	got := parseSQLCounts(strings.NewReader(text))
	if len(got) != 2 || got["Insert"] != 12 || got["GetSingleVal"] != 3 {
		t.Errorf("counts = %v, want Insert 12 and GetSingleVal 3 only", got)
	}
}

func TestSQLPerOpIsTheDifferenceDividedByTheOperations(t *testing.T) {
	before := map[string]float64{"Insert": 10, "CurrentRev": 5}
	after := map[string]float64{"Insert": 30, "CurrentRev": 5, "AfterAllOldVal": 10}
	total, breakdown := sqlPerOp(before, after, 20)
	if total != 1.5 {
		t.Errorf("total = %v, want 1.5", total)
	}
	if breakdown != "Insert=1.00 AfterAllOldVal=0.50" {
		t.Errorf("breakdown = %q; want queries that ran, largest first", breakdown)
	}
}

func TestAProfileIsNamedAfterDatastoreRoundAndStep(t *testing.T) {
	got := profilePath("/p", "sqlite", 2, "etcd: create ops/s, 16 clients")
	if want := "/p/sqlite-r2-etcd-create-ops-s-16-clients.pprof"; got != want {
		t.Errorf("profilePath = %q, want %q", got, want)
	}
}

func TestAMetricEtcdDoesNotHaveIsPrintedAsNotAvailable(t *testing.T) {
	m := "etcd: create kine SQL statements/op, 1 client"
	rounds := []round{{res: map[string]map[string]float64{"sqlite": {m: 2}, "etcd": {}}}}
	var out strings.Builder
	printTable(&out, []string{"sqlite", "etcd"}, rounds)
	if want := "| " + m + " | 2.00 | n/a | n/a |"; !strings.Contains(out.String(), want) {
		t.Errorf("table lacks the row %q:\n%s", want, out.String())
	}
}
