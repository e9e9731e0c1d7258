#!/usr/bin/env bash
# Runs the e2e suite (e2e/test_mock_disagg.py) unchanged on a kind cluster, with the
# pdserve image built from this checkout. For machines with Docker; Linux, because the
# suite reaches pod IPs directly (a route per node's pod CIDR, added with sudo).
#
#   bash e2e/kind/run.sh            # build, create the cluster, test, delete the cluster
#   KEEP=1 bash e2e/kind/run.sh     # keep the cluster afterwards
#
# Needs: docker, kind, kubectl, ip (iproute2), sudo for `ip route`, and `make venv`.
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-pdserve-e2e}
IMAGE=${IMAGE:-pdserve:e2e}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
PY=${PY:-.venv/bin/python}
WORK=$(mktemp -d)
KUBECONFIG_FILE="$WORK/kubeconfig"
ROUTES=()

for tool in docker kind kubectl ip; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is required" >&2; exit 2; }
done
[ -x "$PY" ] || { echo "run.sh: $PY not found; run 'make venv' first" >&2; exit 2; }
if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi

cleanup() {
  for r in "${ROUTES[@]}"; do $SUDO ip route del $r 2>/dev/null || true; done
  if [ -z "${KEEP:-}" ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== building $IMAGE"
docker build -t "$IMAGE" .

echo "== creating kind cluster $CLUSTER"
kind get clusters 2>/dev/null | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --config e2e/kind/cluster.yaml --wait 120s
kind get kubeconfig --name "$CLUSTER" > "$KUBECONFIG_FILE"
export KUBECONFIG="$KUBECONFIG_FILE"
kind load docker-image "$IMAGE" --name "$CLUSTER"

echo "== advertising $GPUS_PER_NODE nvidia.com/gpu per worker (extended resource, no device plugin)"
for node in $(kubectl get nodes -l nvidia.com/gpu.present=true -o name); do
  kubectl patch "$node" --subresource=status --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$GPUS_PER_NODE\"}]"
done

echo "== routing pod CIDRs to the kind nodes (the suite talks to pods directly)"
for node in $(kubectl get nodes -o jsonpath='{.items[*].metadata.name}'); do
  cidr=$(kubectl get node "$node" -o jsonpath='{.spec.podCIDR}')
  ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$node")
  $SUDO ip route replace "$cidr" via "$ip"
  ROUTES+=("$cidr via $ip")
done

# Pods reach this machine's Prometheus (the planner reads it) through the kind network's gateway.
GATEWAY=$(docker network inspect kind -f '{{range .IPAM.Config}}{{if .Gateway}}{{.Gateway}} {{end}}{{end}}' | awk '{print $1}')

echo "== running the e2e suite against kind (Prometheus on $GATEWAY)"
PDSERVE_E2E_KUBECONFIG="$KUBECONFIG_FILE" \
PDSERVE_E2E_IMAGE="$IMAGE" \
PDSERVE_E2E_PROMETHEUS_HOST="$GATEWAY" \
  "$PY" -m pytest -ra e2e/test_mock_disagg.py "$@"
