#!/usr/bin/env python3
"""Cross-checks build/trainer against an independent PyTorch GPT-2 or Llama, step by step.

In a temporary directory: writes train shards from this repository's text
(byte tokens), builds a seeded random model of --arch in torch
(scripts/gpt2_torch.py, scripts/llama_torch.py) and saves it as safetensors
with HF's names, trains it for --steps steps with build/trainer
(model.init_from = that file) and with torch (fp32, torch.optim.AdamW,
clip_grad_norm_), then compares per step `loss`, `grad_norm` and `lr` from
<run>/metrics.jsonl, and the exported <run>/model.safetensors with torch's
final parameters.

The trainer runs in the layout --dp x --fsdp x --cp x --tp (under `mpirun
--oversubscribe` past one rank, one thread per rank) on --device (cpu, or
cuda: the CUDA backend, on a GPU or on the emulated device) in --dtype (bf16
on either device); torch is always the fp32 reference on the CPU, one
process, the same global batch. --cp cuts each sequence over cp ranks
(parallel.cp_comm = --cp-comm, parallel.cp_load_balance = --cp-load-balance,
the trainer's defaults unless given), so train.seq_len (--seq-len, default
32) must be a multiple of 2 cp (of cp without load balancing), and each cp
rank's rows of a micro-batch, 4 x seq_len / cp, a multiple of tp. Where 32
is not, the default becomes the smallest seq_len above it, up to the models'
context of 64, that is; a --seq-len that is not is refused with the numbers.

Tolerances (relative, per step; final weights per tensor against
max(1, max |w|)):

    dtype   loss    grad_norm  weights
    fp32    1e-4    1e-3       1e-4      the same function in the same precision
    bf16    2e-2    2e-2       2e-2      bf16 activation storage against fp32 math

Exit status: 0 PASS, 1 a mismatch (table printed), 2 could not run (no torch:
$GT_NO_TORCH_EXIT if set, which ctest sets to its skip code).

    python3 scripts/check_against_pytorch.py --build build-scripts
    python3 scripts/check_against_pytorch.py --arch llama --tp 2 --fsdp 2
    python3 scripts/check_against_pytorch.py --arch llama --cp 2
    python3 scripts/check_against_pytorch.py --arch gpt2 --cp 2 --tp 2 --cp-comm ring
    python3 scripts/check_against_pytorch.py --build build-gpu --device cuda --dtype bf16 \
        --json bf16.json
"""

import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as tr  # noqa: E402  (re-executes under /usr/bin/python3 if torch is missing)
import gpt2_torch  # noqa: E402
import llama_torch  # noqa: E402
import prepare_data  # noqa: E402
import torch  # noqa: E402

LR_RTOL = 1e-6
# dtype -> (loss, grad_norm, weights). A norm sums many squares: a little
# looser than the loss. Weights: max |ours - torch| <= tol * max(1, max |torch|),
# per tensor. bf16 rounds every activation and GEMM operand to 8 bits of
# mantissa (relative error 2^-9 each), which a 2-layer model's loss carries at
# ~1e-4 (measured: 5.4e-5 on the CPU backend, 10 steps) and AdamW's
# normalised steps can turn into sign flips of tiny gradients: 2e-2 still
# catches a wrong op, a missing term or a wrong layout by orders of magnitude.
TOLERANCES = {"fp32": (1e-4, 1e-3, 1e-4), "bf16": (2e-2, 2e-2, 2e-2)}

# Both models' context (model.block_size): train.seq_len may not exceed it.
BLOCK_SIZE = 64
# The rows of one micro-batch (train.micro_batch).
MICRO_BATCH = 4
# train.seq_len unless --seq-len or the cp x tp layout asks for another.
DEFAULT_SEQ_LEN = 32


# Where a first divergence points, per family: (step-0 loss, step-0 grad norm).
DIAGNOSIS = {
    "gpt2": ("forward pass, weight import (init_from, Conv1D layout, q|k|v order) or data order",
             "backward pass (or the norm: tied wte counted once, before clipping)"),
    "llama": ("forward pass (RMSNorm, RoPE pairs and frequencies, kv head grouping, SwiGLU), "
              "weight import (init_from, (out, in) layout, lm_head vs embed_tokens) or data order",
              "backward pass (or the norm: the norms' tp-partial gradients counted once, "
              "before clipping)"),
}


def make_model(arch, seed):
    """(module, config, seeded model) of a tiny model of `arch`.

    vocab 300 (the data is bytes): the trainer stores it padded to 384 rows,
    torch does not, so the padding's masking is checked too. Both split over
    tp = 2 (GPT-2 also over 4; Llama's 2 key/value heads do not). Llama: 4
    query heads sharing 2 key/value heads, an MLP width that is not a
    multiple of C, an untied head, and Llama 3.1's RoPE scaling with a short
    original context, so that the head's 8 frequencies fall in all three of
    its bands (kept, interpolated, divided by factor).
    """
    if arch == "gpt2":
        cfg = gpt2_torch.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=300,
                                    block_size=BLOCK_SIZE)
        return gpt2_torch, cfg, gpt2_torch.init_gpt2(gpt2_torch.GPT2(cfg), seed=seed, perturb=True)
    cfg = llama_torch.LlamaConfig(
        n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=176, vocab_size=300,
        block_size=BLOCK_SIZE,
        rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=False,
        rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position=32))
    return llama_torch, cfg, llama_torch.init_llama(llama_torch.Llama(cfg), seed=seed, perturb=True)


def seq_len_problem(seq_len, cp, tp, load_balance):
    """Why the trainer would reject train.seq_len in this layout, or None.

    The trainer's own checks (trainer/config/config.cpp), spelt out here so
    that a bad --seq-len fails before any work with the numbers at hand."""
    if not 1 <= seq_len <= BLOCK_SIZE:
        return f"seq_len {seq_len} is not in [1, model.block_size = {BLOCK_SIZE}]"
    chunks = 2 * cp if load_balance else cp
    if cp > 1 and seq_len % chunks:
        how = "2 x cp (load-balanced chunks)" if load_balance else "cp"
        return f"seq_len {seq_len} is not a multiple of {how} = {chunks}"
    rows = MICRO_BATCH * seq_len // cp
    if rows % tp:
        return (f"a cp rank's rows of a micro-batch, micro_batch x seq_len / cp = "
                f"{MICRO_BATCH} x {seq_len} / {cp} = {rows}, do not split over tp = {tp}")
    return None


def choose_seq_len(cp, tp, load_balance):
    """DEFAULT_SEQ_LEN, or else the smallest seq_len above it (up to
    BLOCK_SIZE) that the layout accepts; None where none does."""
    for seq_len in range(DEFAULT_SEQ_LEN, BLOCK_SIZE + 1):
        if seq_len_problem(seq_len, cp, tp, load_balance) is None:
            return seq_len
    return None


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def write_shards(tmp, n_tokens, n_shards, seed):
    """n_tokens of the repo's own text (seeded random bytes if it is too short) in n_shards."""
    texts = prepare_data.read_texts(prepare_data.default_inputs())
    tokens, _ = prepare_data.encode_bytes(texts) if texts else ([], 256)
    tokens = list(tokens[:n_tokens])
    if len(tokens) < n_tokens:
        rng = random.Random(seed)
        tokens += [rng.randrange(256) for _ in range(n_tokens - len(tokens))]
    # Uneven shard sizes whose windows leave a remainder, so that the window
    # numbering across a shard boundary is exercised within the first steps.
    cuts = [0]
    if n_shards > 1:
        first = 1000 + 7
        step = (n_tokens - first) // (n_shards - 1)
        cuts += [first + i * step for i in range(n_shards - 1)]
    cuts.append(n_tokens)
    paths = []
    for i in range(n_shards):
        p = os.path.join(tmp, f"train_{i:06d}.bin")
        prepare_data.write_shard(p, tokens[cuts[i]:cuts[i + 1]])
        paths.append(p)
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(tr.REPO_ROOT, "build"),
                    help="build directory holding the trainer executable (default <repo>/build)")
    ap.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2",
                    help="the model family (torch reference: scripts/<arch>_torch.py)")
    ap.add_argument("--dp", type=int, default=1, help="the trainer's parallel.dp")
    ap.add_argument("--fsdp", type=int, default=1, help="the trainer's parallel.fsdp")
    ap.add_argument("--tp", type=int, default=1, help="the trainer's parallel.tp")
    ap.add_argument("--cp", type=int, default=1, help="the trainer's parallel.cp")
    ap.add_argument("--cp-comm", choices=("allgather", "ring"), default="allgather",
                    help="the trainer's parallel.cp_comm (where cp > 1)")
    ap.add_argument("--cp-load-balance", choices=("true", "false"), default="true",
                    help="the trainer's parallel.cp_load_balance (where cp > 1)")
    ap.add_argument("--seq-len", type=int,
                    help=f"train.seq_len (default {DEFAULT_SEQ_LEN}, or the smallest above it "
                         f"that --cp and --tp accept)")
    ap.add_argument("--fsdp-stage", type=int, choices=(1, 2, 3), default=3,
                    help="the trainer's parallel.fsdp_stage (where fsdp > 1)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=20_000, help="train tokens in all shards")
    ap.add_argument("--shards", type=int, default=2, help="train shards (default 2: crosses a boundary)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="the trainer's runtime.device (torch always runs on the CPU in fp32)")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="the trainer's runtime.dtype; bf16 is held to looser tolerances")
    ap.add_argument("--json", metavar="FILE",
                    help="also write the verdict and the largest differences as JSON")
    args = ap.parse_args()
    if min(args.dp, args.fsdp, args.cp, args.tp) < 1:
        ap.error(f"--dp {args.dp} --fsdp {args.fsdp} --cp {args.cp} --tp {args.tp}: "
                 "each must be >= 1")
    load_balance = args.cp_load_balance == "true"
    if args.seq_len is None:
        seq_len = choose_seq_len(args.cp, args.tp, load_balance)
        if seq_len is None:
            ap.error(f"no seq_len in [{DEFAULT_SEQ_LEN}, {BLOCK_SIZE}] suits --cp {args.cp} "
                     f"--tp {args.tp} --cp-load-balance {args.cp_load_balance}: "
                     f"{seq_len_problem(BLOCK_SIZE, args.cp, args.tp, load_balance)}")
        if seq_len != DEFAULT_SEQ_LEN:
            print(f"train.seq_len {seq_len} instead of {DEFAULT_SEQ_LEN}: "
                  f"{seq_len_problem(DEFAULT_SEQ_LEN, args.cp, args.tp, load_balance)}")
    else:
        seq_len = args.seq_len
        problem = seq_len_problem(seq_len, args.cp, args.tp, load_balance)
        if problem:
            ap.error(f"--seq-len {seq_len} with --cp {args.cp} --tp {args.tp} "
                     f"--cp-load-balance {args.cp_load_balance}: {problem}")
    ranks = args.dp * args.fsdp * args.cp * args.tp
    layout = f"dp{args.dp}_fsdp{args.fsdp}"
    if args.cp > 1:
        layout += f"_cp{args.cp}"
    layout += f"_tp{args.tp}"
    if args.fsdp > 1:
        layout += f"_stage{args.fsdp_stage}"
    if args.cp > 1:
        layout += f"_{args.cp_comm}" + ("" if load_balance else "_unbalanced")
    exe = tr.find_trainer(os.path.abspath(args.build))
    loss_rtol, gnorm_rtol, weight_tol = TOLERANCES[args.dtype]
    summary = dict(arch=args.arch, layout=layout, device=args.device, dtype=args.dtype, steps=args.steps,
                   tolerances=dict(loss=loss_rtol, grad_norm=gnorm_rtol, weights=weight_tol),
                   max_rel_loss=None, max_rel_grad_norm=None, max_weight_diff=None)

    # global_batch 8 of micro_batch 4: two accumulated micro-batches on one
    # rank, one per data rank at dp or fsdp 2 (cp and tp ranks share their
    # data rank's rows: cp ranks each hold a chunk of every row).
    t = dict(seq_len=seq_len, micro_batch=MICRO_BATCH, global_batch=2 * MICRO_BATCH,
             steps=args.steps, lr=1e-3,
             lr_schedule="cosine", warmup_steps=3, min_lr=1e-4, weight_decay=0.1,
             beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0)

    # Kept after any failure (the trainer log and config are in it), removed on PASS.
    tmp = tempfile.mkdtemp(prefix="gt_check_")
    shards = write_shards(tmp, args.tokens, args.shards, args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    ref_module, mcfg, model = make_model(args.arch, args.seed)
    init_path = os.path.join(tmp, "init.safetensors")
    tr.write_safetensors(init_path, ref_module.hf_state_dict(model), {"format": "pt"})

    run_dir = os.path.join(tmp, "run")
    cfg_path = os.path.join(tmp, "cfg.yaml")
    tr.write_trainer_config(cfg_path, {
        "model": dict(mcfg.as_dict(), init_from=init_path),
        "data": dict(train=shards, val=[], shuffle=False),
        "train": dict(t, seed=args.seed, eval_every=0, eval_batches=1),
        "runtime": dict(device=args.device, dtype=args.dtype,
                        threads=args.threads if ranks == 1 else 1),
        "parallel": dict(dp=args.dp, fsdp=args.fsdp, tp=args.tp, fsdp_stage=args.fsdp_stage,
                         # Without cp the config stays as it was before parallel.cp.
                         **(dict(cp=args.cp, cp_comm=args.cp_comm, cp_load_balance=load_balance)
                            if args.cp > 1 else {})),
        "log": dict(dir=run_dir, every=1),
        "checkpoint": dict(every=0, resume="none"),
    })
    launcher, env = tr.mpirun_launcher(ranks)
    print(f"trainer: {' '.join(launcher + [exe])} --config {cfg_path} (model.arch={args.arch}, "
          f"layout {layout}, runtime.device={args.device}, runtime.dtype={args.dtype}; "
          f"torch: one process, cpu, fp32)")
    tr.run_trainer(exe, cfg_path, os.path.join(tmp, "trainer.log"), env=env, launcher=launcher)
    ours = tr.read_metrics(os.path.join(run_dir, "metrics.jsonl"))

    # The same steps in torch, from the same initial weights.
    loader = tr.WindowLoader(shards, t["seq_len"])
    opt = tr.make_adamw(model, t["lr"], t["weight_decay"], t["beta1"], t["beta2"], t["eps"])
    ref = [tr.train_step(model, opt, loader, s, t) for s in range(t["steps"])]
    boundary = loader.first[1] if len(loader.windows) > 1 else None

    ok = True
    missing = [s for s in range(t["steps"]) if s not in ours]
    if missing:
        print(f"FAIL: metrics.jsonl has no train record for steps {missing}")
        ok = False
    print(f"\n{'step':>4} | {'loss ours':>11} {'loss torch':>11} {'rel':>8} | "
          f"{'gnorm ours':>11} {'gnorm torch':>11} {'rel':>8} | {'lr ours':>10} {'lr torch':>10} {'rel':>8}")
    first_bad = {}
    for s, (loss, lr, gnorm) in enumerate(ref):
        if s not in ours:
            continue
        r = ours[s]
        cols = []
        for key, theirs, tol in (("loss", loss, loss_rtol), ("grad_norm", gnorm, gnorm_rtol),
                                 ("lr", lr, LR_RTOL)):
            mine = r.get(key)
            if mine is None or not math.isfinite(float(mine)):
                cols.append((float("nan"), theirs, float("inf"), "!"))
                first_bad.setdefault(key, s)
                continue
            d = rel(float(mine), theirs)
            worst_key = {"loss": "max_rel_loss", "grad_norm": "max_rel_grad_norm"}.get(key)
            if worst_key:
                summary[worst_key] = max(summary[worst_key] or 0.0, d)
            bad = d > tol
            if bad:
                first_bad.setdefault(key, s)
            cols.append((float(mine), theirs, d, "!" if bad else " "))
        note = ""
        if boundary is not None and s * t["global_batch"] <= boundary < (s + 1) * t["global_batch"]:
            note = "  <- rows cross into shard 1"
        (l0, l1, ld, lf), (g0, g1, gd, gf), (r0, r1, rd, rf) = cols
        print(f"{s:>4} | {l0:>11.7f} {l1:>11.7f} {ld:>8.1e}{lf}| {g0:>11.7f} {g1:>11.7f} {gd:>8.1e}{gf}| "
              f"{r0:>10.4e} {r1:>10.4e} {rd:>8.1e}{rf}{note}")
    if first_bad:
        ok = False
        order = sorted(first_bad.items(), key=lambda kv: (kv[1], ["loss", "grad_norm", "lr"].index(kv[0])))
        print("\nfirst divergence: " + ", ".join(f"{k} at step {s}" for k, s in order))
        s0 = min(first_bad.values())
        if "lr" in first_bad and first_bad["lr"] == s0:
            print("diagnosis: the LR schedule differs (warmup/cosine formula or step indexing)")
        elif first_bad.get("loss") == 0:
            print(f"diagnosis: the step-0 loss differs: {DIAGNOSIS[args.arch][0]}")
            if args.cp > 1:
                print("  (or, at --cp > 1: a chunk's positions, the causal mask across chunks "
                      "or the keys and values the cp ranks share)")
        elif first_bad.get("grad_norm") == 0:
            print(f"diagnosis: step-0 loss agrees but grad_norm does not: {DIAGNOSIS[args.arch][1]}")
        elif "loss" in first_bad:
            print("diagnosis: forward and gradients agree first, later losses drift: the update "
                  "(AdamW, weight decay groups, bias correction, clipping, accumulation) "
                  "or the data order of later steps (check the shard-boundary step)")
        if ranks > 1:
            print(f"(one process of the same config may agree: then it is layout {layout}'s "
                  "sharding or collectives; rerun with --dp 1 --fsdp 1 --cp 1 --tp 1 to tell)")

    # Final weights.
    out_path = os.path.join(run_dir, "model.safetensors")
    if not os.path.exists(out_path):
        print(f"FAIL: the trainer wrote no {out_path}")
        ok = False
    else:
        mine = tr.read_safetensors(out_path)
        want = ref_module.expected_shapes(mcfg)
        names_ok = set(mine) == set(want) and all(list(mine[k].shape) == want[k] for k in want)
        if not names_ok:
            print(f"FAIL: exported tensors differ from HF names/shapes: missing "
                  f"{sorted(set(want) - set(mine))[:5]}, unexpected {sorted(set(mine) - set(want))[:5]}, "
                  f"shape mismatches {[k for k in want if k in mine and list(mine[k].shape) != want[k]][:5]}")
            ok = False
        else:
            final = ref_module.hf_state_dict(model)
            diffs = []
            for k in sorted(want):
                d = (mine[k] - final[k]).abs().max().item()
                scale = max(1.0, final[k].abs().max().item())
                diffs.append((d / scale, d, k))
            diffs.sort(reverse=True)
            worst = diffs[0]
            summary["max_weight_diff"] = worst[0]
            print(f"\nfinal weights: max |ours - torch| = {worst[1]:.3e} in {worst[2]} "
                  f"(tolerance {weight_tol:.0e} x max(1, |w|)); worst tensors:")
            for score, d, k in diffs[:5]:
                print(f"  {k:<44} {d:.3e}{'  !' if score > weight_tol else ''}")
            if worst[0] > weight_tol:
                print("FAIL: final weights differ beyond the tolerance")
                ok = False
    fmt = lambda v: "n/a" if v is None else f"{v:.1e}"  # noqa: E731
    print(f"\n{args.arch} {layout}: max relative difference loss {fmt(summary['max_rel_loss'])}, "
          f"grad_norm {fmt(summary['max_rel_grad_norm'])}, weights {fmt(summary['max_weight_diff'])}")
    print("PASS" if ok else "FAIL")
    if args.json:
        summary["pass"] = ok
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    if args.keep or not ok:
        print(f"files kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
