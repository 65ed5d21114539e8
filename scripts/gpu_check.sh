#!/usr/bin/env bash
# One prepared check for a GPU machine with a CUDA LibTorch 2.x: PyTorch's (in its Python, with
# none of Debian's dev packages) or Debian 13's libtorch-cuda-dev (docs/benchmarks.md, "GPU
# check"). It
#   1. finds LibTorch (Torch_DIR; else torch.utils.cmake_prefix_path of $PYTHON's PyTorch; else
#      Debian's /usr/lib/<arch>/cmake/Torch when libtorch_cuda.so is there) and builds the trainer-only
#      configuration (RDATTN_TRAINER_ONLY=ON, no tests): rdattn-train and rdattn_model_bench;
#   2. checks that the GPU forward agrees with the CPU fp32 forward for every arm (fp32 within
#      1e-4, bf16 autocast within 5·2^-8 relative L2) and runs T6 on the GPU (rd with
#      q_v := q_attn is bitwise block and tied), for each preset of $CHECK_PRESETS;
#   3. times S-preset full training steps (bf16 autocast, AdamW) for block and rd after warm-up
#      and prints tokens/s, MFU against the documented H200/H100 bf16 dense peak (989 TFLOP/s),
#      the fraction of the bf16 GEMM peak measured in the same process, peak memory, and rd/block.
#
#   scripts/gpu_check.sh            # exit 0: every check passed and the timings ran
#
# Knobs (environment): Torch_DIR (a folder holding TorchConfig.cmake; skips the Python probe),
# PYTHON (default: /opt/torch/.venv/bin/python3 if present, else python3),
# BUILD_DIR (default build-gpu), JOBS (default: nproc), CHECK_PRESETS (default "cpu-small S"),
# BENCH_BATCH (default 8 sequences of 1024 tokens), BENCH_ROUNDS (3), BENCH_STEPS (5),
# BENCH_WARMUP (3), PEAK_FLOPS (default 989e12), OUT (where the JSON goes; default BUILD_DIR),
# CLI11_INCLUDE_DIR (a folder holding CLI/CLI.hpp, where libcli11-dev is not installed) or
# CLI11_DIR (a folder holding CLI11Config.cmake).
# Exit status: 0 passed; 1 a check failed; 2 no CLI11 headers, or no usable PyTorch/CUDA/GPU or
# build tool (the message says which); other: the build failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
CHECK_PRESETS="${CHECK_PRESETS:-cpu-small S}"
BENCH_BATCH="${BENCH_BATCH:-8}"
BENCH_ROUNDS="${BENCH_ROUNDS:-3}"
BENCH_STEPS="${BENCH_STEPS:-5}"
BENCH_WARMUP="${BENCH_WARMUP:-3}"
PEAK_FLOPS="${PEAK_FLOPS:-989e12}"
OUT="${OUT:-$BUILD_DIR}"
if [ -z "${PYTHON:-}" ]; then
  if [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3; else PYTHON=python3; fi
fi

die() {
  echo "gpu_check: $*" >&2
  exit 2
}
step() { echo "==> [gpu_check] $*"; }

# --- 0. CLI11 headers (rdattn-train's command line; header-only, no pip package) -----------------
cli11=()
if [ -n "${CLI11_INCLUDE_DIR:-}" ]; then
  [ -f "$CLI11_INCLUDE_DIR/CLI/CLI.hpp" ] ||
    die "CLI11_INCLUDE_DIR=$CLI11_INCLUDE_DIR has no CLI/CLI.hpp (point it at the folder that holds CLI11's CLI/ header folder)"
  cli11=(-DCLI11_INCLUDE_DIR="$CLI11_INCLUDE_DIR")
elif [ -n "${CLI11_DIR:-}" ]; then
  cli11=(-DCLI11_DIR="$CLI11_DIR")
elif [ ! -f /usr/include/CLI/CLI.hpp ] && [ ! -f /usr/local/include/CLI/CLI.hpp ]; then
  die "CLI11 headers not found (rdattn-train parses its command line with CLI11, header-only): apt install libcli11-dev, or set CLI11_INCLUDE_DIR to a folder holding CLI/CLI.hpp (a copy of CLI11's include/ folder; there is no pip package)"
fi

# --- 1. A CUDA LibTorch 2.x and a GPU ------------------------------------------------------------
# Three sources, in this order: Torch_DIR (a folder holding TorchConfig.cmake: PyTorch's LibTorch
# zip, or Debian 13's libtorch-cuda-dev at /usr/lib/<arch>/cmake/Torch); PyTorch in $PYTHON
# (torch.utils.cmake_prefix_path); Debian's libtorch-cuda-dev when $PYTHON has no PyTorch.
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
debian_torch=/usr/lib/$multiarch/cmake/Torch
torch_dir="${Torch_DIR:-}"
torch_prefix=""
if [ -z "$torch_dir" ]; then
  probe="NO_TORCH no interpreter '$PYTHON'"
  if command -v "$PYTHON" >/dev/null 2>&1; then
    probe=$("$PYTHON" - <<'EOF' 2>&1
import sys
try:
    import torch
except Exception as e:  # noqa: BLE001
    print("NO_TORCH %s: %s" % (type(e).__name__, e))
    sys.exit(0)
major = int(torch.__version__.split(".")[0])
if major < 2:
    print("OLD_TORCH %s" % torch.__version__)
elif torch.version.cuda is None:
    print("NO_CUDA_BUILD %s" % torch.__version__)
elif not torch.cuda.is_available() or torch.cuda.device_count() == 0:
    print("NO_GPU %s cuda %s" % (torch.__version__, torch.version.cuda))
else:
    print("OK %s|%s|%s|%s" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0),
                              torch.utils.cmake_prefix_path))
EOF
) || die "running $PYTHON failed: $probe"
  fi
  case "$probe" in
    OK\ *) ;;
    NO_TORCH*)
      if [ -f "$debian_torch/TorchConfig.cmake" ] && [ -e "/usr/lib/$multiarch/libtorch_cuda.so" ]; then
        torch_dir=$debian_torch  # Debian 13's libtorch-cuda-dev
      else
        die "no PyTorch in $PYTHON (${probe#NO_TORCH }), no Torch_DIR, and no Debian libtorch-cuda-dev ($debian_torch); this script needs a CUDA LibTorch 2.x"
      fi ;;
    OLD_TORCH*) die "PyTorch ${probe#OLD_TORCH } in $PYTHON is older than 2.x" ;;
    NO_CUDA_BUILD*) die "PyTorch ${probe#NO_CUDA_BUILD } in $PYTHON is a CPU-only build (torch.version.cuda is None)" ;;
    NO_GPU*) die "PyTorch ${probe#NO_GPU } in $PYTHON sees no GPU (torch.cuda.is_available() is False)" ;;
    *) die "unexpected answer from $PYTHON: $probe" ;;
  esac
fi
if [ -n "$torch_dir" ]; then
  # A LibTorch without Python: its version from CMake's version file, its CUDA library beside
  # libtorch.so, the GPU from the driver.
  [ -f "$torch_dir/TorchConfig.cmake" ] || die "Torch_DIR=$torch_dir holds no TorchConfig.cmake"
  torch_version=$(sed -n 's/^set(PACKAGE_VERSION "\([^"]*\)").*/\1/p' "$torch_dir/TorchConfigVersion.cmake" 2>/dev/null | head -n1)
  [ -n "$torch_version" ] || die "Torch_DIR=$torch_dir: no PACKAGE_VERSION in TorchConfigVersion.cmake"
  [ "${torch_version%%.*}" -ge 2 ] 2>/dev/null || die "LibTorch $torch_version in $torch_dir is older than 2.x"
  libdir=""
  for d in "$torch_dir/../../../lib" "$torch_dir/../.." "/usr/lib/$multiarch"; do
    if [ -e "$d/libtorch_cuda.so" ]; then libdir=$(cd "$d" && pwd); break; fi
  done
  [ -n "$libdir" ] || die "LibTorch $torch_version in $torch_dir is a CPU-only build (no libtorch_cuda.so beside it)"
  command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: no NVIDIA driver on this machine, so no GPU for LibTorch $torch_version"
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
  [ -n "$gpu_name" ] || die "nvidia-smi lists no GPU"
  cuda_version=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1 (driver)/p' | head -n1)
  torch_prefix=$torch_dir
  step "LibTorch $torch_version (CUDA ${cuda_version:-?}) from $libdir on $gpu_name; Torch_DIR $torch_dir"
else
  IFS='|' read -r torch_version cuda_version gpu_name torch_prefix <<<"${probe#OK }"
  step "PyTorch $torch_version (CUDA $cuda_version) on $gpu_name; LibTorch from $torch_prefix"
fi
for tool in cmake ninja c++; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (needed to build; docs/build.md, 'GPU build')"
done

# --- 2. Build the trainer-only configuration -----------------------------------------------------
step "configure $BUILD_DIR (RDATTN_TRAINER_ONLY=ON, no tests)"
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
if ! cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DRDATTN_TRAINER_ONLY=ON -DRDATTN_BUILD_TESTS=OFF -DRDATTN_BUILD_BENCHMARKS=ON \
  -DCMAKE_PREFIX_PATH="$torch_prefix" ${torch_dir:+-DTorch_DIR="$torch_dir"} "${launcher[@]}" "${cli11[@]}"; then
  echo "gpu_check: configuring failed. The trainer-only build still needs nlohmann-json, PCRE2" >&2
  echo "  (libpcre2-dev) and CLI11 (libcli11-dev, or CLI11_INCLUDE_DIR) besides LibTorch; see" >&2
  echo "  docs/build.md, 'GPU build'." >&2
  exit 3
fi
step "build rdattn-train rdattn_model_bench (-j$JOBS)"
cmake --build "$BUILD_DIR" -j"$JOBS" --target rdattn-train rdattn_model_bench || exit 4
bench="$BUILD_DIR/tests/bench/rdattn_model_bench"
[ -x "$bench" ] || die "$bench was not built"

# --- 3. CPU vs GPU forwards and T6 on the GPU ------------------------------------------------------
failed=0
for preset in $CHECK_PRESETS; do
  step "device checks, preset $preset"
  "$bench" --gpu-checks --device cuda --check-preset "$preset" --threads "$JOBS" || failed=1
done

# --- 4. S-preset training steps, block vs rd -------------------------------------------------------
mkdir -p "$OUT"
json="$OUT/gpu_bench.json"
step "S preset: full training steps (bf16 autocast, AdamW), block and rd, $BENCH_WARMUP warm-up step(s) each"
"$bench" --device cuda --precision bf16 --presets S --arms block,rd --batch "$BENCH_BATCH" \
  --rounds "$BENCH_ROUNDS" --steps "$BENCH_STEPS" --warmup "$BENCH_WARMUP" \
  --peak-flops "$PEAK_FLOPS" --json "$json" || exit 1

"$PYTHON" - "$json" "$PEAK_FLOPS" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["per_preset"]["S"]
print()
print("S preset, %s, batch %d x %d tokens; MFU against %.0f TFLOP/s (bf16 dense, documented); "
      "bf16 GEMM peak measured here %.0f TFLOP/s" % (d["precision"], d["batch_sequences"], p["config"]["context"],
                                                 float(sys.argv[2]) / 1e12, d["gemm"]["flops_per_second"] / 1e12))
print("%-6s %12s %8s %10s %12s" % ("arm", "tokens/s", "MFU", "of_gemm", "peak_GiB"))
for arm in ("block", "rd"):
    a = p["arms"][arm]
    mem = a["peak_memory_bytes"] / 2**30 if a["peak_memory_bytes"] > 0 else float("nan")
    print("%-6s %12.0f %8.3f %10.3f %12.2f" % (arm, a["tokens_per_second"], a.get("mfu", float("nan")),
                                             a["flops_over_peak"], mem))
print("rd/block: tokens/s %.3f, peak memory %.3f" % (p["rd_over_block_tokens_per_second"],
                                                  p["rd_over_block_peak_memory"]))
EOF

if [ "$failed" -ne 0 ]; then
  echo "gpu_check: FAILED (a device check failed; see the FAIL lines above)" >&2
  exit 1
fi
echo "gpu_check: passed; figures in $json"
