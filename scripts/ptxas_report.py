#!/usr/bin/env python3
"""Registers, spills and static shared memory of every CUDA kernel, from ptxas.

Compiles kernels/cuda/*.cu (or the files given) for one architecture with
`-Xptxas -v`, as the CUDA build does (-O3, --expt-relaxed-constexpr), and
prints one row per kernel instantiation: registers per thread, the stack
frame, spill stores and loads, and static shared memory (dynamic shared
memory is the launcher's business; attention.cuh and attention_tc.cu state
theirs). Needs nvcc, not a GPU.

    scripts/ptxas_report.py                          # every kernel, sm_90
    scripts/ptxas_report.py kernels/cuda/attention_tc.cu --json -
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def short_name(demangled):
    """'void gt::cuda::(anonymous namespace)::foo_kernel<64>(float*, ...)' -> 'foo_kernel<64>'."""
    name = demangled
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous", i):
            cut = i
            break
    name = name[:cut]
    # Drop namespaces (outside template arguments).
    depth, start = 0, 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == ":" and depth == 0 and i + 1 < len(name) and name[i + 1] == ":":
            start = i + 2
    return name[start:].replace("__nv_bfloat16", "bf16")


def parse_ptxas(text, demangle=lambda s: s):
    """Rows from ptxas -v output: one per entry function."""
    rows, cur = [], None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            cur = {"kernel": short_name(demangle(m.group(1))), "mangled": m.group(1),
                   "arch": m.group(2), "registers": None, "stack": 0, "spill_stores": 0,
                   "spill_loads": 0, "smem": 0}
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = FRAME.search(line)
        if m:
            cur["stack"], cur["spill_stores"], cur["spill_loads"] = map(int, m.groups())
            continue
        m = USED.search(line)
        if m and cur["registers"] is None:
            cur["registers"] = int(m.group(1))
            cur["smem"] = int(m.group(2) or 0)
    return rows


def demangler():
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt:
        return lambda s: s
    def run(s):
        return subprocess.run([cxxfilt, s], capture_output=True, text=True).stdout.strip() or s
    return run


def compile_one(nvcc, path, arch):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-std=c++17", "-O3", f"-arch={arch}", "--expt-relaxed-constexpr",
               "-I", ROOT, "-Xptxas", "-v", "-c", path, "-o", os.path.join(tmp, "k.o")]
        p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"error: nvcc failed on {path}:\n{p.stderr[-4000:]}")
    return p.stderr + p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="default: kernels/cuda/*.cu")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--nvcc", default=os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                   "bin", "nvcc"))
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON ('-': stdout)")
    args = ap.parse_args()
    if not os.path.exists(args.nvcc):
        sys.exit(f"error: no nvcc at {args.nvcc} (set --nvcc or CUDA_HOME)")
    files = args.files or sorted(glob.glob(os.path.join(ROOT, "kernels", "cuda", "*.cu")))
    dm = demangler()
    rows = []
    for f in files:
        print(f"compiling {os.path.relpath(f, ROOT)} ...", file=sys.stderr)
        for r in parse_ptxas(compile_one(args.nvcc, f, args.arch), dm):
            r["file"] = os.path.relpath(f, ROOT)
            rows.append(r)
    if args.json == "-":
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    width = max([len(r["kernel"]) for r in rows] + [6])
    print(f"{'kernel':<{width}}  {'file':<24} regs  stack  spill st/ld  smem")
    for r in rows:
        print(f"{r['kernel']:<{width}}  {r['file'].split('/')[-1]:<24} {r['registers']:>4}  "
              f"{r['stack']:>5}  {r['spill_stores']:>5}/{r['spill_loads']:<5}  {r['smem']:>4}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
