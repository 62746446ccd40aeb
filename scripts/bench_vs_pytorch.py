#!/usr/bin/env python3
"""GPU training throughput of build/trainer against PyTorch, same GPT-2 step.

The PyTorch side is a GPT-2 written here for speed, the way a PyTorch user
would train it (scripts/gpt2_torch.py is the semantic reference, with an
explicit masked softmax; this one is the fast baseline): pre-LN blocks,
LayerNorm eps 1e-5, tanh GELU, causal F.scaled_dot_product_attention, LM head
tied to the token embedding, fp32 master weights under bf16 autocast,
torch.compile, fused AdamW, gradient clipping at 1.0. The shape (model,
micro_batch, global_batch, seq_len) comes from our config, so both sides run
the same step on random tokens; each step is timed between
torch.cuda.synchronize() calls and the median over the steps after --warmup
is reported.

Our side: either run the trainer (--trainer PATH) on random-token shards for
the same number of steps (profiling off), or read a run that already happened
(--metrics RUN_DIR: its metrics.jsonl and resolved config.yaml; profiled steps
are left out); or --pytorch-only. Also times causal SDPA fwd+bwd in bf16 at GPT-2 124M's shape
(B=16 T=1024 H=12 hs=64), and with --gpu-bench-csv compares it with our
attention kernels (tests/cuda/bench/gpu_bench.cu's attn_fwd + attn_bwd rows).

    python3 scripts/bench_vs_pytorch.py --trainer build-gpu/trainer
    python3 scripts/bench_vs_pytorch.py --metrics runs/gpu_check/X/train_124m --json out.json

Measures only; never asserts a speed; not run by CI (it needs a GPU).
Exit status: 0 measured; 1 a run failed (what was measured is still written);
2 bad arguments; 3 PyTorch is not installed (or older than 2.0); 4 no CUDA
device for PyTorch.
"""

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run_logs  # noqa: E402  (metrics and config readers; standard library only)
import prepare_data  # noqa: E402  (the shard format)

EXIT_FAILED, EXIT_USAGE, EXIT_NO_TORCH, EXIT_NO_CUDA = 1, 2, 3, 4
SDPA_SHAPE = dict(B=16, T=1024, H=12, hs=64)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ours = ap.add_mutually_exclusive_group(required=True)
    ours.add_argument("--trainer", help="our trainer binary (for example build-gpu/trainer): run it")
    ours.add_argument("--metrics", metavar="RUN_DIR",
                      help="a finished run of ours (metrics.jsonl + config.yaml): read it")
    ours.add_argument("--pytorch-only", action="store_true",
                      help="measure PyTorch alone (the shape from --config)")
    ap.add_argument("--config", default=os.path.join(REPO, "configs", "gpt2_124m.yaml"),
                    help="the config the shape comes from (not with --metrics: its own)")
    ap.add_argument("--steps", type=int, default=30,
                    help="steps of each side (with --metrics: as many as that run logged)")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the medians")
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager, not torch.compile")
    ap.add_argument("--gpu-bench-csv", help="gpu_bench's CSV: compare its attention with SDPA")
    ap.add_argument("--json", metavar="OUT", help="write the figures here")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for our trainer run")
    a = ap.parse_args(argv)
    if a.steps <= a.warmup or a.warmup < 0:
        ap.error(f"--steps ({a.steps}) must exceed --warmup ({a.warmup}) >= 0")
    if a.trainer and not (os.path.isfile(a.trainer) and os.access(a.trainer, os.X_OK)):
        ap.error(f"--trainer {a.trainer}: not an executable file (build it first)")
    if not a.metrics and not os.path.isfile(a.config):
        ap.error(f"--config {a.config}: no such file")
    if a.metrics and not os.path.isfile(os.path.join(a.metrics, "metrics.jsonl")):
        ap.error(f"--metrics {a.metrics}: no metrics.jsonl there")
    if a.metrics and not os.path.isfile(os.path.join(a.metrics, "config.yaml")):
        ap.error(f"--metrics {a.metrics}: no config.yaml there (the trainer writes it to log.dir)")
    if a.gpu_bench_csv and not os.path.isfile(a.gpu_bench_csv):
        ap.error(f"--gpu-bench-csv {a.gpu_bench_csv}: no such file")
    return a


def import_torch():
    """torch (2.0 or later) with a CUDA device, or exit 3 / 4 with a message."""
    try:
        import torch
    except ImportError as e:
        print(f"bench_vs_pytorch: PyTorch is not installed for {sys.executable} ({e}); "
              "nothing measured", file=sys.stderr)
        sys.exit(EXIT_NO_TORCH)
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        print(f"bench_vs_pytorch: PyTorch {torch.__version__} has no "
              "F.scaled_dot_product_attention (PyTorch 2.0 or later needed); nothing measured",
              file=sys.stderr)
        sys.exit(EXIT_NO_TORCH)
    if not torch.cuda.is_available():
        print(f"bench_vs_pytorch: PyTorch {torch.__version__} sees no CUDA device "
              f"(torch.version.cuda = {getattr(torch.version, 'cuda', None)}); nothing measured",
              file=sys.stderr)
        sys.exit(EXIT_NO_CUDA)
    return torch


def shape_of(cfg):
    """The step's shape from a config read by run_logs.read_resolved_config."""
    need = [("model", "n_layer"), ("model", "n_head"), ("model", "n_embd"),
            ("model", "vocab_size"), ("model", "block_size"), ("train", "seq_len"),
            ("train", "micro_batch"), ("train", "global_batch")]
    shape = {}
    for section, key in need:
        v = run_logs.config_int(cfg, section, key)
        if v <= 0:
            raise SystemExit(f"bench_vs_pytorch: the config has no positive {section}.{key}")
        shape[key] = v
    if shape["global_batch"] % shape["micro_batch"]:
        raise SystemExit("bench_vs_pytorch: train.global_batch is not a multiple of micro_batch")
    return shape


# ---------------------------------------------------------------- PyTorch GPT-2

def build_model(torch, shape):
    nn, F = torch.nn, torch.nn.functional
    C, H, V, P, L = (shape[k] for k in ("n_embd", "n_head", "vocab_size", "block_size", "n_layer"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.attn_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):                                         # (B, T, C)
            B, T, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)       # 3 x (B, T, C)
            q, k, v = (u.view(B, T, H, C // H).transpose(1, 2) for u in (q, k, v))  # (B, H, T, hs)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(P, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):                              # (B, T) int64
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)                         # (B, T, C)
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)          # (B, T, V), tied head
            return F.cross_entropy(logits.float().view(-1, V), targets.reshape(-1))

    return GPT()


def make_adamw(torch, model, notes):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    except (TypeError, RuntimeError) as e:
        notes.append(f"fused AdamW unavailable ({e}); foreach AdamW used")
        return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8)


def time_pytorch(torch, shape, steps, warmup, compile_model, notes):
    """Median tokens/s and step ms of the PyTorch GPT-2 step."""
    dev = torch.device("cuda")
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = build_model(torch, shape).to(dev)
    opt = make_adamw(torch, model, notes)
    fwd = model
    if compile_model:
        if hasattr(torch, "compile"):
            fwd = torch.compile(model)
        else:
            notes.append(f"torch {torch.__version__} has no torch.compile; PyTorch ran eager")
    B, T, V = shape["micro_batch"], shape["seq_len"], shape["vocab_size"]
    accum = shape["global_batch"] // B
    data = torch.randint(0, V, (4, B, T + 1), device=dev)
    times = []
    for step in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(accum):
            row = data[(step * accum + k) % data.shape[0]]
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = fwd(row[:, :-1], row[:, 1:]) / accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if step == 0:
            print(f"pytorch: first step {times[0]:.1f} s (compilation), loss {loss.item() * accum:.4f}",
                  flush=True)
    ms = statistics.median(times[warmup:]) * 1e3
    return shape["global_batch"] * T / (ms / 1e3), ms


def time_sdpa(torch, iters=20, warmup=3):
    """(fwd ms, fwd+bwd ms) of causal SDPA in bf16 at SDPA_SHAPE, by CUDA events."""
    F = torch.nn.functional
    B, T, H, hs = (SDPA_SHAPE[k] for k in ("B", "T", "H", "hs"))
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, T, hs, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3))
    dout = torch.randn(B, H, T, hs, device="cuda", dtype=torch.bfloat16, generator=g)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        fwd().backward(dout)

    def timed(fn):
        for _ in range(warmup):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters
    return timed(fwd), timed(fwd_bwd)


# ---------------------------------------------------------------- our trainer

def run_ours(a, work):
    """Runs our trainer on random tokens; returns its run directory."""
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    cfg = run_logs.read_resolved_config(a.config)
    shape = shape_of(cfg)
    rng = random.Random(1234)
    n = max(1 << 20, 4 * shape["global_batch"] * (shape["seq_len"] + 1))
    prepare_data.write_shard(os.path.join(data, "train_000000.bin"),
                             [rng.randrange(shape["vocab_size"]) for _ in range(n)])
    run = os.path.join(work, "ours")
    cmd = [a.trainer, "train", "--config", a.config,
           f"data.train={os.path.join(data, 'train_*.bin')}", "data.val=[]", "train.eval_every=0",
           f"train.steps={a.steps}", "checkpoint.every=0", "profile.every=0", f"log.dir={run}"]
    print("ours: " + " ".join(cmd), flush=True)
    with open(os.path.join(work, "ours.log"), "w") as log:
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=a.timeout)
    if p.returncode != 0:
        with open(os.path.join(work, "ours.log")) as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"our trainer exited {p.returncode}:\n{tail}")
    shutil.rmtree(os.path.join(run, "checkpoints"), ignore_errors=True)
    return run


def main(argv=None):
    a = parse_args(argv)
    torch = import_torch()
    notes, failed = [], False
    res = {"format": "gpt-trainer-bench-vs-pytorch", "version": 1,
           "torch_version": torch.__version__, "device_name": torch.cuda.get_device_name(0),
           "compiled": bool(not a.no_compile and hasattr(torch, "compile")), "notes": notes}

    ours_dir, work = a.metrics, None
    if a.trainer:
        work = tempfile.mkdtemp(prefix="gt_bench_vs_pytorch_")
        try:
            ours_dir = run_ours(a, work)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            print(f"bench_vs_pytorch: {e}", file=sys.stderr)
            notes.append(f"our trainer failed: {str(e).splitlines()[0]}")
            failed, ours_dir = True, None
    cfg = run_logs.read_resolved_config(os.path.join(ours_dir, "config.yaml")
                                         if ours_dir else a.config)
    shape = shape_of(cfg)
    res["shape"] = shape
    steps, warmup = a.steps, a.warmup
    if ours_dir:
        s = run_logs.run_summary(ours_dir, warmup)
        res["ours_tokens_per_s"], res["ours_step_ms"] = s["tokens_per_s"], s["step_ms"]
        res["ours_timed_steps"] = len(s["timed_steps"])
        steps = s["steps"] if a.metrics else steps
        if s["tokens_per_s"] is None:
            notes.append(f"{ours_dir}: no timed steps after {warmup} warm-up")
            failed = True
    res["steps"], res["warmup"] = steps, warmup

    print(f"pytorch: GPT-2 L={shape['n_layer']} C={shape['n_embd']} V={shape['vocab_size']}, "
          f"B={shape['micro_batch']} T={shape['seq_len']}, {steps} steps", flush=True)
    try:
        tps, ms = time_pytorch(torch, shape, max(steps, warmup + 1), warmup, not a.no_compile, notes)
        res["pytorch_tokens_per_s"], res["pytorch_step_ms"] = tps, ms
        res["sdpa_fwd_ms"], res["sdpa_fwd_bwd_ms"] = time_sdpa(torch)
        res["sdpa_shape"] = SDPA_SHAPE
    except Exception as e:  # a compile or CUDA failure: report, keep what we have
        print(f"bench_vs_pytorch: the PyTorch run failed: {type(e).__name__}: {e}", file=sys.stderr)
        notes.append(f"PyTorch run failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        failed = True
    if res.get("ours_tokens_per_s") and res.get("pytorch_tokens_per_s"):
        res["ratio"] = res["ours_tokens_per_s"] / res["pytorch_tokens_per_s"]
    if a.gpu_bench_csv:
        # The tensor-core kernels (bf16's default) when gpu_bench timed them.
        bench = run_logs.read_gpu_bench(a.gpu_bench_csv)
        res["ours_attention_fwd_bwd_ms"] = (
            run_logs.gpu_bench_attention_ms(bench, kernels="tensor_cores")
            or run_logs.gpu_bench_attention_ms(bench))

    def show(x, spec):
        return "-" if x is None else format(x, spec)
    print(f"PyTorch {res['torch_version']} ({'compiled' if res['compiled'] else 'eager'}) on "
          f"{res['device_name']}: {show(res.get('pytorch_tokens_per_s'), ',.0f')} tokens/s "
          f"({show(res.get('pytorch_step_ms'), '.2f')} ms/step)")
    print(f"ours: {show(res.get('ours_tokens_per_s'), ',.0f')} tokens/s "
          f"({show(res.get('ours_step_ms'), '.2f')} ms/step); ours/PyTorch "
          f"{show(res.get('ratio'), '.2f')}x")
    if res.get("sdpa_fwd_bwd_ms"):
        ours_attn = res.get("ours_attention_fwd_bwd_ms")
        print(f"SDPA causal bf16 B=16 T=1024 H=12 hs=64: fwd {res['sdpa_fwd_ms']:.3f} ms, "
              f"fwd+bwd {res['sdpa_fwd_bwd_ms']:.3f} ms"
              + (f"; ours (gpu_bench) fwd+bwd {ours_attn:.3f} ms" if ours_attn else ""))
    for n in notes:
        print(f"note: {n}")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
    if work:
        shutil.rmtree(work, ignore_errors=True)
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())
