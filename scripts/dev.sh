#!/usr/bin/env bash
# One entry point for developers and CI. Every command first makes sure the
# machine is set up (Debian packages, the shared Python environment, the
# build) and is idempotent: a second run downloads nothing and rebuilds only
# what changed.
#
#   scripts/dev.sh demo     run the examples with torchrun on 4 ranks
#   scripts/dev.sh test     run every test (Catch2, pytest, then the format check)
#   scripts/dev.sh bench    run the collective benchmarks against gloo
#   scripts/dev.sh bench-small  small and medium messages against gloo, fake and
#                           Open MPI (installs Debian's openmpi-bin and
#                           python3-mpi4py for Debian's python3, not the venv)
#   scripts/dev.sh conformance  torch's own distributed tests (_DistTestBase)
#                           on gloo and ucxcoll (WORLD_SIZE=2 or 4); lists the
#                           tests that pass on gloo but not on ucxcoll
#   scripts/dev.sh conformance-ci  the same on ucxcoll alone at world size 2,
#                           against the committed list of what passes on gloo
#   scripts/dev.sh compat   build against another torch (COMPAT_TORCH, default
#                           2.11.0, the oldest supported; COMPAT_PYTHON, default
#                           python3.11) in an environment of its own, and run
#                           a 2-rank smoke test on it
#   scripts/dev.sh gpu-pack fill .gpu-carry/ with what scripts/gpu_check.sh
#                           needs on a GPU machine without network
#   scripts/dev.sh across-hosts  the tests across simulated hosts alone (2 hosts
#                           x 2 ranks; scripts/hosts.sh makes them; needs root)
#   scripts/dev.sh startup-sim  the simulated start-up of 64, 256 and 1,024
#                           ranks (threads of one process over the loopback
#                           transport, an in-memory store; sizes: arguments)
#   scripts/dev.sh setup    only set up and build
#
# UCXCOLL_VENV   where the Python environment lives (default
#                ~/.cache/ucxcoll/venv; outside the checkout so that every
#                clone on this machine reuses the same multi-GB torch install)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${UCXCOLL_VENV:-$HOME/.cache/ucxcoll/venv}"
BUILD="$ROOT/build"
APT_PACKAGES=(cmake g++ ninja-build ccache catch2 libucx-dev clang-format iproute2 nlohmann-json3-dev)

log() { printf '[dev.sh] %s\n' "$*" >&2; }

# ccache keys on relative paths inside the checkout and not on the build
# folder, so that every clone on this machine (CI's fresh one included) and
# every build folder of one clone reuse each other's objects. (The cost:
# debug info names the folder of whichever build compiled an object first.)
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1

ensure_apt_packages() {
  local missing=()
  for package in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    local sudo=()
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

find_python() {
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
      echo "$candidate"
      return
    fi
  done
  log "need Python >= 3.10"
  exit 1
}

# Debian's own python3 needs python3-venv to make environments and
# python3-dev for the headers the extension compiles against.
ensure_python_packages() {
  local python
  python="$(find_python)"
  local missing=()
  "$python" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  "$python" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
    missing+=(python3-dev)
  if ((${#missing[@]})); then
    APT_PACKAGES+=("${missing[@]}")
    ensure_apt_packages
  fi
}

ensure_venv() {
  if [[ ! -x "$VENV/bin/python" ]]; then
    ensure_python_packages
    log "creating the Python environment in $VENV"
    mkdir -p "$(dirname "$VENV")"
    "$(find_python)" -m venv "$VENV"
  fi
  # Reinstall only when the pinned requirements change.
  local stamp="$VENV/.ucxcoll-requirements" wanted
  wanted="$(sha256sum "$ROOT/requirements.txt" | cut -d' ' -f1)"
  if [[ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
    log "installing pinned Python packages (requirements.txt)"
    "$VENV/bin/pip" install -q -r "$ROOT/requirements.txt"
    echo "$wanted" >"$stamp"
  fi
  ensure_torchft
}

# Optional: torchft for ucxcoll.torchft's tests (requirements-torchft.txt),
# without its own dependency on torch. Where it cannot be installed those
# tests skip with the reason; nothing else needs it.
ensure_torchft() {
  local stamp="$VENV/.ucxcoll-torchft" wanted
  wanted="$(sha256sum "$ROOT/requirements-torchft.txt" | cut -d' ' -f1)"
  if [[ "$(cat "$stamp" 2>/dev/null)" == "$wanted" ]]; then
    return
  fi
  log "installing torchft, an optional test dependency (requirements-torchft.txt)"
  local file="$ROOT/requirements-torchft.txt"
  if "$VENV/bin/pip" install -q --no-deps "$(grep -E '^torchft==' "$file")" &&
    "$VENV/bin/pip" install -q -r <(grep -vE '^torchft==' "$file"); then
    echo "$wanted" >"$stamp"
  else
    log "torchft could not be installed: its tests will skip, saying so"
  fi
}

# torch's own _DistTestBase suite on gloo and on ucxcoll (WORLD_SIZE, default
# 2); fails if a test that passes on gloo does not pass on ucxcoll. Extra
# arguments go to pytest (e.g. -k test_reduce).
run_conformance() {
  local out="$ROOT/build/conformance" world="${WORLD_SIZE:-2}" backend
  mkdir -p "$out"
  for backend in gloo ucxcoll; do
    log "torch's distributed tests on $backend, world size $world"
    run_torch_suite "$backend" "$world" "$out/$backend-w$world.xml" "$@"
  done
  "$VENV/bin/python" "$ROOT/test/conformance/compare.py" "$out/gloo-w$world.xml" "$out/ucxcoll-w$world.xml"
}

# The same suite on ucxcoll alone, world size 2, against the list of tests
# that pass on gloo (test/conformance/passing_on_gloo_w2.txt, written by
# compare.py --write-list from a `conformance` run). A test that fails (and
# is not a known failure) is run once more, since on a 2-core machine a
# test's ranks can miss torch's own timeouts; it must pass then.
run_conformance_ci() {
  local out="$ROOT/build/conformance" list="$ROOT/test/conformance/passing_on_gloo_w2.txt"
  mkdir -p "$out"
  # Only the tests that pass on gloo, less the known failures: the rest
  # (192 of 285, most needing a GPU or NCCL) skip or fail either way, and
  # each costs a spawn of two ranks (6-9 s) before it does.
  local selected=() name
  for name in $("$VENV/bin/python" "$ROOT/test/conformance/compare.py" --to-run "$list"); do
    selected+=("$ROOT/test/conformance/run_torch_dist_tests.py::TestDistBackendWithSpawn::$name")
  done
  log "torch's distributed tests on ucxcoll, world size 2 (${#selected[@]} that pass on gloo)"
  run_torch_suite ucxcoll 2 "$out/ci-ucxcoll-w2.xml" "${selected[@]}"
  local failed
  failed="$("$VENV/bin/python" "$ROOT/test/conformance/compare.py" --failed "$out/ci-ucxcoll-w2.xml")"
  if [[ -n "$failed" ]]; then
    log "running again: $failed"
    run_torch_suite ucxcoll 2 "$out/ci-ucxcoll-w2-rerun.xml" -k "${failed// / or }"
    "$VENV/bin/python" "$ROOT/test/conformance/compare.py" "$list" "$out/ci-ucxcoll-w2.xml" "$out/ci-ucxcoll-w2-rerun.xml"
  else
    "$VENV/bin/python" "$ROOT/test/conformance/compare.py" "$list" "$out/ci-ucxcoll-w2.xml"
  fi
}

# run_torch_suite BACKEND WORLD XML [pytest arguments]; its output goes next
# to the XML (.log).
run_torch_suite() {
  local backend="$1" world="$2" xml="$3"
  shift 3
  # The whole file, unless the arguments name tests of it (file::class::test).
  local targets=("$ROOT/test/conformance/run_torch_dist_tests.py")
  [[ "${1:-}" == *::* ]] && targets=()
  BACKEND=$backend WORLD_SIZE=$world "$VENV/bin/python" -m pytest "${targets[@]}" \
    -q -p no:cacheprovider --junitxml="$xml" "$@" >"${xml%.xml}.log" 2>&1 || true
}

build() {
  if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DPython3_EXECUTABLE="$VENV/bin/python" >/dev/null
  fi
  cmake --build "$BUILD" -j2
  # The package is installed editable: the module built here is the one
  # Python loads. The install itself (entry point, metadata) is redone only
  # when the packaging files change.
  # Replaced, never overwritten in place: a running process maps the old file.
  local module
  for module in "$BUILD"/_C*.so; do
    cp -f "$module" "$ROOT/torch_ext/ucxcoll/.$(basename "$module").new"
    mv -f "$ROOT/torch_ext/ucxcoll/.$(basename "$module").new" "$ROOT/torch_ext/ucxcoll/$(basename "$module")"
  done
  local stamp="$BUILD/.ucxcoll-installed" wanted
  wanted="$(cat "$ROOT/setup.py" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
  # The venv is shared by every clone on the machine: reinstall when the
  # installed package is another checkout's (find_spec does not import it).
  local installed
  installed="$("$VENV/bin/python" -c 'import importlib.util as u; s = u.find_spec("ucxcoll"); print(s.origin if s else "")' 2>/dev/null || true)"
  if [[ "$(cat "$stamp" 2>/dev/null)" != "$wanted" || "$installed" != "$ROOT/torch_ext/ucxcoll/__init__.py" ]]; then
    log "installing ucxcoll into $VENV (editable)"
    "$VENV/bin/pip" install -q --no-build-isolation --no-deps -e "$ROOT"
    echo "$wanted" >"$stamp"
  fi
}

setup() {
  ensure_apt_packages
  ensure_venv
  build
}

# The oldest torch we support; COMPAT_TORCH picks another one, and
# COMPAT_PYTHON another interpreter (default: the pinned environment's).
COMPAT_TORCH="${COMPAT_TORCH:-2.11.0}"

compat_python() { echo "${COMPAT_PYTHON:-$(find_python)}"; }
check_compat_python() {
  if ! "$(compat_python)" -c 'import sys' 2>/dev/null; then
    log "COMPAT_PYTHON=$(compat_python) does not run"
    exit 1
  fi
}
compat_name() {
  echo "torch$COMPAT_TORCH-py$("$(compat_python)" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
}

# An environment with torch $COMPAT_TORCH beside the pinned one. The wheel is
# downloaded once into ~/.cache/ucxcoll/wheels. It is installed without its
# CUDA dependencies: the environment links the pinned one's nvidia/ folder
# instead (the same CUDA major version; torch finds it through its RPATH
# when it loads), which saves several GB.
ensure_compat_venv() {
  local venv="$HOME/.cache/ucxcoll/venv-$(compat_name)"
  local wheels="$HOME/.cache/ucxcoll/wheels" stamp="$venv/.ucxcoll-compat" wanted
  wanted="torch==$COMPAT_TORCH $(sha256sum "$ROOT/requirements.txt" | cut -d' ' -f1)"
  if [[ "$(cat "$stamp" 2>/dev/null)" == "$wanted" ]]; then
    return
  fi
  log "setting up torch $COMPAT_TORCH in $venv"
  rm -rf "$venv"
  "$(compat_python)" -m venv "$venv"
  local tag wheel
  tag="$("$venv/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
  mkdir -p "$wheels"
  wheel="$(ls "$wheels"/torch-"$COMPAT_TORCH"-"$tag"-*.whl 2>/dev/null | head -1 || true)"
  if [[ -z "$wheel" ]]; then
    "$venv/bin/pip" download -q --no-deps -d "$wheels" "torch==$COMPAT_TORCH"
    wheel="$(ls "$wheels"/torch-"$COMPAT_TORCH"-"$tag"-*.whl | head -1)"
  fi
  "$venv/bin/pip" install -q --no-deps "$wheel"
  local site
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  ln -s "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia" "$site/nvidia"
  # torch's own pure-Python dependencies, and the pinned UCX wheel and numpy.
  "$venv/bin/pip" install -q filelock "typing-extensions>=4.10.0" "setuptools<82" sympy networkx jinja2 fsspec \
    $(grep -E '^(libucx-cu13|numpy)==' "$ROOT/requirements.txt")
  echo "$wanted" >"$stamp"
}

# Builds the extension against torch $COMPAT_TORCH (build-<name>/) and runs
# test/compat/smoke.py on 2 ranks with it: the package's Python files and
# that build's module in a folder of their own, so that the pinned
# environment's editable install is not touched.
run_compat() {
  check_compat_python
  ensure_compat_venv
  local name
  name="$(compat_name)"
  local venv="$HOME/.cache/ucxcoll/venv-$name" build="$ROOT/build-$name"
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake -S "$ROOT" -B "$build" -G Ninja -DPython3_EXECUTABLE="$venv/bin/python" -DUCXCOLL_BUILD_EXTENSION=ON \
      -DUCXCOLL_BUILD_TESTS=OFF >/dev/null
  fi
  log "building the extension against $name"
  cmake --build "$build" -j2 --target _C
  local package="$build/package"
  rm -rf "$package" && mkdir -p "$package/ucxcoll"
  cp "$ROOT"/torch_ext/ucxcoll/*.py "$package/ucxcoll/"
  cp "$build"/_C*.so "$package/ucxcoll/"
  log "smoke test on $name, 2 ranks"
  (cd "$ROOT" && TORCH_DEVICE_BACKEND_AUTOLOAD=0 PYTHONPATH="$package" \
    "$venv/bin/python" -m torch.distributed.run --nproc-per-node 2 test/compat/smoke.py)
}

# What scripts/gpu_check.sh needs on a GPU machine without network, in
# .gpu-carry/ (git-ignored; name it in the device tool's `carry`): the
# pinned libucx wheel for Python 3.12 and UCX's headers (Debian's).
gpu_pack() {
  local carry="$ROOT/.gpu-carry"
  rm -rf "$carry" && mkdir -p "$carry/include"
  "$VENV/bin/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$carry" "$(grep -E '^libucx-cu13==' "$ROOT/requirements.txt")"
  cp -r /usr/include/ucp /usr/include/ucs /usr/include/uct /usr/include/ucm "$carry/include/"
  log "packed for scripts/gpu_check.sh: $(du -sh "$carry" | cut -f1) in $carry"
}

run_demo() {
  cd "$ROOT"
  local torchrun=("$VENV/bin/torchrun" --nproc-per-node=4)
  "${torchrun[@]}" examples/all_gather.py
  "${torchrun[@]}" examples/all_gather_2d.py
  "${torchrun[@]}" examples/ddp_train.py
}

check_format() {
  log "format check (.clang-format)"
  clang-format --dry-run --Werror "$ROOT"/csrc/*/*.[ch]pp "$ROOT"/test/cpp/*.[ch]pp
}

run_tests() {
  cd "$ROOT"
  log "C++ tests (Catch2), UCX from the libucx wheel"
  (cd "$BUILD" && ctest --output-on-failure)
  # The oldest UCX we support is Debian 12's 1.13: run the same tests
  # against it (torch-free build of the core and tests only).
  log "C++ tests (Catch2), Debian's UCX 1.13 (UCX_ROOT=/usr)"
  if [[ ! -f "$BUILD-ucx113/CMakeCache.txt" ]]; then
    cmake -S "$ROOT" -B "$BUILD-ucx113" -G Ninja -DUCX_ROOT=/usr -DUCXCOLL_BUILD_EXTENSION=OFF \
      -DPython3_EXECUTABLE="$VENV/bin/python" >/dev/null
  fi
  cmake --build "$BUILD-ucx113" -j2
  (cd "$BUILD-ucx113" && ctest --output-on-failure)
  log "Python tests (pytest)"
  "$VENV/bin/python" -m pytest test/python -q -rs "$@"
  # Last, so that a formatting slip does not hide the test results.
  check_format
}

# Sanitizers (not in CI: about 30 minutes on 2 cores). The Catch2 suite
# under AddressSanitizer + UBSan; the engine's tests under ThreadSanitizer;
# and a pytest subset with the extension built under ASan + UBSan (Python
# and torch are not instrumented: the runtime is preloaded, leak checks are
# off since the interpreter never frees everything).
run_sanitizers() {
  cd "$ROOT"
  local asan_flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  local asan_env=(ASAN_OPTIONS="abort_on_error=1:detect_leaks=1" LSAN_OPTIONS="suppressions=$ROOT/test/cpp/lsan.supp"
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
  log "C++ tests (Catch2) under AddressSanitizer + UBSan"
  if [[ ! -f "$BUILD-asan/CMakeCache.txt" ]]; then
    cmake -S "$ROOT" -B "$BUILD-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUCXCOLL_BUILD_EXTENSION=ON \
      -DPython3_EXECUTABLE="$VENV/bin/python" -DCMAKE_CXX_FLAGS="$asan_flags" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
      -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  fi
  cmake --build "$BUILD-asan" -j2
  # Groups of up to 6 ranks: under ASan the 7-16-rank groups of the
  # algorithm tests take minutes each on two cores and find nothing new.
  env "${asan_env[@]}" UCXCOLL_TEST_MAX_RANKS=6 "$BUILD-asan/ucxcoll_tests"

  log "engine tests ([engine]) under ThreadSanitizer"
  if [[ ! -f "$BUILD-tsan/CMakeCache.txt" ]]; then
    cmake -S "$ROOT" -B "$BUILD-tsan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUCXCOLL_BUILD_EXTENSION=OFF \
      -DPython3_EXECUTABLE="$VENV/bin/python" -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
  fi
  cmake --build "$BUILD-tsan" -j2 --target ucxcoll_tests
  # UCX's memory hooks (ucm) intercept madvise, which glibc calls as a thread
  # exits, after TSan has let go of the thread: a segfault in TSan's mutex
  # code. ucxcoll registers no memory, so the hooks are not needed here.
  UCX_MEM_EVENTS=no UCX_MEM_MMAP_HOOK_MODE=none \
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/test/cpp/tsan.supp" \
    "$BUILD-tsan/ucxcoll_tests" "[engine]"

  log "Python tests (collectives, point-to-point, disagreements, failure scenarios) with the extension under ASan + UBSan"
  local package="$BUILD-asan/package"
  rm -rf "$package" && mkdir -p "$package/ucxcoll"
  cp "$ROOT"/torch_ext/ucxcoll/*.py "$package/ucxcoll/"
  cp "$BUILD-asan"/_C*.so "$package/ucxcoll/"
  env ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" UCXCOLL_TEST_UNDER_ASAN=1 \
    LD_PRELOAD="$(g++ -print-file-name=libasan.so):$(g++ -print-file-name=libubsan.so)" PYTHONPATH="$package" \
    "$VENV/bin/python" -m pytest -q -x test/python/test_collectives.py test/python/test_point_to_point.py \
    test/python/test_disagreement.py test/python/test_scenarios.py \
    -k "not test_scenarios or killed_peer or dead_peer or reconfigure or stray or exit or forked"
}

# Steps are separate commands, never joined by &&: bash ignores `set -e`
# inside a function that runs on the left of &&, so a failed build would
# not stop the tests that follow it.
command="${1:-}"
shift || true
case "$command" in
  setup) setup ;;
  demo) setup; run_demo ;;
  test) setup; run_tests "$@" ;;
  bench) setup; cd "$ROOT"; "$VENV/bin/python" benchmarks/bench_collectives.py "$@" ;;
  bench-small)
    APT_PACKAGES+=(openmpi-bin python3-mpi4py python3-numpy)
    setup; cd "$ROOT"; "$VENV/bin/python" benchmarks/bench_small.py "$@"
    ;;
  conformance) setup; run_conformance "$@" ;;
  conformance-ci) setup; run_conformance_ci ;;
  compat) ensure_apt_packages; ensure_venv; run_compat ;;
  gpu-pack) ensure_apt_packages; ensure_venv; gpu_pack ;;
  sanitize) setup; run_sanitizers ;;
  startup-sim)
    setup
    sizes=("$@")
    if ((${#sizes[@]} == 0)); then sizes=(64 256 1024); fi
    for ranks in "${sizes[@]}"; do
      UCXCOLL_SIM_RANKS=$ranks "$BUILD/ucxcoll_tests" "start-up simulation*" | grep -E "^start-up simulation|passed|failed"
    done
    ;;
  across-hosts) setup; cd "$ROOT"; "$VENV/bin/python" -m pytest test/python/test_across_hosts.py -q -rs "$@" ;;
  *)
    echo "usage: scripts/dev.sh {demo|test|bench|bench-small|conformance|conformance-ci|compat|gpu-pack|sanitize|across-hosts|setup}" >&2
    exit 2
    ;;
esac
