#!/usr/bin/env python3
"""The layering docs/ARCHITECTURE.md promises, checked on the source tree:

  * no include circle between the folders of trainer/ (a folder that includes
    another, directly or through others, is never included back);
  * no CUDA under trainer/: no CUDA, cuBLAS or NCCL header, no header of
    kernels/cuda/ or of parallel/'s CUDA and NCCL parts, and no #if on
    TRAINER_HAVE_CUDA, TRAINER_HAVE_NCCL or TRAINER_CUDA_EMULATOR (what the
    build has is asked of kernels/backends.hpp and parallel/comm_backends.hpp);
  * the model holds no communicator: trainer/model/gpt.cpp, llama.cpp and
    causal_lm.cpp never name one
    (tensor parallelism lives in trainer/parallelize/);
  * every static shared array in kernels/cuda is declared through GT_SHARED
    (kernels/cuda/device_common.cuh), which the emulated device poisons in
    templates and inline functions too; a bare `__shared__` there would
    escape that (only the macro itself and `extern __shared__` may name it).

Standard library only. Exit status 1, with every violation listed, on failure.

    python3 tests/scripts/test_layering.py [--root REPO]
"""

import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
CUDA_IF = re.compile(r'^\s*#\s*(if|ifdef|ifndef|elif)\b.*\b(TRAINER_HAVE_CUDA|TRAINER_HAVE_NCCL|'
                     r'TRAINER_CUDA_EMULATOR|__CUDACC__)\b', re.M)
CUDA_HEADER = re.compile(r'^(cuda|cublas|cudnn|nccl|nvtx|curand|cuda_runtime|driver_types)|'
                         r'^kernels/cuda/|^parallel/(cuda_|nccl_)')
MODEL_COMM = re.compile(r'comm|Communicator|tp_')
# The model families and what they share (trainer/model/causal_lm.hpp).
MODEL_FILES = ("gpt.cpp", "llama.cpp", "causal_lm.cpp", "make_model.cpp")
# A static shared declaration not made through GT_SHARED (comments aside).
BARE_SHARED = re.compile(r'^(?!\s*//)(?!.*\bextern\s+__shared__)(?!\s*#\s*define).*\b__shared__\b')


def sources(root):
    for dirpath, _, files in os.walk(os.path.join(root, "trainer")):
        for f in sorted(files):
            if f.endswith((".cpp", ".hpp", ".h", ".cc")):
                yield os.path.join(dirpath, f)


def folder_of(root, path):
    rel = os.path.relpath(path, os.path.join(root, "trainer"))
    return rel.split(os.sep)[0] if os.sep in rel else None  # None: trainer/main.cpp


def find_cycle(graph):
    """A list of folders forming a cycle, or None."""
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def check(root):
    problems = []
    graph = {}
    for path in sources(root):
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8").read()
        me = folder_of(root, path)
        for inc in INCLUDE.findall(text):
            if CUDA_HEADER.search(inc):
                problems.append(f"{rel}: includes {inc} (CUDA stays under kernels/ and parallel/)")
            m = re.match(r"trainer/([a-z_]+)/", inc)
            if me and m and m.group(1) != me:
                graph.setdefault(me, set()).add(m.group(1))
        for m in CUDA_IF.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{rel}:{line}: #if on {m.group(2)} (ask kernels/backends.hpp or "
                            "parallel/comm_backends.hpp instead)")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("include circle between trainer/ folders: " + " -> ".join(cycle))
    for name in MODEL_FILES:
        path = os.path.join(root, "trainer", "model", name)
        if not os.path.exists(path):
            continue
        for i, line in enumerate(open(path, encoding="utf-8"), 1):
            if MODEL_COMM.search(line):
                problems.append(f"trainer/model/{name}:{i}: names a communicator or tp group: "
                                f"{line.strip()}")
    kdir = os.path.join(root, "kernels", "cuda")
    for name in sorted(os.listdir(kdir)) if os.path.isdir(kdir) else []:
        if not name.endswith((".cu", ".cuh")):
            continue
        lines = open(os.path.join(kdir, name), encoding="utf-8").read().split("\n")
        for i, line in enumerate(lines, 1):
            # GT_SHARED's own definition names it too (its continued #define).
            in_define = i >= 2 and lines[i - 2].lstrip().startswith("#define GT_SHARED") and \
                lines[i - 2].rstrip().endswith("\\")
            if BARE_SHARED.search(line) and not in_define:
                problems.append(f"kernels/cuda/{name}:{i}: a bare __shared__ (declare static "
                                f"shared arrays with GT_SHARED): {line.strip()}")
    return problems, graph


def self_test():
    """The checker itself finds each kind of violation in a planted tree."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        files = {
            "trainer/a/x.cpp": '#include "trainer/b/y.hpp"\n#include <cuda_runtime_api.h>\n',
            "trainer/b/y.hpp": '#include "trainer/a/z.hpp"\n#if TRAINER_HAVE_CUDA\n#endif\n',
            "trainer/a/z.hpp": "",
            "trainer/model/gpt.cpp": "void f() { tp_.comm->all_reduce_sum(x, n); }\n",
            "kernels/cuda/k.cu": "template <int N> __global__ void k() {\n"
                                 "  __shared__ float s[N];\n  extern __shared__ float d[];\n}\n",
        }
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        problems, _ = check(root)
    kinds = ["includes cuda_runtime_api.h", "#if on TRAINER_HAVE_CUDA", "include circle",
             "names a communicator", "k.cu:2: a bare __shared__"]
    if any("k.cu:3" in p for p in problems):
        print("FAIL: the checker flagged extern __shared__ (dynamic shared memory)")
        return False
    missed = [k for k in kinds if not any(k in p for p in problems)]
    if missed:
        print("FAIL: the checker missed planted violations: " + ", ".join(missed))
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    args = ap.parse_args()
    if not self_test():
        return 1
    problems, graph = check(args.root)
    for folder in sorted(graph):
        print(f"trainer/{folder} -> " + ", ".join(sorted(graph[folder])))
    if problems:
        print(f"FAIL: {len(problems)} layering violation(s):")
        for p in problems:
            print("  " + p)
        return 1
    print(f"layering: OK ({len(graph)} folders, no circle, no CUDA under trainer/, "
          "no communicator in the model, every static shared array through GT_SHARED)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
