#!/usr/bin/env bash
# Build the local Kubernetes control plane used by the test suite from source:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
# Usage: build-binaries.sh OUTDIR
#
# Idempotent: when every binary exists in OUTDIR and OUTDIR/VERSION matches the
# versions below, it does nothing. Only the Go toolchain and a Go module proxy
# are needed (no Docker, no release downloads). The Go module and build caches of
# a build (~1.2 GB modules + ~3.5 GB objects) go to a temporary folder removed at
# exit: nothing needs them once the binaries are cached in OUTDIR, and a CI disk
# is small. GOCACHE / GOMODCACHE / GOPATH set by the user are used and kept, and so
# are the machine's default Go caches when they already hold something.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
# Bump when the recipe (flags, tags) changes so cached binaries get rebuilt.
RECIPE=1
# The machine is shared; keep the compiler from taking every core.
GO_PARALLEL="${PDSERVE_GO_BUILD_P:-2}"

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
command -v go >/dev/null || { echo "error: the Go toolchain (go) is not on PATH" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 is needed to read 'go mod download -json'" >&2; exit 1; }

mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
SRC="$(dirname "$OUT")/src"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STAMP="k8s=$K8S_VERSION etcd=$ETCD_VERSION kwok=$KWOK_VERSION recipe=$RECIPE"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

export GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0

# Go caches for a build: the user's when set; the machine's default ones when they already
# hold something (a warm machine: the rebuild takes seconds and adds little); otherwise a
# temporary folder (see the header), created only when a build runs and removed at exit.
GO_TMP=""
warm() { [[ -n "$1" && -d "$1" && -n "$(ls -A "$1" 2>/dev/null | head -n 1)" ]]; }
go_caches() {
  local d
  if [[ -z "${GOCACHE:-}" ]]; then
    d="$(go env GOCACHE 2>/dev/null || true)"
    if warm "$d"; then export GOCACHE="$d"; fi
  fi
  if [[ -z "${GOMODCACHE:-}" && -z "${GOPATH:-}" ]]; then
    d="$(go env GOMODCACHE 2>/dev/null || true)"
    if warm "$d"; then export GOMODCACHE="$d"; fi
  fi
  [[ -z "${GOCACHE:-}" || ( -z "${GOMODCACHE:-}" && -z "${GOPATH:-}" ) ]] || return 0
  GO_TMP="$(mktemp -d "${TMPDIR:-/tmp}/pdserve-k8s-go.XXXXXX")"
  trap 'chmod -R u+w "$GO_TMP" 2>/dev/null; rm -rf "$GO_TMP"' EXIT
  [[ -n "${GOCACHE:-}" ]] || export GOCACHE="$GO_TMP/build"
  if [[ -z "${GOMODCACHE:-}" && -z "${GOPATH:-}" ]]; then
    # -modcacherw: module files writable, so the folder can be removed without chmod.
    export GOMODCACHE="$GO_TMP/mod" GOFLAGS="$GOFLAGS -modcacherw"
  fi
}

all_present() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || return 1; done
  [[ -f "$OUT/VERSION" && "$(cat "$OUT/VERSION")" == "$STAMP" ]]
}

if all_present; then
  echo "[k8s-bins] up to date in $OUT ($STAMP)"
  exit 0
fi
rm -f "$OUT/VERSION"
# Binaries left by an interrupted build of the same versions are reused; any
# others are stale.
PARTIAL="$OUT/.partial"
if [[ ! -f "$PARTIAL" || "$(cat "$PARTIAL")" != "$STAMP" ]]; then
  for b in "${BINARIES[@]}"; do rm -f "$OUT/$b"; done
  echo "$STAMP" >"$PARTIAL"
fi

T0=$SECONDS
log() { printf '[k8s-bins %4ds] %s\n' "$((SECONDS - T0))" "$*"; }

# Runs a build step with a heartbeat so long compiles visibly make progress; a
# failed step is retried once, since a cold build downloads hundreds of modules
# and one flaky fetch should not cost CI the run (the retry reuses the caches).
step() {
  if ! step_once "$@"; then
    log "retrying $1 once"
    step_once "$@" || { log "FAILED building $1"; exit 1; }
  fi
}

step_once() {
  local name="$1"; shift
  local t=$SECONDS
  log "building $name ..."
  "$@" &
  local pid=$!
  local next=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if ((SECONDS >= next)) && kill -0 "$pid" 2>/dev/null; then
      log "  still building $name ($((SECONDS - t))s)"
      next=$((SECONDS + 30))
    fi
  done
  wait "$pid" || return 1
  log "built $name in $((SECONDS - t))s"
}

build_etcd() {
  local dir="$SRC/etcd-$ETCD_VERSION"
  mkdir -p "$dir"
  cp "$HERE/gomod/etcd/main.go" "$dir/main.go"
  if [[ ! -f "$dir/go.mod" ]]; then
    cat >"$dir/go.mod" <<EOF
module pdserve.local/etcd

go 1.26.0

require (
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
)
EOF
  fi
  (cd "$dir" && go mod tidy >/dev/null && nice -n 10 go build -p "$GO_PARALLEL" -trimpath -ldflags='-s -w' -o "$OUT/etcd" .)
}

# A module that requires k8s.io/kubernetes and points each staging module
# (k8s.io/api, k8s.io/client-go, ...) at its published v0.Y.Z tag, since
# kubernetes' own go.mod replaces them with ./staging paths that a dependent
# module cannot use.
k8s_wrapper() {
  local dir="$SRC/kubernetes-$K8S_VERSION"
  if [[ -f "$dir/go.mod" ]]; then echo "$dir"; return; fi
  mkdir -p "$dir"
  local gomod
  gomod="$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  local staging_version="v0.${K8S_VERSION#v1.}"
  python3 - "$gomod" "$K8S_VERSION" "$staging_version" >"$dir/go.mod.tmp" <<'EOF'
import re, sys
gomod, k8s_version, staging_version = sys.argv[1:]
text = open(gomod).read()
go_line = re.search(r"^go (\S+)$", text, re.M).group(1)
staging = sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", text, re.M)))
if not staging:
    sys.exit(f"no ./staging replace directives found in {gomod}")
print("module pdserve.local/kubernetes\n")
print(f"go {go_line}\n")
print(f"require k8s.io/kubernetes {k8s_version}\n")
print("replace (")
for mod in staging:
    print(f"\t{mod} => {mod} {staging_version}")
print(")")
EOF
  mv "$dir/go.mod.tmp" "$dir/go.mod"
  echo "$dir"
}

build_k8s() {
  local dir="$1"; shift
  local major minor
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
  local ldflags="-s -w"
  ldflags+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=$major"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  local cmd
  for cmd in "$@"; do
    (cd "$dir" && nice -n 10 go build -p "$GO_PARALLEL" -trimpath -tags providerless \
      -ldflags="$ldflags" -o "$OUT/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  done
}

build_kwok() {
  GOBIN="$OUT" nice -n 10 go install -p "$GO_PARALLEL" -trimpath -ldflags='-s -w' \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

go_caches
log "output: $OUT ($STAMP), $(go version); GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE)"
[[ -x "$OUT/etcd" ]] || step "etcd $ETCD_VERSION" build_etcd
K8S_DIR="$(k8s_wrapper)"
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  [[ -x "$OUT/$b" ]] || step "$b $K8S_VERSION" build_k8s "$K8S_DIR" "$b"
done
[[ -x "$OUT/kwok" ]] || step "kwok $KWOK_VERSION" build_kwok

for b in "${BINARIES[@]}"; do
  [[ -x "$OUT/$b" ]] || { log "missing $OUT/$b after build"; exit 1; }
done
echo "$STAMP" >"$OUT/VERSION"
rm -f "$PARTIAL"
log "done: ${BINARIES[*]} in $OUT"
if [[ -n "$GO_TMP" ]]; then
  log "Go caches used: $(du -sb "$GO_TMP" | cut -f1) bytes in $GO_TMP (removed now)"
fi
