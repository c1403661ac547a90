package main

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestTheTableGivesMediansAndTheMedianOfEachRoundsRatio(t *testing.T) {
	m := "kube: create ops/s, 1 client"
	rounds := []round{
		{fsyncRate: 100, res: map[string]map[string]float64{"sqlite": {m: 80}, "etcd": {m: 100}}},
		{fsyncRate: 300, res: map[string]map[string]float64{"sqlite": {m: 50}, "etcd": {m: 200}}},
		{fsyncRate: 200, res: map[string]map[string]float64{"sqlite": {m: 90}, "etcd": {m: 100}}},
	}
	var out bytes.Buffer
	printTable(&out, []string{"sqlite", "etcd"}, rounds)
	// Medians: sqlite 80 (50–90), etcd 100 (100–200). The ratios per round are 0.8, 0.25, 0.9:
	// their median is 0.80, where the ratio of the medians would also be
	// 0.80, but the range shows the round that disagreed.
	want := "| " + m + " | 80.00 (50.00–90.00) | 100 (100–200) | 0.80 (0.25–0.90) |"
	if !strings.Contains(out.String(), want) {
		t.Errorf("table lacks the row %q:\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "fdatasync): 200/s") {
		t.Errorf("the fsync rate is not the median of the rounds:\n%s", out.String())
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := formatRatio([]float64{0.7}); got != "0.70" {
		t.Errorf("one round: %q, want no range", got)
	}
}

func TestCPUSecondsCountsThisProcesssWork(t *testing.T) {
	before := cpuSeconds(os.Getpid())
	if math.IsNaN(before) {
		t.Fatal("cannot read this process's CPU time")
	}
	x := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		x++
	}
	if after := cpuSeconds(os.Getpid()); after <= before {
		t.Errorf("CPU time did not grow over a busy loop: %v then %v (%d turns)", before, after, x)
	}
	if !math.IsNaN(cpuSeconds(-1)) {
		t.Error("a missing process has a CPU time")
	}
}
