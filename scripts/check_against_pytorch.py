#!/usr/bin/env python3
"""Cross-checks build/trainer against an independent PyTorch GPT-2, Llama or Mixtral, step by step.

In a temporary directory: writes train shards from this repository's text
(byte tokens), builds a seeded random model of --arch in torch
(scripts/gpt2_torch.py, scripts/llama_torch.py, scripts/mixtral_torch.py)
and saves it as safetensors
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

Mixtral (--arch mixtral; model.n_experts 4, experts_per_token 2, ffn_hidden
96, router_aux_loss_coef 0.02, router_z_loss_coef 1e-3, capacity_factor
--capacity-factor, 0 = dropless; --ep E runs parallel.ep=E, the experts split
over groups of E data ranks that exchange tokens all-to-all) also compares `aux_loss` per step (the
unscaled load-balancing loss, mean over the step's micro-batches) at the
loss tolerance; `loss` is the cross-entropy alone, the optimised objective
adds the scaled aux and z-losses (scripts/mixtral_torch.py). Its routers are
made decisive (mixtral_torch.make_routing_decisive) so that rounding cannot
flip a top-k choice; the smallest top-k margin (k-th minus (k+1)-th prob,
over every row, layer and step) is printed, and with capacity drops the
smallest gap at an expert's capacity cut. Where the run folder holds the
trainer's routing.jsonl (below) the chosen experts are compared and any
flip listed; without one, a margin under --routing-margin (1e-4 in fp32,
1e-2 in bf16) fails the check as too close to call rather than hiding a flip
inside the loss tolerance. `dropped_tokens` and `expert_imbalance` are
printed beside the reference's figures, not compared (their definitions
are the trainer's). --reference-only runs the torch side alone and prints
its figures (no trainer needed).

routing.jsonl, one record per (step, global micro-batch, layer):
  {"step": s, "micro": m, "layer": l, "experts": [[e, ...] x rows],
   "kept": [[true|false, ...] x rows]}
micro m = the micro-batch of global rows [m micro_batch, (m + 1) micro_batch)
of the step, its rows in (sequence, position) order, k experts each; "kept"
(optional, false where the capacity cut dropped that slot) lets a capacity
run compare its drops too: without it, a gap under --routing-margin between
an expert's last kept and first dropped slot weights fails as too close to
call (with capacity factors 1 to 1.5 that gap falls to ~3e-5..9e-5 within
10 steps: slots of the same frequent token differ by their context only).

Exit status: 0 PASS, 1 a mismatch (table printed) or a Mixtral routing too
close to call, 2 could not run (no torch: $GT_NO_TORCH_EXIT if set, which
ctest sets to its skip code).

    python3 scripts/check_against_pytorch.py --build build-scripts
    python3 scripts/check_against_pytorch.py --arch llama --tp 2 --fsdp 2
    python3 scripts/check_against_pytorch.py --arch llama --cp 2
    python3 scripts/check_against_pytorch.py --arch gpt2 --cp 2 --tp 2 --cp-comm ring
    python3 scripts/check_against_pytorch.py --arch mixtral --capacity-factor 1.25
    python3 scripts/check_against_pytorch.py --arch mixtral --reference-only
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
import mixtral_torch  # noqa: E402
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

# dtype -> the smallest top-k margin (in probs) that a Mixtral comparison
# without routing dumps accepts: the two sides' router probs differ by
# ~1e-7 in fp32 (measured against transformers: logits 7e-7 apart) and by
# ~1e-3 in bf16, and a row closer than this could be routed differently by
# rounding alone.
ROUTING_MARGIN = {"fp32": 1e-4, "bf16": 1e-2}

# The models' context (model.block_size): train.seq_len may not exceed it.
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
    "mixtral": ("forward pass (llama's, and the router: fp32 softmax, top-k, renormalised "
                "weights; the experts' SwiGLU; the combine; capacity drops), weight import "
                "(block_sparse_moe.gate / experts.M.w1,w2,w3 names), the objective (CE + coef aux "
                "+ coef z; metrics loss = CE alone) or data order",
                "backward pass (the router's gradient through the renormalised weights, the aux "
                "and z-loss gradients, the experts' GEMMs; an unchosen expert's zero gradient "
                "still updated by AdamW) or the norm"),
}


def make_model(arch, seed, capacity_factor=0.0):
    """(module, config, seeded model) of a tiny model of `arch`.

    vocab 300 (the data is bytes): the trainer stores it padded to 384 rows,
    torch does not, so the padding's masking is checked too. Both split over
    tp = 2 (GPT-2 also over 4; Llama's 2 key/value heads do not). Llama: 4
    query heads sharing 2 key/value heads, an MLP width that is not a
    multiple of C, an untied head, and Llama 3.1's RoPE scaling with a short
    original context, so that the head's 8 frequencies fall in all three of
    its bands (kept, interpolated, divided by factor).
    """
    if arch == "mixtral":
        return make_mixtral(seed, capacity_factor)
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


def make_mixtral(seed, capacity_factor):
    """Llama's test model (no RoPE scaling: HF's Mixtral has none) with 4
    experts of width 96 (not a multiple of C), top-2, both router losses on,
    and decisive routers (see mixtral_torch.make_routing_decisive)."""
    cfg = mixtral_torch.MixtralConfig(
        n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=96, vocab_size=300,
        block_size=BLOCK_SIZE, rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=False,
        n_experts=4, experts_per_token=2, router_aux_loss_coef=0.02, router_z_loss_coef=1e-3,
        capacity_factor=capacity_factor)
    model = mixtral_torch.init_mixtral(mixtral_torch.Mixtral(cfg), seed=seed, perturb=True)
    return mixtral_torch, cfg, mixtral_torch.make_routing_decisive(model, seed=seed + 1)


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


# ================================================================ mixtral

def write_routing(path, moe):
    """The reference's chosen experts in routing.jsonl's format (module doc)."""
    with open(path, "w") as f:
        for s, m in enumerate(moe):
            for micro, layers in enumerate(m["routing"]):
                for layer, rec in enumerate(layers):
                    f.write(json.dumps(dict(step=s, micro=micro, layer=layer, **rec)) + "\n")


def routing_flips(path, moe):
    """(flips, drop_flips, has_kept, problems) between the trainer's
    routing.jsonl and the reference.

    A flip is a row whose SET of k experts differs: the order within the
    top-k changes no output, a different set does. A drop flip is a row whose
    set of kept experts differs while the chosen ones agree (only where every
    record has "kept"). problems: records missing or malformed (a dump that
    does not cover the run proves nothing)."""
    got, problems = {}, []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                got[(int(rec["step"]), int(rec["micro"]), int(rec["layer"]))] = (
                    rec["experts"], rec.get("kept"))
            except (ValueError, KeyError, TypeError) as e:
                problems.append(f"{path}:{n}: {e}")
    flips, drop_flips = [], []
    has_kept = bool(got) and all(kept is not None for _, kept in got.values())
    kept_set = lambda es, ks: sorted(e for e, k in zip(es, ks) if k)  # noqa: E731
    for s, m in enumerate(moe):
        for micro, layers in enumerate(m["routing"]):
            for layer, want in enumerate(layers):
                key = (s, micro, layer)
                if key not in got:
                    problems.append(f"no record for step {s} micro {micro} layer {layer}")
                    continue
                mine, mine_kept = got[key]
                if len(mine) != len(want["experts"]) or (has_kept and len(mine_kept) != len(mine)):
                    problems.append(f"step {s} micro {micro} layer {layer}: {len(mine)} rows, "
                                    f"the reference has {len(want['experts'])}")
                    continue
                for row, (a, b) in enumerate(zip(mine, want["experts"])):
                    if sorted(a) != sorted(b):
                        flips.append((s, micro, layer, row, a, b))
                    elif has_kept and kept_set(a, mine_kept[row]) != kept_set(b, want["kept"][row]):
                        drop_flips.append((s, micro, layer, row, kept_set(a, mine_kept[row]),
                                           kept_set(b, want["kept"][row])))
    return flips, drop_flips, has_kept, problems


def compare_mixtral(ours, moe, run_dir, tol, margin_floor, capacity_factor, summary):
    """The Mixtral-only comparisons: aux_loss per step, the chosen experts
    (routing.jsonl) or else the smallest margins. Returns True when they pass."""
    ok = True
    print(f"\n{'step':>4} | {'aux ours':>11} {'aux torch':>11} {'rel':>8} | {'topk margin':>11} "
          f"{'cap gap':>9} | {'dropped ours':>12} {'torch':>6} | {'imbalance ours':>14} {'torch':>6}")
    first_bad = None
    for s, m in enumerate(moe):
        r = ours.get(s, {})
        mine = r.get("aux_loss")
        if mine is None or not math.isfinite(float(mine)):
            d, flag, shown = float("inf"), "!", float("nan")
        else:
            shown = float(mine)
            d = rel(shown, m["aux_loss"])
            flag = "!" if d > tol else " "
            summary["max_rel_aux_loss"] = max(summary.get("max_rel_aux_loss") or 0.0, d)
        if flag == "!" and first_bad is None:
            first_bad = s
        # The reference's load imbalance, for reading beside the trainer's
        # expert_imbalance: max over experts of the step's chosen slots (all
        # layers, all micro-batches) over their mean. Not compared: the
        # trainer's definition is its own.
        counts = m["counts"].sum(dim=0).float()
        imbalance = (counts.max() / counts.mean()).item()
        fmt = lambda v: "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
        gap = m["capacity_gap"]
        print(f"{s:>4} | {shown:>11.7f} {m['aux_loss']:>11.7f} {d:>8.1e}{flag}| {m['margin']:>11.2e} "
              f"{'-' if gap == float('inf') else f'{gap:.2e}':>9} | {fmt(r.get('dropped_tokens')):>12} "
              f"{m['dropped']:>6} | {fmt(r.get('expert_imbalance')):>14} {imbalance:>6.3f}")
    if first_bad is not None:
        ok = False
        print(f"\nFAIL: aux_loss differs first at step {first_bad}: the load-balancing loss pools "
              "the router logits of every layer of one micro-batch (rows = layers x tokens), counts "
              "each row's k chosen experts, multiplies by the mean probs and by E; or the router "
              "itself (then the losses differ too)")
    margin = min(m["margin"] for m in moe)
    at = min(range(len(moe)), key=lambda s: moe[s]["margin"])
    summary["min_topk_margin"] = margin
    print(f"\nsmallest top-k margin of the reference: {margin:.2e} (step {at}); "
          f"the floor without routing dumps: {margin_floor:.0e}")
    dump = os.path.join(run_dir, "routing.jsonl")
    drops_compared = False
    if os.path.exists(dump):
        flips, drop_flips, drops_compared, problems = routing_flips(dump, moe)
        summary["routing_flips"] = len(flips)
        if problems:
            ok = False
            print(f"FAIL: {dump} does not cover the run: " + "; ".join(problems[:5]))
        if flips:
            ok = False
            print(f"FAIL: {len(flips)} rows chose other experts than the reference (step, micro-batch, "
                  "layer, row: ours / torch):")
            for s, micro, layer, row, a, b in flips[:10]:
                print(f"  step {s} micro {micro} layer {layer} row {row}: {a} / {b}")
            print("  a wrong router (softmax, top-k, tie order) or, if the margins are tiny, rounding")
        if drop_flips:
            ok = False
            print(f"FAIL: {len(drop_flips)} rows kept other slots than the reference at the capacity "
                  "cut (step, micro-batch, layer, row: kept experts ours / torch):")
            for s, micro, layer, row, a, b in drop_flips[:10]:
                print(f"  step {s} micro {micro} layer {layer} row {row}: {a} / {b}")
            print("  the capacity ceil(capacity_factor k N / E), the drop order (lowest weight first, "
                  "equal weights the later row first) or, if the gaps are tiny, rounding")
        if not (problems or flips or drop_flips):
            print("routing: every row's chosen experts agree"
                  + (" and so do the kept slots" if drops_compared else "") + f" ({dump})")
    else:
        summary["routing_flips"] = None
        print(f"(no {dump}: the trainer dumped no routing to compare)")
        if margin < margin_floor:
            ok = False
            print(f"FAIL: too close to call: at step {at} a row's k-th and (k+1)-th router probs "
                  f"are {margin:.2e} apart, under {margin_floor:.0e}; the trainer may have chosen "
                  "other experts there by rounding alone, so agreement or disagreement of the "
                  "losses proves nothing. Dump the trainer's routing (routing.jsonl) or change "
                  "--seed / --routing-margin")
    if capacity_factor > 0:
        gap = min(m["capacity_gap"] for m in moe)
        summary["min_capacity_gap"] = gap
        print(f"smallest gap at a capacity cut: {gap:.2e}; dropped slots (reference, all steps): "
              f"{sum(m['dropped'] for m in moe)}")
        # Without "kept" in the dump a near tie at a capacity cut is not covered.
        if gap < margin_floor and not drops_compared:
            ok = False
            print(f"FAIL: too close to call: an expert's last kept and first dropped slot weights "
                  f"are {gap:.2e} apart, under {margin_floor:.0e}; rounding alone could drop "
                  "another slot")
    return ok


def write_shards(tmp, n_tokens, n_shards, seed):
    """n_tokens of the repo's own text (seeded random bytes if it is too short) in n_shards."""
    # Byte tokens: the files' bytes, joined by a blank line.
    data = b"\n\n".join(open(p, "rb").read() for p in prepare_data.default_inputs())
    tokens = list(data[:n_tokens])
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
    ap.add_argument("--arch", choices=("gpt2", "llama", "mixtral"), default="gpt2",
                    help="the model family (torch reference: scripts/<arch>_torch.py)")
    ap.add_argument("--dp", type=int, default=1, help="the trainer's parallel.dp")
    ap.add_argument("--fsdp", type=int, default=1, help="the trainer's parallel.fsdp")
    ap.add_argument("--tp", type=int, default=1, help="the trainer's parallel.tp")
    ap.add_argument("--cp", type=int, default=1, help="the trainer's parallel.cp")
    ap.add_argument("--ep", type=int, default=1,
                    help="mixtral: the trainer's parallel.ep (folded out of dp x fsdp: no ranks added)")
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
    ap.add_argument("--capacity-factor", type=float, default=0.0,
                    help="mixtral: model.capacity_factor (default 0: dropless)")
    ap.add_argument("--routing-margin", type=float,
                    help="mixtral: the smallest top-k margin accepted without routing dumps "
                         "(default 1e-4 in fp32, 1e-2 in bf16)")
    ap.add_argument("--reference-only", action="store_true",
                    help="run the torch reference alone and print its figures (no trainer)")
    args = ap.parse_args()
    if args.ep > 1 and args.arch != "mixtral":
        ap.error("--ep is for --arch mixtral (only a mixture has experts to split)")
    if args.ep < 1 or (args.dp * args.fsdp) % args.ep:
        ap.error(f"--ep {args.ep} must divide --dp x --fsdp = {args.dp * args.fsdp}")
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
    if args.ep > 1:
        layout += f"_ep{args.ep}"
    if args.fsdp > 1:
        layout += f"_stage{args.fsdp_stage}"
    if args.cp > 1:
        layout += f"_{args.cp_comm}" + ("" if load_balance else "_unbalanced")
    if args.arch != "mixtral" and (args.capacity_factor or args.routing_margin is not None):
        ap.error("--capacity-factor and --routing-margin are for --arch mixtral")
    if args.capacity_factor < 0:
        ap.error(f"--capacity-factor {args.capacity_factor} must be >= 0 (0: dropless)")
    margin_floor = ROUTING_MARGIN[args.dtype] if args.routing_margin is None else args.routing_margin
    exe = None if args.reference_only else tr.find_trainer(os.path.abspath(args.build))
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
    ref_module, mcfg, model = make_model(args.arch, args.seed, args.capacity_factor)
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
                            if args.cp > 1 else {}),
                         **(dict(ep=args.ep) if args.ep > 1 else {})),
        "log": dict(dir=run_dir, every=1),
        "checkpoint": dict(every=0, resume="none"),
    })
    if not args.reference_only:
        launcher, env = tr.mpirun_launcher(ranks)
        print(f"trainer: {' '.join(launcher + [exe])} --config {cfg_path} (model.arch={args.arch}, "
              f"layout {layout}, runtime.device={args.device}, runtime.dtype={args.dtype}; "
              f"torch: one process, cpu, fp32)")
        tr.run_trainer(exe, cfg_path, os.path.join(tmp, "trainer.log"), env=env, launcher=launcher)
        ours = tr.read_metrics(os.path.join(run_dir, "metrics.jsonl"))

    # The same steps in torch, from the same initial weights.
    loader = tr.WindowLoader(shards, t["seq_len"])
    opt = tr.make_adamw(model, t["lr"], t["weight_decay"], t["beta1"], t["beta2"], t["eps"])
    moe = None  # mixtral: the per-step figures of mixtral_torch.train_step
    if args.arch == "mixtral":
        moe = [mixtral_torch.train_step(model, opt, loader, s, t, record_routing=True)
               for s in range(t["steps"])]
        ref = [(m["loss"], m["lr"], m["grad_norm"]) for m in moe]
    else:
        ref = [tr.train_step(model, opt, loader, s, t) for s in range(t["steps"])]
    boundary = loader.first[1] if len(loader.windows) > 1 else None

    if args.reference_only:
        print(f"torch reference alone ({args.arch}, {t['steps']} steps; config {cfg_path}):")
        print(f"{'step':>4} {'loss':>11} {'grad_norm':>11} {'lr':>10}" +
              (f" {'aux_loss':>11} {'z_loss':>9} {'topk margin':>11} {'cap gap':>9} {'dropped':>7}"
               if moe else ""))
        for s, (loss, lr, gnorm) in enumerate(ref):
            extra = ""
            if moe:
                m = moe[s]
                gap = "-" if m["capacity_gap"] == float("inf") else f"{m['capacity_gap']:.2e}"
                extra = (f" {m['aux_loss']:>11.7f} {m['z_loss']:>9.5f} {m['margin']:>11.2e} {gap:>9}"
                         f" {m['dropped']:>7}")
            print(f"{s:>4} {loss:>11.7f} {gnorm:>11.7f} {lr:>10.4e}{extra}")
        if moe:
            write_routing(os.path.join(tmp, "ref_routing.jsonl"), moe)
        if args.keep:
            print(f"files kept in {tmp}" + (" (the reference's routing: ref_routing.jsonl)" if moe else ""))
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        return 0

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
        if args.arch == "mixtral" and "loss" in first_bad:
            print("  (mixtral: metrics `loss` must be the cross-entropy alone, not the objective "
                  "with the scaled aux and z-losses)")
        if ranks > 1:
            print(f"(one process of the same config may agree: then it is layout {layout}'s "
                  "sharding or collectives; rerun with --dp 1 --fsdp 1 --cp 1 --tp 1 to tell)")

    if moe is not None:
        # Kept with the trainer's files on failure: the reference's side of any flip.
        write_routing(os.path.join(tmp, "ref_routing.jsonl"), moe)
        ok = compare_mixtral(ours, moe, run_dir, loss_rtol, margin_floor, args.capacity_factor,
                             summary) and ok

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
