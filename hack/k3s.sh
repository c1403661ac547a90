#!/usr/bin/env bash
# k3s.sh builds the real k3s server from an upstream source tarball (a `git archive`
# of k3s-io/k3s) and packs it as a local image laid out like rancher/k3s: the static
# binary at /bin/k3s, the CNI plugins the server looks for on its PATH (host-local,
# loopback) beside it, /bin/kubectl linked to k3s, and the empty directories k3s
# writes to. The binary is cached in $K3S_CACHE keyed by the tarball's sha256, so a
# warm run only packs the image (seconds).
#
# The same `go build` links the Kubernetes commands the tests run outside k3s
# (kube-apiserver and etcd for envtest; kube-controller-manager, kube-scheduler,
# kubelet, kube-proxy and kubectl for the e2e host cluster) from the Kubernetes
# k3s is built on: k3s already compiles every package they need but a dozen, so
# they cost their links, not a second compile of Kubernetes from its own module
# (about 2,400 packages, the largest item of a cold CI run; docs/e2e.md, "CI time").
#
# usage: hack/k3s.sh binary TARBALL         build (or reuse) the binaries; prints k3s's path
#        hack/k3s.sh image TARBALL OUT.tar  the binary packed as k3k-io/k3s:$K3S_TAG
#        hack/k3s.sh kube DEST CMD...       the Kubernetes commands CMD, built from
#                                           $K3S_SOURCE, linked into DEST; containerd
#                                           and ctr are k3s itself under those names
#
# env:   K3K_TOOLS_DIR (default ~/.cache/k3k/tools): the cache lives in $K3K_TOOLS_DIR/k3s
#        K3S_SOURCE    the tarball `kube` builds from (default ../shared/k3s/k3s-4035a25a.tar.gz)
#        K3S_VERSION   the version the binary reports (default: read from the tarball's
#                      Kubernetes version, e.g. v1.34.3+k3s1)
#        K3S_TAG       the image tag (default: K3S_VERSION with + as -, the form of
#                      rancher/k3s tags, so the controller's default version names it)
#
# Facts behind the flags are in ../shared/k3s/README.md: cgo is required, the two
# embed folders are normally filled from the internet, and k3s refuses to start
# unless it was told which Go it was built with.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${K3K_TOOLS_DIR:-$HOME/.cache/k3k/tools}
CACHE=$TOOLS/k3s
BIN=$ROOT/_output/bin
K3S_SOURCE=${K3S_SOURCE:-$ROOT/../shared/k3s/k3s-4035a25a.tar.gz}
# The Kubernetes commands built beside k3s, into $CACHE/<sum>/kube/.
KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

say() { printf '[%s] k3s: %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'k3s: %s\n' "$*" >&2; exit 1; }

# built DIR: whether DIR holds k3s and every Kubernetes command.
built() {
  local c
  [ -x "$1/k3s" ] || return 1
  for c in "${KUBE_CMDS[@]}"; do [ -x "$1/kube/$c" ] || return 1; done
}

# binary TARBALL: path of the cached k3s built from TARBALL, building it (and the
# Kubernetes commands beside it) if needed.
binary() {
  local tarball=$1
  [ -f "$tarball" ] || die "no source tarball at $tarball"
  local sum
  sum=$(sha256sum "$tarball" | cut -c1-16)
  local out=$CACHE/$sum/k3s
  if built "$CACHE/$sum"; then
    echo "$out"
    return 0
  fi
  # One build at a time per source: a second caller (the e2e suite's images
  # while CI builds k3s in the background) waits for the first, then finds
  # the binary, instead of unpacking the source over the build under way.
  mkdir -p "$CACHE/$sum"
  exec 7>"$CACHE/$sum.lock"
  flock -n 7 || { say "another build of k3s from this source runs: waiting for it ($CACHE/$sum.lock)"; flock 7; }
  if built "$CACHE/$sum"; then
    exec 7>&-
    echo "$out"
    return 0
  fi
  command -v gcc >/dev/null || die "gcc is needed (cgo): apt-get install gcc libc6-dev"
  mkdir -p "$CACHE/$sum"
  # The source tree is unpacked into the cache too, so a failed or interrupted
  # build resumes with Go's build cache warm; it is removed once the binary exists.
  local src=$CACHE/$sum/src
  rm -rf "$src"
  mkdir -p "$src"
  tar -xzf "$tarball" -C "$src"
  local top
  top=$(find "$src" -mindepth 1 -maxdepth 2 -name go.mod -printf '%h\n' | head -1)
  [ -n "$top" ] || die "$tarball holds no go.mod"
  # Offline stand-ins for the two folders upstream fills by download: the
  # manifests k3s deploys come from the tree itself; the static folder normally
  # holds the Traefik chart, which the product disables.
  mkdir -p "$top/pkg/deploy/embed" "$top/pkg/static/embed"
  cp -a "$top"/manifests/. "$top/pkg/deploy/embed/"
  [ -n "$(ls -A "$top/pkg/static/embed")" ] || echo "traefik is disabled by k3k" >"$top/pkg/static/embed/README"

  local version=${K3S_VERSION:-}
  if [ -z "$version" ]; then
    local kube
    kube=$(awk '$1 == "k8s.io/kubernetes" && $2 == "=>" {print $4}' "$top/go.mod" | head -1)
    [ -n "$kube" ] || die "cannot read the Kubernetes version from $top/go.mod; set K3S_VERSION"
    version=${kube/-k3s/+k3s}
  fi
  local commit
  commit=$(basename "$tarball" .tar.gz | sed -n 's/^k3s-//p')
  commit=${commit:-unknown}
  local date
  date=$(date -u -d @"$(stat -c %Y "$tarball")" +%Y-%m-%dT%H:%M:%SZ)
  local pkg=github.com/k3s-io/k3s/pkg/version
  local ldflags="-s -w -X $pkg.Version=$version -X $pkg.GitCommit=$commit"
  ldflags+=" -X $pkg.UpstreamGolang=$(go env GOVERSION)"
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $p.gitVersion=$version -X $p.gitCommit=$commit -X $p.gitTreeState=clean -X $p.buildDate=$date"
  done
  ldflags+=" -extldflags '-static -lm -ldl -lpthread'"
  say "building k3s $version and ${KUBE_CMDS[*]} from $(basename "$tarball") (cgo; ~7 min warm, ~16 min cold on 2 cores)"
  # One build for all: the commands share k3s's compiled packages (same module,
  # tags and flags). With several packages, -o names a directory and each
  # binary is named for its package's last element (./cmd/server → server).
  local tmp=$CACHE/$sum/.build
  rm -rf "$tmp"
  mkdir -p "$tmp"
  local pkgs=(./cmd/server) c
  for c in "${KUBE_CMDS[@]}"; do
    case $c in
      # The fork's own main for it panics at start (hack/k3s/_kube-apiserver).
      kube-apiserver)
        mkdir -p "$top/k3k/kube-apiserver"
        cp "$ROOT/hack/k3s/_kube-apiserver/main.go" "$top/k3k/kube-apiserver/"
        pkgs+=(./k3k/kube-apiserver) ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$c") ;;
    esac
  done
  (
    cd "$top"
    CGO_ENABLED=1 GOFLAGS=-mod=mod \
      CGO_CFLAGS="-DSQLITE_ENABLE_DBSTAT_VTAB=1 -DSQLITE_USE_ALLOCA=1" \
      go build -trimpath \
      -tags "ctrd netgo osusergo providerless urfave_cli_no_docs sqlite_omit_load_extension apparmor seccomp" \
      -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
  )
  rm -rf "$CACHE/$sum/kube"
  mkdir -p "$CACHE/$sum/kube"
  for c in "${KUBE_CMDS[@]}"; do mv "$tmp/$c" "$CACHE/$sum/kube/$c"; done
  mv "$tmp/server" "$out"
  rm -rf "$tmp"
  echo "$version" >"$CACHE/$sum/version"
  rm -rf "$src"
  exec 7>&-
  say "built $out"
  echo "$out"
}

# cni PLUGIN: the path of a CNI plugin from Debian's containernetworking-plugins.
cni() {
  local p=/usr/lib/cni/$1
  if [ ! -x "$p" ]; then
    say "installing containernetworking-plugins for $1"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q containernetworking-plugins >/dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q containernetworking-plugins >/dev/null; }
  fi
  [ -x "$p" ] || die "no $p after installing containernetworking-plugins"
  echo "$p"
}

image() {
  local tarball=$1 out=$2
  local k3s
  k3s=$(binary "$tarball")
  local version
  version=$(cat "$(dirname "$k3s")/version")
  local tag=${K3S_TAG:-${version/+/-}}
  mkdir -p "$BIN" "$(dirname "$out")"
  (cd "$ROOT/hack/hostcluster/tools" && CGO_ENABLED=0 go build -trimpath -o "$BIN/mkimage" ./mkimage)
  local entries=(
    /bin/k3s="$k3s"
    /bin/host-local="$(cni host-local)"
    /bin/loopback="$(cni loopback)"
    /bin/kubectl@k3s
    /var/lib/rancher/k3s/ /etc/rancher/k3s/ /tmp/ /run/
  )
  say "k3k-io/k3s:$tag → $out"
  "$BIN/mkimage" -o "$out" -t "k3k-io/k3s:$tag" -entrypoint /bin/k3s \
    -env PATH=/bin:/usr/bin:/sbin "${entries[@]}"
}

# kube DEST CMD...: the Kubernetes commands CMD, built with k3s from
# $K3S_SOURCE, linked (or copied) into DEST under a temporary name first, so a
# reader of DEST never sees half a binary.
kube() {
  local dest=$1; shift
  local dir c
  dir=$(dirname "$(binary "$K3S_SOURCE")")/kube
  mkdir -p "$dest"
  for c in "$@"; do
    local src=$dir/$c
    # k3s itself is containerd and ctr when called by those names (its
    # embedded containerd, the release k3s ships).
    case $c in containerd | ctr) src=$(dirname "$dir")/k3s ;; esac
    [ -x "$src" ] || die "$c is not one of the commands built with k3s (${KUBE_CMDS[*]} containerd ctr)"
    [ "$src" -ef "$dest/$c" ] && continue
    local tmp=$dest/.$c.$$.tmp
    ln -f "$src" "$tmp" 2>/dev/null || cp "$src" "$tmp"
    # Two callers waiting for the same build (CI's host cluster build and its
    # test phase) may link the same file: mv then refuses to move a file onto
    # itself, and the file is in place already.
    if ! mv -f "$tmp" "$dest/$c" 2>/dev/null; then
      [ "$tmp" -ef "$dest/$c" ] || die "cannot put $c into $dest"
      rm -f "$tmp"
    fi
  done
}

case "${1:-}" in
  binary) [ $# -eq 2 ] || die "usage: $0 binary TARBALL"; binary "$2" ;;
  image) [ $# -eq 3 ] || die "usage: $0 image TARBALL OUT.tar"; image "$2" "$3" ;;
  kube) [ $# -ge 3 ] || die "usage: $0 kube DEST CMD..."; shift; kube "$@" ;;
  *) die "usage: $0 binary TARBALL | image TARBALL OUT.tar | kube DEST CMD..." ;;
esac
