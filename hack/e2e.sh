#!/usr/bin/env bash
# e2e.sh runs the end-to-end suite (e2e/, build tag e2e) and the demo on a real
# cluster. See docs/e2e.md.
#
# usage: hack/e2e.sh test [GO_TEST_ARG...]   host cluster up → images imported → helm install
#                                             → go test -tags e2e ./e2e/ → host cluster down
#                                             (always, also on failure or Ctrl-C)
#        hack/e2e.sh demo                     host cluster up → chart → one virtual cluster, left running
#        hack/e2e.sh demo-down                remove what demo made
#
# env:   E2E_CLUSTER=hostcluster (default) the single-node host cluster of
#                    hack/hostcluster (root, Linux); `existing` uses $KUBECONFIG as it
#                    is and leaves it running (the images must already be loaded, e.g.
#                    `kind load image-archive`)
#        E2E_SERVER_IMAGE=REPO:TAG the k3s server image; default the real k3s built
#                    from source into _output/images (k3k-io/k3s:v1.34.3-k3s1, see
#                    hack/k3s.sh). Set, e.g. rancher/k3s:v1.34.3-k3s1, the deployed
#                    images' pull policy becomes IfNotPresent so it can be pulled
#        E2E_SKIP_IMAGES=1 reuse the tarballs in _output/images
#        E2E_PARALLEL=4 how many scenarios run at once (each has its own virtual cluster)
#        E2E_NODE_LOSS=1 after the suite, two nodes join the host cluster and the node-loss
#                    scenario runs (e2e/nodeloss_test.go); the default when `test` has no
#                    GO_TEST_ARG; 0 never; only: that scenario alone
#        E2E_KEEP=1  leave the host cluster up after `test` (for debugging)
#        E2E_DUMP_LINES=150 log lines per container in the dump a failed `test` prints
#        E2E_FAIL_LINES=80 lines of each failed scenario printed after the dump (the whole go test
#                    output is in _output/e2e/go-test.log)
#        E2E_LOCK_WAIT=3600 seconds to wait for another run on the same host cluster
#        K3K_TOOLS_DIR (default ~/.cache/k3k/tools), HOSTCLUSTER_DIR (default /tmp/k3k-hostcluster)
set -euo pipefail

# Built the one way the Makefile builds everything (see its header), so the
# suite's compile reuses what `make test` compiled.
export CGO_ENABLED=0
case " ${GOFLAGS:-} " in *" -trimpath "*) ;; *) export GOFLAGS="-trimpath${GOFLAGS:+ $GOFLAGS}" ;; esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export K3K_TOOLS_DIR=${K3K_TOOLS_DIR:-$HOME/.cache/k3k/tools}
export HOSTCLUSTER_DIR=${HOSTCLUSTER_DIR:-/tmp/k3k-hostcluster}
CLUSTER=${E2E_CLUSTER:-hostcluster}
HC=$ROOT/hack/hostcluster/hostcluster.sh
IMAGES=${IMAGES_DIR:-$ROOT/_output/images}
BIN=$ROOT/_output/bin
DEMO=$ROOT/_output/demo
TEST_LOG=$ROOT/_output/e2e/go-test.log
HELM=$K3K_TOOLS_DIR/helm
KUBECTL=$K3K_TOOLS_DIR/kubectl
RELEASE=k3k RELEASE_NS=k3k-system

say() { printf '[%s] e2e: %s\n' "$(date +%T)" "$*"; }
die() { printf 'e2e: %s\n' "$*" >&2; exit 1; }

# prepare builds what every mode needs: helm, kubectl, k3kcli, the images and
# (for the host cluster) its binaries.
prepare() {
  "$ROOT/hack/build-tools.sh" "$K3K_TOOLS_DIR" helm kubectl
  mkdir -p "$BIN"
  go build -o "$BIN/k3kcli" ./cmd/k3kcli
  if [ "${E2E_SKIP_IMAGES:-}" != 1 ] || [ ! -f "$IMAGES/values.yaml" ]; then
    IMAGES_DIR=$IMAGES "$ROOT/hack/images.sh"
  fi
  if [ "$CLUSTER" = hostcluster ]; then
    "$HC" build
  fi
}

# up starts the host cluster and loads the images, or checks the existing cluster.
up() {
  case "$CLUSTER" in
    hostcluster)
      # The daemons `up` starts outlive this script (make demo); they must not
      # inherit the lock's descriptor, or it stays held until they stop and
      # `make demo-down` would wait for itself.
      "$HC" up 9>&-
      export KUBECONFIG=$HOSTCLUSTER_DIR/kubeconfig
      "$HC" import "$IMAGES"/*.tar
      ;;
    existing)
      [ -n "${KUBECONFIG:-}" ] || die "E2E_CLUSTER=existing needs KUBECONFIG"
      "$KUBECTL" get nodes >/dev/null || die "cannot reach the cluster of $KUBECONFIG"
      ;;
    *) die "E2E_CLUSTER=$CLUSTER: want hostcluster or existing" ;;
  esac
}

down() {
  if [ "$CLUSTER" = hostcluster ]; then
    # The external-datastore scenario's PostgreSQL (e2e/external_test.go) lives
    # in the host cluster's directory; a test that was killed leaves it running.
    "$ROOT/hack/postgres.sh" down || say "PostgreSQL down failed (run '$ROOT/hack/postgres.sh down' again)"
    "$HC" down || say "host cluster down failed (run '$HC down' again)"
  fi
}

# install puts the chart in with the locally built images (and the server
# image of E2E_SERVER_IMAGE) and waits for the controller.
install() {
  local args=(-f "$IMAGES/values.yaml")
  if [ -n "${E2E_SERVER_IMAGE:-}" ]; then
    local repo=${E2E_SERVER_IMAGE%:*} tag=${E2E_SERVER_IMAGE##*:}
    [ "$repo" != "$E2E_SERVER_IMAGE" ] || die "E2E_SERVER_IMAGE=$E2E_SERVER_IMAGE: want REPOSITORY:TAG"
    args+=(--set-string "k3sServer.image.repository=$repo,k3sServer.image.tag=$tag"
      --set "k3sServer.image.pullPolicy=IfNotPresent,datastore.image.pullPolicy=IfNotPresent,sharedAgent.image.pullPolicy=IfNotPresent")
  fi
  say "helm install $RELEASE (server image ${E2E_SERVER_IMAGE:-from $IMAGES/values.yaml})"
  interruptible "$HELM" upgrade --install "$RELEASE" charts/k3k -n "$RELEASE_NS" --create-namespace --wait --timeout 3m "${args[@]}"
}

# interruptible runs a long command in its own process group and waits for it
# in the background: a SIGTERM to this script alone (a CI time limit) runs the
# EXIT trap at once instead of after the command, and the trap (finish) ends
# exactly that group.
interruptible() {
  setsid "$@" &
  CHILD_PGID=$!
  local rc=0
  wait "$CHILD_PGID" || rc=$?
  CHILD_PGID=
  return "$rc"
}

# lock makes runs of this script on one host cluster directory take turns: `up`
# stops any cluster of the same directory, so a second `make e2e` or `make demo`
# would otherwise tear down the cluster under the first one's tests.
lock() {
  [ "$CLUSTER" = hostcluster ] || return 0
  local file=$HOSTCLUSTER_DIR.lock
  exec 9>"$file"
  if ! flock -n 9; then
    say "another run holds $file; waiting for it (at most ${E2E_LOCK_WAIT:-3600}s)"
    flock -w "${E2E_LOCK_WAIT:-3600}" 9 || die "$file is still held"
  fi
}

# dump prints what explains a failed run, for CI logs: nodes, then for the
# chart's namespace and every namespace the suite or the demo made (e2e-*, demo)
# the objects, events, pod descriptions and the logs of every container, the
# instance before the last restart included; then the tail of each host cluster
# component's log (the whole logs stay in $HOSTCLUSTER_DIR/log).
dump() {
  [ -x "$KUBECTL" ] && [ -n "${KUBECONFIG:-}" ] || return 0
  local k=("$KUBECTL" --request-timeout=15s) ns pod c prev lines=${E2E_DUMP_LINES:-150}
  section() { printf '\n===== %s =====\n' "$*"; }
  section "nodes and pods"
  "${k[@]}" get nodes -o wide || { say "the API does not answer: no cluster state to show"; return 0; }
  "${k[@]}" get pods -A -o wide
  for ns in $("${k[@]}" get namespaces -o name | sed 's#^namespace/##' | grep -E "^($RELEASE_NS|e2e-.*|demo)\$"); do
    section "namespace $ns: objects"
    "${k[@]}" -n "$ns" get clusters.k3k.io,statefulsets,pods,services,pvc,secrets -o wide
    "${k[@]}" -n "$ns" get clusters.k3k.io -o yaml
    section "namespace $ns: events"
    "${k[@]}" -n "$ns" get events --sort-by=.lastTimestamp
    section "namespace $ns: pods"
    "${k[@]}" -n "$ns" describe pods
    for pod in $("${k[@]}" -n "$ns" get pods -o name); do
      # name=restartCount for every init container (native sidecars) and container
      for c in $("${k[@]}" -n "$ns" get "$pod" -o jsonpath='{range .status.initContainerStatuses[*]}{.name}={.restartCount} {end}{range .status.containerStatuses[*]}{.name}={.restartCount} {end}'); do
        section "logs $ns/${pod#pod/} ${c%=*} (last $lines lines)"
        "${k[@]}" -n "$ns" logs "$pod" -c "${c%=*}" --tail="$lines"
        prev=${c#*=}
        if [ "$prev" != 0 ]; then
          section "logs $ns/${pod#pod/} ${c%=*} before its restart #$prev (last $lines lines)"
          "${k[@]}" -n "$ns" logs "$pod" -c "${c%=*}" --previous --tail="$lines"
        fi
      done
    done
  done
  if [ "$CLUSTER" = hostcluster ]; then
    local f
    for f in "$HOSTCLUSTER_DIR"/log/*.log; do
      [ -f "$f" ] || continue
      section "host cluster $(basename "$f") (last 40 lines)"
      tail -n 40 "$f"
    done
  fi
  section "end of dump"
}

# failures prints, for every scenario go test reported as failed, the last
# E2E_FAIL_LINES (default 80) of its own output lines, then the FAIL lines: go
# test -v marks whose lines follow with "=== RUN/CONT/NAME Test..." when
# parallel scenarios interleave, so the lines can be told apart.
failures() {
  [ -s "${TEST_LOG:-}" ] || return 0
  local failed
  failed=$(sed -n 's/^ *--- FAIL: \([^ ]*\).*/\1/p' "$TEST_LOG" | sort -u)
  printf '\n===== failed scenarios (whole output: %s) =====\n' "$TEST_LOG"
  [ -n "$failed" ] || { echo "go test reported no failed scenario (a build error, a timeout or a panic: see the end of $TEST_LOG)"; tail -n 40 "$TEST_LOG"; return 0; }
  local t
  for t in $failed; do
    printf '\n----- %s (last %s lines) -----\n' "$t" "${E2E_FAIL_LINES:-80}"
    awk -v want="$t" '
      /^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
      /^ *--- (PASS|FAIL|SKIP): / { if ($3 == want || index($3, want "/") == 1) print; next }
      cur == want || index(cur, want "/") == 1 { print }
    ' "$TEST_LOG" | tail -n "${E2E_FAIL_LINES:-80}"
  done
  # Last, where a CI log's tail shows it: each scenario's lines just before its
  # own dump (dumpPod in e2e/main_test.go logs the pods after a failure, and
  # those lines would otherwise push the failing check out of that tail).
  printf '\n===== what each failed scenario said last before its dump =====\n'
  for t in $failed; do
    printf -- '----- %s\n' "$t"
    awk -v want="$t" '
      /^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
      /^ *--- / { next }
      cur == want || index(cur, want "/") == 1 {
        if ($0 ~ /main_test\.go:[0-9]+: server pod /) dumped = 1
        if (!dumped) print substr($0, 1, 400)
      }
    ' "$TEST_LOG" | tail -n "${E2E_FAIL_BEFORE_DUMP:-6}"
  done
  printf '\n'
  grep -E '^ *--- FAIL|^FAIL' "$TEST_LOG"
}

# scenario_times prints each top-level scenario's wall time as go test
# reported it, longest first, so that drift from run to run shows in CI logs.
scenario_times() {
  [ -s "${TEST_LOG:-}" ] || return 0
  printf '\n===== scenario wall times (s), longest first =====\n'
  sed -n 's/^--- \(PASS\|FAIL\|SKIP\): \([^ ]*\) (\([0-9.]*\)s)$/\3 \1 \2/p' "$TEST_LOG" |
    sort -rn | awk '{ printf "%8.1f  %-4s  %s\n", $1, $2, $3; t += $1 } END { printf "%8.1f  sum of %d scenarios\n", t, NR }'
}

# finish runs on every exit of `test`: on failure it dumps the cluster's state,
# then it stops the host cluster (unless E2E_KEEP=1). `down` touches only what
# `up` started (hack/hostcluster/hostcluster.sh).
finish() {
  local rc=$1
  set +e
  trap - EXIT INT TERM
  if [ -n "${CHILD_PGID:-}" ] && kill -0 "$CHILD_PGID" 2>/dev/null; then
    say "stopping process group $CHILD_PGID (helm or go test)"
    kill -TERM -- "-$CHILD_PGID" 2>/dev/null
    sleep 2
    kill -KILL -- "-$CHILD_PGID" 2>/dev/null
  fi
  scenario_times
  if [ "$rc" != 0 ] && [ -n "${CLUSTER_STARTED:-}" ]; then
    say "failed (exit $rc): dumping the cluster's state"
    dump 2>&1
    failures
  fi
  if [ -n "${CLUSTER_STARTED:-}" ] && [ "$CLUSTER" = hostcluster ]; then
    if [ "${E2E_KEEP:-}" = 1 ]; then
      say "E2E_KEEP=1: the host cluster stays up ('$HC down' removes it)"
    else
      down
    fi
  fi
  say "took $((SECONDS - START))s"
  exit "$rc"
}

cmd_test() {
  START=$SECONDS # global: the EXIT trap runs after this function returned
  lock
  prepare
  trap 'finish $?' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  CLUSTER_STARTED=1 # from here on `up` may have started something, also when it fails
  up
  install
  local tags="e2e${E2E_EXTRA_TAGS:+,$E2E_EXTRA_TAGS}"
  # TestNodeRestart restarts the node of the host cluster started here; an
  # existing cluster's nodes are not the suite's to restart.
  if [ "$CLUSTER" = hostcluster ]; then
    export E2E_NODE_RESTART="$HC restart 10"
  fi
  mkdir -p "$(dirname "$TEST_LOG")"
  : >"$TEST_LOG"
  local phase=${E2E_NODE_LOSS:-}
  if [ -z "$phase" ]; then
    # By default the node-loss scenario runs after a whole suite, not after
    # the scenarios a GO_TEST_ARG such as -run picked.
    phase=0
    [ $# -gt 0 ] || [ "$CLUSTER" != hostcluster ] || phase=1
  fi
  if [ "$phase" = 1 ]; then
    # The same test binary runs both parts (go test builds it once).
    suite "$tags" -skip '^TestNodeLoss' "$@"
  elif [ "$phase" != only ]; then
    suite "$tags" "$@"
  fi
  if [ "$phase" = 1 ] || [ "$phase" = only ]; then
    [ "$CLUSTER" = hostcluster ] || die "E2E_NODE_LOSS=$phase: the node-loss scenario needs the host cluster of hack/hostcluster"
    node_loss "$tags"
  fi
  say "suite passed"
}

# suite TAGS [GO_TEST_ARG...] runs go test on the e2e package. Scenarios run
# side by side (each on its own virtual cluster in its own namespace; see
# e2e/doc.go): most of their time is spent waiting for pods. The output is
# kept in $TEST_LOG too: a failed run prints, after the dump, the tail of each
# failed scenario's own lines (CI shows only the last part). No vet pass
# here: `make lint` vets the suite with every analyzer.
suite() {
  local tags=$1
  shift
  say "go test -tags $tags ./e2e/ $*"
  E2E_K3KCLI=$BIN/k3kcli interruptible bash -o pipefail -c '"$@" 2>&1 | tee -a "$0"' "$TEST_LOG" \
    go test -tags "$tags" -vet=off -count=1 -v -timeout 80m -parallel "${E2E_PARALLEL:-4}" ./e2e/ "$@"
}

# node_loss runs the node-loss scenario (e2e/nodeloss_test.go) on the same
# host cluster: two nodes added, the controller's node-loss timeout lowered
# to 10 s (its default, 5 min, is what the rest of the suite ran with: a node
# restart there must replace nothing), the scenario cutting one added node
# off for good.
node_loss() {
  say "node-loss scenario: nodeLossTimeout 10s, nodes 2 and 3 join"
  # First, so that the controller's new pod starts on node 1, which the
  # scenario never cuts off.
  interruptible "$HELM" upgrade "$RELEASE" charts/k3k -n "$RELEASE_NS" --reuse-values --set-string nodeLossTimeout=10s --wait --timeout 3m
  # Side by side: each node's own state, network namespace and containerd
  # (most of a join is importing the images into it).
  local two three
  "$HC" add-node 2 & two=$!
  "$HC" add-node 3 & three=$!
  local rc2=0 rc3=0
  wait "$two" || rc2=$?
  wait "$three" || rc3=$?
  [ "$rc2" = 0 ] && [ "$rc3" = 0 ] || die "add-node failed: node 2 exit $rc2, node 3 exit $rc3"
  E2E_KILL_NODE="$HC kill-node" suite "$1" -run '^TestNodeLoss'
}

# node_ip is the InternalIP of the (first) node: where node ports are reached.
node_ip() {
  "$KUBECTL" get nodes -o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}'
}

cmd_demo() {
  local start=$SECONDS
  lock
  prepare
  up
  install
  mkdir -p "$DEMO"
  # k3kcli puts the host API server's name into a node-port cluster's TLS SANs and
  # kubeconfig: give it the node's address, which is reachable from this machine.
  local ip
  ip=$(node_ip)
  "$KUBECTL" create namespace demo --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
  sed "s#server: https://127.0.0.1:6443#server: https://$ip:6443#" "$KUBECONFIG" >"$DEMO/host.kubeconfig"
  "$BIN/k3kcli" --kubeconfig "$DEMO/host.kubeconfig" cluster create demo -n demo --expose nodeport \
    --output-kubeconfig "$DEMO/demo-kubeconfig.yaml" 2>&1 | sed 's/^/  /' || true
  [ -s "$DEMO/demo-kubeconfig.yaml" ] || die "creating the virtual cluster failed (see above; '$0 demo-down' cleans up)"
  cat <<EOF

The virtual cluster "demo" runs as pod demo/k3k-demo-server-0 of the host cluster ($((SECONDS - start))s).
  kubeconfig of the virtual cluster: $DEMO/demo-kubeconfig.yaml
  kubeconfig of the host cluster:    $KUBECONFIG

Try:
  $KUBECTL --kubeconfig $DEMO/demo-kubeconfig.yaml get namespaces
  $KUBECTL --kubeconfig $KUBECONFIG -n demo get cluster,pods,secrets

Remove everything with: make demo-down
EOF
}

cmd_demo_down() {
  lock
  if [ "$CLUSTER" = existing ]; then
    "$BIN/k3kcli" cluster delete demo -n demo --ignore-not-found || true
    "$HELM" uninstall "$RELEASE" -n "$RELEASE_NS" || true
  else
    down
  fi
  rm -rf "$DEMO"
  say "demo removed"
}

case "${1:-}" in
  test) shift; cmd_test "$@" ;;
  demo) cmd_demo ;;
  demo-down) cmd_demo_down ;;
  *) echo "usage: $0 test [GO_TEST_ARG...]|demo|demo-down" >&2; exit 2 ;;
esac
