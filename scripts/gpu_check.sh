#!/usr/bin/env bash
# gpu_check.sh: everything a lent GPU can tell us, in one call that returns
# every figure even when parts fail. Three ways to run it:
#
#   scripts/gpu_check.sh --prepare [--from BUILD_DIR]     on this CPU machine
#       Fetches the Debian packages the binaries need (.gpu_deps/, 23 MB, via
#       scripts/fetch_gpu_deps.sh) and builds trainer, gt_cuda_tests and
#       gpu_bench for sm_90 with this machine's nvcc (or copies them from
#       BUILD_DIR, a CUDA build of this tree) into .gpu_bin/, stamped with a
#       hash of the sources. Prints the device call to make.
#
#   scripts/gpu_check.sh [--only STAGES] [--budget S] [--out DIR]   on the GPU
#       Run with `.gpu_deps` and `.gpu_bin` carried. Prints the machine's
#       cmake, g++, nvcc, OS and GPU; unpacks the packages into .gpu_prefix/
#       (never into /); uses the prepared binaries when their stamp matches
#       these sources and they load (ldd, --help), else rebuilds (build-gpu/).
#       Then the stages, in order of value, each under its own timeout with
#       its own log and verdict (ok | FAILED | warn | skipped), a failure never
#       stopping the ones after it:
#         costs             trainer costs: every op of the 124M step with its
#                           floor on the H200, for the SIMT and the
#                           tensor-core attention (no GPU needed; the table
#                           puts the profiled run's measured time beside each
#                           row of its own kernels' table)
#         tests-core        the cuBLASLt matmul and attention tests (the gate
#                           for the tensor-core attention), one process
#         data              random GPT-2 tokens and this repository's text
#         train-tc          GPT-2 124M bf16, 12 steps (10-11 profiled), with
#                           the tensor-core attention if its gate test passed
#         train-simt        the same on the SIMT attention, unprofiled
#         train-llama       Llama 3 8B's dimensions (GQA 32/8 heads, SwiGLU
#                           14336, vocabulary 128256) cut to 4 layers, bf16,
#                           T=2048, 10 steps, unprofiled
#         train-fp8         train-tc with runtime.fp8=tensorwise (profiled)
#         train-llama-fp8   train-llama with runtime.fp8=tensorwise
#         pytorch-fp32/bf16 scripts/check_against_pytorch.py with
#                           runtime.device=cuda (fp32 to 1e-4, bf16 to 2e-2)
#         tests-production  the production-shape tests (attention 12 heads x
#                           T=1024 x B=4, a C=768 block, the LM-head GEMMs)
#         tests-<Suite>     every other GPU test suite, one process each
#         memcheck,         compute-sanitizer on the attention, cross-entropy
#         racecheck         and embedding tests (findings are "warn": non-fatal)
#         gpu-bench         gpu_bench: GEMMs, attention, bandwidth-bound kernels,
#                           the LM-head GEMMs checked in double on samples
#         peaks             trainer bench (the measured peaks)
#         torch-compile     scripts/bench_vs_pytorch.py: the same 124M step in
#                           torch.compile (runs even when our build failed)
#         layout-*          ref, dp2, fsdp2, tp2, pp2, cp2 (K|V all-gathered),
#                           cp2_ring (K|V round the ring): 2 ranks on the one GPU
#                           against 1
#       then one table (scripts/gpu_table.py) and, with --out DIR (default
#       $OUT when set), DIR/gpu_check.tar.gz (every log) and DIR/table.txt.
#       The whole run stays inside --budget (default 510 s: a 600 s device
#       call with room to pack); a stage with no time left is "not run". At
#       the end it prints the command that reruns only the failed stages.
#
#   scripts/gpu_check.sh --trial                          on this CPU machine
#       After --prepare: the device path with every file of the system's
#       copies of those packages hidden (a private mount namespace; root),
#       so the prepared binaries must load from .gpu_prefix/ alone, as on the
#       GPU machine; every GPU stage then says "skipped: no GPU". Under 4 min.
#
#   scripts/gpu_check.sh --rehearse EMU_BUILD                on this CPU machine
#       Every GPU stage for real on the emulated device (docs/EMULATOR.md), with
#       the binaries of an emulator build (trainer, gt_cuda_tests) and the 124M
#       runs shrunk to 2 layers of 128 at T=64 and each tests-<Suite> stage
#       running its suite's first test (run_emulator_tests.sh's phase 1 runs
#       them all), so every command line the GPU call will run is tried
#       before device time is spent on it. No figure of a rehearsal is a GPU
#       measurement (the table says so). About 6 minutes;
#       its default --budget is 900 s and a test suite may take 180 s (60 on a GPU).
#
# --only STAGES: comma-separated stage names or prefixes ("tests-" is every
# test stage); the others are not run, except what a selected stage needs
# (data for the training and layout stages, tests-core for train-tc's gate
# when the log folder has no result of it). --logs DIR: where the logs go
# (default runs/gpu_check/<time>). Exit status: 0 when no stage failed.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: scripts/gpu_check.sh [--prepare [--from BUILD_DIR]] [--trial] [--rehearse EMU_BUILD] [--only STAGES]
                            [--logs DIR] [--out DIR] [--budget SECONDS] [--jobs N]"
logs="" out="${OUT:-}" only="" budget="" from="" mode=device inside_trial=0 rehearse=""
jobs="$(nproc 2>/dev/null || echo 4)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prepare) mode=prepare; shift ;;
    --from) from="$2"; shift 2 ;;
    --trial) mode=trial; shift ;;
    --rehearse) mode=rehearse; rehearse="$2"; shift 2 ;;
    --inside-trial) mode=trial; inside_trial=1; shift ;;
    --only) only="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
# A rehearsal is not bound by a lent device's 600 s: its default budget is
# the emulated device's (about 100x slower than a GPU on the GPU-sized suites).
if [[ -z "$budget" ]]; then
  budget=510
  [[ $mode == rehearse ]] && budget=900
fi
if ! [[ "$budget" =~ ^[0-9]+$ && "$jobs" =~ ^[0-9]+$ ]]; then
  echo "gpu_check: --budget and --jobs take a whole number" >&2
  exit 2
fi
if [[ -n "$from" && $mode != prepare ]]; then
  echo "gpu_check: --from goes with --prepare" >&2
  exit 2
fi
if [[ -n "$from" ]]; then
  from="$(cd "$from" 2>/dev/null && pwd)" || { echo "gpu_check: --from: no such folder" >&2; exit 2; }
fi
if [[ $mode == rehearse ]]; then
  rehearse="$(cd "$rehearse" 2>/dev/null && pwd)" || { echo "gpu_check: --rehearse: no such folder" >&2; exit 2; }
  if ! grep -q '^TRAINER_CUDA_EMULATOR:BOOL=ON' "$rehearse/CMakeCache.txt" 2>/dev/null ||
     [[ ! -x "$rehearse/trainer" || ! -x "$rehearse/tests/gt_cuda_tests" ]]; then
    echo "gpu_check: --rehearse needs an emulator build with trainer and gt_cuda_tests built:" \
         "cmake -S . -B build-emu -DTRAINER_CUDA_EMULATOR=ON && cmake --build build-emu --target trainer gt_cuda_tests" >&2
    exit 2
  fi
fi
cd "$root" || exit 1
# GPU_CHECK_DEPS / GPU_CHECK_BIN: other places for the two carried folders
# (tests point them at empty ones).
deps="${GPU_CHECK_DEPS:-$root/.gpu_deps}"
bin="${GPU_CHECK_BIN:-$root/.gpu_bin}"
prefix="$root/.gpu_prefix"
multiarch=x86_64-linux-gnu

# The sources the binaries are built from; a prepared build is used only
# when this hash is the one it was built with.
source_hash() {
  find CMakeLists.txt cmake kernels parallel trainer tests emulator -type f \
    \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \
       -o -name 'CMakeLists.txt' -o -name '*.cmake' -o -name '*.in' \) -print0 2>/dev/null |
    LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -c1-16
}
targets=(trainer gt_cuda_tests gpu_bench)
# Where each target lands in a build folder.
target_path() {
  case "$2" in
    gt_cuda_tests) echo "$1/tests/gt_cuda_tests" ;;
    *) echo "$1/$2" ;;
  esac
}

# ---- --prepare: build here, where the same nvcc and Debian libraries are ------------
if [[ $mode == prepare ]]; then
  t0=$(date +%s)
  if ! ls "$deps"/*.deb >/dev/null 2>&1; then
    echo "== fetching the packages the binaries need into .gpu_deps/"
    "$root/scripts/fetch_gpu_deps.sh" || exit 1
  fi
  build="$from"
  if [[ -z "$build" ]]; then
    build="$root/build-gpu-prep"
    echo "== building ${targets[*]} in $build (sm_90; minutes on a few cores)"
    mkdir -p "$build"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$build/configure.log" 2>&1 ||
      { tail -20 "$build/configure.log"; echo "gpu_check: configure failed" >&2; exit 1; }
  fi
  # A GPU build: nvcc found at configure time, not the emulated device.
  if ! ls "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake >/dev/null 2>&1 ||
     grep -q '^TRAINER_CUDA_EMULATOR:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "gpu_check: $build is not an nvcc build of this tree (no CMakeCUDACompiler.cmake, or the emulator)" >&2
    exit 1
  fi
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" || { echo "gpu_check: build failed" >&2; exit 1; }
  rm -rf "$bin"
  mkdir -p "$bin"
  for t in "${targets[@]}"; do
    cp "$(target_path "$build" "$t")" "$bin/$t" || exit 1
    strip --strip-unneeded "$bin/$t" 2>/dev/null || true
  done
  {
    echo "source_hash $(source_hash)"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME")"
    echo "nvcc $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo '?')"
    echo "g++ $(g++ -dumpfullversion 2>/dev/null || echo '?')"
  } >"$bin/STAMP"
  echo "== prepared in $(( $(date +%s) - t0 ))s: .gpu_bin/ ($(du -sh "$bin" | cut -f1)) and .gpu_deps/ ($(du -sh "$deps" | cut -f1))"
  cat "$bin/STAMP"
  echo "device call: run(command=\"bash scripts/gpu_check.sh\", carry=[\".gpu_deps\", \".gpu_bin\"], timeout_s=600)"
  echo "rehearse it here first: bash scripts/gpu_check.sh --trial"
  exit 0
fi

# ---- --trial: hide the system's copies, then run the real thing inside ---------------
[[ -n "$logs" ]] || logs="$root/runs/gpu_check/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$logs" && logs="$(cd "$logs" && pwd)"
if [[ $mode == trial && $inside_trial == 0 ]]; then
  if [[ $(id -u) -ne 0 ]]; then echo "gpu_check: --trial needs root (unshare, mount)" >&2; exit 2; fi
  args=(--inside-trial --logs "$logs" --budget "$budget" --jobs "$jobs")
  [[ -n "$only" ]] && args+=(--only "$only")
  [[ -n "$out" ]] && args+=(--out "$out")
  exec unshare --mount --propagation private "$0" "${args[@]}"
fi
if [[ $inside_trial == 1 ]]; then
  hidden=0
  # Every installed package of the dependency families (all BLAS and MPI
  # flavours too, so nothing can be picked up from the system by accident).
  pattern='openmpi|openblas|libblas|liblapack|yaml-cpp|spdlog|libfmt|gtest|gmock|googletest|nlohmann|hwloc|pmix|libucx|libfabric|libevent|ibverbs|rdmacm|libpsm|libmunge|libgfortran|libquadmath'
  while read -r pkg; do
    while read -r f; do
      if [[ -f "$f" && ! -L "$f" ]]; then
        mount --bind /dev/null "$f" 2>/dev/null && hidden=$((hidden + 1))
      fi
    done < <(dpkg -L "$pkg" 2>/dev/null)
  done < <(dpkg-query -W -f='${Package}\n' | grep -E "$pattern")
  echo "gpu_check --trial: $hidden files of the system's packages hidden"
fi

t_start=$(date +%s)
deadline=$(( t_start + budget ))
elapsed() { echo $(( $(date +%s) - t_start ))s; }
step() { echo "== [$(elapsed)] $*"; }
status=0
echo "gpu_check: logs in $logs"

# ---- 0. the machine, first: what every later line depends on -------------------------
{
  echo "os: $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo '?')"
  echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo 'not found')"
  echo "g++: $(g++ --version 2>/dev/null | head -1 || echo 'not found')"
  nv="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  echo "nvcc: $("$nv" --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo 'not found')"
  echo "python3: $(python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo 'not found')"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "no device")' 2>/dev/null || echo 'not importable')"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
  echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo 'not found')"
  echo "prepared binaries: $(tr '\n' ';' <"$bin/STAMP" 2>/dev/null || echo 'none (.gpu_bin/STAMP missing)')"
} | tee "$logs/machine.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$logs/gpu.txt" 2>/dev/null ||
  echo "no nvidia-smi" >"$logs/gpu.txt"
have_gpu=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && have_gpu=1
[[ $mode == trial ]] && have_gpu=0
if [[ $mode == rehearse ]]; then
  have_gpu=1
  echo "the emulated device (a rehearsal: no figure is a GPU measurement)" >"$logs/gpu.txt"
fi
no_gpu="no GPU (nvidia-smi lists none)"

# ---- stages ---------------------------------------------------------------------------
# Each adds one line to stages.tsv: name, ok | FAILED | warn | skipped,
# seconds, log, note. The table renders it.
wanted() {  # STAGE: selected by --only (a name or a prefix of one)?
  [[ -z "$only" ]] && return 0
  local w
  IFS=',' read -ra sel <<<"$only"
  for w in "${sel[@]}"; do [[ "$1" == "$w" || ( "$w" == *- && "$1" == "$w"* ) ]] && return 0; done
  return 1
}
stages="$logs/stages.tsv"
# A rerun (--only) into the same --logs folder keeps the other stages' rows;
# record() replaces a stage's old row.
[[ -n "$only" && -f "$stages" ]] || : >"$stages"
record() {  # NAME STATUS SECONDS LOG NOTE
  awk -F'\t' -v n="$1" '$1 != n' "$stages" >"$stages.tmp" && mv "$stages.tmp" "$stages"
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$stages"
  [[ $2 == FAILED ]] && status=1
  [[ $2 == ok ]] || echo "   $1: $2${5:+: $5}${4:+ (see $(basename "$4"))}"
  progress
  return 0
}
# The shared progress line (scripts/progress.py) after each stage. Its total
# is the time budget, the one bound the stages keep, so its ETA is the
# latest the run ends.
progress() {
  local done_n failed_n
  done_n=$(wc -l <"$stages")
  failed_n=$(awk -F'\t' '$2 == "FAILED"' "$stages" | wc -l)
  python3 "$root/scripts/progress.py" gpu_check "$(( $(date +%s) - t_start ))" "$budget" s \
    "$(( $(date +%s) - t_start ))" "$done_n stages done" "$failed_n failed" 2>/dev/null || true
}
skip() { wanted "$1" && record "$1" skipped "" "" "$2"; return 0; }
# run_stage NAME MAX_SECONDS CMD...: CMD's output into $logs/NAME.log, at most
# MAX_SECONDS and never past the budget. Before it, SKIP_RC=N SKIP_NOTE=TEXT:
# exit code N means "skipped: TEXT"; WARN_RC=N WARN_NOTE=TEXT: "warn: TEXT";
# NONFATAL=1: any other failure is "warn" too (the note says what happened).
# Returns CMD's exit code (124 on timeout; 125 when not run).
run_stage() {
  local name="$1" max="$2"
  shift 2
  [[ -n "${ONLY_OVERRIDE:-}" ]] || wanted "$name" || return 125
  local log="$logs/$name.log"
  local left=$(( deadline - $(date +%s) - 5 ))
  if (( left < 10 )); then
    record "$name" FAILED 0 "" "not run: the ${budget}s budget (--budget) is spent"
    return 125
  fi
  local limit=$(( max < left ? max : left ))
  step "$name (at most ${limit}s)"
  local t0 rc secs
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  if [[ $rc == 0 ]]; then
    record "$name" ok "$secs" "$log" ""
  elif [[ -n "${SKIP_RC:-}" && $rc == "$SKIP_RC" ]]; then
    record "$name" skipped "$secs" "$log" "$SKIP_NOTE"
  elif [[ -n "${WARN_RC:-}" && $rc == "$WARN_RC" ]]; then
    record "$name" warn "$secs" "$log" "$WARN_NOTE"
  else
    local what="exit $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))")"
    [[ $rc == 124 || $rc == 137 ]] && what="timed out after ${limit}s"
    record "$name" "$([[ -n "${NONFATAL:-}" ]] && echo warn || echo FAILED)" "$secs" "$log" "$what"
  fi
  return $rc
}

# ---- 1. the dependency prefix and the binaries ------------------------------------------
bin_note=""
if [[ $mode == rehearse ]]; then
  :  # the emulator build links this machine's libraries
elif ! ls "$deps"/*.deb >/dev/null 2>&1; then
  bin_note="no .gpu_deps/: run scripts/gpu_check.sh --prepare on the CPU machine and carry .gpu_deps and .gpu_bin"
else
  stamp="$(cat "$deps"/MANIFEST 2>/dev/null; ls -l "$deps"/*.deb | md5sum)"
  if [[ ! -f "$prefix/.stamp" || "$(cat "$prefix/.stamp")" != "$stamp" ]]; then
    step "unpacking $(ls "$deps"/*.deb | wc -l) packages into $prefix"
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for f in "$deps"/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$f" "$prefix"
      else  # not a Debian-family machine: a .deb is an ar archive holding data.tar.*
        member="$(ar t "$f" | grep '^data\.tar')" && ar p "$f" "$member" | tar -xa -f - -C "$prefix"
      fi || { bin_note="cannot unpack $f"; break; }
    done
    # What Debian's maintainer scripts would have done: the alternatives
    # symlinks (cblas.h, mpicxx) and the unversioned MPI names.
    for h in cblas.h f77blas.h openblas_config.h; do
      ln -sfn "openblas-openmp/$h" "$prefix/usr/include/$multiarch/$h"
    done
    for t in mpicxx mpicc mpirun; do ln -sfn "$t.openmpi" "$prefix/usr/bin/$t"; done
    [[ -z "$bin_note" ]] && echo "$stamp" >"$prefix/.stamp"
  fi
fi
P="$prefix/usr"
L="$P/lib/$multiarch"
if [[ $mode != rehearse ]]; then
  export CMAKE_PREFIX_PATH="$P${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PATH="$P/bin:$PATH"
  export CPATH="$P/include/$multiarch${CPATH:+:$CPATH}"
  export LD_LIBRARY_PATH="$L:$L/openmpi/lib:$L/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LIBRARY_PATH="$L:$L/openmpi/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  # Open MPI finds its wrapper data, headers and libraries under OPAL_PREFIX.
  export OPAL_PREFIX="$P" OPAL_LIBDIR="$L/openmpi/lib" OPAL_INCLUDEDIR="$L/openmpi/include"
  export OPAL_PKGDATADIR="$P/share/openmpi" OPAL_DATADIR="$P/share"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# CUDA libraries the binaries need that the machine's loader cannot find
# (NCCL is not always under /usr/local/cuda): PyTorch's wheels carry them.
missing_libs() { ldd "$1" 2>/dev/null | awk '/not found/ {print $1}'; }
add_wheel_libs() {
  local miss="$(missing_libs "$1")" dir
  [[ -z "$miss" ]] && return 0
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib \
             $(python3 -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in os.listdir(p)]' 2>/dev/null); do
    [[ -d "$dir" ]] || continue
    for lib in $miss; do
      if [[ -e "$dir/$lib" && ":$LD_LIBRARY_PATH:" != *":$dir:"* ]]; then
        export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
        echo "   $lib from $dir"
      fi
    done
  done
}
# Usable: every library resolves and the programs start. Not in a subshell:
# it extends LD_LIBRARY_PATH. Sets `problem` when it returns 1.
problem=""
binaries_work() {  # DIR
  local t miss
  for t in "${targets[@]}"; do
    [[ -x "$1/$t" ]] || { problem="$t missing in $1"; return 1; }
    add_wheel_libs "$1/$t"
    miss="$(missing_libs "$1/$t" | tr '\n' ' ')"
    [[ -z "$miss" ]] || { problem="$t: libraries not found: $miss"; return 1; }
  done
  "$1/trainer" --help >/dev/null 2>&1 || { problem="trainer --help failed"; return 1; }
  "$1/gt_cuda_tests" --gtest_list_tests >/dev/null 2>&1 ||
    { problem="gt_cuda_tests does not start"; return 1; }
  return 0
}
exe_dir=""
# The prepared binaries' sources and these, each hashed once.
stamped="$(awk '/^source_hash/ {print $2}' "$bin/STAMP" 2>/dev/null)"
[[ $mode == rehearse ]] || current="$(source_hash)"
if [[ $mode == rehearse ]]; then
  exe_dir="$logs/rehearse_bin"
  mkdir -p "$exe_dir"
  ln -sfn "$rehearse/trainer" "$exe_dir/trainer"
  ln -sfn "$rehearse/tests/gt_cuda_tests" "$exe_dir/gt_cuda_tests"
  record "binaries" ok 0 "" "the emulator build $rehearse (a rehearsal)"
elif [[ -n "$bin_note" ]]; then
  record "binaries" FAILED "" "" "$bin_note"
elif [[ -n "$stamped" && "$stamped" == "$current" ]] && binaries_work "$bin"; then
  exe_dir="$bin"
  record "binaries" ok 0 "$bin/STAMP" "prepared on the CPU machine ($(sed -n 's/^built //p' "$bin/STAMP"))"
else
  if [[ ! -f "$bin/STAMP" ]]; then why="no prepared binaries (.gpu_bin/)"
  elif [[ -n "$problem" ]]; then why="$problem"
  else why="prepared from other sources (stamp ${stamped:-none}, these $current)"
  fi
  echo "   prepared binaries unusable: $why; building here"
  build="$root/build-gpu"
  [[ $mode == trial ]] && build="$root/build-gpu-trial"
  nvcc_path="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  # A cache from another generator or prefix would mislead CMake.
  grep -qF "$L/openblas-openmp/libopenblas.so" "$build/CMakeCache.txt" 2>/dev/null || rm -rf "$build"
  if ONLY_OVERRIDE=1 run_stage configure 240 cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_CUDA_COMPILER="$nvcc_path" -DGT_OPENBLAS_OPENMP="$L/openblas-openmp/libopenblas.so" \
       -DMPI_CXX_COMPILER="$P/bin/mpicxx.openmpi" -DCMAKE_PREFIX_PATH="$P" &&
     ONLY_OVERRIDE=1 run_stage build 600 cmake --build "$build" -j "$jobs" --target "${targets[@]}"; then
    mkdir -p "$build/gpu_check_bin"
    for t in "${targets[@]}"; do ln -sfn "$(target_path "$build" "$t")" "$build/gpu_check_bin/$t"; done
    problem=""
    if binaries_work "$build/gpu_check_bin"; then
      exe_dir="$build/gpu_check_bin"
      record "binaries" ok 0 "" "built here: $why"
    else
      record "binaries" FAILED 0 "" "built here but unusable: $problem"
    fi
  else
    record "binaries" FAILED 0 "" "$why; the build here failed too"
  fi
fi
trainer="$exe_dir/trainer"
tests_bin="$exe_dir/gt_cuda_tests"

# ---- 2. stages, in order of value -------------------------------------------------------
# A rehearsal keeps 124M's vocabulary and step count and shrinks the rest,
# for the cost table and the training runs alike (so their op names match).
shrink=()
# The Llama run's size: Llama 3 8B's layers, 4 of them, at T=2048 on the
# GPU; a rehearsal shrinks it like the GPT-2 runs.
llama_size=(model.n_layer=4 train.seq_len=2048 train.micro_batch=4 train.global_batch=4)
[[ $mode == rehearse ]] && shrink=(model.n_layer=2 model.n_head=4 model.n_embd=128
                                   train.seq_len=64 train.micro_batch=1 train.global_batch=1)
[[ $mode == rehearse ]] && llama_size=(model.n_layer=2 model.n_head=4 model.n_kv_head=2
                                       model.n_embd=128 model.ffn_hidden=256
                                       train.seq_len=64 train.micro_batch=1 train.global_batch=1)
# The cost table needs the trainer, not a GPU: it runs in --trial too.
if [[ -n "$exe_dir" ]]; then
  # Twice: the SIMT attention (costs.json) and the tensor-core one
  # (costs_tc.json), so each profiled run has the table of its own kernels.
  run_stage costs 60 bash -c '"$1" costs "${@:4}" --json "$2" runtime.attention=simt &&
                              "$1" costs "${@:4}" --json "$3" runtime.attention=tensor_cores' \
    _ "$trainer" "$logs/costs.json" "$logs/costs_tc.json" \
    --config "$root/configs/gpt2_124m.yaml" --hardware "$root/configs/hardware/h200.yaml" \
    "${shrink[@]}"
else
  wanted costs && record costs FAILED "" "" "no usable binaries (see the binaries row)"
fi
ours_stages=(tests-core data train-tc train-simt train-llama train-fp8 train-llama-fp8 pytorch-fp32
             pytorch-bf16 tests-production
             tests-suites memcheck racecheck gpu-bench peaks layout-ref layout-dp2 layout-fsdp2 layout-tp2
             layout-pp2 layout-cp2 layout-cp2_ring)
# check_against_pytorch.py runs under python3, or re-runs itself under
# Debian's /usr/bin/python3 when that one has torch.
have_torch() {
  python3 -c "import torch" >/dev/null 2>&1 || /usr/bin/python3 -c "import torch" >/dev/null 2>&1
}
gate_passed() {  # did the tensor-core attention's test pass in tests-core?
  python3 - "$logs/tests-core.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except (OSError, ET.ParseError):
    sys.exit(1)
ok = [c for c in cases if c.get("name") == "Bf16TensorCoreForwardAndBackwardMatchCpu"
      and c.get("result") == "completed" and c.find("failure") is None and c.find("skipped") is None]
sys.exit(0 if ok else 1)
PY
}
production='*AtProductionShape*'
if [[ -z "$exe_dir" || $have_gpu == 0 ]]; then
  why="$([[ -z "$exe_dir" ]] && echo "no usable binaries (see the binaries row)" || echo "$no_gpu")"
  status_word="$([[ -z "$exe_dir" ]] && echo FAILED || echo skipped)"
  for s in "${ours_stages[@]}"; do wanted "$s" && record "$s" "$status_word" "" "" "$why"; done
else
  # tests-core is also train-tc's gate: it runs for train-tc when --only
  # leaves it out and this log folder has no result of it yet (a rerun of
  # train-tc alone would otherwise skip it and waste the device call).
  core_override=""
  if ! wanted tests-core && wanted train-tc && [[ ! -f "$logs/tests-core.xml" ]]; then
    core_override=1
  fi
  ONLY_OVERRIDE=$core_override run_stage tests-core 120 "$tests_bin" \
    --gtest_filter="CudaDevice.*:CudaResources.*:CudaCheck.*:CudaMatmul.*:CudaAttention.*:-$production" \
    --gtest_output="xml:$logs/tests-core.xml"

  # Data, no network: random GPT-2 token ids for 124M (its loss stays near
  # ln 50257; the speed is what counts), and this repository's sources as
  # bytes (vocab 256, a loss that moves) for the layouts. Made once per log
  # folder, whatever --only says: the training and layout stages read it.
  [[ -f "$logs/data/.done" ]] || ONLY_OVERRIDE=1 run_stage data 60 python3 - "$root" "$logs/data" <<'PY'
import glob, os, random, sys
sys.path.insert(0, os.path.join(sys.argv[1], "scripts"))
import prepare_data
out = os.path.join(sys.argv[2], "gpt2_random")
os.makedirs(out, exist_ok=True)
rng = random.Random(1234)
prepare_data.write_shard(os.path.join(out, "train_000000.bin"),
                         [rng.randrange(50257) for _ in range(1 << 20)])
out = os.path.join(sys.argv[2], "llama_random")  # uint32 ids (Llama 3's vocabulary)
os.makedirs(out, exist_ok=True)
prepare_data.write_shard(os.path.join(out, "train_000000.bin"),
                         [rng.randrange(128256) for _ in range(1 << 17)], vocab=128256)
texts = [os.path.join(sys.argv[1], d, "**", p) for d in ("trainer", "kernels", "parallel")
         for p in ("*.cpp", "*.hpp", "*.cu")]
texts = [t for t in texts if glob.glob(t, recursive=True)]
rc = prepare_data.main(["--input", *texts, "--out-dir", os.path.join(sys.argv[2], "text")])
if rc == 0:
    open(os.path.join(sys.argv[2], ".done"), "w").close()
sys.exit(rc)
PY

  # GPT-2 124M, bf16, 12 steps: 5 warm-up, 5 timed, 2 profiled; no final
  # checkpoint (1.5 GB no one reads).
  train=("$trainer" train --config "$root/configs/gpt2_124m.yaml"
         "data.train=$logs/data/gpt2_random/train_*.bin" train.steps=12 train.warmup_steps=2
         checkpoint.final=false "profile.hardware=$root/configs/hardware/h200.yaml" "${shrink[@]}")
  if ! wanted train-tc; then :
  elif gate_passed; then
    run_stage train-tc 150 "${train[@]}" "log.dir=$logs/train_tc" runtime.attention=tensor_cores \
      profile.every=12 profile.steps=2
  else
    record train-tc skipped "" "" "the tensor-core attention's gate test (CudaAttention.Bf16TensorCoreForwardAndBackwardMatchCpu) did not pass in tests-core"
  fi
  run_stage train-simt 150 "${train[@]}" "log.dir=$logs/train_simt" runtime.attention=simt \
    profile.every=0
  # Llama 3 8B's layers, 4 of them (1.9 B parameters with the untied 128256
  # x 4096 embedding and head, ~35 GB of weights, gradients and AdamW state).
  run_stage train-llama 150 "$trainer" train --config "$root/configs/llama3_8b.yaml" \
    "data.train=$logs/data/llama_random/train_*.bin" data.val=[] train.steps=10 \
    train.warmup_steps=2 train.recompute=none train.eval_every=0 checkpoint.final=false \
    "profile.hardware=$root/configs/hardware/h200.yaml" profile.every=0 \
    "log.dir=$logs/train_llama" "${llama_size[@]}"
  # fp8 (runtime.fp8=tensorwise, every block linear: fp8_min_dim=0) against
  # the bf16 runs above, the same steps in the same call: 124M (profiled,
  # so its fp8 GEMMs and casts get their own roofline rows) and the 8B
  # layers (issue 31's goal: >= 1.3x there, no slowdown at 124M).
  if gate_passed; then
    run_stage train-fp8 150 "${train[@]}" "log.dir=$logs/train_fp8" runtime.attention=tensor_cores \
      runtime.fp8=tensorwise runtime.fp8_min_dim=0 profile.every=12 profile.steps=2
  else
    record train-fp8 skipped "" "" "the tensor-core attention's gate test did not pass in tests-core"
  fi
  if [[ $mode == rehearse ]]; then
    # Its command line is train-llama's with train-fp8's two fp8 overrides,
    # both rehearsed above; a minute of CI saved.
    skip train-llama-fp8 "train-llama's command line with train-fp8's overrides, both rehearsed"
  else
    run_stage train-llama-fp8 150 "$trainer" train --config "$root/configs/llama3_8b.yaml" \
      "data.train=$logs/data/llama_random/train_*.bin" data.val=[] train.steps=10 \
      train.warmup_steps=2 train.recompute=none train.eval_every=0 checkpoint.final=false \
      "profile.hardware=$root/configs/hardware/h200.yaml" profile.every=0 \
      runtime.fp8=tensorwise runtime.fp8_min_dim=0 "log.dir=$logs/train_llama_fp8" \
      "${llama_size[@]}"
  fi

  for dt in fp32 bf16; do
    if ! have_torch; then skip "pytorch-$dt" "no python3 with torch"; continue; fi
    run_stage "pytorch-$dt" 150 python3 "$root/scripts/check_against_pytorch.py" --build "$exe_dir" \
      --device cuda --dtype "$dt" --json "$logs/pytorch-$dt.json"
  done

  run_stage tests-production 240 "$tests_bin" --gtest_filter="$production" \
    --gtest_output="xml:$logs/tests-production.xml"

  # Every other suite in its own process: one crash or sticky CUDA error
  # costs that suite alone.
  # 60 s a suite on a GPU; the emulated device takes over that for the
  # whole-model suite (CudaTraining: about 80 s on a 2-core CI machine).
  suite_limit=60
  [[ $mode == rehearse ]] && suite_limit=180
  listing="$("$tests_bin" --gtest_list_tests 2>/dev/null)"
  for suite in $(grep -v '^ ' <<<"$listing" | grep '\.$' | tr -d '.'); do
    case "$suite" in CudaDevice|CudaResources|CudaCheck|CudaMatmul|CudaAttention) continue ;; esac
    filter="$suite.*:-$production"
    # A rehearsal runs each suite's first test: what it checks is this
    # loop's plumbing, and scripts/run_emulator_tests.sh's phase 1 has run
    # every test of every suite on the emulated device already.
    # (Its first test not at production shape and not disabled: a filter
    # that selected nothing would pass without running anything.)
    if [[ $mode == rehearse ]]; then
      first="$(awk -v s="$suite." '$1 == s { in_suite = 1; next }
        in_suite && /^  / { if ($1 !~ /AtProductionShape|^DISABLED_/) { print $1; exit } next }
        in_suite { exit }' <<<"$listing")"
      if [[ -z $first ]]; then
        record "tests-$suite" FAILED 0 "" "no test of $suite to rehearse (all at production shape or disabled)"
        continue
      fi
      filter="$suite.$first"
    fi
    run_stage "tests-$suite" "$suite_limit" "$tests_bin" --gtest_filter="$filter" \
      --gtest_output="xml:$logs/tests-$suite.xml"
  done

  # compute-sanitizer (non-fatal): small shapes, the kernels with shared
  # memory, atomics and bounds to get wrong.
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  for tool in memcheck racecheck; do
    if [[ ! -x "$sanitizer" ]]; then skip "$tool" "compute-sanitizer not found"; continue; fi
    WARN_RC=99 WARN_NOTE="compute-sanitizer reported errors (non-fatal; see its log)" NONFATAL=1 \
      GT_TEST_SHAPES=small run_stage "$tool" 60 "$sanitizer" --tool "$tool" --error-exitcode 99 \
      "$tests_bin" --gtest_filter="CudaAttention.*:CudaCrossEntropy*:CudaEmbedding*:-$production"
  done

  if [[ -x "$exe_dir/gpu_bench" ]]; then
    run_stage gpu-bench 150 bash -c 'exec "$0" >"$1"' "$exe_dir/gpu_bench" "$logs/gpu_bench.csv"
  else
    skip gpu-bench "gpu_bench is built for a GPU only (not for the emulated device)"
  fi
  if [[ $mode == rehearse ]]; then
    skip peaks "trainer bench's GPU-sized products take too long on the emulated device"
  else
    run_stage peaks 90 "$trainer" bench --config "$root/configs/gpt2_124m.yaml" --out "$logs/peaks.json"
  fi
fi

# torch.compile's 124M step: needs no build of ours, so it runs whatever
# happened above; ours is the tensor-core run's (else the SIMT one's) metrics.
if ! python3 -c "import torch" >/dev/null 2>&1; then
  skip torch-compile "python3 has no torch"
elif [[ $have_gpu == 0 ]] || ! python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  skip torch-compile "torch sees no CUDA device"
else
  ours=(--pytorch-only --config "$root/configs/gpt2_124m.yaml")
  for r in train_tc train_simt; do
    if [[ -f "$logs/$r/metrics.jsonl" ]]; then ours=(--metrics "$logs/$r"); break; fi
  done
  csv=()
  grep -q '^attention,' "$logs/gpu_bench.csv" 2>/dev/null && csv=(--gpu-bench-csv "$logs/gpu_bench.csv")
  SKIP_RC=3 SKIP_NOTE="PyTorch older than 2.0 (no scaled_dot_product_attention)" \
    run_stage torch-compile 200 python3 "$root/scripts/bench_vs_pytorch.py" "${ours[@]}" "${csv[@]}" \
    --json "$logs/pytorch.json"
fi

# dp=2, fsdp=2, tp=2 as 2 ranks on the one GPU (collectives through host
# memory, parallel.comm=mpi), fp32, against one rank on the same global batch.
if [[ -n "$exe_dir" && $have_gpu == 1 ]]; then
  small=(--config "$root/configs/default.yaml"
         "data.train=$logs/data/text/train_*.bin" "data.val=[]" train.eval_every=0
         model.n_layer=2 model.n_head=4 model.n_embd=64 model.block_size=64 train.seq_len=64
         train.global_batch=8 train.steps=10 train.warmup_steps=2 log.every=1
         checkpoint.every=0 checkpoint.final=false runtime.device=cuda runtime.dtype=fp32
         runtime.collective_timeout_s=60 parallel.comm=mpi)
  mpirun_bin="$P/bin/mpirun"
  [[ -x "$mpirun_bin" ]] || mpirun_bin="$(command -v mpirun || echo mpirun)"
  mpirun=("$mpirun_bin" --oversubscribe --allow-run-as-root --bind-to none -np 2)
  run_stage layout-ref 60 "$trainer" train "${small[@]}" train.micro_batch=8 "log.dir=$logs/layouts/ref"
  run_stage layout-dp2 60 "${mpirun[@]}" "$trainer" train "${small[@]}" parallel.dp=2 \
    train.micro_batch=4 "log.dir=$logs/layouts/dp2"
  run_stage layout-fsdp2 60 "${mpirun[@]}" "$trainer" train "${small[@]}" parallel.fsdp=2 \
    train.micro_batch=4 "log.dir=$logs/layouts/fsdp2"
  run_stage layout-tp2 60 "${mpirun[@]}" "$trainer" train "${small[@]}" parallel.tp=2 \
    train.micro_batch=8 "log.dir=$logs/layouts/tp2"
  # Two pipeline stages, 1F1B over 4 micro-batches: the executor's sends and
  # receives of device buffers (staged through host memory, both ranks on one GPU).
  run_stage layout-pp2 60 "${mpirun[@]}" "$trainer" train "${small[@]}" parallel.pp=2 \
    train.micro_batch=2 "log.dir=$logs/layouts/pp2"
  # Context parallelism: each rank holds half of every sequence (load
  # balanced), attention runs over key/value blocks (the block kernels), and
  # K|V are all-gathered (cp2) or passed round the ring point to point
  # (cp2_ring), staged through host memory.
  run_stage layout-cp2 60 "${mpirun[@]}" "$trainer" train "${small[@]}" parallel.cp=2 \
    train.micro_batch=8 "log.dir=$logs/layouts/cp2"
  run_stage layout-cp2_ring 60 "${mpirun[@]}" "$trainer" train "${small[@]}" parallel.cp=2 \
    parallel.cp_comm=ring train.micro_batch=8 "log.dir=$logs/layouts/cp2_ring"
fi

# ---- 3. the table, the tarball, the follow-up ----------------------------------------------
table_args=("$logs" --elapsed "$(elapsed)")
[[ $mode == trial ]] && table_args+=(--trial)
[[ $mode == rehearse ]] && table_args+=(--rehearsal)
python3 "$root/scripts/gpu_table.py" "${table_args[@]}" >"$logs/table.txt" 2>"$logs/table.err"
[[ $? -ne 0 ]] && status=1
cat "$logs/table.txt" "$logs/table.err"
if [[ -n "$out" ]]; then
  mkdir -p "$out"
  # Every log and small result; the data shards and any checkpoint stay behind.
  tar -czf "$out/gpu_check.tar.gz" -C "$(dirname "$logs")" --exclude='*/data/*' \
    --exclude='*/checkpoints/*' --exclude='*.safetensors' "$(basename "$logs")" &&
    cp "$logs/table.txt" "$out/table.txt" &&
    echo "gpu_check: $out/gpu_check.tar.gz ($(du -h "$out/gpu_check.tar.gz" | cut -f1)) and $out/table.txt"
fi
failed="$(awk -F'\t' '$2 == "FAILED" && $1 != "binaries" {printf "%s%s", sep, $1; sep=","}' "$stages")"
if [[ -n "$failed" ]]; then
  echo "rerun only the failed stages on the still-warm machine (30 s):"
  echo "  bash scripts/gpu_check.sh --only $failed --logs $logs"
fi
echo "gpu_check: $([[ $status == 0 ]] && echo OK || echo FAILED) after $(elapsed); logs in $logs"
exit $status
