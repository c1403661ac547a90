package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
)

// The table's rows, in the order printed; every round measures each of them
// for every datastore.
const (
	metricSnapshotSeconds = "snapshot s"
	metricSnapshotMiB     = "snapshot MiB"
	metricRestoreNew      = "restore-new s"
	metricRestoreInPlace  = "restore-in-place s"
)

var metrics = []string{metricSnapshotSeconds, metricSnapshotMiB, metricRestoreNew, metricRestoreInPlace}

// round is one measurement of every datastore: results by datastore, then by
// metric.
type round map[string]map[string]float64

// printTable prints one row per metric and one column per datastore, each
// cell the median over the rounds with their min–max: on a shared machine
// the range says how far one number can be trusted.
func printTable(w io.Writer, header string, names []string, rounds []round) {
	fmt.Fprintln(w, header)
	fmt.Fprintln(w)
	head, sep := "| metric |", "| --- |"
	for _, n := range names {
		head += " " + n + " |"
		sep += " ---: |"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, m := range metrics {
		row := "| " + m + " |"
		for _, n := range names {
			var vals []float64
			for _, rd := range rounds {
				v, ok := rd[n][m]
				if !ok {
					v = math.NaN()
				}
				vals = append(vals, v)
			}
			row += " " + formatRange(vals) + " |"
		}
		fmt.Fprintln(w, row)
	}
	fmt.Fprintf(w, "\n%d round(s); each cell is the median over the rounds (min–max). Lower is better.\n", len(rounds))
}

// median of vals, NaN when empty or when any value is NaN (a round that did
// not measure it); vals is sorted in place.
func median(vals []float64) float64 {
	if len(vals) == 0 || slices.ContainsFunc(vals, math.IsNaN) {
		return math.NaN()
	}
	sort.Float64s(vals)
	if len(vals)%2 == 1 {
		return vals[len(vals)/2]
	}
	return (vals[len(vals)/2-1] + vals[len(vals)/2]) / 2
}

// formatRange gives the median of vals, and with more than one round the
// range (min–max); vals is sorted in place.
func formatRange(vals []float64) string {
	m := median(vals) // sorts
	if len(vals) == 1 || math.IsNaN(m) {
		return format(m)
	}
	return fmt.Sprintf("%s (%s–%s)", format(m), format(vals[0]), format(vals[len(vals)-1]))
}

func format(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
