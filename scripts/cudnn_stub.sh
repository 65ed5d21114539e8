#!/usr/bin/env bash
# A stand-in for cuDNN's libcudnn.so.9 where Debian's real one cannot be had: Debian 13's
# `nvidia-cudnn` is an installer whose post-install script downloads cuDNN from NVIDIA (and only
# after its license question is answered "I Agree"), which machines without that network access
# cannot do. LibTorch's CUDA library (libtorch_cuda.so, linked with BIND_NOW) names libcudnn.so.9,
# so without some libcudnn.so.9 nothing linked to it links or even loads, on the CPU path too.
#
#   scripts/cudnn_stub.sh LIBTORCH_CUDA.so OUT_DIR
#
# writes OUT_DIR/libcudnn.so.9 (and the libcudnn.so link): every cudnn* function that
# LIBTORCH_CUDA.so imports, under its version node (libcudnn.so.9), each of which prints
# "rdattn: cuDNN is not installed here (a link stub): FUNCTION called" and aborts. rdattn's CPU
# path never calls cuDNN; a GPU job through this stub would stop at its first cuDNN call, loudly.
# Used by scripts/debian13.sh (the cuda root) and deploy/docker/Dockerfile.cuda (CUDNN=stub).
# docs/build.md, "cuDNN", says what this does and does not prove.
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,16p "$0" >&2; exit 2; }
lib=$1
out=$2
[ -r "$lib" ] || { echo "cudnn_stub.sh: cannot read $lib" >&2; exit 2; }
mkdir -p "$out"
mapfile -t syms < <(nm -D --undefined-only "$lib" | awk '{print $2}' \
                      | sed -n 's/^\(cudnn[A-Za-z0-9_]*\)@libcudnn\.so\.9$/\1/p' | sort -u)
[ "${#syms[@]}" -gt 0 ] || { echo "cudnn_stub.sh: $lib imports no cudnn* symbol of libcudnn.so.9" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
{
  cat <<'C'
#include <stdio.h>
#include <stdlib.h>
static void rdattn_cudnn_stub(const char* f) {
  fprintf(stderr, "rdattn: cuDNN is not installed here (a link stub): %s called\n", f);
  abort();
}
C
  for s in "${syms[@]}"; do echo "int $s(void) { rdattn_cudnn_stub(\"$s\"); return 0; }"; done
} >"$work/stub.c"
{
  echo 'libcudnn.so.9 {'
  echo '  global:'
  for s in "${syms[@]}"; do echo "    $s;"; done
  echo '  local: *;'
  echo '};'
} >"$work/stub.map"
cc -shared -fPIC -O1 -o "$out/libcudnn.so.9" -Wl,-soname,libcudnn.so.9 \
  -Wl,--version-script="$work/stub.map" "$work/stub.c"
ln -sf libcudnn.so.9 "$out/libcudnn.so"
echo "cudnn_stub.sh: $out/libcudnn.so.9 with ${#syms[@]} functions (each aborts when called)"
