package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestTheTableHasAColumnPerDatastoreWithMediansAndRanges(t *testing.T) {
	rounds := []round{
		{"sqlite": {metricSnapshotSeconds: 3, metricSnapshotMiB: 12}, "etcd": {metricSnapshotSeconds: 1, metricSnapshotMiB: 150}},
		{"sqlite": {metricSnapshotSeconds: 1, metricSnapshotMiB: 12}, "etcd": {metricSnapshotSeconds: 2, metricSnapshotMiB: 140}},
		{"sqlite": {metricSnapshotSeconds: 2, metricSnapshotMiB: 12}, "etcd": {metricSnapshotSeconds: 9, metricSnapshotMiB: 160}},
	}
	var out bytes.Buffer
	printTable(&out, "HEADER", []string{"sqlite", "etcd"}, rounds)
	for _, want := range []string{
		"HEADER\n",
		"| metric | sqlite | etcd |",
		"| snapshot s | 2.00 (1.00–3.00) | 2.00 (1.00–9.00) |",
		"| snapshot MiB | 12.00 (12.00–12.00) | 150 (140–160) |",
		// Not measured in any round: said so, not printed as zero.
		"| restore-new s | n/a | n/a |",
		"3 round(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	// The rows come in the order of metrics, not sorted by name.
	if strings.Index(out.String(), "| snapshot s |") > strings.Index(out.String(), "| restore-new s |") {
		t.Errorf("rows out of order:\n%s", out.String())
	}
}

func TestOneRoundGivesTheValueWithoutARange(t *testing.T) {
	var out bytes.Buffer
	printTable(&out, "h", []string{"etcd"}, []round{{"etcd": {metricRestoreInPlace: 4.5}}})
	if !strings.Contains(out.String(), "| restore-in-place s | 4.50 |") {
		t.Errorf("one round printed with a range or not at all:\n%s", out.String())
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"one value is its own median", []float64{3}, 3},
		{"an odd count takes the middle one", []float64{5, 1, 3}, 3},
		{"an even count averages the middle two", []float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("%s: median(%v) = %v, want %v", c.name, c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) || !math.IsNaN(median([]float64{1, math.NaN(), 2})) {
		t.Error("a median of nothing, or over a round that did not measure, is a number")
	}
}
