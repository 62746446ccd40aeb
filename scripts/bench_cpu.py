#!/usr/bin/env python3
"""CPU training throughput of build/trainer against PyTorch eager, same model and batch.

Runs our trainer for --steps steps (runtime.threads = --threads) and reads
tokens_per_s from metrics.jsonl; then times the same step in torch
(torch.set_num_threads(--threads)): forward + backward over the micro-batches,
clip_grad_norm_, AdamW. torch is made to load the same OpenBLAS build that our
trainer links (see _same_blas_for_torch). Both report the median over the steps after the first
--warmup. Prints tokens/s for both, the ratio ours/torch, and which BLAS each
side uses. Measures only: it never asserts a speed.

    python3 scripts/bench_cpu.py --build build-scripts
    python3 scripts/bench_cpu.py --build build-scripts --n-layer 2 --n-embd 128 --steps 8
"""

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def _pin_blas_threads():
    """OpenBLAS sizes its thread pool when it loads, from the environment, and
    torch.set_num_threads does not resize it: set it before torch is imported."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    n, _ = pre.parse_known_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(n.threads))


def _same_blas_for_torch():
    """Equal terms: torch must run on the same OpenBLAS build our trainer links.
    Debian's torch loads libblas.so.3 through the alternatives system (the
    pthread OpenBLAS by default), while our trainer links the OpenMP build, and
    the two builds differ by up to 2x on 2 cores. The loader reads
    LD_LIBRARY_PATH only at process start, so re-execute once with the
    trainer's BLAS directory in front (--torch-blas system skips this)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    pre.add_argument("--torch-blas", default="same", choices=("same", "system"))
    n, _ = pre.parse_known_args()
    if n.torch_blas != "same" or os.environ.get("GT_BENCH_BLAS_DIR") is not None:
        return
    exe = os.path.join(os.path.abspath(n.build), "trainer")
    blas_dir = ""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=30).stdout
        for line in out.splitlines():
            parts = line.split("=>")
            if "libopenblas" in parts[0] and len(parts) > 1 and parts[1].strip().startswith("/"):
                blas_dir = os.path.dirname(parts[1].split()[0])
    except (OSError, subprocess.TimeoutExpired):
        pass
    os.environ["GT_BENCH_BLAS_DIR"] = blas_dir  # set even when empty: never loop
    if blas_dir and os.path.exists(os.path.join(blas_dir, "libblas.so.3")):
        os.environ["LD_LIBRARY_PATH"] = blas_dir + (":" + os.environ["LD_LIBRARY_PATH"]
                                                    if os.environ.get("LD_LIBRARY_PATH") else "")
        os.execv(sys.executable, [sys.executable, os.path.abspath(sys.argv[0])] + sys.argv[1:])


_pin_blas_threads()
_same_blas_for_torch()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as tr  # noqa: E402  (re-executes under /usr/bin/python3 if torch is missing)
import gpt2_torch as gt  # noqa: E402
import prepare_data  # noqa: E402
import torch  # noqa: E402

BLAS_LIB = re.compile(r"lib(openblas|blas|cblas|mkl\w*|blis|flexiblas)[\w.-]*\.so[\w.]*")


class _FixedBatches:
    """The loader interface of tr.train_step over pre-built tensors, so that
    building Python lists is not part of torch's timed step."""

    def __init__(self, loader, steps, micro_batch, global_batch):
        accum = global_batch // micro_batch
        self.batches = {(s, k): loader.micro_batch(s, k, micro_batch, global_batch)
                        for s in range(steps) for k in range(accum)}

    def micro_batch(self, step, k, micro_batch, global_batch):
        return self.batches[(step, k)]


def loaded_blas_libs():
    """BLAS-like shared libraries mapped into this process."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            m = BLAS_LIB.search(line)
            if m:
                libs.add(line.split()[-1])
    return sorted(libs)


def trainer_blas(exe):
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ["(ldd failed)"]
    return [line.strip() for line in out.splitlines() if BLAS_LIB.search(line)] or ["(no BLAS library linked)"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(tr.REPO_ROOT, "build"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--global-batch", type=int, default=None, help="default: = --micro-batch")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--skip-ours", action="store_true", help="time torch only")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--torch-blas", default="same", choices=("same", "system"),
                    help="same: torch loads the OpenBLAS build our trainer links (equal terms); "
                         "system: whatever Debian's alternatives give it")
    args = ap.parse_args()
    gb = args.global_batch or args.micro_batch
    if gb % args.micro_batch:
        sys.exit(f"error: --global-batch {gb} is not a multiple of --micro-batch {args.micro_batch}")
    if args.steps <= args.warmup:
        sys.exit(f"error: --steps {args.steps} must exceed --warmup {args.warmup}")
    exe = None if args.skip_ours else tr.find_trainer(os.path.abspath(args.build))

    mcfg = gt.GPT2Config(args.n_layer, args.n_head, args.n_embd, args.vocab, args.block)
    t = dict(seq_len=args.seq_len, micro_batch=args.micro_batch, global_batch=gb, steps=args.steps,
             lr=1e-3, lr_schedule="cosine", warmup_steps=2, min_lr=1e-4, weight_decay=0.1,
             beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0)
    tokens_per_step = gb * args.seq_len
    n_params = None

    tmp = tempfile.mkdtemp(prefix="gt_bench_")
    try:
        # Random tokens: throughput does not depend on the text.
        rng = random.Random(args.seed)
        shard = os.path.join(tmp, "train_000000.bin")
        prepare_data.write_shard(shard, [rng.randrange(args.vocab)
                                         for _ in range(args.steps * tokens_per_step + 1)])

        ours = None
        if exe:
            run_dir = os.path.join(tmp, "run")
            cfg_path = os.path.join(tmp, "cfg.yaml")
            tr.write_trainer_config(cfg_path, {
                "model": mcfg.as_dict(),
                "data": dict(train=[shard], val=[], shuffle=False),
                "train": dict(t, seed=args.seed, eval_every=0),
                "runtime": dict(device="cpu", dtype="fp32", threads=args.threads),
                "log": dict(dir=run_dir, every=max(1, args.steps // 4)),
                "checkpoint": dict(every=0, resume="none"),
            })
            print(f"ours:  {exe} --config {cfg_path}")
            t0 = time.perf_counter()
            tr.run_trainer(exe, cfg_path, os.path.join(tmp, "trainer.log"))
            wall = time.perf_counter() - t0
            metrics = tr.read_metrics(os.path.join(run_dir, "metrics.jsonl"))
            tps = [float(metrics[s]["tokens_per_s"]) for s in sorted(metrics) if s >= args.warmup]
            if not tps:
                sys.exit("error: metrics.jsonl has no steps after the warmup")
            ours = statistics.median(tps)
            ours_spread = (min(tps), max(tps))
            print(f"       {len(metrics)} steps in {wall:.1f} s wall (process start and export included)")

        torch.manual_seed(args.seed)
        torch.set_num_threads(args.threads)
        model = gt.init_gpt2(gt.GPT2(mcfg), seed=args.seed)
        n_params = sum(p.numel() for p in model.parameters())
        opt = tr.make_adamw(model, t["lr"], t["weight_decay"], t["beta1"], t["beta2"], t["eps"])
        batches = _FixedBatches(tr.WindowLoader([shard], args.seq_len), args.steps, args.micro_batch, gb)
        times = []
        for s in range(args.steps):
            t0 = time.perf_counter()
            tr.train_step(model, opt, batches, s, t)  # .item() calls: the step has finished
            times.append(time.perf_counter() - t0)
        torch_tps = tokens_per_step / statistics.median(times[args.warmup:])
        torch_spread = (tokens_per_step / max(times[args.warmup:]), tokens_per_step / min(times[args.warmup:]))
    finally:
        if args.keep:
            print(f"files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nmodel: n_layer {args.n_layer}, n_head {args.n_head}, n_embd {args.n_embd}, vocab {args.vocab}, "
          f"block {args.block} ({n_params / 1e6:.2f} M params); seq_len {args.seq_len}, "
          f"micro_batch {args.micro_batch}, global_batch {gb}; threads {args.threads}; "
          f"median of steps {args.warmup}..{args.steps - 1}")
    print(f"torch eager: {torch_tps:12,.0f} tokens/s   (min {torch_spread[0]:,.0f}, max {torch_spread[1]:,.0f}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads)")
    if ours is not None:
        print(f"ours:        {ours:12,.0f} tokens/s   (min {ours_spread[0]:,.0f}, max {ours_spread[1]:,.0f})")
        print(f"ratio ours/torch: {ours / torch_tps:.2f}x")

    print("env: " + ", ".join(f"{v}={os.environ.get(v, '(unset)')}" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")))
    print("\ntorch BLAS (torch.__config__.show()):")
    for line in torch.__config__.show().splitlines():
        for part in line.split(","):
            if "BLAS" in part.upper():
                print(f"  {part.strip()}")
    torch.ones(64, 64) @ torch.ones(64, 64)  # make sure the BLAS is loaded and used
    libs = loaded_blas_libs()
    print("  loaded: " + (", ".join(libs) if libs else "(no BLAS shared library mapped)"))
    if args.torch_blas == "same" and not os.environ.get("GT_BENCH_BLAS_DIR"):
        print("  WARNING: could not find our trainer's OpenBLAS directory; torch uses the system BLAS")
    if not any("libopenblas" in lib for lib in libs):
        print("  WARNING: libopenblas is not loaded in torch: its matmuls may use a slow "
              "reference BLAS, which flatters the ratio (apt-get install libopenblas0-pthread)")
    if exe:
        print("our trainer links: " + "; ".join(trainer_blas(exe)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
