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
#        E2E_SERVER_IMAGE=REPO:TAG the k3s server image; default the test-only stand-in
#                    from _output/images (k3k-io/k3s-standin:dev). Set, e.g.
#                    rancher/k3s:v1.34.2-k3s1, the deployed images' pull policy
#                    becomes IfNotPresent so it can be pulled
#        E2E_SKIP_IMAGES=1 reuse the tarballs in _output/images
#        E2E_KEEP=1  leave the host cluster up after `test` (for debugging)
#        K3K_TOOLS_DIR (default ~/.cache/k3k/tools), HOSTCLUSTER_DIR (default /tmp/k3k-hostcluster)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export K3K_TOOLS_DIR=${K3K_TOOLS_DIR:-$HOME/.cache/k3k/tools}
export HOSTCLUSTER_DIR=${HOSTCLUSTER_DIR:-/tmp/k3k-hostcluster}
CLUSTER=${E2E_CLUSTER:-hostcluster}
HC=$ROOT/hack/hostcluster/hostcluster.sh
IMAGES=${IMAGES_DIR:-$ROOT/_output/images}
BIN=$ROOT/_output/bin
DEMO=$ROOT/_output/demo
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
  CGO_ENABLED=0 go build -trimpath -o "$BIN/k3kcli" ./cmd/k3kcli
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
      "$HC" up
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
  "$HELM" upgrade --install "$RELEASE" charts/k3k -n "$RELEASE_NS" --create-namespace --wait --timeout 3m "${args[@]}"
}

cmd_test() {
  START=$SECONDS # global: the EXIT trap runs after this function returned
  prepare
  if [ "$CLUSTER" = hostcluster ] && [ "${E2E_KEEP:-}" != 1 ]; then
    trap 'rc=$?; down; say "took $((SECONDS - START))s"; exit $rc' EXIT
    trap 'exit 130' INT TERM
  fi
  up
  install
  say "go test -tags e2e ./e2e/ $*"
  E2E_K3KCLI=$BIN/k3kcli go test -tags e2e -count=1 -v -timeout 30m ./e2e/ "$@"
  say "suite passed"
}

# node_ip is the InternalIP of the (first) node: where node ports are reached.
node_ip() {
  "$KUBECTL" get nodes -o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}'
}

cmd_demo() {
  local start=$SECONDS
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
