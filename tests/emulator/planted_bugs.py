#!/usr/bin/env python3
"""Plants known GPU bugs in copies of the project's sources and shows that the
emulated device catches every one, and what caught it.

Each bug is one textual change to one file (kernels/cuda/*.cu, or
parallel/nccl_communicator.cpp for the stream-ordering bug). The patched copy
goes to a scratch directory and is built into a test executable of an
existing emulator build (the CMake cache variables GT_EMU_PLANTED_KERNEL /
GT_EMU_PLANTED_PARALLEL: the copy's objects take the original's place), then
the tests of that kernel run. The sources in the repository are never
touched. A bug counts as caught when one of these says so:
  * the CPU twin comparison (a gtest failure in the kernel's test),
  * the emulator's own rules (a "gt-emu:" report: launch limits, wmma and
    ldmatrix alignment, barrier divergence, deadlock),
  * AddressSanitizer / UBSan (the ASan build),
  * ThreadSanitizer, with its fiber and barrier annotations (the TSan build),
  * a stream order that runs the consumer first (GT_EMU_STREAM_ORDER=reverse).
A control (a redundant barrier removed) must be caught by nothing.

    python3 tests/emulator/planted_bugs.py --asan build-emu-asan --tsan build-emu-tsan \\
        --emu build-emu

Exit status 1 when a bug goes uncaught, the control is flagged, or a patch
no longer applies (the source changed: update the bug's snippet).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name, file, the text to find (must occur exactly once), its replacement,
# the build to use, the gtest filter, what is expected to catch it.
BUGS = [
    dict(name="RAW: barrier removed before a shared read",
         file="kernels/cuda/layernorm.cu",
         find="  __syncthreads();\n  for (int c = threadIdx.x; c < C; c += blockDim.x) {\n",
         repl="  for (int c = threadIdx.x; c < C; c += blockDim.x) {\n",
         build="tsan", tests="CudaLayerNorm.Backward*"),
    # The plain emulated device (no sanitizer): a barrier removed in a
    # template kernel, whose static shared arrays g++ keeps out of the
    # poisoned section; GT_SHARED poisons them at each block's first
    # declaration, so the readers see NaN (it passed before: issue 32).
    dict(name="RAW: barrier removed in a template kernel (plain emulator)",
         file="kernels/cuda/layernorm.cu",
         find="  s_db[threadIdx.y][threadIdx.x] = db;\n  __syncthreads();\n",
         repl="  s_db[threadIdx.y][threadIdx.x] = db;\n",
         build="emu", tests="CudaLayerNorm.Backward*"),
    dict(name="WAR: barrier removed before a shared overwrite",
         file="kernels/cuda/attention.cu",
         find="    __syncthreads();  // the previous tile's readers of k_s, v_s, p_s are done\n",
         repl="",
         build="tsan", tests="CudaAttention.Fp32ForwardAndBackwardMatchCpu"),
    dict(name="off-by-one row bound",
         file="kernels/cuda/layernorm.cu",
         find="  if (row >= R) return;  // whole warp leaves together; no block sync below\n",
         repl="  if (row > R) return;  // whole warp leaves together; no block sync below\n",
         build="asan", tests="CudaLayerNorm.Forward*"),
    dict(name="undersized dynamic shared allocation",
         file="kernels/cuda/attention.cu",
         find="  launch_with_smem(attention_forward_kernel<T, HSP>, sizeof(float) * forward_smem_floats<HSP>(),",
         repl="  launch_with_smem(attention_forward_kernel<T, HSP>, sizeof(float) * (forward_smem_floats<HSP>() - kTile),",
         build="asan", tests="CudaAttention.Fp32ForwardAndBackwardMatchCpu"),
    dict(name="ldmatrix row address off the 16-byte rule",
         file="kernels/cuda/attention_tc.cu",
         find="  dev::ldmatrix_x4<false>(a, tile + (r0 + lane % 16) * kLd<HSP> + c0 + (lane / 16) * 8);",
         repl="  dev::ldmatrix_x4<false>(a, tile + (r0 + lane % 16) * kLd<HSP> + c0 + (lane / 16) * 4);",
         build="asan", tests="CudaAttention.Bf16TensorCore*"),
    dict(name="ldmatrix without .trans for a (k x n) operand",
         file="kernels/cuda/attention_tc.cu",
         find="  dev::ldmatrix_x4<true>(",
         repl="  dev::ldmatrix_x4<false>(",
         build="asan", tests="CudaAttention.Bf16TensorCore*"),
    dict(name="missing cudaFuncSetAttribute",
         file="kernels/cuda/attention.cu",
         find="  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,\n"
              "                                  static_cast<int>(smem_bytes)));\n",
         repl="",
         build="asan", tests="CudaAttention.Fp32ForwardAndBackwardMatchCpu"),
    dict(name="wrong shuffle width",
         file="kernels/cuda/attention.cu",
         find="  for (int o = kLanes / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(dev::kFullMask, v, o));",
         repl="  for (int o = kLanes / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(dev::kFullMask, v, o, 8));",
         build="asan", tests="CudaAttention.Fp32ForwardAndBackwardMatchCpu"),
    dict(name="WAR: barrier removed before the next key tile",
         file="kernels/cuda/attention_tc.cu",
         find="    __syncthreads();  // everyone is done with the previous k_s / v_s\n"
              "    load_tile<HSP>(k_s, base + static_cast<int64_t>(k0) * C3 + dm.C, C3, min(kTile, dm.T - k0),\n",
         repl="    load_tile<HSP>(k_s, base + static_cast<int64_t>(k0) * C3 + dm.C, C3, min(kTile, dm.T - k0),\n",
         build="tsan", tests="CudaAttention.Bf16TensorCore*"),
    dict(name="removed cudaStreamWaitEvent before a collective",
         file="parallel/nccl_communicator.cpp",
         find="  ready_.record(compute_);\n  stream_.wait(ready_.get());\n}\n\n"
              "std::shared_ptr<detail::NcclWork> NcclCommunicator::enqueue_done",
         repl="  ready_.record(compute_);\n}\n\n"
              "std::shared_ptr<detail::NcclWork> NcclCommunicator::enqueue_done",
         build="emu", tests="NcclCommunicator.CollectivesSeeTheComputeStreamsEarlierWork"),
    dict(name="removed the consumer's wait on a collective",
         file="parallel/nccl_communicator.cpp",
         find="    CUDA_CHECK(cudaStreamWaitEvent(compute_, work_->done.get(), 0));\n",
         repl="",
         build="emu", tests="NcclCommunicator.WaitOrdersTheComputeStreamAfterTheCollective"),
    # Attention over blocks (context parallelism): the mask by position one
    # key short, the merge of partial results losing the old share, and a
    # block kernel's barrier before the next query tile.
    dict(name="attention block: mask off by one position",
         file="kernels/cuda/attention.cu",
         find="        if (k0 + tx + kLanes * j > last[i]) s[i][j] = -INFINITY;  // also every key past Tk\n",
         repl="        if (k0 + tx + kLanes * j >= last[i]) s[i][j] = -INFINITY;  // also every key past Tk\n",
         build="asan", tests="CudaAttentionBlocks.Fp32*"),
    dict(name="attention block: the merge drops the old output's share",
         file="kernels/cuda/attention_tc.cu",
         find="        orow[col] = mg.w_old == 0.f ? ob * mg.w_new : orow[col] * mg.w_old + ob * mg.w_new;\n",
         repl="        orow[col] = ob * mg.w_new;\n",
         build="asan", tests="CudaAttentionBlocks.Bf16TensorCore*"),
    dict(name="attention block: WAR, barrier removed before the next query tile",
         file="kernels/cuda/attention_tc.cu",
         find="      __syncthreads();  // everyone is done with the previous q_s / do_s / lse_s / d_s\n"
              "      load_tile<HSP>(q_s, q_base + q0 * dm.q_st, dm.q_st, q_rows, dm.hs, dm.vec);\n",
         repl="      load_tile<HSP>(q_s, q_base + q0 * dm.q_st, dm.q_st, q_rows, dm.hs, dm.vec);\n",
         build="tsan", tests="CudaAttentionBlocks.Bf16TensorCoreBlocksMatchCpu"),
    # The control: every caller of write_rows either exits after it or next
    # writes other rows, so its trailing __syncwarp orders nothing and
    # nothing may report its removal.
    dict(name="control: a redundant __syncwarp removed",
         file="kernels/cuda/attention_tc.cu",
         find="      if (r < valid_rows) dst[r * row_stride + d] = stage[r * LD + d];\n    }\n  }\n  __syncwarp();\n}",
         repl="      if (r < valid_rows) dst[r * row_stride + d] = stage[r * LD + d];\n    }\n  }\n}",
         build="tsan", tests="CudaAttention.Bf16TensorCore*", control=True),
    # The same control under the block kernels' tests (attention_tc.cu holds
    # both families): their ThreadSanitizer run must stay silent too.
    dict(name="control: a redundant __syncwarp removed, attention block tests",
         file="kernels/cuda/attention_tc.cu",
         find="      if (r < valid_rows) dst[r * row_stride + d] = stage[r * LD + d];\n    }\n  }\n  __syncwarp();\n}",
         repl="      if (r < valid_rows) dst[r * row_stride + d] = stage[r * LD + d];\n    }\n  }\n}",
         build="tsan", tests="CudaAttentionBlocks.Bf16TensorCore*", control=True),
]


def source_line(frame):
    """'attention.cu:58' from a sanitizer stack frame."""
    m = re.search(r"([\w.-]+\.(?:cu|cpp|cuh|hpp):\d+)", frame or "")
    return m.group(1) if m else (frame or "?").strip()[:80]


def detectors(output):
    """What caught the bug, as (detector, first line of its report)."""
    found = []
    lines = output.splitlines()

    def first(pattern):
        for ln in lines:
            if re.search(pattern, ln):
                return ln
        return None

    m = first(r"WARNING: ThreadSanitizer: data race")
    if m:
        frames = [ln for ln in lines if re.match(r"\s+#0 ", ln)][:2]
        found.append(("ThreadSanitizer",
                      "data race between " + " and ".join(source_line(f) for f in frames)))
    m = first(r"ERROR: AddressSanitizer")
    if m:
        kind = re.sub(r" on (unknown )?address.*", "", m.split("ERROR: AddressSanitizer: ")[-1])
        after = lines[lines.index(m if m in lines else lines[0]):]
        frame = next((ln for ln in after if re.match(r"^\s+#\d+ .*\.(cu|cpp|cuh|hpp):\d+", ln)),
                     None)
        found.append(("AddressSanitizer", kind + (f" at {source_line(frame)}" if frame else "")))
    m = first(r"runtime error:")
    if m:
        found.append(("UBSan", m.strip()))
    m = first(r"gt-emu: (device fault|error|fatal):")
    if m:
        found.append(("emulator rules", m.strip()[:220]))
    m = first(r"(: Failure$|Failure$)")
    if m:
        detail = None
        for i, ln in enumerate(lines):
            if ln.rstrip().endswith("Failure"):
                detail = " ".join(x.strip() for x in lines[i + 1:i + 4])[:220]
                break
        found.append(("CPU twin comparison" if "Cuda" in output else "test comparison",
                      detail or m.strip()))
    return found


def run(cmd, env=None, timeout=900):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout


def build_planted(build_dir, var, target, source):
    rc, out = run(["cmake", "-S", REPO, "-B", build_dir, f"-D{var}={source}"])
    if rc != 0:
        raise SystemExit(f"error: reconfiguring {build_dir} failed:\n{out[-3000:]}")
    rc, out = run(["cmake", "--build", build_dir, "--target", target, "-j",
                   str(os.cpu_count() or 2)])
    if rc != 0:
        raise SystemExit(f"error: building {target} in {build_dir} failed:\n{out[-3000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--asan", required=True, help="kernels-only AddressSanitizer emulator build")
    ap.add_argument("--tsan", required=True, help="kernels-only ThreadSanitizer emulator build")
    ap.add_argument("--emu", required=True, help="full emulator build (the NCCL bugs, and "
                    "kernel bugs the plain emulated device must catch)")
    ap.add_argument("--only", help="run the bugs whose name contains this")
    args = ap.parse_args()
    builds = {"asan": os.path.abspath(args.asan), "tsan": os.path.abspath(args.tsan),
              "emu": os.path.abspath(args.emu)}
    for k, d in builds.items():
        if not os.path.exists(os.path.join(d, "CMakeCache.txt")):
            sys.exit(f"error: --{k} {d} is not a configured build directory")

    scratch = tempfile.mkdtemp(prefix="planted_bugs_")
    env = dict(os.environ, GT_TEST_SHAPES="small", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1",
               TSAN_OPTIONS="halt_on_error=1:report_signal_unsafe=0")
    rows, failures = [], []
    used = set()
    try:
        for i, bug in enumerate(BUGS):
            if args.only and args.only not in bug["name"]:
                continue
            src = os.path.join(REPO, bug["file"])
            text = open(src).read()
            if text.count(bug["find"]) != 1:
                failures.append(f"{bug['name']}: the snippet to patch occurs "
                                f"{text.count(bug['find'])} times in {bug['file']} (expected once)")
                continue
            d = os.path.join(scratch, str(i))
            os.makedirs(d)
            patched = os.path.join(d, os.path.basename(src))
            with open(patched, "w") as f:
                f.write(text.replace(bug["find"], bug["repl"]))
            build = builds[bug["build"]]
            t0 = time.time()
            if bug["file"].startswith("parallel/"):
                build_planted(build, "GT_EMU_PLANTED_PARALLEL", "gt_emu_planted_mpi_tests", patched)
                used.add((bug["build"], "GT_EMU_PLANTED_PARALLEL"))
                exe = os.path.join(build, "tests", "mpi", "gt_emu_planted_mpi_tests")
                cmd = ["mpirun", "--oversubscribe", "-np", "2", exe,
                       f"--gtest_filter={bug['tests']}"]
            else:
                build_planted(build, "GT_EMU_PLANTED_KERNEL", "gt_emu_planted_kernel_tests", patched)
                used.add((bug["build"], "GT_EMU_PLANTED_KERNEL"))
                exe = os.path.join(build, "tests", "gt_emu_planted_kernel_tests")
                cmd = [exe, f"--gtest_filter={bug['tests']}"]
            rc, out = run(cmd, env=env)
            found = detectors(out)
            caught = rc != 0 or bool(found)
            if bug.get("control"):
                ok = not caught
                verdict = "silent, as it must be" if ok else "FLAGGED: a false positive"
            else:
                ok = caught
                verdict = "caught" if caught else "MISSED"
            rows.append((bug["name"], bug["file"], bug["build"], verdict, found,
                         time.time() - t0))
            if not ok:
                failures.append(f"{bug['name']}: {verdict}\n{out[-4000:]}")
    finally:
        # Leave every build as it was: drop the planted variables.
        for k, var in sorted(used):
            run(["cmake", "-S", REPO, "-B", builds[k], f"-D{var}="])
        shutil.rmtree(scratch, ignore_errors=True)

    print("planted bug                                          | build | verdict | caught by")
    print("-" * 100)
    for name, path, build, verdict, found, took in rows:
        by = "; ".join(f"{d}: {why}" for d, why in found) or "-"
        print(f"{name:52} | {build:5} | {verdict} ({took:.0f} s)\n    {path}: {by}")
    if failures:
        print("\nFAIL:\n" + "\n\n".join(failures))
        return 1
    caught = sum(1 for r in rows if not r[0].startswith("control"))
    controls = len(rows) - caught
    print(f"\nall {caught} planted bugs caught" + ("; the control stayed silent" if controls else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
