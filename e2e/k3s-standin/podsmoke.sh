#!/usr/bin/env bash
# podsmoke.sh runs the k3s stand-in image the way a k3k server pod will: a
# StatefulSet pod whose native sidecar serves the etcd API on 127.0.0.1:2379 (here
# plain etcd, standing in for the datastore sidecar), the stand-in started with
# `k3s server --config …` plus extra flags, its data dir on a PVC. It checks the
# written kubeconfig works, then deletes the pod and checks the new pod, on a new
# IP, comes back with the same CA and token.
#
# Needs a running host cluster (hack/hostcluster/hostcluster.sh up) and the image
# tarball from `hack/images.sh k3s-standin`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${HOSTCLUSTER_DIR:-/tmp/k3k-hostcluster}
TOOLS=${K3K_TOOLS_DIR:-/root/.cache/k3k/tools}
IMAGES=${IMAGES_DIR:-$ROOT/_output/images}
TAG=${IMAGE_TAG:-dev}
export KUBECONFIG=$DIR/kubeconfig
NS=standin-smoke
WORK=$(mktemp -d)
k() { "$TOOLS/kubectl" -n "$NS" "$@"; }
t0=$SECONDS
step() { printf '[%3ds] %s\n' $((SECONDS - t0)) "$*"; }
fail() { printf 'podsmoke: FAIL: %s\n' "$*" >&2; k get pods -o wide >&2 || true; k logs server-0 -c k3s --tail=30 >&2 || true; exit 1; }
cleanup() { "$TOOLS/kubectl" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

[ -f "$IMAGES/k3s-standin.tar" ] || fail "$IMAGES/k3s-standin.tar missing: run hack/images.sh k3s-standin"
"$DIR/bin/mkimage" -o "$WORK/etcd.tar" -t hostcluster.local/etcd:test -entrypoint /bin/etcd /bin/etcd="$TOOLS/etcd" /var/lib/etcd/ 2>/dev/null
"$ROOT/hack/hostcluster/hostcluster.sh" import "$WORK/etcd.tar" "$IMAGES/k3s-standin.tar" >/dev/null
step "images imported"

"$TOOLS/kubectl" create namespace "$NS" >/dev/null
k create secret generic token --from-literal=token="smoke-$RANDOM$RANDOM" >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata: {name: k3s-config}
data:
  config.yaml: |
    datastore-endpoint: http://127.0.0.1:2379
    disable-agent: true
    write-kubeconfig: /var/lib/k3k/kubeconfig/kubeconfig.yaml
    write-kubeconfig-mode: "0600"
    tls-san: [server.$NS.svc, server.$NS.svc.cluster.local]
    token-file: /etc/k3k/token/token
    data-dir: /var/lib/rancher/k3s
    cluster-cidr: 10.42.0.0/16
    service-cidr: 10.43.0.0/16
    cluster-dns: 10.43.0.10
    disable: [servicelb, traefik, metrics-server, local-storage]
    egress-selector-mode: disabled
    https-listen-port: 6443
---
apiVersion: v1
kind: Service
metadata: {name: server}
spec:
  clusterIP: None
  selector: {app: server}
  ports: [{name: https, port: 6443}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: server}
spec:
  serviceName: server
  replicas: 1
  selector: {matchLabels: {app: server}}
  template:
    metadata: {labels: {app: server}}
    spec:
      terminationGracePeriodSeconds: 30
      initContainers:
      - name: datastore
        image: hostcluster.local/etcd:test
        imagePullPolicy: Never
        restartPolicy: Always
        args: [--data-dir=/data/etcd, --listen-client-urls=http://127.0.0.1:2379,
               --advertise-client-urls=http://127.0.0.1:2379, --listen-peer-urls=http://127.0.0.1:2380,
               --initial-advertise-peer-urls=http://127.0.0.1:2380, --initial-cluster=default=http://127.0.0.1:2380,
               --listen-metrics-urls=http://0.0.0.0:2381, --log-level=warn]
        startupProbe: {httpGet: {path: /health, port: 2381}, periodSeconds: 1, failureThreshold: 60}
        volumeMounts: [{name: data, mountPath: /data}]
      containers:
      - name: k3s
        image: k3k-io/k3s-standin:$TAG
        imagePullPolicy: Never
        args: [server, --config, /etc/rancher/k3s/config.yaml, --tls-san=\$(POD_NAME).server.$NS.svc]
        env:
        - name: POD_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        readinessProbe: {tcpSocket: {port: 6443}, periodSeconds: 2}
        volumeMounts:
        - {name: data, mountPath: /var/lib/rancher/k3s, subPath: k3s}
        - {name: config, mountPath: /etc/rancher/k3s}
        - {name: token, mountPath: /etc/k3k/token}
        - {name: kubeconfig, mountPath: /var/lib/k3k/kubeconfig}
      volumes:
      - {name: config, configMap: {name: k3s-config}}
      - {name: token, secret: {secretName: token}}
      - {name: kubeconfig, emptyDir: {}}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
EOF

# check N: wait for server-0 to be ready, fetch its kubeconfig, point it at the
# pod IP and use it from this machine. Prints the CA data.
check() {
  k rollout status statefulset/server --timeout=300s >/dev/null || fail "server pod not ready"
  local ip kc=$WORK/kubeconfig-$1
  ip=$(k get pod server-0 -o jsonpath='{.status.podIP}')
  for _ in $(seq 120); do
    k exec server-0 -c k3s -- cat /var/lib/k3k/kubeconfig/kubeconfig.yaml >"$kc" 2>/dev/null && break
    sleep 1
  done
  [ -s "$kc" ] || fail "no kubeconfig written"
  mode=$(k exec server-0 -c k3s -- stat -c %a /var/lib/k3k/kubeconfig/kubeconfig.yaml)
  [ "$mode" = 600 ] || fail "kubeconfig mode $mode, want 600"
  grep -q 'server: https://127.0.0.1:6443' "$kc" || fail "kubeconfig server is not https://127.0.0.1:6443"
  sed -i "s#https://127.0.0.1:6443#https://$ip:6443#" "$kc"
  "$TOOLS/kubectl" --kubeconfig "$kc" get namespace kube-system >/dev/null 2>&1 || fail "kubeconfig does not work against https://$ip:6443"
  "$TOOLS/kubectl" --kubeconfig "$kc" --tls-server-name "server-0.server.$NS.svc" get --raw /readyz >/dev/null || fail "tls-san from the command line missing"
  echo "$ip $(grep certificate-authority-data "$kc" | sha256sum | cut -c1-16)"
}

read -r ip0 ca0 < <(check 0) || true
[ -n "${ca0:-}" ] || fail "first start"
token0=$(k exec server-0 -c k3s -- cat /var/lib/rancher/k3s/server/token | sha256sum)
step "stand-in serving at $ip0, kubeconfig works (CA $ca0)"
uid0=$(k get pod server-0 -o jsonpath='{.metadata.uid}')
k delete pod server-0 --wait=true >/dev/null
for _ in $(seq 240); do
  uid=$(k get pod server-0 -o jsonpath='{.metadata.uid}' 2>/dev/null || true)
  [ -n "$uid" ] && [ "$uid" != "$uid0" ] && break
  sleep 0.5
done
read -r ip1 ca1 < <(check 1) || true
[ -n "${ca1:-}" ] || fail "start after the pod's deletion"
token1=$(k exec server-0 -c k3s -- cat /var/lib/rancher/k3s/server/token | sha256sum)
[ "$ip1" != "$ip0" ] || fail "new pod kept IP $ip0"
[ "$ca1" = "$ca0" ] || fail "CA changed across the pod's deletion ($ca0 -> $ca1)"
[ "$token1" = "$token0" ] || fail "stored token changed across the pod's deletion"
step "pod deleted: IP $ip0 -> $ip1, same CA and token, kubeconfig works"
"$TOOLS/kubectl" delete namespace "$NS" --wait=true --timeout=180s >/dev/null
step "cleaned up"
echo "podsmoke: PASS in $((SECONDS - t0))s"
