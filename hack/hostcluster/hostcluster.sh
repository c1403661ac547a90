#!/usr/bin/env bash
# hostcluster.sh runs a single-node Kubernetes "host cluster" on this machine for the
# end-to-end tests: no container engine, no image registry, nothing downloaded but Go
# modules and Debian packages. See docs/e2e.md.
#
#   hostcluster.sh build              install packages, build binaries and base images
#   hostcluster.sh up                 start the cluster (stops a previous one first)
#   hostcluster.sh down               stop everything and remove the cluster's state
#   hostcluster.sh import IMAGE.tar…  load image tarballs into the node's containerd
#   hostcluster.sh status             what runs, and the node
#   hostcluster.sh restart [SECONDS]  restart the node as a power cut does: its kubelet,
#                                     kube-proxy, containerd and every container killed at
#                                     once, mounts, network namespaces, iptables rules and
#                                     /run state gone; SECONDS (default 10) later started
#                                     again with /var kept (images, volumes, kubelet state)
#
# Needs root. Everything the cluster owns lives under $HOSTCLUSTER_DIR (default
# /tmp/k3k-hostcluster); `down` stops only the cluster's own programs (binaries it
# built or containerd, with that directory on their command line) and the
# containers of its own containerd shims.
#
# NetworkPolicy is enforced by kube-router's network policy controller
# (hack/tools/netpol, the one k3s embeds), started with the node; HOSTCLUSTER_NETPOL=0
# leaves it out. `down` removes its iptables chains and ipsets.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${HOSTCLUSTER_DIR:-/tmp/k3k-hostcluster}
DIR=${DIR%/}
TOOLS=${K3K_TOOLS_DIR:-$HOME/.cache/k3k/tools}
NETPOL=${HOSTCLUSTER_NETPOL:-1}
# postgresql: the external datastore scenario's database (hack/postgres.sh);
# libseccomp-dev, pkg-config: runc is built with cgo against libseccomp. The runtime is not
# Debian's (containerd 1.6, runc 1.1, which cannot run pods in user
# namespaces) but containerd 2.1 (k3s's), its shim and runc 1.4, built from
# source (hack/build-tools.sh).
PACKAGES="gcc libc6-dev pkg-config libseccomp-dev containernetworking-plugins iptables ipset conntrack busybox-static postgresql"

BIN=$DIR/bin IMAGES=$DIR/images PKI=$DIR/pki ETC=$DIR/etc VAR=$DIR/var RUN=$DIR/run LOG=$DIR/log
SOCK=$RUN/containerd/containerd.sock
KUBECTL=$TOOLS/kubectl
export KUBECONFIG=$DIR/kubeconfig

POD_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
DNS_IP=10.96.0.10
BRIDGE=k3khc0
CNI_NETWORK=k3k-hostcluster
ETCD_PORT=2479 # not 2379, so a test's own etcd on the default port does not collide

NODE=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
default_ip() {
  local dev
  dev=$(ip route show default 2>/dev/null | awk '{print $5; exit}')
  [ -n "$dev" ] && ip -4 -o addr show dev "$dev" | awk '{split($4, a, "/"); print a[1]; exit}'
}
NODE_IP=${NODE_IP:-$(default_ip || true)}

say() { printf '[%s] %s\n' "$(date +%T)" "$*"; }
die() { printf 'hostcluster: %s\n' "$*" >&2; exit 1; }
ctr_() { "$TOOLS/ctr" --address "$SOCK" --namespace k8s.io "$@"; }
kc() { "$KUBECTL" "$@"; }

# until SECONDS WHAT COMMAND…: retry COMMAND every half second.
until_ok() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${limit}s waiting for $what (logs: $LOG)"
    sleep 0.5
  done
}

# ours PID: the process runs one of the cluster's programs (a binary under $TOOLS
# or $BIN, containerd or a containerd shim) and its command line names our
# directory, or it holds a file below our directory open. k3s's containerd
# overwrites its own arguments once it runs (its command line is then only
# its path), so for it the open files (its metadata database) are the proof.
# Both must hold, so a shell, editor or `tail` that merely names a file of
# ours is never taken for part of the cluster.
ours() {
  local exe
  [ -r "/proc/$1/cmdline" ] || return 1
  grep -qF "$DIR/" < <(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) ||
    find "/proc/$1/fd" -mindepth 1 -maxdepth 1 -lname "$DIR/*" -print -quit 2>/dev/null | grep -q . || return 1
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)} # rebuilt since it started
  case "$exe" in
    "$(realpath -m "$TOOLS")"/* | "$(realpath -m "$BIN")"/* | */containerd | */containerd-shim*) return 0 ;;
  esac
  return 1
}

launch() {
  local name=$1; shift
  setsid "$@" >"$LOG/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
  say "started $name (pid $!)"
}

halt() {
  local name=$1 pid
  pid=$(cat "$RUN/$name.pid" 2>/dev/null) || return 0
  rm -f "$RUN/$name.pid"
  ours "$pid" || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
}

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

cmd_build() {
  need_root
  # One build at a time: CI builds the host cluster in the background while
  # the e2e suite's preparation asks for it too; the second waits, then finds
  # everything built (each step below is cached).
  exec 6>"$DIR.build.lock"
  flock -n 6 || { say "another host cluster build runs: waiting for it ($DIR.build.lock)"; flock 6; }
  if ! dpkg -s $PACKAGES >/dev/null 2>&1; then
    say "installing $PACKAGES"
    # Wait for another apt or dpkg run instead of failing on its lock; retry
    # downloads that break off.
    local apt=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
    apt-get "${apt[@]}" update -qq
    DEBIAN_FRONTEND=noninteractive apt-get "${apt[@]}" install -y -qq --no-install-recommends $PACKAGES >/dev/null
  fi
  # CoreDNS too: it lives beside the other upstream binaries, in the cache that
  # outlives $DIR (which may be under /tmp).
  say "kubernetes, etcd, coredns and the container runtime into $TOOLS"
  "$ROOT/hack/build-tools.sh" "$TOOLS" containerd-shim-runc-v2 runc etcd netpol coredns \
    kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl containerd ctr
  mkdir -p "$BIN" "$IMAGES"
  say "harness tools"
  (cd "$ROOT/hack/hostcluster/tools" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$BIN/" ./mkimage ./pause ./pki ./provisioner)
  [ -x /bin/busybox ] || die "/bin/busybox missing (package busybox-static)"
  say "base images"
  "$BIN/mkimage" -o "$IMAGES/pause.tar" -t registry.k8s.io/pause:3.10 -entrypoint /pause /pause="$BIN/pause"
  "$BIN/mkimage" -o "$IMAGES/coredns.tar" -t hostcluster.local/coredns:v1 \
    -entrypoint /coredns -cmd "-conf /etc/coredns/Corefile" /coredns="$TOOLS/coredns"
  # toolbox: busybox and its applets, for test pods (sh, wget, nslookup, httpd, …).
  local links=()
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || links+=("/bin/$applet@busybox")
  done
  "$BIN/mkimage" -o "$IMAGES/toolbox.tar" -t hostcluster.local/toolbox:v1 -entrypoint /bin/sh \
    /bin/busybox=/bin/busybox "${links[@]}"
  say "build done"
}

write_config() {
  mkdir -p "$ETC/cni" "$VAR" "$RUN/containerd" "$LOG"
  cat >"$ETC/containerd.toml" <<EOF
version = 2 # containerd 2 migrates it in memory (a warning in its log)
root = "$VAR/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$VAR/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # The sandbox lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj, so keep
  # every container's at or above ours, or no pod starts.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN/runc"
        BinaryName = "$TOOLS/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ETC/cni"
EOF
  cat >"$ETC/cni/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}],
               "dataDir": "$VAR/cni-ipam"}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$ETC/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# Every pod gets a process bound (the pids cgroup of its pod): Kubernetes
# bounds a pod's processes only through this setting, and without it a
# tenant's fork bomb reaches the node's limit (docs/security.md, "What the
# host must set"). 4096 leaves a k3s server (a few hundred threads) ample room.
podPidsLimit: 4096
# Test images are imported, never pulled: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
EOF
  cat >"$ETC/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $PKI/kube-proxy.kubeconfig}
hostnameOverride: $NODE
mode: iptables
clusterCIDR: $POD_CIDR
nodePortAddresses: [primary]
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
EOF
}

# port_free PORT: nothing listens on TCP PORT.
port_free() { ! ss -Hltn "sport = :$1" | grep -q .; }

# raise_inotify_limits sets the node's inotify limits to what a node running
# many k3s servers needs, as kind's and k3s's guides do, never lowering them.
# Instances are per user and every root process of the node shares them: a
# k3s server holds 13 (measured on this node during the e2e suite), so the
# kernel's default of 128 is gone with nine servers, which the suite runs at
# once (CI of 2026-12-05). docs/kubeconfig.md has the same advice for users.
raise_inotify_limits() {
  local kv key want have
  for kv in fs.inotify.max_user_instances=8192 fs.inotify.max_user_watches=524288; do
    key=${kv%=*}; want=${kv#*=}
    have=$(sysctl -n "$key")
    if [ "$have" -lt "$want" ]; then
      sysctl -qw "$key=$want"
      say "$key raised from $have to $want"
    fi
  done
}

cmd_up() {
  need_root
  [ -n "$NODE_IP" ] || die "cannot find this machine's address (no default route); set NODE_IP"
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd containerd ctr containerd-shim-runc-v2 runc; do
    [ -x "$TOOLS/$b" ] || die "$TOOLS/$b missing: run '$0 build'"
  done
  if [ "$NETPOL" = 1 ]; then
    [ -x "$TOOLS/netpol" ] || die "$TOOLS/netpol missing: run '$0 build' (or set HOSTCLUSTER_NETPOL=0)"
    command -v ipset >/dev/null || die "ipset missing: run '$0 build'"
  fi
  for b in pki provisioner; do [ -x "$BIN/$b" ] || die "$BIN/$b missing: run '$0 build'"; done
  cmd_down quiet
  for port in $ETCD_PORT 6443 10250 10257 10259; do
    port_free "$port" || die "port $port is in use (another cluster on this machine?)"
  done
  say "node $NODE at $NODE_IP, state in $DIR"
  sysctl -qw net.ipv4.ip_forward=1
  raise_inotify_limits
  mkdir -p "$PKI" "$RUN" "$LOG"
  "$BIN/pki" -dir "$PKI" -node "$NODE" -node-ip "$NODE_IP" -service-ip "$SERVICE_IP"
  cp "$PKI/admin.kubeconfig" "$KUBECONFIG"
  write_config

  launch etcd "$TOOLS/etcd" --name hostcluster --data-dir "$VAR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls http://127.0.0.1:2480 --initial-advertise-peer-urls http://127.0.0.1:2480 \
    --initial-cluster hostcluster=http://127.0.0.1:2480 --listen-metrics-urls http://127.0.0.1:2481 \
    --unsafe-no-fsync --log-level warn
  start_containerd
  # k3s's Kubernetes (hack/k3s.sh) writes the loopback client certificate into
  # --cert-dir; its default, /var/run/kubernetes, is not ours to create.
  mkdir -p "$VAR/kube-apiserver"
  launch kube-apiserver "$TOOLS/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --advertise-address="$NODE_IP" --secure-port=6443 \
    --cert-dir="$VAR/kube-apiserver" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction --allow-privileged=true \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP,Hostname --profiling=false
  # /etc/hosts maps the hostname to 127.0.0.1 here: the apiserver must reach the
  # kubelet by the node's InternalIP (above), and the kubelet must report it (below).

  until_ok 30 containerd test -S "$SOCK"
  cmd_import "$IMAGES"/*.tar
  until_ok 90 kube-apiserver kc get --raw /readyz
  say "apiserver ready"
  local cm=$PKI/controller-manager.kubeconfig sc=$PKI/scheduler.kubeconfig
  launch kube-controller-manager "$TOOLS/kube-controller-manager" \
    --kubeconfig="$cm" --authentication-kubeconfig="$cm" --authorization-kubeconfig="$cm" \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --use-service-account-credentials=true --leader-elect=false --bind-address=127.0.0.1 \
    --allocate-node-cidrs=false --profiling=false
  launch kube-scheduler "$TOOLS/kube-scheduler" \
    --kubeconfig="$sc" --authentication-kubeconfig="$sc" --authorization-kubeconfig="$sc" \
    --leader-elect=false --bind-address=127.0.0.1 --profiling=false
  kc apply -f "$ROOT/hack/hostcluster/manifests/storage.yaml" >/dev/null
  launch provisioner "$BIN/provisioner" --kubeconfig "$PKI/admin.kubeconfig" --root "$VAR/volumes"
  start_node_agents
  until_ok 60 "default service account" kc get serviceaccount default
  kc apply -f "$ROOT/hack/hostcluster/manifests/coredns.yaml" >/dev/null
  kc -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null || die "coredns did not become ready"
  say "up: export KUBECONFIG=$KUBECONFIG"
}

# The node's own programs (what a node restart stops) are containerd, the
# kubelet, kube-proxy and the network policy controller; etcd, the API server,
# the controller manager, the scheduler and the volume provisioner are the
# control plane, which lives elsewhere in a real cluster and stays up.
NODE_PROGRAMS="netpol kube-proxy kubelet containerd"

start_containerd() {
  # k3s's containerd (v2.1, from the k3s build) finds its shim on the PATH.
  launch containerd env PATH="$TOOLS:$PATH" "$TOOLS/containerd" --config "$ETC/containerd.toml"
}

# start_node_agents starts the kubelet and kube-proxy, waits for the node to be
# Ready, then starts the network policy controller.
start_node_agents() {
  launch kubelet "$TOOLS/kubelet" --config="$ETC/kubelet.yaml" --kubeconfig="$PKI/kubelet.kubeconfig" \
    --root-dir="$VAR/kubelet" --cert-dir="$VAR/kubelet/pki" --node-ip="$NODE_IP" --hostname-override="$NODE"
  launch kube-proxy "$TOOLS/kube-proxy" --config="$ETC/kube-proxy.yaml"
  until_ok 90 "node $NODE Ready" node_ready
  say "node Ready"
  if [ "$NETPOL" = 1 ]; then
    # It reads the node's addresses when it starts, so only once the node is Ready.
    launch netpol "$TOOLS/netpol" -kubeconfig "$PKI/admin.kubeconfig" -node "$NODE" -service-cidr "$SERVICE_CIDR" -v=1
    until_ok 60 "the network policy controller's chains" iptables -w -S KUBE-ROUTER-FORWARD
    say "network policy enforced (kube-router netpol)"
  fi
}

# cmd_restart emulates a node that loses power and boots again: every program
# of the node and every container dies at once (SIGKILL, no pod is stopped
# gracefully, nothing is told), and what a boot clears is cleared (mounts,
# network namespaces, the bridge, iptables rules and ipsets, containerd's and
# runc's state under /run). What lives on the node's disk stays: images,
# volumes, containerd's metadata, the kubelet's directory. The control plane
# keeps running, as it would on other machines. After DOWNTIME seconds the
# node's programs start again and the kubelet finds its pods without
# containers, as after a real boot.
cmd_restart() {
  local downtime=${1:-10}
  need_root
  [[ "$downtime" =~ ^[0-9]+$ ]] || die "restart: SECONDS must be a whole number, not '$downtime'"
  [ -f "$ETC/kubelet.yaml" ] || die "there is no node to restart: run '$0 up' first"
  say "node $NODE: power cut"
  local name pid child
  for name in $NODE_PROGRAMS; do
    pid=$(cat "$RUN/$name.pid" 2>/dev/null) || continue
    rm -f "$RUN/$name.pid"
    ours "$pid" && kill -9 "$pid" 2>/dev/null || true
  done
  # The containers: each shim's children are its containers' first processes
  # (killing one ends its PID namespace), then the shims.
  for pid in $(pgrep -f -- "$DIR/" || true); do
    ours "$pid" || continue
    case "$(readlink "/proc/$pid/exe" 2>/dev/null)" in
      */containerd-shim*)
        for child in $(pgrep -P "$pid" || true); do kill -9 "$child" 2>/dev/null || true; done
        kill -9 "$pid" 2>/dev/null || true
        ;;
    esac
  done
  sleep 0.5
  forget_boot_state
  rm -rf "$RUN/containerd" "$RUN/runc"
  # The logs of the node's programs before the cut stay beside the new ones.
  local stamp
  stamp=$(date +%H%M%S)
  for name in $NODE_PROGRAMS; do
    [ -f "$LOG/$name.log" ] && mv "$LOG/$name.log" "$LOG/$name.before-restart-$stamp.log"
  done
  say "node $NODE: down for ${downtime}s"
  sleep "$downtime"
  say "node $NODE: boot"
  mkdir -p "$RUN/containerd"
  start_containerd
  until_ok 30 containerd test -S "$SOCK"
  start_node_agents
  say "node $NODE: restarted"
}

# forget_boot_state removes what a machine's restart removes: mounts under our
# directory (deepest first: kubelet volumes, overlay root filesystems, shm),
# network namespaces no process uses any more, the CNI plugin's cached
# results, the network policy controller's and kube-proxy's iptables rules and
# ipsets, and the bridge.
forget_boot_state() {
  awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done || true
  local ns
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    [ -z "$(ip netns pids "$(basename "$ns")" 2>/dev/null)" ] || continue
    umount "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  rm -f /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null || true
  clean_netpol
  clean_iptables
  ip link del "$BRIDGE" 2>/dev/null || true
}

node_ready() {
  [ "$(kc get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

cmd_down() {
  local quiet=${1:-}
  need_root
  [ -d "$DIR" ] || return 0
  # With the apiserver and kubelet alive, let the kubelet tear pods down properly
  # (CNI DEL, volume unmounts) before anything is killed.
  if [ -f "$RUN/kube-apiserver.pid" ] && [ -f "$RUN/kubelet.pid" ] && [ -x "$KUBECTL" ]; then
    halt kube-controller-manager
    halt kube-scheduler
    kc delete pods --all --all-namespaces --force --grace-period=0 --wait=false --request-timeout=5s >/dev/null 2>&1 || true
    for _ in $(seq 60); do
      [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  local name
  for name in netpol provisioner kube-proxy kubelet kube-scheduler kube-controller-manager; do halt "$name"; done
  if [ -S "$SOCK" ] && [ -f "$RUN/containerd.pid" ]; then
    local id
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    sleep 0.5
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true; done
  fi
  for name in containerd kube-apiserver etcd; do halt "$name"; done
  # Whatever is left that names our directory: the shims (their -address is our
  # socket) and anything from a run whose pid files are gone. A shim is the parent
  # of its containers' first processes; killing those ends each container's PID
  # namespace, so the containers go first, then the shims.
  local pid child
  for pid in $(pgrep -f -- "$DIR/" || true); do
    [ "$pid" != $$ ] && ours "$pid" || continue
    case "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" in
      *containerd-shim*) for child in $(pgrep -P "$pid" || true); do kill -9 "$child" 2>/dev/null || true; done ;;
    esac
  done
  sleep 0.2
  for pid in $(pgrep -f -- "$DIR/" || true); do
    [ "$pid" != $$ ] && ours "$pid" && kill -9 "$pid" 2>/dev/null || true
  done
  sleep 0.2
  forget_boot_state
  rm -rf "$VAR" "$RUN" "$PKI" "$ETC" "$KUBECONFIG"
  [ -n "$quiet" ] || say "down"
}

# clean_iptables removes the chains kube-proxy, kubelet and the CNI portmap plugin
# made (KUBE-*, CNI-*) and the rules that jump to them.
clean_iptables() {
  [ -x "$TOOLS/kube-proxy" ] && "$TOOLS/kube-proxy" --cleanup >/dev/null 2>&1 || true
  local ipt table rule chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for table in filter nat mangle; do
      "$ipt" -t "$table" -S 2>/dev/null | grep -E '^-A [^ ]+ .*-j (KUBE-|CNI-)' | grep -vE '^-A (KUBE-|CNI-)' |
        sed 's/^-A /-D /' | while read -r rule; do
          eval "$ipt -t $table $rule" 2>/dev/null || true
        done || true
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}'); do
        "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}'); do
        "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# clean_netpol removes the network policy controller's iptables rules and
# ipsets (its own cleanup, then any KUBE-SRC-*/KUBE-DST-* set left over, once
# no rule refers to it any more).
clean_netpol() {
  local log=/dev/null
  [ -d "$LOG" ] && log=$LOG/netpol-cleanup.log
  [ -x "$TOOLS/netpol" ] && "$TOOLS/netpol" -cleanup >"$log" 2>&1 || true
  command -v ipset >/dev/null || return 0
  local set
  for set in $(ipset -n list 2>/dev/null | grep -E '^KUBE-(SRC|DST)-' || true); do
    ipset destroy "$set" 2>/dev/null || true
  done
}

cmd_import() {
  need_root
  [ $# -gt 0 ] || die "usage: $0 import IMAGE.tar…"
  [ -S "$SOCK" ] || die "containerd is not running: run '$0 up' first"
  local f
  for f in "$@"; do
    [ -f "$f" ] || die "$f: no such file"
    ctr_ images import "$f" >/dev/null
    say "imported $f"
  done
}

cmd_status() {
  local name pid state running=0
  local want=8
  [ "$NETPOL" = 1 ] && want=9
  for name in etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy provisioner $([ "$NETPOL" = 1 ] && echo netpol); do
    pid=$(cat "$RUN/$name.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && ours "$pid"; then state="running (pid $pid)"; running=$((running + 1)); else state="stopped"; fi
    printf '%-24s %s\n' "$name" "$state"
  done
  [ "$running" -gt 0 ] || { echo "host cluster is down ($DIR)"; return 1; }
  echo "KUBECONFIG=$KUBECONFIG"
  kc get nodes -o wide 2>&1 || true
  [ "$running" = "$want" ]
}

case "${1:-}" in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  import) shift; cmd_import "$@" ;;
  status) cmd_status ;;
  restart) shift; cmd_restart "$@" ;;
  *) echo "usage: $0 build|up|down|import IMAGE.tar…|status|restart [SECONDS]" >&2; exit 2 ;;
esac
