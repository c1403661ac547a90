#!/usr/bin/env bash
# images.sh builds the project's container images without a container engine:
# static Go binaries (CGO_ENABLED=0) packed by hack/hostcluster/tools/mkimage into
# one-layer `docker save` tarballs, plus a Helm values file that points the chart
# at them with pullPolicy Never (load them with `hostcluster.sh import` or
# `kind load image-archive`).
#
# usage: hack/images.sh [NAME...]     NAME is one of controller datastore kubelet k3s
#                                      e2e-webhook (default: all of them)
# env:   IMAGE_TAG (default dev), IMAGES_DIR (default _output/images),
#        K3K_TOOLS_DIR (upstream binaries; default ~/.cache/k3k/tools)
#        K3S_SOURCE (the k3s source tarball; default ../shared/k3s/k3s-4035a25a.tar.gz)
#
# Output: $IMAGES_DIR/<image>.tar for each image, and $IMAGES_DIR/values.yaml.
# An image whose command package does not exist yet is skipped with a message.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TAG=${IMAGE_TAG:-dev}
OUT=${IMAGES_DIR:-$ROOT/_output/images}
TOOLS=${K3K_TOOLS_DIR:-$HOME/.cache/k3k/tools}
BIN=$ROOT/_output/bin
REPO=k3k-io

say() { printf '[%s] images: %s\n' "$(date +%T)" "$*"; }

mkdir -p "$OUT" "$BIN"
say "mkimage"
(cd "$ROOT/hack/hostcluster/tools" && CGO_ENABLED=0 go build -trimpath -o "$BIN/mkimage" ./mkimage)

gobuild() { # OUTPUT MODULE_DIR PACKAGE
  (cd "$2" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1" "$3")
}

# product IMAGE PACKAGE BINARY [LINK...]: an image holding one binary of the main
# module at /bin/BINARY, plus a symbolic link to it at each LINK (the paths the
# controller's pod specs name, e.g. /usr/local/bin/datastore).
product() {
  local image=$1 pkg=$2 binary=$3
  shift 3
  local links=("$@")
  if [ ! -d "$ROOT/$pkg" ]; then
    say "skipping $REPO/$image: $pkg does not exist yet"
    skipped+=("$image")
    return 0
  fi
  say "$REPO/$image:$TAG from ./$pkg"
  gobuild "$BIN/$binary" "$ROOT" "./$pkg"
  local entries=("/bin/$binary=$BIN/$binary")
  for link in "${links[@]}"; do entries+=("$link@/bin/$binary"); done
  "$BIN/mkimage" -o "$OUT/$image.tar" -t "$REPO/$image:$TAG" -entrypoint "/bin/$binary" "${entries[@]}"
}

# k3s: the real k3s server built from the upstream source tarball K3S_SOURCE by
# hack/k3s.sh (cached by the tarball's hash), laid out like rancher/k3s and tagged
# with its own version (k3k-io/k3s:v1.34.3-k3s1), so the controller's default
# version names it.
k3s() {
  local src=${K3S_SOURCE:-$ROOT/../shared/k3s/k3s-4035a25a.tar.gz}
  "$ROOT/hack/k3s.sh" image "$src" "$OUT/k3s.tar"
  K3S_IMAGE_TAG=$(k3s_tag)
  [ -n "$K3S_IMAGE_TAG" ] || { echo "images: cannot read the tag of $OUT/k3s.tar" >&2; exit 1; }
}

# k3s_tag: the tag of an already built k3s image (when only other images were asked for).
k3s_tag() {
  [ -f "$OUT/k3s.tar" ] && tar -xOf "$OUT/k3s.tar" manifest.json | sed -n 's/.*"RepoTags":\["[^:]*:\([^"]*\)".*/\1/p'
}

skipped=()
K3S_IMAGE_TAG=
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(controller datastore kubelet k3s e2e-webhook)
for name in "${names[@]}"; do
  case "$name" in
    controller) product k3k-controller cmd/controller k3k-controller ;;
    # The controller runs the sidecar and the publisher as /usr/local/bin/datastore
    # (internal/controller/cluster/statefulset.go DatastoreArgs, PublisherArgs).
    datastore) product k3k-datastore cmd/datastore k3k-datastore /usr/local/bin/datastore ;;
    # The agent Deployment runs /usr/local/bin/kubelet (cluster.AgentBinary).
    kubelet) product k3k-kubelet cmd/kubelet k3k-kubelet /usr/local/bin/kubelet ;;
    k3s) k3s ;;
    # The suite's webhook and aggregated API server (e2e/webhook_test.go); a test
    # program, not part of the product or the chart's values.
    e2e-webhook) product k3k-e2e-webhook e2e/webhookserver k3k-e2e-webhook ;;
    *) echo "images: unknown image $name (controller datastore kubelet k3s e2e-webhook)" >&2; exit 2 ;;
  esac
done

# The agreed contract with the chart's values.
cat >"$OUT/values.yaml" <<EOF
# Written by hack/images.sh: the locally built images, never pulled.
image: {repository: $REPO/k3k-controller, tag: "$TAG", pullPolicy: Never}
datastore: {image: {repository: $REPO/k3k-datastore, tag: "$TAG", pullPolicy: Never}}
sharedAgent: {image: {repository: $REPO/k3k-kubelet, tag: "$TAG", pullPolicy: Never}, alwaysPullImages: false}
EOF
# The server image only where it was built (else the chart's default stays).
K3S_IMAGE_TAG=${K3S_IMAGE_TAG:-$(k3s_tag || true)}
if [ -n "$K3S_IMAGE_TAG" ]; then
  echo "k3sServer: {image: {repository: $REPO/k3s, tag: \"$K3S_IMAGE_TAG\", pullPolicy: Never}}" >>"$OUT/values.yaml"
fi
[ ${#skipped[@]} -eq 0 ] || say "not built (package missing): ${skipped[*]}"
say "done: $(cd "$OUT" && ls -- *.tar 2>/dev/null | tr '\n' ' ')values.yaml in $OUT"
