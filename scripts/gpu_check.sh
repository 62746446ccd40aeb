#!/usr/bin/env bash
# gpu_check.sh: one command for a GPU machine that has the CUDA toolkit, a
# C++ compiler, CMake and python3, and nothing else the trainer needs (no
# Open MPI, yaml-cpp, spdlog, GoogleTest, OpenBLAS; no network). It
#   1. unpacks the .deb files that scripts/fetch_gpu_deps.sh put in .gpu_deps/
#      (23 MB: the only thing to carry besides the working tree) into a local
#      prefix (.gpu_prefix/, never into /) and points CMake, the compilers,
#      the loader and Open MPI at it;
#   2. configures and builds the GPU tests, the GPU benchmark and the trainer
#      (build-gpu/);
#   3. runs every GPU test (gt_cuda_tests) and build-gpu/gpu_bench;
#   4. with the trainer: `trainer bench` (the measured peaks); GPT-2 124M in
#      bf16 for 30 steps, the last 2 profiled (configs/gpt2_124m.yaml, on
#      random tokens: no network); dp=2, fsdp=2 and tp=2 as 2 ranks on the
#      one GPU (parallel.comm=mpi, a small GPT in fp32) against one rank on
#      the same global batch; scripts/bench_vs_pytorch.py when python3 has
#      torch with CUDA;
#   5. prints one table (scripts/gpu_table.py): every stage's status, tests
#      passed/failed/skipped, gpu_bench's GEMMs, attention and bandwidth-bound
#      kernels, the peaks, tokens/s, MFU against the measured bf16 GEMM peak,
#      peak memory, a profiled step's time split and roofline, each layout's
#      largest loss difference against one rank, and the PyTorch ratio.
# Every stage runs under `timeout` with its own log; one that fails becomes a
# FAILED row naming its log and the rest still run. --budget (default 480 s,
# build included; 2400 s with --trial) caps the whole: a stage with no time left is a FAILED row.
# Without a GPU (--trial, or no device) the GPU stages are "skipped: no GPU".
# Logs go to runs/gpu_check/<time>/ or --logs DIR; the folder is named at
# start and end. Exit status: 0 when no stage failed and no check missed.
#
#   scripts/gpu_check.sh [--logs DIR] [--jobs N] [--budget SECONDS] [--trial]
#
# --trial is for a Debian machine WITHOUT a GPU that has the dependencies
# installed (the developers' machines): it re-runs itself in a private mount
# namespace where every file of those system packages is hidden (each bound
# over by /dev/null), so the build can only succeed from the unpacked prefix,
# exactly as on the GPU machine. Tests then report skipped, the benchmark
# reports no device and the trainer stages are skipped. Needs root (unshare,
# mount).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
logs=""
jobs="$(nproc 2>/dev/null || echo 4)"
budget=""
trial=0
inside_trial=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --logs) logs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --trial) trial=1; shift ;;
    --inside-trial) inside_trial=1; trial=1; shift ;;
    *) echo "usage: scripts/gpu_check.sh [--logs DIR] [--jobs N] [--budget SECONDS] [--trial]" >&2; exit 2 ;;
  esac
done
# 8 minutes on a GPU machine; a --trial builds on a few CPU cores, so more.
[[ -n "$budget" ]] || { [[ $trial == 1 ]] && budget=2400 || budget=480; }
if ! [[ "$budget" =~ ^[0-9]+$ && "$jobs" =~ ^[0-9]+$ ]]; then
  echo "gpu_check: --budget and --jobs take a whole number" >&2
  exit 2
fi
[[ -n "$logs" ]] || logs="$root/runs/gpu_check/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$logs"
logs="$(cd "$logs" && pwd)"
cd "$root" || exit 1

deps="$root/.gpu_deps"
prefix="$root/.gpu_prefix"
multiarch=x86_64-linux-gnu
build="$root/build-gpu"
[[ $trial == 1 ]] && build="$root/build-gpu-trial"

# ---- --trial: hide the system's copies, then run the real thing inside -------------
if [[ $trial == 1 && $inside_trial == 0 ]]; then
  if [[ $(id -u) -ne 0 ]]; then echo "gpu_check: --trial needs root" >&2; exit 2; fi
  exec unshare --mount --propagation private "$0" --inside-trial --logs "$logs" --jobs "$jobs" \
    --budget "$budget"
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
elapsed() { echo $(( $(date +%s) - t_start ))s; }
step() { echo "== [$(elapsed)] $*"; }
status=0
echo "gpu_check: logs in $logs"

# ---- 1. the dependency prefix ----------------------------------------------------
if ! ls "$deps"/*.deb >/dev/null 2>&1; then
  echo "gpu_check: no .deb files in $deps: run scripts/fetch_gpu_deps.sh on a Debian 12 machine and carry .gpu_deps" >&2
  exit 1
fi
stamp="$(cat "$deps"/MANIFEST 2>/dev/null; ls -l "$deps"/*.deb | md5sum)"
if [[ ! -f "$prefix/.stamp" || "$(cat "$prefix/.stamp")" != "$stamp" ]]; then
  step "unpacking $(ls "$deps"/*.deb | wc -l) packages into $prefix"
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for f in "$deps"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$prefix"
    else  # not a Debian-family machine: a .deb is an ar archive holding data.tar.*
      member="$(ar t "$f" | grep '^data\.tar')" && ar p "$f" "$member" | tar -xa -f - -C "$prefix" 2>/dev/null ||
        ar p "$f" "$member" | tar -xJ -C "$prefix"
    fi || { echo "gpu_check: cannot unpack $f" >&2; exit 1; }
  done
  # What Debian's maintainer scripts would have done: the alternatives
  # symlinks (cblas.h, mpicxx) and the unversioned MPI library names.
  inc="$prefix/usr/include/$multiarch"
  for h in cblas.h f77blas.h openblas_config.h; do
    ln -sfn "openblas-openmp/$h" "$inc/$h"
  done
  ln -sfn mpicxx.openmpi "$prefix/usr/bin/mpicxx"
  ln -sfn mpicc.openmpi "$prefix/usr/bin/mpicc"
  ln -sfn mpirun.openmpi "$prefix/usr/bin/mpirun"
  echo "$stamp" > "$prefix/.stamp"
fi
P="$prefix/usr"
L="$P/lib/$multiarch"
export CMAKE_PREFIX_PATH="$P${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export PATH="$P/bin:$PATH"
export CPATH="$P/include/$multiarch${CPATH:+:$CPATH}"
export LD_LIBRARY_PATH="$L:$L/openmpi/lib:$L/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$L:$L/openmpi/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
# Open MPI finds its wrapper data, headers and libraries under OPAL_PREFIX.
export OPAL_PREFIX="$P"
export OPAL_LIBDIR="$L/openmpi/lib"
export OPAL_INCLUDEDIR="$L/openmpi/include"
export OPAL_PKGDATADIR="$P/share/openmpi"
export OPAL_DATADIR="$P/share"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- stages: each runs under `timeout`, its output in its own log, and adds
# one line to stages.tsv (name, ok | FAILED | skipped, seconds, log, note),
# which the table renders; a failed stage never stops the ones after it.
stages="$logs/stages.tsv"
: >"$stages"
deadline=$(( t_start + budget ))
record() {  # NAME STATUS SECONDS LOG NOTE
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$stages"
  [[ $2 == FAILED ]] && status=1
  [[ $2 == ok ]] || echo "   $1: $2${5:+: $5}${4:+ (see $4)}"
  return 0
}
# run_stage NAME LOG MAX_SECONDS CMD...: CMD's stdout and stderr into LOG, at
# most MAX_SECONDS and never past the budget. SKIP_RC=N SKIP_NOTE=TEXT before
# it: exit code N means "skipped: TEXT" rather than a failure. Returns CMD's
# exit code (124 on timeout; 125 when there was no time left to start it).
run_stage() {
  local name="$1" log="$2" max="$3"
  shift 3
  local left=$(( deadline - $(date +%s) - 10 ))
  if (( left < 15 )); then
    record "$name" FAILED 0 "" "not run: the ${budget}s budget (--budget) is spent"
    return 125
  fi
  local limit=$(( max < left ? max : left ))
  step "$name (at most ${limit}s)"
  local t0 rc secs
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  if [[ $rc == 0 ]]; then
    record "$name" ok "$secs" "$log" ""
  elif [[ -n "${SKIP_RC:-}" && $rc == "$SKIP_RC" ]]; then
    record "$name" skipped "$secs" "$log" "$SKIP_NOTE"
  elif [[ $rc == 124 || $rc == 137 ]]; then
    record "$name" FAILED "$secs" "$log" "timed out after ${limit}s"
  else
    record "$name" FAILED "$secs" "$log" "exit $rc"
  fi
  return $rc
}
skip() { record "$1" skipped "" "" "$2"; }

# ---- 2. configure and build -------------------------------------------------------
nvcc_path="$(command -v nvcc || true)"
[[ -z "$nvcc_path" && -x /usr/local/cuda/bin/nvcc ]] && nvcc_path=/usr/local/cuda/bin/nvcc
if [[ -z "$nvcc_path" ]]; then
  echo "gpu_check: nvcc not found (PATH or /usr/local/cuda/bin)" >&2
  exit 1
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# A cache from another generator or another prefix location would mislead CMake.
if [[ -f "$build/CMakeCache.txt" ]] &&
   ! { grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}" "$build/CMakeCache.txt" &&
       grep -qF "GT_OPENBLAS_OPENMP:FILEPATH=$L/openblas-openmp/libopenblas.so" "$build/CMakeCache.txt"; }; then
  rm -rf "$build"
fi
built_tests=0 built_trainer=0
if run_stage "configure" "$logs/configure.log" 300 \
     cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_CUDA_COMPILER="$nvcc_path" \
       -DGT_OPENBLAS_OPENMP="$L/openblas-openmp/libopenblas.so" \
       -DMPI_CXX_COMPILER="$P/bin/mpicxx.openmpi" \
       -DCMAKE_PREFIX_PATH="$P"; then
  grep -E "CUDA backend|BLAS:" "$logs/configure.log"
  if run_stage "build tests, gpu_bench" "$logs/build.log" 900 \
       cmake --build "$build" -j "$jobs" --target gt_cuda_tests gpu_bench; then
    built_tests=1
  else
    grep -E "error|Error" "$logs/build.log" | head -20 >&2
  fi
  # The trainer links the same library the tests do: one more file to compile.
  if run_stage "build trainer" "$logs/build_trainer.log" 600 \
       cmake --build "$build" -j "$jobs" --target trainer; then
    built_trainer=1
  else
    grep -E "error|Error" "$logs/build_trainer.log" | head -20 >&2
  fi
  warnings=$(cat "$logs"/build*.log 2>/dev/null | grep -c "warning:" || true)
  echo "build: $warnings compiler warnings (see build.log, build_trainer.log)"
else
  tail -30 "$logs/configure.log" >&2
fi

# ---- 3. GPU tests and gpu_bench ----------------------------------------------------
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$logs/gpu.txt" 2>&1 ||
  echo "no nvidia-smi" >"$logs/gpu.txt"
# Is there a GPU? nvidia-smi's list, else gpu_bench's own probe below (it
# exits 2 saying "no CUDA device"). Without one every GPU stage is skipped.
have_gpu=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && have_gpu=1
if [[ $built_tests == 1 ]]; then
  # Without a device every test skips itself (GTEST_SKIP) and the run passes.
  run_stage "gpu tests" "$logs/gt_cuda_tests.log" 300 \
    "$build/tests/gt_cuda_tests" --gtest_output="xml:$logs/gt_cuda_tests.xml"
  SKIP_RC=2 SKIP_NOTE="no CUDA device" run_stage "gpu_bench" "$logs/gpu_bench.csv" 120 \
    bash -c 'exec "$0" 2>"$1"' "$build/gpu_bench" "$logs/gpu_bench.err"
  bench_rc=$?
  if [[ $bench_rc == 2 ]] && grep -q "no CUDA device" "$logs/gpu_bench.csv"; then
    if [[ $have_gpu == 1 ]]; then  # nvidia-smi sees one, the CUDA runtime does not
      record "cuda runtime" FAILED "" "$logs/gpu_bench.csv" \
        "nvidia-smi lists a GPU but gpu_bench finds no CUDA device (driver/toolkit mismatch?)"
    fi
    have_gpu=0
  elif [[ $bench_rc == 0 ]]; then
    have_gpu=1
  fi
else
  record "gpu tests" FAILED "" "" "not built"
  record "gpu_bench" FAILED "" "" "not built"
fi
no_gpu="no GPU (nvidia-smi lists none and gpu_bench finds no CUDA device)"

# ---- 4. trainer stages: peaks, GPT-2 124M in bf16, layouts against one rank --------
trainer_stages=("trainer bench" "train gpt2_124m bf16" "layout ref (1 rank)" "layout dp2"
                "layout fsdp2" "layout tp2" "bench_vs_pytorch")
if [[ $have_gpu == 0 ]]; then
  for s in "${trainer_stages[@]}"; do skip "$s" "$no_gpu"; done
elif [[ $built_trainer == 0 ]]; then
  for s in "${trainer_stages[@]}"; do record "$s" FAILED "" "$logs/build_trainer.log" "trainer not built"; done
else
  trainer="$build/trainer"
  mkdir -p "$logs/bench" "$logs/data"
  # (a) the measured peaks that MFU and the roofline are quoted against.
  run_stage "trainer bench" "$logs/bench/bench.log" 120 \
    "$trainer" bench --config "$root/configs/gpt2_124m.yaml" --out "$logs/bench/peaks.json"
  peaks=()
  [[ -f "$logs/bench/peaks.json" ]] && peaks=(--peaks "$logs/bench/peaks.json")

  # Data, no network: random GPT-2 token ids for 124M (its loss stays near
  # ln 50257; only the speed matters), and this repository's sources as bytes
  # (vocab 256, a loss that moves) for the small layout runs.
  run_stage "data" "$logs/data/data.log" 60 python3 - "$root" "$logs/data" <<'PY'
import glob, os, random, sys
sys.path.insert(0, os.path.join(sys.argv[1], "scripts"))
import prepare_data
out = os.path.join(sys.argv[2], "gpt2_random")
os.makedirs(out, exist_ok=True)
rng = random.Random(1234)
prepare_data.write_shard(os.path.join(out, "train_000000.bin"),
                         [rng.randrange(50257) for _ in range(1 << 20)])
texts = [os.path.join(sys.argv[1], d, "**", p) for d in ("trainer", "kernels", "parallel")
         for p in ("*.cpp", "*.hpp", "*.cu")]
texts = [t for t in texts if glob.glob(t, recursive=True)]
sys.exit(prepare_data.main(["--input", *texts, "--out-dir", os.path.join(sys.argv[2], "text")]))
PY

  # (b) GPT-2 124M, bf16, 30 steps, the last 2 profiled (configs/gpt2_124m.yaml).
  # The tensor-core attention kernels only once their CPU-twin test has passed
  # on this GPU in stage 3 (runtime.attention_tensor_cores, off by default).
  attn=()
  if python3 - "$logs/gt_cuda_tests.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except (OSError, ET.ParseError):
    sys.exit(1)
ok = [c for c in cases if c.get("name") == "Bf16TensorCoreForwardAndBackwardMatchCpu"
      and c.get("result") == "completed" and c.find("failure") is None]
sys.exit(0 if ok else 1)
PY
  then
    attn=("runtime.attention_tensor_cores=true")
    echo "   tensor-core attention test passed: training with runtime.attention_tensor_cores=true"
  fi
  run="$logs/train_124m"
  run_stage "train gpt2_124m bf16" "$logs/train_124m.log" 240 \
    "$trainer" train --config "$root/configs/gpt2_124m.yaml" "${peaks[@]}" \
      "data.train=$logs/data/gpt2_random/train_*.bin" "log.dir=$run" \
      "profile.hardware=$root/configs/hardware/h200.yaml" "${attn[@]}"
  train_rc=$?
  # 1.5 GB of checkpoint and export that no one will read.
  rm -rf "$run/checkpoints" "$run/model.safetensors"

  # (c) dp=2, fsdp=2, tp=2 as 2 ranks on the one GPU, collectives through
  # host memory (parallel.comm=mpi), fp32, against one rank on the same
  # global batch of 8 rows: micro_batch = 8 / data-parallel degree.
  small=(--config "$root/configs/default.yaml"
         "data.train=$logs/data/text/train_*.bin" "data.val=[]" train.eval_every=0
         model.n_layer=2 model.n_head=4 model.n_embd=64 model.block_size=64 train.seq_len=64
         train.global_batch=8 train.steps=10 train.warmup_steps=2 log.every=1
         checkpoint.every=0 runtime.device=cuda runtime.dtype=fp32
         runtime.collective_timeout_s=60 parallel.comm=mpi)
  mpirun=("$P/bin/mpirun" --oversubscribe --allow-run-as-root --bind-to none -np 2)
  run_stage "layout ref (1 rank)" "$logs/layout_ref.log" 60 \
    "$trainer" train "${small[@]}" train.micro_batch=8 "log.dir=$logs/layouts/ref"
  run_stage "layout dp2" "$logs/layout_dp2.log" 60 "${mpirun[@]}" \
    "$trainer" train "${small[@]}" parallel.dp=2 train.micro_batch=4 "log.dir=$logs/layouts/dp2"
  run_stage "layout fsdp2" "$logs/layout_fsdp2.log" 60 "${mpirun[@]}" \
    "$trainer" train "${small[@]}" parallel.fsdp=2 train.micro_batch=4 "log.dir=$logs/layouts/fsdp2"
  run_stage "layout tp2" "$logs/layout_tp2.log" 60 "${mpirun[@]}" \
    "$trainer" train "${small[@]}" parallel.tp=2 train.micro_batch=8 "log.dir=$logs/layouts/tp2"

  # (d) the same 124M step in PyTorch, when python3 has torch with CUDA;
  # ours from the run above (profiled steps left out) if it finished.
  if ! python3 -c "import torch" >/dev/null 2>&1; then
    skip "bench_vs_pytorch" "python3 has no torch"
  elif ! python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
    skip "bench_vs_pytorch" "torch sees no CUDA device"
  else
    # Ours as the training stage measured it; if that failed, PyTorch alone
    # (running a failing trainer again would only spend the budget).
    ours=(--pytorch-only --config "$root/configs/gpt2_124m.yaml")
    [[ $train_rc == 0 && -f "$run/metrics.jsonl" ]] && ours=(--metrics "$run")
    csv=()
    grep -q '^attention,' "$logs/gpu_bench.csv" 2>/dev/null && csv=(--gpu-bench-csv "$logs/gpu_bench.csv")
    SKIP_RC=3 SKIP_NOTE="PyTorch older than 2.0 (no scaled_dot_product_attention)" \
      run_stage "bench_vs_pytorch" "$logs/bench_vs_pytorch.log" 240 \
      python3 "$root/scripts/bench_vs_pytorch.py" "${ours[@]}" "${csv[@]}" --json "$logs/pytorch.json"
  fi
fi

# ---- 5. the table -------------------------------------------------------------------
trial_flag=()
[[ $trial == 1 ]] && trial_flag=(--trial)
python3 "$root/scripts/gpu_table.py" "$logs" "${trial_flag[@]}" --elapsed "$(elapsed)" |
  tee "$logs/table.txt"
[[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
echo "gpu_check: $([[ $status == 0 ]] && echo OK || echo FAILED) after $(elapsed); logs in $logs"
exit $status
