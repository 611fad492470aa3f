#!/usr/bin/env bash
# The GPU checks as one command, for a machine with GPUs and torch but no
# network (the lent device machine: Python 3.12, torch 2.11, CMake, ninja):
#
#   bash scripts/dev.sh gpu-pack      # here, once: fills .gpu-carry/
#   bash scripts/gpu_check.sh         # there, with .gpu-carry/ carried along
#
# .gpu-carry/ holds what that machine cannot fetch: the libucx wheel (for
# Python 3.12) and UCX's headers. The script builds ucxcoll._C against the
# machine's own torch, puts the package (with its torch.backends entry
# point, so that scripts select it by name alone) in a folder on PYTHONPATH,
# then runs the GPU tests, the CUDA example, and the CUDA benchmark against
# nccl. Logs go to $OUT (or /tmp/ucxcoll-gpu-out). Exits non-zero if a test
# fails.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARRY="$ROOT/.gpu-carry"
PYTHON="${PYTHON:-python3}"
OUT="${OUT:-/tmp/ucxcoll-gpu-out}"
WORK="${TMPDIR:-/tmp}/ucxcoll-gpu"
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/gpu_check.log") 2>&1

log() { echo "[gpu_check] $*"; }
status=0

log "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4)"
"$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
  "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None,
  "gpus", torch.cuda.device_count())'

ls "$CARRY"/libucx*.whl >/dev/null 2>&1 || { log "no libucx wheel in $CARRY: run scripts/dev.sh gpu-pack first"; exit 2; }
site="$WORK/site"
rm -rf "$site" && "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$CARRY"/libucx*.whl \
  || exit 2

build="$WORK/build"
cmake -S "$ROOT" -B "$build" -G Ninja -DPython3_EXECUTABLE="$(command -v "$PYTHON")" -DUCXCOLL_BUILD_EXTENSION=ON \
  -DUCXCOLL_BUILD_TESTS=OFF -DUCX_WHEEL_LIBDIR="$site/libucx/lib" -DUCX_INCLUDE_DIR="$CARRY/include" >"$OUT/cmake.log" \
  || { cat "$OUT/cmake.log"; exit 2; }
cmake --build "$build" -j "$(nproc)" --target _C || exit 2

# The package as pip would lay it out, entry point included.
package="$WORK/package"
rm -rf "$package" && mkdir -p "$package/ucxcoll" "$package/ucxcoll-0.dist-info"
cp "$ROOT"/torch_ext/ucxcoll/*.py "$build"/_C*.so "$package/ucxcoll/"
cp "$ROOT"/torch_ext/_ucxcoll_autoload.py "$package/"
printf 'Metadata-Version: 2.1\nName: ucxcoll\nVersion: 0\n' >"$package/ucxcoll-0.dist-info/METADATA"
printf '[torch.backends]\nucxcoll = _ucxcoll_autoload:autoload\n' >"$package/ucxcoll-0.dist-info/entry_points.txt"
export PYTHONPATH="$package:$site${PYTHONPATH:+:$PYTHONPATH}"

cd "$ROOT"
log "doctor"
"$PYTHON" -m ucxcoll.doctor || status=1
log "GPU tests"
"$PYTHON" -m pytest -q -rs -p no:cacheprovider test/python/test_gpu.py \
  "test/python/test_scenarios.py::test_cpu_only_job_never_initialises_cuda" --junitxml="$OUT/gpu_tests.xml" || status=1
gpus="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')"
if [[ "$gpus" == 0 ]]; then
  log "no GPU on this machine: the GPU tests above were skipped; no example or benchmark to run"
  exit 3
fi
log "examples/all_gather_cuda.py on $gpus GPU(s)"
"$PYTHON" -m torch.distributed.run --nproc-per-node "$gpus" examples/all_gather_cuda.py || status=1
log "benchmark: ucxcoll vs nccl on CUDA tensors, $gpus rank(s)"
"$PYTHON" benchmarks/bench_collectives.py --device cuda --nproc "$gpus" \
  --ops all_reduce all_gather_into_tensor reduce_scatter_tensor all_to_all_single reduce \
  --sizes 8 4096 1048576 16777216 67108864 --json "$OUT/bench_cuda.json" || status=1
log "done, status $status"
exit "$status"
