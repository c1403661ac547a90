#!/usr/bin/env bash
# build-tools.sh builds the upstream binaries the tests run (kube-apiserver, etcd,
# and on request the rest of a host cluster) from their Go modules into a cache
# directory that survives between runs on the same machine. A binary is rebuilt only
# when the module that pins it changes, so a warm run costs a few seconds.
#
# The Kubernetes commands come from the k3s build (hack/k3s.sh kube): the
# Kubernetes k3s is built on, linked in the same `go build` as k3s, so that a
# machine compiles Kubernetes once, not once for k3s and once more from its own
# module.
#
# usage: hack/build-tools.sh DEST COMMAND...
#   COMMAND is one of kube-apiserver etcd kube-controller-manager kube-scheduler
#   kubelet kube-proxy kubectl controller-gen staticcheck actionlint helm netpol
#   coredns, and for the e2e node's runtime containerd and ctr (the k3s binary,
#   hack/k3s.sh), containerd-shim-runc-v2 and runc
set -euo pipefail

dest=$1; shift
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dest"

# One run at a time per cache: a second run (the e2e suite's preparation while
# CI builds the host cluster in the background) waits here, then finds its
# binaries built, instead of building them again beside the first.
#
# The Kubernetes commands are not built under this lock but under k3s's
# (hack/k3s.sh), after the rest: a run that waits for the k3s build must not
# keep another from building etcd, helm or the generators meanwhile.
go_cmds=() kube_cmds=()
for cmd in "$@"; do
  case "$cmd" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl|containerd|ctr) kube_cmds+=("$cmd") ;;
    *) go_cmds+=("$cmd") ;;
  esac
done
exec 8>"$dest/.build-tools.lock"
if [ ${#go_cmds[@]} -gt 0 ]; then
  flock -n 8 || { echo "build-tools: another build into $dest runs: waiting for it" >&2; flock 8; }
fi

# stamp MODDIR LDFLAGS PKG: the content hash of the module that pins a binary,
# of how it is linked and, for a package of ours (./…), of its source, so a
# change of any rebuilds it. A tool of this module is relinked whenever go.mod
# changes; its packages come from the build cache, so that costs seconds.
stamp() {
  {
    cat "$1/go.mod" "$1/go.sum"; echo "$2"
    case "$3" in ./*) cat "$1/$3"/*.go ;; esac
  } | sha256sum | cut -c1-16
}

for cmd in ${go_cmds[@]+"${go_cmds[@]}"}; do
  cgo=0 tags=""
  case "$cmd" in
    # Built from this module (its go.mod's tool directives): they share the
    # Kubernetes, etcd and gRPC packages our own code compiles, at the same
    # versions and flags, so a cold machine compiles them once, not once per
    # tool module (docs/e2e.md, "CI time").
    etcd) moddir=$root; pkg=./hack/tools/_main/etcd ;;
    coredns) moddir=$root; pkg=./hack/tools/_main/coredns ;;
    controller-gen) moddir=$root; pkg=sigs.k8s.io/controller-tools/cmd/controller-gen ;;
    helm) moddir=$root; pkg=helm.sh/helm/v3/cmd/helm ;;
    staticcheck) moddir=$root/hack/tools/staticcheck; pkg=honnef.co/go/tools/cmd/staticcheck ;;
    actionlint) moddir=$root/hack/tools/actionlint; pkg=github.com/rhysd/actionlint/cmd/actionlint ;;
    netpol) moddir=$root/hack/tools/netpol; pkg=. ;;
    containerd-shim-runc-v2) moddir=$root/hack/tools/containerd-shim; pkg=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 ;;
    # cgo: runc loads seccomp filters through libseccomp (libseccomp-dev).
    runc) moddir=$root/hack/tools/runc; pkg=github.com/opencontainers/runc; cgo=1; tags=seccomp ;;
    *) echo "build-tools: unknown command $cmd" >&2; exit 2 ;;
  esac
  # No symbol table or DWARF: nothing debugs these, and linking without them
  # takes half the time (kube-apiserver: 4.8 s instead of 9.7 s).
  ldflags="-s -w"
  how=$ldflags
  [ "$cgo" = 0 ] || how="$how cgo $tags" # so the others' stamps stay as they were
  want=$(stamp "$moddir" "$how" "$pkg")
  if [ -x "$dest/$cmd" ] && [ "$(cat "$dest/.$cmd.stamp" 2>/dev/null)" = "$want" ]; then
    continue
  fi
  echo "build-tools: building $cmd into $dest" >&2
  # A private temporary name, so two concurrent runs never move each other's file.
  tmp=$dest/.$cmd.$$.tmp
  (cd "$moddir" && CGO_ENABLED=$cgo go build -trimpath -tags="$tags" -ldflags="$ldflags" -o "$tmp" "$pkg")
  mv "$tmp" "$dest/$cmd"
  echo "$want" > "$dest/.$cmd.stamp"
done
exec 8>&-

if [ ${#kube_cmds[@]} -gt 0 ]; then
  "$root/hack/k3s.sh" kube "$dest" "${kube_cmds[@]}"
fi
