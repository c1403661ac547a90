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
#   hostcluster.sh restart [SECONDS]  restart node 1 as a power cut does: its kubelet,
#                                     kube-proxy, containerd and every container killed at
#                                     once, mounts, network namespaces, iptables rules and
#                                     /run state gone; SECONDS (default 10) later started
#                                     again with /var kept (images, volumes, kubelet state)
#   hostcluster.sh restart-node I [SECONDS]  the same for node I (a number, or
#                                     the node's name)
#   hostcluster.sh kill-node I        node I loses power and its network: it stops
#                                     answering and never comes back on its own
#                                     (restart-node I brings it back)
#   hostcluster.sh add-node I         join node I (2..9) to the running cluster, with
#                                     every image imported so far
#
# HOSTCLUSTER_NODES=N (default 1) runs N nodes under one control plane. Node 1 is
# this machine's own network namespace; node I (2..N) is a kubelet, containerd,
# kube-proxy and network policy controller of its own in network namespace
# k3khc-nI (address 10.245.0.I on bridge k3khcn, pods 10.244.(I-1).0/24 routed
# through it), its own cgroup root /k3khc-nI and its state in nodes/nI.
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

NODES=${HOSTCLUSTER_NODES:-1}
[[ "$NODES" =~ ^[1-9]$ ]] || { echo "hostcluster: HOSTCLUSTER_NODES=$NODES: want 1 to 9" >&2; exit 2; }
POD_CIDR=10.244.0.0/16 # all nodes' pods, node I's 10.244.(I-1).0/24
LINK_BRIDGE=k3khcn LINK_NET=10.245.0 # between this machine and nodes 2..N
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
ctr_() { "$TOOLS/ctr" --address "${N_SOCK:-$SOCK}" --namespace k8s.io "$@"; }
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

# use_node I sets the variables naming node I's programs, files and addresses:
# N_SFX (suffix of its programs' pid and log files), N_NAME, N_IP, N_CIDR,
# N_ETC, N_VAR, N_RUN, N_SOCK, N_CNI (its CNI network's name), N_KUBELET_KC,
# N_PROXY_KC, N_ADMIN_KC and N_EXEC (the command prefix that runs a program
# in its network namespace: none for node 1). Node 1's are what they were
# before there were other nodes.
use_node() {
  local i=$1
  if [ "$i" = 1 ]; then
    N_SFX="" N_NAME=$NODE N_IP=$NODE_IP N_ETC=$ETC N_VAR=$VAR N_RUN=$RUN N_SOCK=$SOCK N_CNI=$CNI_NETWORK
    # A /24 like every node's, also while it is the only one: add-node
    # routes 10.244.(I-1).0/24 to node I, which node 1's range must not hold.
    N_CIDR=10.244.0.0/24
    N_KUBELET_KC=$PKI/kubelet.kubeconfig N_PROXY_KC=$PKI/kube-proxy.kubeconfig N_ADMIN_KC=$PKI/admin.kubeconfig
    N_EXEC=()
    return
  fi
  N_SFX=-n$i N_NAME=$NODE-n$i N_IP=$LINK_NET.$i N_CIDR=10.244.$((i - 1)).0/24 N_CNI=k3khc-n$i
  N_ETC=$DIR/nodes/n$i/etc N_VAR=$DIR/nodes/n$i/var N_RUN=$DIR/nodes/n$i/run
  N_SOCK=$N_RUN/containerd/containerd.sock
  N_KUBELET_KC=$PKI/kubelet-$N_NAME.kubeconfig N_PROXY_KC=$PKI/kube-proxy-remote.kubeconfig N_ADMIN_KC=$PKI/admin-remote.kubeconfig
  # nsenter, not `ip netns exec`: that one also remounts /sys, which hides
  # the cgroup hierarchies from the kubelet and runc.
  N_EXEC=(nsenter --net=/run/netns/k3khc-n$i)
}

# in_node CMD…: runs CMD in the current node's network namespace.
in_node() { "${N_EXEC[@]}" "$@"; }

write_config() {
  local i
  for i in $(seq "$NODES"); do
    use_node "$i"
    write_node_config "$i"
  done
}

# write_node_config I writes node I's containerd, CNI, kubelet and
# kube-proxy configuration (node I's variables set).
write_node_config() {
  local cgroup_root=""
  [ "$1" = 1 ] || cgroup_root="cgroupRoot: /k3khc-n$1"
  mkdir -p "$N_ETC/cni" "$N_VAR" "$N_RUN/containerd" "$LOG"
  cat >"$N_ETC/containerd.toml" <<EOF
version = 2 # containerd 2 migrates it in memory (a warning in its log)
root = "$N_VAR/containerd"
state = "$N_RUN/containerd"
[grpc]
  address = "$N_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$N_VAR/containerd-opt"
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
        Root = "$N_RUN/runc"
        BinaryName = "$TOOLS/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$N_ETC/cni"
EOF
  cat >"$N_ETC/cni/10-$N_CNI.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$N_CNI",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$N_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}],
               "dataDir": "$N_VAR/cni-ipam"}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$N_ETC/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
address: $N_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$N_SOCK
$cgroup_root
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
  cat >"$N_ETC/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $N_PROXY_KC}
hostnameOverride: $N_NAME
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
  # Identities for every node there may be (2..9), so that add-node can
  # join one later without a new CA.
  local i extra=()
  for i in $(seq 2 9); do use_node "$i"; extra+=("$N_NAME"); done
  "$BIN/pki" -dir "$PKI" -node "$NODE" -node-ip "$NODE_IP" -service-ip "$SERVICE_IP" \
    -extra-nodes "$(IFS=,; echo "${extra[*]}")" -remote-server "https://$NODE_IP:6443"
  cp "$PKI/admin.kubeconfig" "$KUBECONFIG"
  # Nodes 2..N reach the apiserver at this machine's address, not 127.0.0.1.
  local kc_
  for kc_ in kube-proxy admin; do
    sed "s#server: https://127.0.0.1:6443#server: https://$NODE_IP:6443#" "$PKI/$kc_.kubeconfig" >"$PKI/$kc_-remote.kubeconfig"
  done
  if [ "$NODES" -gt 1 ]; then
    link_up
    for i in $(seq 2 "$NODES"); do node_net_up "$i"; done
  fi
  write_config

  launch etcd "$TOOLS/etcd" --name hostcluster --data-dir "$VAR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls http://127.0.0.1:2480 --initial-advertise-peer-urls http://127.0.0.1:2480 \
    --initial-cluster hostcluster=http://127.0.0.1:2480 --listen-metrics-urls http://127.0.0.1:2481 \
    --unsafe-no-fsync --log-level warn
  for i in $(seq "$NODES"); do use_node "$i"; start_containerd; done
  # k3s's Kubernetes (hack/k3s.sh) writes the loopback client certificate into
  # --cert-dir; its default, /var/run/kubernetes, is not ours to create.
  mkdir -p "$VAR/kube-apiserver"
  # The toleration of a not-ready or unreachable node every pod gets unless it
  # names one is 60 s, not Kubernetes' 300 s, so that the suite's lost-node
  # scenarios see the pods of a lost node evicted within its time; a node's
  # restart (under 60 s) evicts nothing either way. docs/e2e.md says so.
  launch kube-apiserver "$TOOLS/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --advertise-address="$NODE_IP" --secure-port=6443 \
    --cert-dir="$VAR/kube-apiserver" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction --allow-privileged=true \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP,Hostname --profiling=false \
    --default-not-ready-toleration-seconds=60 --default-unreachable-toleration-seconds=60
  # /etc/hosts maps the hostname to 127.0.0.1 here: the apiserver must reach the
  # kubelet by the node's InternalIP (above), and the kubelet must report it (below).

  for i in $(seq "$NODES"); do use_node "$i"; until_ok 30 "containerd$N_SFX" test -S "$N_SOCK"; done
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
  for i in $(seq "$NODES"); do use_node "$i"; start_node_agents; done
  until_ok 60 "default service account" kc get serviceaccount default
  kc apply -f "$ROOT/hack/hostcluster/manifests/coredns.yaml" >/dev/null
  kc -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null || die "coredns did not become ready"
  say "up: export KUBECONFIG=$KUBECONFIG"
}

# link_up makes the bridge between this machine and nodes 2..N.
link_up() {
  ip link add "$LINK_BRIDGE" type bridge 2>/dev/null || true
  ip addr replace "$LINK_NET.1/24" dev "$LINK_BRIDGE"
  ip link set "$LINK_BRIDGE" up
}

# node_net_up I gives node I its network namespace, its address on the link
# bridge, a default route through this machine and this machine a route to
# its pods, and its cgroup root in every cgroup hierarchy.
node_net_up() {
  local i=$1 ns=k3khc-n$1 veth=k3khcv$1
  use_node "$i"
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$LINK_BRIDGE" up
  in_node ip link set lo up
  in_node ip addr add "$N_IP/24" dev eth0
  in_node ip link set eth0 up
  in_node ip route add default via "$LINK_NET.1"
  in_node sysctl -qw net.ipv4.ip_forward=1
  in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  ip route replace "$N_CIDR" via "$N_IP"
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -L "${h%/}" ] && continue # cpu and cpuacct name one hierarchy
    mkdir -p "$h$ns"
    # A cpuset cgroup holds no task until it has CPUs and memory nodes.
    if [ -f "${h}cpuset.cpus" ]; then
      cat "${h}cpuset.cpus" >"$h$ns/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h$ns/cpuset.mems"
    fi
  done
}

# The node's own programs (what a node restart stops) are containerd, the
# kubelet, kube-proxy and the network policy controller; etcd, the API server,
# the controller manager, the scheduler and the volume provisioner are the
# control plane, which lives elsewhere in a real cluster and stays up.
NODE_PROGRAMS="netpol kube-proxy kubelet containerd"

# start_containerd starts the current node's containerd.
start_containerd() {
  # k3s's containerd (v2.1, from the k3s build) finds its shim on the PATH.
  launch "containerd$N_SFX" "${N_EXEC[@]}" env PATH="$TOOLS:$PATH" "$TOOLS/containerd" --config "$N_ETC/containerd.toml"
}

# start_node_agents starts the current node's kubelet and kube-proxy, waits
# for the node to be Ready, then starts its network policy controller.
start_node_agents() {
  launch "kubelet$N_SFX" "${N_EXEC[@]}" "$TOOLS/kubelet" --config="$N_ETC/kubelet.yaml" --kubeconfig="$N_KUBELET_KC" \
    --root-dir="$N_VAR/kubelet" --cert-dir="$N_VAR/kubelet/pki" --node-ip="$N_IP" --hostname-override="$N_NAME"
  launch "kube-proxy$N_SFX" "${N_EXEC[@]}" "$TOOLS/kube-proxy" --config="$N_ETC/kube-proxy.yaml"
  until_ok 90 "node $N_NAME Ready" node_ready "$N_NAME"
  say "node $N_NAME Ready"
  if [ "$NETPOL" = 1 ]; then
    # It reads the node's addresses when it starts, so only once the node is Ready.
    launch "netpol$N_SFX" "${N_EXEC[@]}" "$TOOLS/netpol" -kubeconfig "$N_ADMIN_KC" -node "$N_NAME" -service-cidr "$SERVICE_CIDR" -v=1
    until_ok 60 "the network policy controller's chains" in_node iptables -w -S KUBE-ROUTER-FORWARD
    say "network policy enforced on $N_NAME (kube-router netpol)"
  fi
}

# power_cut kills the current node's programs and every container of its
# containerd at once (SIGKILL, no pod stopped gracefully, nothing told), then
# clears what a boot clears (forget_boot_state) and containerd's and runc's
# state under its run directory. Its disk stays: images, volumes,
# containerd's metadata, the kubelet's directory.
power_cut() {
  say "node $N_NAME: power cut"
  local name pid child cmd
  for name in $NODE_PROGRAMS; do
    pid=$(cat "$RUN/$name$N_SFX.pid" 2>/dev/null) || continue
    rm -f "$RUN/$name$N_SFX.pid"
    ours "$pid" && kill -9 "$pid" 2>/dev/null || true
  done
  # The containers: each shim of this node's containerd (its -address is the
  # node's socket) is the parent of its containers' first processes (killing
  # one ends its PID namespace); then the shims.
  for pid in $(pgrep -f -- "$DIR/" || true); do
    ours "$pid" || continue
    case "$(readlink "/proc/$pid/exe" 2>/dev/null)" in */containerd-shim*) ;; *) continue ;; esac
    cmd=" $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) "
    [[ "$cmd" == *" -address $N_SOCK "* ]] || continue
    for child in $(pgrep -P "$pid" || true); do kill -9 "$child" 2>/dev/null || true; done
    kill -9 "$pid" 2>/dev/null || true
  done
  sleep 0.5
  forget_boot_state
  rm -rf "$N_RUN/containerd" "$N_RUN/runc"
  # The logs of the node's programs before the cut stay beside the new ones.
  local stamp
  stamp=$(date +%H%M%S)
  for name in $NODE_PROGRAMS; do
    [ -f "$LOG/$name$N_SFX.log" ] && mv "$LOG/$name$N_SFX.log" "$LOG/$name$N_SFX.before-restart-$stamp.log"
  done
  return 0
}

# boot starts the current node's programs again after a power cut.
boot() {
  say "node $N_NAME: boot"
  mkdir -p "$N_RUN/containerd"
  start_containerd
  until_ok 30 "containerd$N_SFX" test -S "$N_SOCK"
  start_node_agents
  say "node $N_NAME: restarted"
}

# node_number ARG: the node number of ARG, a number or a node's name
# ($NODE is node 1, $NODE-nI node I).
node_number() {
  case "$1" in
    "$NODE") echo 1 ;;
    "$NODE"-n[2-9]) echo "${1#"$NODE"-n}" ;;
    *) echo "$1" ;;
  esac
}

# cmd_restart I SECONDS emulates node I losing power and booting again: a
# power cut, DOWNTIME seconds, a boot; the kubelet finds its pods without
# containers, as after a real boot. The control plane keeps running, as it
# would on other machines.
cmd_restart() {
  local i downtime=${2:-10}
  i=$(node_number "${1:-}")
  need_root
  [[ "$i" =~ ^[1-9]$ ]] || die "restart-node: I must be a node number (1 to 9), not '$i'"
  [[ "$downtime" =~ ^[0-9]+$ ]] || die "restart: SECONDS must be a whole number, not '$downtime'"
  use_node "$i"
  [ -f "$N_ETC/kubelet.yaml" ] || die "there is no node $i to restart: run '$0 up' (HOSTCLUSTER_NODES) first"
  power_cut
  [ "$i" = 1 ] || ip link set "k3khcv$i" up # after kill-node
  say "node $N_NAME: down for ${downtime}s"
  sleep "$downtime"
  boot
}

# cmd_kill I: node I loses power and its network for good: a power cut, then
# its link to this machine goes down, so it answers nothing (its pods' IPs
# included) until restart-node I. Node 1 holds this machine's own network and
# cannot be cut off that way.
cmd_kill() {
  local i
  i=$(node_number "${1:-}")
  need_root
  [[ "$i" =~ ^[2-9]$ ]] || die "kill-node: I must be a node number from 2 to 9, not '$i'"
  use_node "$i"
  [ -f "$N_ETC/kubelet.yaml" ] || die "there is no node $i: run '$0 up' with HOSTCLUSTER_NODES=$i or more first"
  power_cut
  ip link set "k3khcv$i" down
  say "node $N_NAME: killed (restart-node $i brings it back)"
}

# forget_boot_state removes what the current node's restart removes: mounts
# under its directories (deepest first: kubelet volumes, overlay root
# filesystems, shm), network namespaces no process uses any more, its CNI
# network's cached results, the network policy controller's and kube-proxy's
# iptables rules and ipsets, and its bridge.
forget_boot_state() {
  awk -v v="$N_VAR/" -v r="$N_RUN/" 'index($2, v) == 1 || index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done || true
  forget_pod_netns
  rm -f /var/lib/cni/results/"$N_CNI"-* 2>/dev/null || true
  clean_netpol
  clean_iptables
  in_node ip link del "$BRIDGE" 2>/dev/null || true
}

# forget_pod_netns removes the pod network namespaces no process uses any more.
# /run/netns is every node's: one made in the last 30 s may be another node's
# pod sandbox whose process has not joined it yet, so it is left alone. A
# namespace file that is still mounted in another mount namespace (a container
# being set up copies the mounts) cannot be removed (EBUSY): it stays, an
# empty file no one uses (a CI run failed on it, killing a node while another
# node started a pod).
forget_pod_netns() {
  local ns now
  now=$(date +%s)
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    [ $(( now - $(stat -c %Y "$ns" 2>/dev/null || echo "$now") )) -ge 30 ] || continue
    [ -z "$(ip netns pids "$(basename "$ns")" 2>/dev/null)" ] || continue
    umount "$ns" 2>/dev/null || true
    rm -f "$ns" 2>/dev/null || true
  done
}

node_ready() {
  [ "$(kc get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# made_nodes lists the numbers of the nodes the last `up` made (1, and each
# nodes/nI directory).
made_nodes() {
  echo 1
  local d
  for d in "$DIR"/nodes/n*; do
    [ -d "$d" ] && echo "${d##*/n}"
  done
  return 0
}

cmd_down() {
  local quiet=${1:-}
  need_root
  [ -d "$DIR" ] || return 0
  local i nodes
  nodes=$(made_nodes)
  # With the apiserver and kubelet alive, let the kubelet tear pods down properly
  # (CNI DEL, volume unmounts) before anything is killed.
  if [ -f "$RUN/kube-apiserver.pid" ] && [ -f "$RUN/kubelet.pid" ] && [ -x "$KUBECTL" ]; then
    halt kube-controller-manager
    halt kube-scheduler
    kc delete pods --all --all-namespaces --force --grace-period=0 --wait=false --request-timeout=5s >/dev/null 2>&1 || true
    for i in $nodes; do
      use_node "$i"
      for _ in $(seq 60); do
        [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
        sleep 0.5
      done
    done
  fi
  local name
  for i in $nodes; do
    use_node "$i"
    for name in netpol kube-proxy kubelet; do halt "$name$N_SFX"; done
  done
  for name in provisioner kube-scheduler kube-controller-manager; do halt "$name"; done
  for i in $nodes; do
    use_node "$i"
    if [ -S "$N_SOCK" ] && [ -f "$RUN/containerd$N_SFX.pid" ]; then
      local id
      for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
      sleep 0.5
      for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true; done
    fi
    halt "containerd$N_SFX"
  done
  for name in kube-apiserver etcd; do halt "$name"; done
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
  # Mounts below our directory, deepest first, whichever node made them.
  awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done || true
  for i in $nodes; do
    use_node "$i"
    if [ "$i" = 1 ]; then
      forget_boot_state
      continue
    fi
    # A network namespace takes its iptables rules, ipsets, bridge and veth
    # with it; the cgroups go once empty, deepest first.
    ip netns del "k3khc-n$i" 2>/dev/null || true
    ip route del "$N_CIDR" 2>/dev/null || true
    local h
    for h in /sys/fs/cgroup/*/; do
      [ -d "${h}k3khc-n$i" ] && find "${h}k3khc-n$i" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
  done
  forget_pod_netns
  ip link del "$LINK_BRIDGE" 2>/dev/null || true
  rm -rf "$VAR" "$RUN" "$PKI" "$ETC" "$DIR/nodes" "$DIR/imported" "$KUBECONFIG"
  [ -n "$quiet" ] || say "down"
}

# clean_iptables removes the chains kube-proxy, kubelet and the CNI portmap plugin
# made (KUBE-*, CNI-*) in the current node's network namespace, and the rules
# that jump to them.
clean_iptables() {
  [ -x "$TOOLS/kube-proxy" ] && in_node "$TOOLS/kube-proxy" --cleanup >/dev/null 2>&1 || true
  local ipt table rule chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for table in filter nat mangle; do
      in_node "$ipt" -t "$table" -S 2>/dev/null | grep -E '^-A [^ ]+ .*-j (KUBE-|CNI-)' | grep -vE '^-A (KUBE-|CNI-)' |
        sed 's/^-A /-D /' | while read -r rule; do
          eval "in_node $ipt -t $table $rule" 2>/dev/null || true
        done || true
      for chain in $(in_node "$ipt" -t "$table" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}'); do
        in_node "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $(in_node "$ipt" -t "$table" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}'); do
        in_node "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# clean_netpol removes the network policy controller's iptables rules and
# ipsets in the current node's network namespace (its own cleanup, then any
# KUBE-SRC-*/KUBE-DST-* set left over, once no rule refers to it any more).
clean_netpol() {
  local log=/dev/null
  [ -d "$LOG" ] && log=$LOG/netpol$N_SFX-cleanup.log
  [ -x "$TOOLS/netpol" ] && in_node "$TOOLS/netpol" -cleanup >"$log" 2>&1 || true
  command -v ipset >/dev/null || return 0
  local set
  for set in $(in_node ipset -n list 2>/dev/null | grep -E '^KUBE-(SRC|DST)-' || true); do
    in_node ipset destroy "$set" 2>/dev/null || true
  done
}

# cmd_import loads image tarballs into every node's containerd, and notes
# them in $DIR/imported so that a node added later gets them too.
cmd_import() {
  need_root
  [ $# -gt 0 ] || die "usage: $0 import IMAGE.tar…"
  local f i
  for i in $(made_nodes); do
    use_node "$i"
    [ -S "$N_SOCK" ] || die "containerd$N_SFX is not running: run '$0 up' first"
    for f in "$@"; do
      [ -f "$f" ] || die "$f: no such file"
      ctr_ images import "$f" >/dev/null
      [ "$i" = 1 ] && say "imported $f"
    done
  done
  for f in "$@"; do
    f=$(realpath "$f")
    grep -qxF "$f" "$DIR/imported" 2>/dev/null || echo "$f" >>"$DIR/imported"
  done
  return 0
}

# cmd_add_node I joins node I (2..9) to the running cluster: its network
# namespace and link, its containerd with every image imported so far, its
# kubelet, kube-proxy and network policy controller. The suite adds nodes
# this way after the scenarios that want one node, for those that need more.
cmd_add_node() {
  local i=$1 f
  need_root
  [[ "$i" =~ ^[2-9]$ ]] || die "add-node: I must be a node number from 2 to 9, not '$i'"
  [ -f "$RUN/kube-apiserver.pid" ] && ours "$(cat "$RUN/kube-apiserver.pid")" || die "the host cluster is not up: run '$0 up' first"
  use_node "$i"
  [ ! -e "$DIR/nodes/n$i" ] || die "node $i exists already ($DIR/nodes/n$i)"
  link_up
  node_net_up "$i"
  write_node_config "$i"
  start_containerd
  until_ok 30 "containerd$N_SFX" test -S "$N_SOCK"
  # Every tarball imported so far, `up`'s own base images included.
  for f in $(cat "$DIR/imported" 2>/dev/null); do
    [ -f "$f" ] && ctr_ images import "$f" >/dev/null
  done
  start_node_agents
  say "node $N_NAME added"
}

cmd_status() {
  local name pid state running=0 want=0 i
  local programs="etcd kube-apiserver kube-controller-manager kube-scheduler provisioner"
  for i in $(made_nodes); do
    use_node "$i"
    for name in containerd kubelet kube-proxy $([ "$NETPOL" = 1 ] && echo netpol); do programs+=" $name$N_SFX"; done
  done
  for name in $programs; do
    want=$((want + 1))
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
  restart) shift; cmd_restart 1 "$@" ;;
  restart-node) shift; cmd_restart "$@" ;;
  kill-node) shift; cmd_kill "$@" ;;
  add-node) shift; cmd_add_node "$@" ;;
  *) echo "usage: $0 build|up|down|import IMAGE.tar…|status|restart [SECONDS]|restart-node I [SECONDS]|kill-node I|add-node I" >&2; exit 2 ;;
esac
