#!/usr/bin/env bash
# conformance.sh runs the Kubernetes conformance suite against a shared-mode
# virtual cluster on real k3s. See docs/conformance.md.
#
# usage: hack/conformance.sh build   e2e.test, ginkgo and the test images only
#        hack/conformance.sh run     build → `make demo` (host cluster, chart, the
#                                    virtual cluster "demo"; kept running) → the
#                                    test images imported → the suite against demo
#                                    → JUnit and a summary table
#
# env:   CONFORMANCE_FOCUS   ginkgo focus (default '\[Conformance\]')
#        CONFORMANCE_SKIP    ginkgo skip (default '\[Serial\]|\[Disruptive\]')
#        CONFORMANCE_PARALLEL ginkgo processes (default 2; 1 runs without ginkgo's CLI)
#        CONFORMANCE_TIMEOUT the suite's timeout (default 24h)
#        CONFORMANCE_REUSE=1 run against the virtual cluster an earlier run left
#        K3K_TOOLS_DIR (default ~/.cache/k3k/tools)
#
# Output: _output/conformance/<start time>/ with junit_01.xml (one per process),
# the suite's log, and summary.txt (passed, failed and skipped, each failure
# named), printed at the end too. Remove the virtual cluster and the host
# cluster with `make demo-down`.
#
# Nothing can be pulled here: every image a conformance test names
# (k8s.io/kubernetes test/utils/image/manifest.go) is built from the
# Kubernetes module's own sources (agnhost, sample-apiserver) or stands in
# for it with what the machine has (busybox for busybox, httpd and nginx; the
# pause of the host cluster), under the name the suite expects.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export K3K_TOOLS_DIR=${K3K_TOOLS_DIR:-$HOME/.cache/k3k/tools}
export HOSTCLUSTER_DIR=${HOSTCLUSTER_DIR:-/tmp/k3k-hostcluster}
MOD=$ROOT/hack/tools/conformance
TOOLS=$K3K_TOOLS_DIR/conformance
IMAGES=$ROOT/_output/conformance/images
BIN=$ROOT/_output/bin
KUBECTL=$K3K_TOOLS_DIR/kubectl
HC=$ROOT/hack/hostcluster/hostcluster.sh
DEMO=$ROOT/_output/demo
E2E_REGISTRY=registry.k8s.io/e2e-test-images
# Debian packages whose programs the agnhost and dnsutils images carry.
PACKAGES="bind9-dnsutils netcat-openbsd curl"

say() { printf '[%s] conformance: %s\n' "$(date +%T)" "$*"; }
die() { printf 'conformance: %s\n' "$*" >&2; exit 1; }

# stamp: what the binaries are built from (the module and its source), so a
# change of either rebuilds them and nothing else does.
stamp() {
  cat "$MOD/go.mod" "$MOD/go.sum" "$MOD"/*.go "$MOD"/sh/*.go | sha256sum | cut -c1-16
}

# build_binaries: e2e.test (go test -c; vet off, it took minutes and checks
# upstream's code), the ginkgo CLI of the suite's ginkgo, agnhost, nonewprivs
# and the sample API server, cached under $TOOLS.
build_binaries() {
  local want
  want=$(stamp)
  if [ "$(cat "$TOOLS/.stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  mkdir -p "$TOOLS"
  say "building e2e.test, ginkgo, agnhost, nonewprivs and sample-apiserver into $TOOLS (~7 min cold on 2 cores)"
  (
    cd "$MOD"
    export CGO_ENABLED=0
    go test -c -vet=off -trimpath -ldflags='-s -w' -o "$TOOLS/e2e.test" .
    go build -trimpath -ldflags='-s -w' -o "$TOOLS/" github.com/onsi/ginkgo/v2/ginkgo \
      k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/nonewprivs k8s.io/sample-apiserver ./sh
  )
  echo "$want" >"$TOOLS/.stamp"
}

# with_libs FILE...: mkimage entries for each FILE and every shared library
# it loads (ldd), at the same paths, so a Debian program runs in an image
# that has nothing else.
with_libs() {
  local f lib
  for f in "$@"; do
    echo "$f=$f"
    for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*'); do
      echo "$lib=$(readlink -f "$lib")"
    done
  done | sort -u
}

# busybox_entries: busybox-static and a link for each applet; /bin/sh is
# hack/tools/conformance/sh, which runs busybox's ash, or bash when the
# environment holds a name that is no identifier (data-1): Debian's busybox
# 1.35 ash drops those, which upstream's image keeps and the suite checks
# through `sh -c env`, while other tests expect ash's own messages.
busybox_entries() {
  local applet
  {
    echo "/bin/busybox=/bin/busybox"
    for applet in $(/bin/busybox --list); do
      case $applet in busybox | sh) ;; *) echo "/bin/$applet@busybox" ;; esac
    done
    echo "/bin/sh=$TOOLS/sh"
    with_libs /bin/bash
  } | sort -u
}

build_images() {
  command -v dig >/dev/null && command -v nc.openbsd >/dev/null ||
    { say "apt-get install $PACKAGES"; apt-get install -y -q $PACKAGES >/dev/null; }
  [ -x /bin/busybox ] || die "/bin/busybox missing (package busybox-static)"
  mkdir -p "$IMAGES" "$BIN"
  (cd "$ROOT/hack/hostcluster/tools" && CGO_ENABLED=0 go build -trimpath -o "$BIN/" ./mkimage ./pause)
  local mk=$BIN/mkimage work=$IMAGES/.files
  rm -rf "$work"
  mkdir -p "$work/htdocs"
  echo '<html><body><h1>It works!</h1></body></html>' >"$work/htdocs/index.html"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$work/nsswitch.conf"
  printf 'root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user:/bin/sh\n' >"$work/passwd"
  printf 'root:x:0:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >"$work/group"
  local -a busybox tools
  mapfile -t busybox < <(busybox_entries)
  # What agnhost's own image adds to Alpine: nc, curl, dig and getent for
  # the network tests' probes, and a shell. That shell is bash: Debian's
  # static busybox runs its own applet for any name it has, whatever PATH
  # says, so its ash would run busybox's nc (no -v, no -z) where the
  # Services tests call OpenBSD's.
  mapfile -t tools < <({ busybox_entries | grep -v '^/bin/sh='; echo '/bin/sh@bash'; with_libs /usr/bin/dig /usr/bin/curl /bin/nc.openbsd /usr/bin/getent; } | sort -u)

  say "images into $IMAGES"
  # The suite's HTTPS servers use the certificate the image carries.
  local porter
  porter=$(cd "$MOD" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/porter
  "$mk" -o "$IMAGES/agnhost.tar" -t "$E2E_REGISTRY/agnhost:2.56" -entrypoint /agnhost -cmd pause \
    /agnhost="$TOOLS/agnhost" /agnhost-2@agnhost /uploads/ \
    /localhost.crt="$porter/localhost.crt" /localhost.key="$porter/localhost.key" /etc/nsswitch.conf="$work/nsswitch.conf" \
    /etc/passwd="$work/passwd" /etc/group="$work/group" "${tools[@]}" /usr/bin/nc@/bin/nc.openbsd
  # jessie-dnsutils: dig, and getent for the /etc/hosts probes (Debian's,
  # as in upstream's image; busybox has none).
  "$mk" -o "$IMAGES/jessie-dnsutils.tar" -t "$E2E_REGISTRY/jessie-dnsutils:1.7" -entrypoint /bin/sh \
    /etc/nsswitch.conf="$work/nsswitch.conf" $({ busybox_entries; with_libs /usr/bin/dig /usr/bin/getent; } | sort -u)
  "$mk" -o "$IMAGES/sample-apiserver.tar" -t "$E2E_REGISTRY/sample-apiserver:1.29.2" -entrypoint /sample-apiserver \
    /sample-apiserver="$TOOLS/sample-apiserver"
  "$mk" -o "$IMAGES/busybox.tar" -t "$E2E_REGISTRY/busybox:1.37.0-1" -entrypoint /bin/sh "${busybox[@]}"
  "$mk" -o "$IMAGES/nonroot.tar" -t "$E2E_REGISTRY/nonroot:1.4" -entrypoint /bin/sh -user 1234 "${busybox[@]}"
  # nnp prints its effective user: set-user-ID root, so that a container
  # allowed to escalate privileges runs it as root.
  install -m 4755 "$TOOLS/nonewprivs" "$work/nnp"
  "$mk" -o "$IMAGES/nonewprivs.tar" -t "$E2E_REGISTRY/nonewprivs:1.3" -cmd nnp /usr/local/bin/nnp="$work/nnp" "${busybox[@]}"
  # httpd and nginx: busybox httpd on port 80, serving from the document
  # root of the image it stands in for: the StatefulSet tests break a pod's
  # readiness by moving /usr/local/apache2/htdocs/index.html away (and back).
  local web root
  for web in httpd:2.4.38-4 httpd:2.4.39-4 nginx:1.14-4 nginx:1.15-4; do
    case $web in
      httpd:*) root=/usr/local/apache2/htdocs ;;
      *) root=/usr/share/nginx/html ;;
    esac
    "$mk" -o "$IMAGES/${web/:/-}.tar" -t "$E2E_REGISTRY/$web" -entrypoint "/bin/httpd -f -p 80 -h $root" \
      "$root/index.html=$work/htdocs/index.html" "${busybox[@]}"
  done
  # kitten and nautilus are agnhost's test-webserver with a picture.
  local pet
  for pet in kitten nautilus; do
    "$mk" -o "$IMAGES/$pet.tar" -t "$E2E_REGISTRY/$pet:1.7" -entrypoint /agnhost -cmd test-webserver \
      /agnhost="$TOOLS/agnhost" /data.json="$work/htdocs/index.html"
  done
  "$mk" -o "$IMAGES/pause.tar" -t registry.k8s.io/pause:3.10.1 -entrypoint /pause /pause="$BIN/pause"
  rm -rf "$work"
}

cmd_build() {
  build_binaries
  build_images
}

# summary DIR: passed, failed and skipped from the JUnit files, and the
# failures by name.
summary() {
  local dir=$1
  python3 - "$dir" <<'EOF'
import glob, sys, xml.etree.ElementTree as ET
passed, failed, skipped, unselected = [], [], [], 0
for f in sorted(glob.glob(sys.argv[1] + "/junit_*.xml")):
    for case in ET.parse(f).getroot().iter("testcase"):
        name = case.get("name", "")
        if not name.startswith("[It]"):
            continue  # setup and teardown nodes
        skip = case.find("skipped")
        if skip is not None:
            # Specs the focus left out say only "skipped"; a test that
            # skipped itself says why.
            message = skip.get("message") or ""
            if message == "skipped":
                unselected += 1
            else:
                skipped.append((name, message))
        elif case.find("failure") is not None or case.find("error") is not None:
            failed.append((name, float(case.get("time", 0))))
        else:
            passed.append((name, float(case.get("time", 0))))
run = len(passed) + len(failed)
print(f"passed {len(passed)} of {run} run, failed {len(failed)}, skipped {len(skipped)} (not selected: {unselected})")
print(f"time of the tests run: {sum(t for _, t in passed + failed):.0f} s")
for name, t in failed:
    print(f"FAILED ({t:.0f} s) {name}")
for name, message in skipped:
    print(f"SKIPPED {name}: {message}")
EOF
}

cmd_run() {
  local start=$SECONDS
  cmd_build
  # The host cluster, the chart and a virtual cluster, as a newcomer's
  # `make demo` makes them; CONFORMANCE_REUSE=1 runs against the one an
  # earlier run left (the product's images as they were then).
  if [ "${CONFORMANCE_REUSE:-}" = 1 ] && [ -s "$DEMO/demo-kubeconfig.yaml" ]; then
    say "reusing the virtual cluster of $DEMO/demo-kubeconfig.yaml"
  else
    "$ROOT/hack/e2e.sh" demo
  fi
  export KUBECONFIG=$HOSTCLUSTER_DIR/kubeconfig
  "$HC" import "$IMAGES"/*.tar
  local out
  out=$ROOT/_output/conformance/$(date -u +%Y%m%dT%H%M%SZ)
  mkdir -p "$out"
  local focus=${CONFORMANCE_FOCUS:-'\[Conformance\]'} skip=${CONFORMANCE_SKIP:-'\[Serial\]|\[Disruptive\]'}
  local procs=${CONFORMANCE_PARALLEL:-2}
  local args=(--provider=skeleton --kubeconfig="$DEMO/demo-kubeconfig.yaml" --kubectl-path="$KUBECTL"
    --report-dir="$out" --non-blocking-taints=node-role.kubernetes.io/control-plane)
  say "suite: focus '$focus', skip '$skip', $procs processes; log $out/suite.log"
  local rc=0
  if [ "$procs" -gt 1 ]; then
    "$TOOLS/ginkgo" --procs="$procs" --timeout="${CONFORMANCE_TIMEOUT:-24h}" --focus="$focus" --skip="$skip" \
      --no-color "$TOOLS/e2e.test" -- "${args[@]}" >"$out/suite.log" 2>&1 || rc=$?
  else
    "$TOOLS/e2e.test" --ginkgo.focus="$focus" --ginkgo.skip="$skip" --ginkgo.timeout="${CONFORMANCE_TIMEOUT:-24h}" \
      --ginkgo.no-color "${args[@]}" >"$out/suite.log" 2>&1 || rc=$?
  fi
  summary "$out" | tee "$out/summary.txt"
  say "suite exit $rc after $((SECONDS - start)) s; results in $out"
}

case "${1:-}" in
  build) cmd_build ;;
  run) cmd_run ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
