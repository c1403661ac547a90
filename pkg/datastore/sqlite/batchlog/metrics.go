package batchlog

import "github.com/k3s-io/kine/pkg/metrics"

// counted adds one statement to kine's kine_sql_total counter, so the
// bench's "kine SQL statements/op" rows compare both backends. kine's
// statements keep kine's names (Insert, UpdateCompact, Compact); ours are
// named v2*; v2Transaction counts write transactions (BEGIN…COMMIT), so
// writes per transaction is Insert over v2Transaction.
func counted(name string, err error) {
	code := ""
	if err != nil {
		code = "error"
	}
	metrics.SQLTotal.WithLabelValues(name, code).Inc()
}
