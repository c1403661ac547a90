#!/usr/bin/env bash
# phase.sh times one phase of a run (a make target, a build) and keeps a record
# for a table at the end: wall seconds, the CPU seconds the whole machine spent
# meanwhile (from /proc/stat: what else ran beside it counts too, which is what
# two busy cores mean), and the CPU seconds of the phase's own processes (the
# command and every descendant it waited for; daemons it left running, such as
# the host cluster's pods, are not in it, so the machine column is the one to
# read for the end-to-end suite).
#
# usage: hack/phase.sh run NAME CMD...   run CMD, append a record to $PHASES_FILE
#        hack/phase.sh table             print the records as a table
#        hack/phase.sh reset             forget the records
#
# env:   PHASES_FILE (default _output/phases.tsv)
set -euo pipefail

FILE=${PHASES_FILE:-_output/phases.tsv}
HZ=$(getconf CLK_TCK)

# busy_ticks: the machine's CPU time so far, in clock ticks (user, nice,
# system, irq, softirq and steal; not idle or iowait).
busy_ticks() {
  local _cpu user nice system _idle _iowait irq softirq steal _rest
  read -r _cpu user nice system _idle _iowait irq softirq steal _rest </proc/stat
  echo $((user + nice + system + irq + softirq + steal))
}

cmd_run() {
  local name=$1; shift
  mkdir -p "$(dirname "$FILE")"
  local start t0 rc=0 own
  start=$(date +%s.%N)
  t0=$(busy_ticks)
  # `times` in a child shell reports the CPU of the command and of every
  # descendant that was waited for (RUSAGE_CHILDREN).
  own=$(mktemp)
  OWN=$own bash -c '"$@"; rc=$?; times >"$OWN"; exit $rc' phase "$@" || rc=$?
  local end t1
  end=$(date +%s.%N)
  t1=$(busy_ticks)
  # The second line of `times` is the children's "XmY.Zs XmY.Zs" (user, system).
  local cpu
  cpu=$(awk 'NR == 2 {
      s = 0
      for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2] }
      printf "%.0f", s
    }' "$own" 2>/dev/null || true)
  rm -f "$own"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }')" \
    "$(( (t1 - t0) / HZ ))" "${cpu:--}" "$rc" >>"$FILE"
  return "$rc"
}

cmd_table() {
  [ -s "$FILE" ] || { echo "phase: no phases recorded in $FILE"; return 0; }
  awk -F'\t' '
    BEGIN { printf "%-34s %8s %8s %8s %10s %5s\n", "phase", "wall s", "wall min", "mach s", "own cpu s", "exit" }
    { printf "%-34s %8d %8.1f %8d %10s %5s\n", $1, $2, $2 / 60, $3, $4, $5; w += $2; m += $3 }
    END { printf "%-34s %8d %8.1f %8d\n", "sum (background phases overlap)", w, w / 60, m }
  ' "$FILE"
}

case "${1:-}" in
  run) shift; cmd_run "$@" ;;
  table) cmd_table ;;
  reset) rm -f "$FILE" ;;
  *) echo "usage: $0 run NAME CMD...|table|reset" >&2; exit 2 ;;
esac
