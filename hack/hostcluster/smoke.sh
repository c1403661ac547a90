#!/usr/bin/env bash
# smoke.sh checks that a running host cluster does what the end-to-end suite
# relies on: a StatefulSet pod with a dynamically provisioned PVC, deleted and
# recreated with a new IP, still finds its data; cluster DNS resolves Services and
# pod names; kubectl exec and logs reach the kubelet. Cleans up after itself.
set -euo pipefail

DIR=${HOSTCLUSTER_DIR:-/tmp/k3k-hostcluster}
TOOLS=${K3K_TOOLS_DIR:-/root/.cache/k3k/tools}
export KUBECONFIG=$DIR/kubeconfig
NS=hostcluster-smoke
k() { "$TOOLS/kubectl" -n "$NS" "$@"; }
t0=$SECONDS
step() { printf '[%3ds] %s\n' $((SECONDS - t0)) "$*"; }
fail() { printf 'smoke: FAIL: %s\n' "$*" >&2; k get pods -o wide >&2 || true; exit 1; }

"$TOOLS/kubectl" create namespace "$NS" >/dev/null
trap '"$TOOLS/kubectl" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true' EXIT
k apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-vip}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: hostcluster.local/toolbox:v1
        imagePullPolicy: Never
        command: [sh, -c, 'echo "boot $(hostname) $(date +%s)" >> /data/boot.log && echo started && exec httpd -f -p 8080 -h /data']
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
EOF
k rollout status statefulset/web --timeout=120s >/dev/null || fail "StatefulSet not ready"
[ "$(k get pvc data-web-0 -o jsonpath='{.status.phase}')" = Bound ] || fail "PVC not bound"
ip0=$(k get pod web-0 -o jsonpath='{.status.podIP}')
uid0=$(k get pod web-0 -o jsonpath='{.metadata.uid}')
step "StatefulSet ready, PVC bound, pod IP $ip0"

k logs web-0 | grep -q started || fail "kubectl logs"
k exec web-0 -- cat /data/boot.log | grep -q boot || fail "kubectl exec"
step "kubectl logs and exec reach the kubelet"

k delete pod web-0 --wait=true >/dev/null
for _ in $(seq 240); do
  uid=$(k get pod web-0 -o jsonpath='{.metadata.uid}' 2>/dev/null || true)
  [ -n "$uid" ] && [ "$uid" != "$uid0" ] && break
  sleep 0.5
done
k wait --for=condition=Ready pod/web-0 --timeout=120s >/dev/null || fail "recreated pod not ready"
ip1=$(k get pod web-0 -o jsonpath='{.status.podIP}')
[ "$ip1" != "$ip0" ] || fail "recreated pod kept IP $ip0"
boots=$(k exec web-0 -- cat /data/boot.log | grep -c '^boot')
[ "$boots" = 2 ] || fail "expected 2 boot lines on the PVC, found $boots"
step "pod deleted and recreated: IP $ip0 -> $ip1, data on the PVC kept ($boots boots)"

k run dns --image=hostcluster.local/toolbox:v1 --image-pull-policy=Never --restart=Never --command -- sh -c '
  nslookup web-vip.hostcluster-smoke.svc.cluster.local &&
  nslookup kubernetes.default.svc.cluster.local &&
  wget -qO- http://web-vip/boot.log &&
  wget -qO- http://web-0.web:8080/boot.log' >/dev/null
for _ in $(seq 120); do
  phase=$(k get pod dns -o jsonpath='{.status.phase}')
  case "$phase" in Succeeded|Failed) break ;; esac
  sleep 0.5
done
[ "$phase" = Succeeded ] || { k logs dns >&2 || true; fail "DNS/Service check pod: $phase"; }
step "DNS resolves Services and pod names; Service VIP and pod DNS reach the pod"

"$TOOLS/kubectl" delete namespace "$NS" --wait=true --timeout=120s >/dev/null
trap - EXIT
for _ in $(seq 60); do
  [ -z "$("$TOOLS/kubectl" get pv -o name)" ] && break
  sleep 0.5
done
[ -z "$("$TOOLS/kubectl" get pv -o name)" ] || fail "PV not deleted"
step "cleaned up, PV deleted"
echo "smoke: PASS in $((SECONDS - t0))s"
