#!/usr/bin/env python3
"""Removes each block barrier of the CUDA kernels in turn and reports which
test on the emulated device caught it.

A site is one `__syncthreads()` in kernels/cuda/*.cu, or one
`dev::mbarrier_wait(` call of the sm_90 kernels (their waits go through that
helper so that this sweep finds them). For each site the file is copied
with that one call replaced by `((void)0)`, the copy is built into the full
emulator build's planted-kernel executable (the CMake cache variable
GT_EMU_PLANTED_KERNEL, as planted_bugs.py does: the copy's objects take the
original's place; the repository is never touched) and the tests of that
file (FILE_TESTS) run:

  1. on the plain emulated device in its default thread order;
  2. if nothing failed, the same executable again under
     GT_EMU_THREAD_ORDER=warps (each warp runs through its collectives to
     its next barrier before the next warp starts: a WAR hazard's early
     writer then lands before the later warps' reads);
  3. then under GT_EMU_THREAD_ORDER=random:<seed> (a new permutation of
     each block's threads between barriers);
  4. if still nothing, and --tsan names the kernels-only ThreadSanitizer
     build, that build with the same copy (for the files whose tests it
     has: TSAN_FILES).

A site is caught when a test fails (the CPU twin comparison, or the
emulator's rules: "gt-emu:" reports) or the sanitizer reports. A barrier
that nothing catches is either redundant or guards a hazard no test
exposes: each such site is listed in KNOWN_UNCAUGHT with the reason, and
the sweep fails on an uncaught site that is not listed, and on a listed
site that is now caught (the entry is stale) or gone.

    python3 tests/emulator/barrier_sweep.py --list                 # the sites, no build
    python3 tests/emulator/barrier_sweep.py --emu build-emu --tsan build-emu-tsan
    python3 tests/emulator/barrier_sweep.py --emu build-emu --sample 3 --seed 1234

--sample N draws N of the sites with --seed (CI: the commit's, printed, so
a failure reproduces with `--only`). Sites in headers (device_common.cuh)
are listed but not swept: the planted build replaces one .cu, and a header's
template function compiled into several files would keep its other copies.

Standard library only (and the builds). Exit status 1 on an unexpected
result, a patch that no longer applies, or a build failure.
"""

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import planted_bugs as pb  # noqa: E402  (beside this file: run, build_planted, detectors)

REPO = pb.REPO
KERNELS = os.path.join(REPO, "kernels", "cuda")

# What a site is: the block barrier, and the mbarrier wait helper the sm_90
# kernels use (attention_sm90.cu).
SITE = re.compile(r"__syncthreads\(\)|\bdev::mbarrier_wait\(")
REMOVED = "((void)0)"

# Each kernel file's tests (a gtest filter over gt_cuda_tests).
FILE_TESTS = {
    "adamw.cu": "CudaAdamW.*",
    "attention.cu": "CudaAttention.*:CudaAttentionGqa.*:CudaAttentionBlocks.*",
    "attention_tc.cu": "CudaAttention.*:CudaAttentionGqa.*:CudaAttentionBlocks.*",
    "attention_sm90.cu": "CudaAttentionSm90.*",
    "cross_entropy.cu": "CudaCrossEntropy.*:CudaCrossEntropyShard.*",
    "elementwise.cu": "CudaElementwise.*:CudaCast.*",
    "embedding.cu": "CudaEmbedding.*:CudaEmbeddingTp.*",
    "fp8.cu": "CudaFp8.*:CudaFp8Ops.*",
    "gelu.cu": "CudaGelu.*",
    "layernorm.cu": "CudaLayerNorm.*",
    "llama.cu": "CudaLlama.*",
    "moe.cu": "CudaMoe.*",
    "sum_squares.cu": "CudaSumSquares.*:CudaClipScale.*",
}

# The files whose tests the kernels-only ThreadSanitizer build has
# (tests/CMakeLists.txt): only these get the TSan stage.
TSAN_FILES = {"attention.cu", "attention_tc.cu", "attention_sm90.cu", "cross_entropy.cu",
              "embedding.cu", "fp8.cu", "layernorm.cu", "moe.cu"}

# Sites nothing catches, by "file:function#k" (k: the site's index within
# its function, from 0), with why. From the full sweep of 2026-12-07; see
# docs/EMULATOR.md, "Every barrier removed in turn".
KNOWN_UNCAUGHT = {
    # Redundant today: the next tile's first barrier, which every thread
    # reaches only after this tile's reads of s_pos / s_tok, already comes
    # before anyone rewrites them; s_count, written before that barrier,
    # was last read before this tile's second barrier.
    "embedding.cu:embedding_backward_wte_kernel#2":
        "redundant: the next tile's first barrier orders the list rewrites",
    # Guards a second call in one kernel ("a previous call may still be
    # reading partial"); every kernel of fp8.cu calls block_max_bits once.
    "fp8.cu:block_max_bits#0": "redundant: no kernel calls block_max_bits twice",
}


class Site:
    def __init__(self, path, offset, line, function, index, text):
        self.path, self.offset, self.line = path, offset, line
        self.function, self.index, self.text = function, index, text

    @property
    def file(self):
        return os.path.basename(self.path)

    @property
    def key(self):
        return f"{self.file}:{self.function}#{self.index}"

    @property
    def in_header(self):
        return self.path.endswith((".cuh", ".hpp", ".h"))


def enclosing_function(text, pos):
    """The name of the __global__/__device__ function a position lies in."""
    start = None
    for m in re.finditer(r"__(?:global|device)__", text[:pos]):
        start = m.end()
    if start is None:
        return "?"
    head = text[start:start + 400]
    head = re.sub(r"__launch_bounds__\s*\([^)]*\)", "", head)
    m = re.search(r"(\w+)\s*\(", head)
    return m.group(1) if m else "?"


def find_sites():
    sites = []
    for name in sorted(os.listdir(KERNELS)):
        if not name.endswith((".cu", ".cuh")):
            continue
        path = os.path.join(KERNELS, name)
        text = open(path).read()
        per_function = {}
        for m in SITE.finditer(text):
            line_no = text.count("\n", 0, m.start()) + 1
            line = text.splitlines()[line_no - 1].strip()
            if line.startswith("//"):
                continue
            fn = enclosing_function(text, m.start())
            k = per_function.get(fn, 0)
            per_function[fn] = k + 1
            sites.append(Site(path, m.start(), line_no, fn, k, line))
    return sites


def failed_tests(output):
    names = []
    for ln in output.splitlines():
        m = re.match(r"^\[  FAILED  \] (\S+\.\S+)", ln)
        if m and m.group(1) not in names:
            names.append(m.group(1))
    return names


def verdict(rc, out):
    """(caught, what) from one run's exit status and output."""
    fails = failed_tests(out)
    found = pb.detectors(out)
    if fails:
        first = next((why for d, why in found if d.startswith("CPU twin")), "")
        return True, ", ".join(fails[:3]) + (f" (+{len(fails) - 3})" if len(fails) > 3 else "") + \
            (f": {first[:120]}" if first else "")
    if found:
        return True, "; ".join(f"{d}: {why[:120]}" for d, why in found)
    if rc != 0:
        return True, f"exit status {rc}: {out.strip().splitlines()[-1][:120] if out.strip() else ''}"
    return False, ""


def call_end(text, start):
    """The offset just past the call that starts at `start` (its matching ')')."""
    depth = 0
    for i in range(text.index("(", start), len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    raise SystemExit(f"error: unbalanced call at offset {start}")


def sweep_site(site, builds, scratch, env, seed):
    text = open(site.path).read()
    patched_text = text[:site.offset] + REMOVED + text[call_end(text, site.offset):]
    d = os.path.join(scratch, f"{site.file}_{site.offset}")
    os.makedirs(d)
    patched = os.path.join(d, site.file)
    with open(patched, "w") as f:
        f.write(patched_text)
    tests = FILE_TESTS[site.file]
    stages = [("plain", builds["emu"], {}),
              ("warps order", builds["emu"], {"GT_EMU_THREAD_ORDER": "warps"}),
              (f"random order (seed {seed})", builds["emu"],
               {"GT_EMU_THREAD_ORDER": f"random:{seed}"})]
    if builds.get("tsan") and site.file in TSAN_FILES:
        stages.append(("TSan", builds["tsan"], {}))
    built = set()
    for name, build, extra in stages:
        if build not in built:
            pb.build_planted(build, "GT_EMU_PLANTED_KERNEL", "gt_emu_planted_kernel_tests", patched)
            built.add(build)
        exe = os.path.join(build, "tests", "gt_emu_planted_kernel_tests")
        try:
            rc, out = pb.run([exe, f"--gtest_filter={tests}"], env=dict(env, **extra),
                             timeout=1800)
        except subprocess.TimeoutExpired:
            return name, "timed out after 1800 s (a hang)"
        if re.search(r"Running 0 tests", out):
            raise SystemExit(f"error: {tests} matches no test of {exe}: fix FILE_TESTS")
        caught, what = verdict(rc, out)
        if caught:
            return name, what
    return None, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--emu", help="full emulator build (its planted-kernel target)")
    ap.add_argument("--tsan", help="kernels-only ThreadSanitizer emulator build (optional)")
    ap.add_argument("--list", action="store_true", help="list the sites and exit")
    ap.add_argument("--only", help="sweep the sites whose key (file:function#k) contains this")
    ap.add_argument("--sample", type=int, help="sweep this many sites, drawn with --seed")
    ap.add_argument("--seed", type=int, default=2026, help="the sample's and random order's seed")
    ap.add_argument("--from", dest="first", type=int, default=1,
                    help="start at the N-th site of the list (resume a sweep)")
    args = ap.parse_args()

    sites = find_sites()
    for f in sorted({s.file for s in sites if not s.in_header}):
        if f not in FILE_TESTS:
            sys.exit(f"error: {f} has barriers but no tests in FILE_TESTS: add its gtest filter")
    keys = {s.key for s in sites}
    if args.list:
        for s in sites:
            note = "  (header: not swept)" if s.in_header else ""
            known = "  [known uncaught]" if s.key in KNOWN_UNCAUGHT else ""
            print(f"{s.file}:{s.line:<5} {s.key:55} {s.text[:60]}{note}{known}")
        print(f"{len(sites)} sites, {sum(s.in_header for s in sites)} in headers")
        return 0
    if not args.emu:
        sys.exit("error: --emu <full emulator build> is required (or --list)")
    builds = {"emu": os.path.abspath(args.emu)}
    if args.tsan:
        builds["tsan"] = os.path.abspath(args.tsan)
    for k, d in builds.items():
        if not os.path.exists(os.path.join(d, "CMakeCache.txt")):
            sys.exit(f"error: --{k} {d} is not a configured build directory")

    todo = [s for s in sites if not s.in_header][args.first - 1:]
    full = not args.only and not args.sample and args.first == 1
    if args.only:
        todo = [s for s in todo if args.only in s.key]
        if not todo:
            sys.exit(f"error: no site's key contains {args.only!r} (see --list)")
    if args.sample:
        todo = sorted(random.Random(args.seed).sample(todo, min(args.sample, len(todo))),
                      key=lambda s: (s.file, s.offset))
        print(f"sample of {len(todo)} sites, --seed {args.seed}")

    scratch = tempfile.mkdtemp(prefix="barrier_sweep_")
    env = dict(os.environ, GT_TEST_SHAPES="small", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1",
               TSAN_OPTIONS="halt_on_error=1:report_signal_unsafe=0")
    env.pop("GT_EMU_THREAD_ORDER", None)
    rows, problems = [], []
    try:
        for i, s in enumerate(todo):
            t0 = time.time()
            print(f"[{i + args.first}/{len(todo) + args.first - 1}] {s.key} ({s.file}:{s.line}) ...",
                  flush=True)
            by, what = sweep_site(s, builds, scratch, env, args.seed)
            took = time.time() - t0
            rows.append((s, by, what, took))
            print(f"    {by or 'NOT CAUGHT'}{': ' + what if what else ''} ({took:.0f} s)",
                  flush=True)
            if by is None and s.key not in KNOWN_UNCAUGHT:
                problems.append(f"{s.key} ({s.file}:{s.line}): nothing caught its removal; "
                                "find the hazard a test misses, or list it in KNOWN_UNCAUGHT "
                                "with the reason")
            if by is not None and s.key in KNOWN_UNCAUGHT:
                problems.append(f"{s.key}: listed in KNOWN_UNCAUGHT but now caught ({by}): "
                                "remove the entry")
    finally:
        pb.run(["cmake", "-S", REPO, "-B", builds["emu"], "-DGT_EMU_PLANTED_KERNEL="])
        if "tsan" in builds:
            pb.run(["cmake", "-S", REPO, "-B", builds["tsan"], "-DGT_EMU_PLANTED_KERNEL="])
        shutil.rmtree(scratch, ignore_errors=True)
    if full:
        for k in KNOWN_UNCAUGHT:
            if k not in keys:
                problems.append(f"{k}: listed in KNOWN_UNCAUGHT but no such site (renamed?)")

    print("\nsite                                                  | line | caught by")
    print("-" * 100)
    for s, by, what, took in rows:
        reason = KNOWN_UNCAUGHT.get(s.key, "")
        shown = f"{by}: {what}" if by else f"not caught{' (known: ' + reason + ')' if reason else ''}"
        print(f"{s.key:54} | {s.line:4} | {shown} ({took:.0f} s)")
    caught = sum(1 for r in rows if r[1])
    print(f"\n{caught} of {len(rows)} removals caught; "
          f"{sum(1 for s in sites if s.in_header)} header sites not swept")
    if problems:
        print("\nFAIL:\n" + "\n".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
