#!/usr/bin/env bash
# A Debian 13 (trixie) build environment, made from Debian's own mirror: a minbase root from
# debootstrap (main, contrib, non-free) with one flavor's packages installed, cached outside the
# repository and rebuilt when the flavor's package list (or this script's root recipe) changes.
# Commands run in it with the repository mounted at its own path, so build folders made inside
# (build-debian13-*) are ordinary folders of the checkout. docs/build.md, "Debian 13".
#
#   scripts/debian13.sh [--flavor F] prepare           make (or reuse) the root; print its path
#   scripts/debian13.sh [--flavor F] run [--] CMD...   run CMD in the root, in the repository
#   scripts/debian13.sh [--flavor F] path              the root's path ("" when not made yet)
#   scripts/debian13.sh [--flavor F] packages          the flavor's package list
#
# Flavors:
#   cpu   LibTorch 2.6 for the CPU (libtorch-dev) and the trainer's build tools
#   cuda  CUDA LibTorch 2.6 (libtorch-cuda-dev, contrib), CUDA 12.4 (nvidia-cuda-toolkit,
#         non-free) and NCCL 2.22 (libnccl-dev, non-free), the same build tools, and the
#         service's libraries (gRPC, protobuf, abseil, prometheus-cpp, SQLite, yaml-cpp), so
#         that the whole service builds with CUDA as deploy/docker/Dockerfile.cuda builds it
#   full  cpu plus everything the whole service builds and tests with (gRPC, protobuf, abseil,
#         prometheus-cpp, OpenMPI, SQLite, Prometheus, Slurm, Python gRPC, ...)
#
# Knobs (environment): RDATTN_DEBIAN13_CACHE (default /var/cache/rdattn/debian13; the roots and
# a shared ccache live there), RDATTN_DEBIAN_MIRROR (default: the first deb.debian.org-style
# mirror of this machine's apt sources, else http://deb.debian.org/debian).
#
# Every mount and process `run` makes lives in its own mount and PID namespaces (unshare), so
# they are gone when the command ends, however it ends. Needs root (debootstrap, chroot, mounts).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Bumped when the recipe below changes in a way the package list does not show.
RECIPE=2
SUITE=trixie
flavor=cpu
cache="${RDATTN_DEBIAN13_CACHE:-/var/cache/rdattn/debian13}"

usage() { sed -n 2,26p "$0"; }
die() { echo "debian13.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --flavor) [ $# -ge 2 ] || die "--flavor needs a value (cpu, cuda or full)"; flavor=$2; shift 2 ;;
    --flavor=*) flavor=${1#--flavor=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
cmd=$1
shift

# Build tools and the libraries the trainer-only build needs (CMakeLists.txt with
# RDATTN_TRAINER_ONLY=ON and the tests on).
COMMON=(
  cmake ninja-build g++ pkg-config ccache python3 ca-certificates
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libpcre2-dev zlib1g-dev libxxhash-dev libssl-dev
  libopenmpi-dev openmpi-bin libopenblas0-openmp
)
# The service's libraries (gRPC 1.51, protobuf 3.21, abseil 20240722, prometheus-cpp, SQLite,
# yaml-cpp) and googleapis' google/rpc .proto files (proto/ generates the gRPC error details from
# them): what the whole build links besides LibTorch.
SERVICE=(
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  golang-github-gogo-googleapis-dev prometheus-cpp-dev libsqlite3-dev sqlite3 libyaml-cpp-dev
)
case "$flavor" in
  cpu) PACKAGES=("${COMMON[@]}" libtorch-dev libgloo-dev) ;;
  # libtorch-cuda-2.6 depends on libgloo-cuda-0, which conflicts with libgloo0 (libgloo-dev):
  # the CUDA root takes libgloo-cuda-dev instead. nvidia-cudnn comes along (libtorch-cuda-2.6
  # depends on it) with its download declined; see prepare below and docs/build.md, "cuDNN".
  cuda) PACKAGES=("${COMMON[@]}" libtorch-cuda-dev libgloo-cuda-dev nvidia-cuda-toolkit libnccl-dev
          "${SERVICE[@]}") ;;
  # scripts/setup.sh's list, less what Debian 13 has no more (clang-14: its clang is 19) and
  # what the full check does not run (fuzzing, containers; Slurm is installed because configuring
  # needs it, its tests are not run).
  full) PACKAGES=("${COMMON[@]}" libtorch-dev libgloo-dev "${SERVICE[@]}"
          git curl xz-utils python3-grpcio python3-protobuf prometheus openssl iproute2 procps
          nodejs npm jargon-text gnuplot-nox clang-format clang-tidy shellcheck slurm-wlm munge) ;;
  *) die "unknown flavor '$flavor' (cpu, cuda or full)" ;;
esac

key="$(printf '%s\n' "recipe=$RECIPE" "suite=$SUITE" "${PACKAGES[@]}" | sha256sum | cut -c1-16)"
root="$cache/$flavor-$key"

mirror() {
  if [ -n "${RDATTN_DEBIAN_MIRROR:-}" ]; then echo "$RDATTN_DEBIAN_MIRROR"; return; fi
  local m
  m="$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
        | head -n1 | tr -d ' ')" || true
  echo "${m:-http://deb.debian.org/debian}"
}

# The minbase root, shared by the flavors: made once into base-<suite>/ (debootstrap verifies
# the Release file with this machine's debian-archive-keyring).
make_base() (
  local base="$cache/base-$SUITE" tmp
  exec 8>"$cache/.lock-base"
  flock 8
  [ -f "$base/.rdattn-complete" ] && return 0
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap; scripts/setup.sh installs it)"
  tmp="$cache/.base-$SUITE.tmp.$$"
  rm -rf -- "$cache/.base-$SUITE.tmp."*
  trap 'rm -rf -- "$tmp"' EXIT
  echo "debian13.sh: debootstrap --variant=minbase $SUITE from $(mirror)" >&2
  if ! debootstrap --variant=minbase --components=main,contrib,non-free "$SUITE" "$tmp" "$(mirror)" \
      >"$cache/debootstrap.log" 2>&1; then
    tail -n 20 "$cache/debootstrap.log" >&2
    rm -rf -- "$tmp"
    die "debootstrap failed (whole log: $cache/debootstrap.log)"
  fi
  touch "$tmp/.rdattn-complete"
  rm -rf -- "$base"
  mv -- "$tmp" "$base"
  trap - EXIT
)

# Runs CMD (a bash script text) chrooted in $1 inside fresh mount and PID namespaces: /proc, /dev
# (with /dev/shm, which Open MPI's shared-memory transport needs), /sys (read-only), a private
# /tmp, the repository at its own path and the shared ccache. All of it disappears with the
# namespaces.
in_root() {
  local r=$1 script=$2
  shift 2
  mkdir -p "$r$here" "$r/var/cache/rdattn-ccache" "$cache/ccache"
  local envs=(HOME=/root LC_ALL=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
              CCACHE_DIR=/var/cache/rdattn-ccache DEBIAN_FRONTEND=noninteractive TERM="${TERM:-dumb}")
  local v
  for v in $(compgen -e); do
    case "$v" in OMP_*|OMPI_*|RDATTN_*|CTEST_*|ASAN_*|UBSAN_*) envs+=("$v=${!v}") ;; esac
  done
  # shellcheck disable=SC2016  # the inner script expands its own positional parameters
  unshare --mount --pid --fork --kill-child --propagation private -- /bin/bash -c '
    set -e
    r=$1; here=$2; cache=$3; script=$4; shift 4
    mount -t proc proc "$r/proc"
    mount -t sysfs -o ro sysfs "$r/sys"  # hwloc (Open MPI) reads the CPU topology there
    mount --rbind /dev "$r/dev"
    mount --make-rslave "$r/dev"
    mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
    mount --bind "$here" "$r$here"
    mount --bind "$cache/ccache" "$r/var/cache/rdattn-ccache"
    exec chroot "$r" /usr/bin/env -i "$@" /bin/bash -c "cd \"$here\" && $script"
  ' bash "$r" "$here" "$cache" "$script" "${envs[@]}"
}

# A subshell: the lock (fd 9) is released when it returns, before `run` runs anything.
prepare() (
  [ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot and mounts)"
  mkdir -p "$cache"
  exec 9>"$cache/.lock-$flavor"
  flock 9  # one preparer per flavor at a time (the debian13 ctests may start together)
  if [ -f "$root/.rdattn-complete" ]; then echo "$root"; return 0; fi
  local t0=$SECONDS
  make_base
  local tmp="$cache/.$flavor-$key.tmp.$$"
  rm -rf -- "$cache/.$flavor-"*.tmp.*  # left by a killed run (the lock says none is running)
  trap 'rm -rf -- "$tmp"' EXIT
  echo "debian13.sh: making the $flavor root ($((${#PACKAGES[@]})) packages) in $root" >&2
  cp -a "$cache/base-$SUITE" "$tmp"
  rm -f "$tmp/.rdattn-complete"
  cp /etc/resolv.conf "$tmp/etc/resolv.conf"
  # Only the named packages: no recommends (as the images do). dpkg without its fsyncs
  # (--force-unsafe-io): a root that a crash leaves half made is a temporary folder, removed by
  # the next run, and the fsyncs of some 10 GB of CUDA files would stall the machine's other
  # disk writers (scripts/test.sh runs this beside the tests).
  printf '%s\n' 'APT::Install-Recommends "false";' 'APT::Install-Suggests "false";' \
    >"$tmp/etc/apt/apt.conf.d/90rdattn"
  # nvidia-cudnn (pulled in by libtorch-cuda-2.6) downloads cuDNN from NVIDIA in its
  # post-install script once its license question is answered "I Agree" (its default). Declined,
  # it installs nothing and succeeds; scripts/cudnn_stub.sh then gives libtorch_cuda.so the
  # libcudnn.so.9 it names (docs/build.md, "cuDNN").
  if ! in_root "$tmp" "echo 'nvidia-cudnn nvidia-cudnn/question select I Decline' | debconf-set-selections \
        && apt-get update -qq && apt-get install -y -qq -o Dpkg::Options::=--force-unsafe-io \
           ${PACKAGES[*]} >/tmp/apt.log 2>&1 \
        || { tail -n 40 /tmp/apt.log; exit 1; }"; then
    rm -rf -- "$tmp"
    die "installing the $flavor packages failed"
  fi
  if [ "$flavor" = cuda ]; then
    mkdir -p "$tmp/opt/rdattn-scripts"
    cp "$here/scripts/cudnn_stub.sh" "$tmp/opt/rdattn-scripts/"
    in_root "$tmp" "/opt/rdattn-scripts/cudnn_stub.sh /usr/lib/x86_64-linux-gnu/libtorch_cuda.so \
        /usr/local/lib/rdattn-cudnn-stub && echo /usr/local/lib/rdattn-cudnn-stub \
        >/etc/ld.so.conf.d/rdattn-cudnn-stub.conf && ldconfig" || { rm -rf -- "$tmp"; die "the cuDNN stub failed"; }
  fi
  in_root "$tmp" "apt-get clean && rm -rf /var/lib/apt/lists/*" || true
  touch "$tmp/.rdattn-complete"
  # Roots of this flavor made from another package list are stale now.
  local old
  for old in "$cache/$flavor"-*; do
    [ -d "$old" ] && [ "$old" != "$root" ] && rm -rf -- "$old"
  done
  mv -- "$tmp" "$root"
  trap - EXIT
  echo "debian13.sh: $flavor root ready in $((SECONDS - t0)) s" >&2
  echo "$root"
)

case "$cmd" in
  prepare) prepare ;;
  path) if [ -f "$root/.rdattn-complete" ]; then echo "$root"; else echo ""; fi ;;
  packages) printf '%s\n' "${PACKAGES[@]}" ;;
  run)
    [ "${1:-}" = "--" ] && shift
    [ $# -ge 1 ] || die "run needs a command"
    prepare >/dev/null
    quoted=$(printf '%q ' "$@")
    in_root "$root" "$quoted"
    ;;
  *) die "unknown command '$cmd' (prepare, run, path or packages)" ;;
esac
