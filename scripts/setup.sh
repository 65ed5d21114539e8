#!/usr/bin/env bash
# Installs every Debian package rdattn needs and fetches the offline data of docs/data.md
# (GPT-2 BPE files and the bundled corpus, checked against their sha256 sums).
# Idempotent: a second run installs nothing and re-downloads nothing.
#
#   scripts/setup.sh            packages + data
#   scripts/setup.sh --no-data  packages only
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want_data=1
for a in "$@"; do
  case "$a" in
    --no-data) want_data=0 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$a'" >&2; exit 2 ;;
  esac
done

# The one package list. deploy/docker/Dockerfile.cpu must carry the same list (a test checks it).
PACKAGES=(
  cmake ninja-build g++ pkg-config ccache git curl ca-certificates python3 xz-utils
  libgtest-dev libgmock-dev libbenchmark-dev
  libtorch-dev libopenblas0-openmp libgloo-dev python3-torch
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  golang-github-gogo-googleapis-dev
  prometheus-cpp-dev libopenmpi-dev openmpi-bin libsqlite3-dev sqlite3
  nlohmann-json3-dev libyaml-cpp-dev libpcre2-dev libcli11-dev libxxhash-dev libssl-dev
  nodejs npm jargon-text gnuplot-nox prometheus python3-grpcio python3-protobuf
  slurm-wlm munge iproute2
  clang-14 libclang-rt-14-dev llvm-14 openssl clang-format clang-tidy shellcheck
  buildah debootstrap
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    # node/npm may come from another source (e.g. nodesource); accept the binaries.
    case "$p" in
      nodejs) command -v node >/dev/null && continue ;;
      npm) command -v npm >/dev/null && continue ;;
    esac
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
fi

# kubectl (with kustomize v5) renders deploy/k8s in the tests. Debian 12 has no such package
# (its kubernetes-client is kubectl 1.20, whose kustomize has no components), so it is not
# installed here; these machines come with it. Without it only the deploy_k8s_render tests fail.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "setup: WARNING: kubectl not found; the deploy_k8s_render tests need kubectl v1.27+ (kustomize v5)" >&2
fi

if [ "$want_data" -eq 1 ]; then
  "$here/scripts/fetch_data.sh"
fi
