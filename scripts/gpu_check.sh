#!/usr/bin/env bash
# gpu_check.sh: one command for a GPU machine that has the CUDA toolkit, a
# C++ compiler, CMake and python3, and nothing else the trainer needs (no
# Open MPI, yaml-cpp, spdlog, GoogleTest, OpenBLAS; no network). It
#   1. unpacks the .deb files that scripts/fetch_gpu_deps.sh put in .gpu_deps/
#      (23 MB: the only thing to carry besides the working tree) into a local
#      prefix (.gpu_prefix/, never into /) and points CMake, the compilers,
#      the loader and Open MPI at it;
#   2. configures and builds the GPU tests and the GPU benchmark (build-gpu/);
#   3. runs every GPU test (gt_cuda_tests) and build-gpu/gpu_bench;
#   4. prints one table: tests passed/failed/skipped per suite, the GEMMs of
#      GPT-2 124M (fwd and bwd) and causal attention with ms and TFLOP/s, the
#      measured bf16 GEMM peak, and the bandwidth-bound kernels in GB/s.
# Logs (configure, build, test XML and output, bench CSV, the table) go to
# runs/gpu_check/<time>/ or --logs DIR; the folder is named at start and end.
# Exit status: 0 when everything built and no test failed.
#
#   scripts/gpu_check.sh [--logs DIR] [--jobs N] [--trial]
#
# --trial is for a Debian machine WITHOUT a GPU that has the dependencies
# installed (the developers' machines): it re-runs itself in a private mount
# namespace where every file of those system packages is hidden (each bound
# over by /dev/null), so the build can only succeed from the unpacked prefix,
# exactly as on the GPU machine. Tests then report skipped and the benchmark
# reports no device. Needs root (unshare, mount).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
logs=""
jobs="$(nproc 2>/dev/null || echo 4)"
trial=0
inside_trial=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --logs) logs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --trial) trial=1; shift ;;
    --inside-trial) inside_trial=1; trial=1; shift ;;
    *) echo "usage: scripts/gpu_check.sh [--logs DIR] [--jobs N] [--trial]" >&2; exit 2 ;;
  esac
done
[[ -n "$logs" ]] || logs="$root/runs/gpu_check/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$logs"
logs="$(cd "$logs" && pwd)"

deps="$root/.gpu_deps"
prefix="$root/.gpu_prefix"
multiarch=x86_64-linux-gnu
build="$root/build-gpu"
[[ $trial == 1 ]] && build="$root/build-gpu-trial"

# ---- --trial: hide the system's copies, then run the real thing inside -------------
if [[ $trial == 1 && $inside_trial == 0 ]]; then
  if [[ $(id -u) -ne 0 ]]; then echo "gpu_check: --trial needs root" >&2; exit 2; fi
  exec unshare --mount --propagation private "$0" --inside-trial --logs "$logs" --jobs "$jobs"
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
step "configure ($build)"
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$nvcc_path" \
  -DGT_OPENBLAS_OPENMP="$L/openblas-openmp/libopenblas.so" \
  -DMPI_CXX_COMPILER="$P/bin/mpicxx.openmpi" \
  -DCMAKE_PREFIX_PATH="$P" >"$logs/configure.log" 2>&1
if [[ $? -ne 0 ]]; then
  echo "gpu_check: configure failed; the end of $logs/configure.log:" >&2
  tail -30 "$logs/configure.log" >&2
  exit 1
fi
grep -E "CUDA backend|BLAS:" "$logs/configure.log"
step "build gt_cuda_tests gpu_bench (-j$jobs)"
if ! cmake --build "$build" -j "$jobs" --target gt_cuda_tests gpu_bench >"$logs/build.log" 2>&1; then
  echo "gpu_check: build failed; the errors in $logs/build.log:" >&2
  grep -E "error|Error" "$logs/build.log" | head -40 >&2
  exit 1
fi
warnings=$(grep -c "warning:" "$logs/build.log" || true)
echo "build: $warnings compiler warnings (see build.log)"

# ---- 3. tests and benchmark ---------------------------------------------------------
step "GPU tests"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$logs/gpu.txt" 2>&1 || echo "no nvidia-smi" >"$logs/gpu.txt"
"$build/tests/gt_cuda_tests" --gtest_output="xml:$logs/gt_cuda_tests.xml" >"$logs/gt_cuda_tests.log" 2>&1
test_rc=$?
[[ $test_rc -ne 0 ]] && status=1
step "gpu_bench"
"$build/gpu_bench" >"$logs/gpu_bench.csv" 2>"$logs/gpu_bench.err"
bench_rc=$?
if [[ $bench_rc -ne 0 && $bench_rc -ne 2 ]]; then status=1; fi

# ---- 4. the table -------------------------------------------------------------------
python3 - "$logs" "$test_rc" "$bench_rc" "$(elapsed)" "$trial" <<'EOF' | tee "$logs/table.txt"
import csv, os, sys, xml.etree.ElementTree as ET
logs, test_rc, bench_rc, elapsed, trial = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
gpu = open(os.path.join(logs, "gpu.txt")).read().strip()
print(f"\n==== gpu_check ({'trial, no GPU' if trial else gpu}) ====")
print("\nGPU tests (gt_cuda_tests)")
print(f"  {'suite':<34}{'passed':>8}{'failed':>8}{'skipped':>9}")
xml_path = os.path.join(logs, "gt_cuda_tests.xml")
failed_names = []
if os.path.exists(xml_path):
    totals = [0, 0, 0]
    for suite in ET.parse(xml_path).getroot().iter("testsuite"):
        p = f = s = 0
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                f += 1
                failed_names.append(f"{suite.get('name')}.{case.get('name')}")
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                s += 1
            else:
                p += 1
        totals = [totals[0] + p, totals[1] + f, totals[2] + s]
        print(f"  {suite.get('name'):<34}{p:>8}{f:>8}{s:>9}")
    print(f"  {'total':<34}{totals[0]:>8}{totals[1]:>8}{totals[2]:>9}")
    for n in failed_names:
        print(f"  FAILED {n}")
else:
    print(f"  no XML report: gt_cuda_tests exited {test_rc} (see gt_cuda_tests.log)")

rows = []
csv_path = os.path.join(logs, "gpu_bench.csv")
if os.path.exists(csv_path):
    rows = [r for r in csv.DictReader(l for l in open(csv_path) if not l.startswith("#"))]
peak = max((float(r["tflops"]) for r in rows if r["section"] == "peak"), default=0.0)
print("\nBenchmark (gpu_bench; GPT-2 124M: B=16 T=1024 C=768 V=50257, 12 heads of 64)")
if not rows:
    print("  not measured: " + (open(csv_path).read().strip() if os.path.exists(csv_path) else "no output")
          + f" (exit {bench_rc})")
else:
    print(f"  {'section':<10}{'name':<16}{'dtype':<6}{'M x N x K':>22}{'ms':>10}{'TFLOP/s':>10}"
          f"{'% peak':>8}{'GB/s':>8}")
    for r in rows:
        mem = r["section"] == "memory"
        shape = f"{r['M']}x{r['N']}" + ("" if mem else f"x{r['K']}")
        pct = f"{100 * float(r['tflops']) / peak:.0f}" if peak > 0 and r["dtype"] == "bf16" and not mem else ""
        tf = "" if mem else f"{float(r['tflops']):.1f}"
        gbs = f"{float(r.get('gbs') or 0):.0f}" if mem else ""
        print(f"  {r['section']:<10}{r['name']:<16}{r['dtype']:<6}{shape:>22}{float(r['ms']):>10.3f}"
              f"{tf:>10}{pct:>8}{gbs:>8}")
    print(f"  measured bf16 GEMM peak: {peak:.1f} TFLOP/s (% peak: bf16 rows against it)")
print("\nGPT-2 124M bf16 training run, tokens/s and MFU: NOT MEASURED - GPU training is not")
print("  implemented yet (the model and ShardedParameters hold host memory; CudaOps is not wired in).")
print(f"\nlogs: {logs}   elapsed: {elapsed}")
EOF
[[ $? -ne 0 ]] && status=1
echo "gpu_check: $([[ $status == 0 ]] && echo OK || echo FAILED) after $(elapsed); logs in $logs"
exit $status
