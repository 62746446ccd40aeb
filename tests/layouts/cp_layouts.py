"""The layout matrix's context-parallel cases (parallel.cp): the layouts,
the attention's bytes on the cp axis, and the runs against one rank,
resharding across cp included. Used by layout_matrix.py, which passes
itself as `lm` (the module whose MODEL its main() set to the family under
test) to the functions that run the trainer.

Each layout runs in every variant of parallel.cp_comm (allgather, ring) and
parallel.cp_load_balance (true, false) unless --cp-comm / --cp-load-balance
pick one, each with one and with two (pipelines: one and four) micro-batches
per step, and is compared with one rank at the same global batch and
seq_len: losses to 1e-5, final weights to 1e-4 in fp32; in bf16 at the
layout matrix's bf16 tolerances against the one-rank bf16 run (a cp rank's
attention sums its key blocks in another order, merged in fp32, which can
round an activation to the neighbouring bf16 value, as any layout can).
The bytes on every axis must equal cp_bytes and layout_matrix's formulas,
and (layouts without a pipeline) `trainer plan`'s prediction for the same
layout: its comm_bytes, under the same keys, are the planner's formulas
(trainer/plan/step_model.hpp cp_bytes_per_step for cp), so the trainer, this
file's cp_bytes and the planner are held to one another (the CPU plan for
fp32 runs, the H100's, which is the bf16 model, for --dtype bf16).

    python3 tests/layouts/layout_matrix.py --build build --layout cp2_tp2
    python3 tests/layouts/layout_matrix.py --build build --layout cp2 --cp-comm ring \\
        --cp-load-balance false
    python3 tests/layouts/layout_matrix.py --build build --check reshard_cp

Standard library only.
"""

import json
import os
import subprocess


class Ctx:
    """A context-parallel layout: degree, parallel.cp_comm, load balancing."""

    def __init__(self, cp, comm, load_balance):
        self.cp, self.comm, self.load_balance = cp, comm, load_balance

    def overrides(self):
        return {"parallel.cp": self.cp, "parallel.cp_comm": self.comm,
                "parallel.cp_load_balance": self.load_balance}


class CpLayout:
    """name -> the other degrees (dp, fsdp, tp, pp), the ZeRO stage, cp."""

    def __init__(self, cp, dp=1, fsdp=1, tp=1, pp=1, stage=3, recompute="none"):
        self.cp, self.dp, self.fsdp, self.tp, self.pp = cp, dp, fsdp, tp, pp
        self.stage, self.recompute = stage, recompute

    def world(self):
        return self.cp * self.dp * self.fsdp * self.tp * self.pp


CP_LAYOUTS = {
    "cp2": CpLayout(2), "cp4": CpLayout(4),
    "cp2_dp2": CpLayout(2, dp=2), "cp2_tp2": CpLayout(2, tp=2),
    "cp2_fsdp2": CpLayout(2, fsdp=2, stage=3), "cp2_pp2": CpLayout(2, pp=2),
    # Beyond the required matrix: recomputation (the recomputed block's
    # attention gathers again, and its backward keeps that gather).
    "cp2_tp2_recompute_block": CpLayout(2, tp=2, recompute="block"),
}
CP_COMMS = ("allgather", "ring")
CP_LOAD_BALANCE = (True, False)
# The RMS bound on each final tensor with parallel.reduce_dtype=bf16 (the
# element bound stays the matrix's). Each cp rank's gradient is a partial
# sum over its positions of the same rows, rounded to bf16 before the sum
# (as dp ranks' are over their rows), and a small bias vector near zero
# carries that rounding as a large share of its own size (measured, GPT-2:
# cp4's h.2.ln_2.bias 3.3e-2 of its RMS, cp2 x fsdp2's h.0.mlp.c_proj.bias
# 2.1e-2, every element within 5.5e-3; the same runs in fp32 are within
# 6e-6 of one rank and with bf16 storage within the matrix's bounds).
CP_REDUCE_BF16_RMS_TOL = 5e-2


def cp_bytes(lm, ctx, tp, L, R, A, recompute, dtype):
    """Bytes one rank sends per step on the cp axis
    (trainer/parallelize/context_parallel.hpp), over L blocks, A micro-batches
    of R rows per rank (T / cp of each sequence). A rank's packed keys and
    values are n = R * 2 * KV hs / tp elements, in the activations' dtype;
    their gradients fp32.
      allgather  per layer: each gather (cp-1) n, forward and backward, but
                 the backward keeps the gather its own forward just made (the
                 last block's; with recompute=block every block's, rerun just
                 before): 2L - 1 gathers (2L with block); one fp32
                 reduce-scatter (cp-1) n per layer.
      ring       per layer: (cp-1) sends of n forward (again in a recomputed
                 forward), and in backward (cp-1) of n beside cp fp32 sends
                 of the dK|dV partial sums (the last brings each its own).
    Plus the step's loss averaged over the sequence: an 8-byte all-reduce."""
    cp = ctx.cp
    hs = lm.MODEL["n_embd"] // lm.MODEL["n_head"]
    kv_heads = lm.MODEL.get("n_kv_head", lm.MODEL["n_head"])
    n = R * 2 * kv_heads * hs // tp
    act = 2 if dtype == "bf16" else 4
    forwards = 2 * L if recompute == "block" else L
    if ctx.comm == "allgather":
        gathers = 2 * L if recompute == "block" else 2 * L - 1
        per_micro = gathers * (cp - 1) * n * act + L * (cp - 1) * n * 4
    else:
        per_micro = forwards * (cp - 1) * n * act + L * ((cp - 1) * n * act + cp * n * 4)
    return A * per_micro + 2 * (cp - 1) / cp * 8


def plan_bytes(lm, runner, cfg, lay, ctx, micro):
    """The comm_bytes `trainer plan` predicts for this layout of `cfg`."""
    hw = "h100" if runner.dtype == "bf16" else "cpu_reference"
    cmd = [runner.exe, "plan", "--config", cfg, "--gpus", str(lay.world()), "--json", "-",
           "--hardware", os.path.join(lm.REPO, "configs", "hardware", hw + ".yaml")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}"
                         f"{p.stderr[-2000:]}")
    for got in json.loads(p.stdout)[0]["layouts"]:
        if "invalid" in got:
            continue
        if ((got["dp"], got["fsdp"], got["tp"], got.get("pp", 1), got.get("cp", 1),
             got.get("cp_comm"), got["micro_batch"]) ==
                (lay.dp, lay.fsdp, lay.tp, lay.pp, lay.cp, ctx.comm, micro) and
                (lay.fsdp == 1 or got["stage"] == lay.stage)):
            return got["comm_bytes"]
    raise SystemExit(f"FAIL: trainer plan lists no layout {vars(lay)} {ctx.comm} mb={micro}")


def check_plan_bytes(lm, runner, label, run_dir, cfg, lay, ctx, micro):
    """The planner's bytes for the layout against the trainer's logged ones
    and cp_bytes (the same formula written twice, once in C++)."""
    fails = []
    want = plan_bytes(lm, runner, cfg, lay, ctx, micro)
    R = micro * lm.TRAIN["seq_len"] // lay.cp
    A = lm.TRAIN["global_batch"] // (micro * lay.dp * lay.fsdp)
    formula = cp_bytes(lm, ctx, lay.tp, lm.MODEL["n_layer"], R, A, lay.recompute, runner.dtype)
    if abs(want["cp"] - formula) > lm.BYTES_RTOL * formula:
        fails.append(f"{label}: trainer plan's cp bytes {want['cp']:.0f}, cp_bytes {formula:.0f}")
    for step, rec in sorted(lm.read_metrics(os.path.join(run_dir, "metrics.jsonl")).items()):
        for axis, w in want.items():
            if axis == "pp":
                continue
            g = rec["comm_bytes"].get(axis, 0.0)
            if (w == 0 and g != 0) or (w > 0 and abs(g - w) > lm.BYTES_RTOL * w):
                fails.append(f"{label}: step {step} {axis} sent {g:.0f} bytes, "
                             f"trainer plan predicts {w:.0f}")
    return fails


def variants(args):
    comms = [args.cp_comm] if args.cp_comm else list(CP_COMMS)
    balance = ([args.cp_load_balance == "true"] if args.cp_load_balance
               else list(CP_LOAD_BALANCE))
    return [(c, b) for c in comms for b in balance]


def run_cp_layout(lm, runner, name, args):
    """A context-parallel layout against one rank (module docstring)."""
    lay = CP_LAYOUTS[name]
    D = lay.dp * lay.fsdp
    bf16 = runner.dtype == "bf16" or runner.reduce_dtype == "bf16"
    tag = (" bf16" if runner.dtype == "bf16" else "") + (
        " reduce_dtype=bf16" if runner.reduce_dtype == "bf16" else "")
    arch = lm.MODEL.get("arch", "gpt2")
    pipe = None
    model = {}
    if lay.pp > 1:
        pipe = lm.pipeline_layouts.Pipe(lay.pp, "1f1b", dp=lay.dp, fsdp=lay.fsdp, tp=lay.tp,
                                        stage=lay.stage)
        model = {"model.n_layer": pipe.n_layer}
    rms_tol = CP_REDUCE_BF16_RMS_TOL if runner.reduce_dtype == "bf16" else lm.BF16_RMS_TOL
    tols = (dict(loss_rtol=lm.BF16_TOL,
                 norm_rtol=lm.pipeline_layouts.PP_BF16_NORM_TOL if pipe else lm.BF16_TOL,
                 param_tol=lm.BF16_PARAM_TOL[arch], skip_key_bias=True, rms_tol=rms_tol)
            if bf16 else {})
    per_step = (1, 4) if pipe else (1, 2)  # micro-batches per step on each data rank
    fails = []
    refs = {}
    for m in per_step:
        micro = lm.TRAIN["global_batch"] // (D * m)
        ref_dir, ref_cfg = runner.config(f"ref_cp_m{m}", micro=lm.TRAIN["global_batch"] // m,
                                         extra=model)
        runner.run(1, ref_cfg)
        refs[m] = ref_dir
    for comm, balance in variants(args):
        ctx = Ctx(lay.cp, comm, balance)
        for m in per_step:
            micro = lm.TRAIN["global_batch"] // (D * m)
            extra = dict(model, **ctx.overrides(), **{"train.recompute": lay.recompute})
            if pipe:
                extra.update({"parallel.pp": lay.pp, "parallel.pp_schedule": "1f1b"})
            label = (f"{name}{tag} cp_comm={comm} load_balance={str(balance).lower()} "
                     f"micro-batches={m}")
            run_dir, cfg = runner.config(name, lay.dp, lay.fsdp, lay.tp, lay.stage, micro,
                                         extra=extra)
            _, took = runner.run(lay.world(), cfg)
            f, worst = lm.compare_runs(label, refs[m], run_dir, **tols)
            f += lm.check_bytes(label, run_dir, lay.dp, lay.fsdp, lay.tp, lay.stage, micro,
                                lay.recompute, runner.dtype, runner.reduce_dtype, pipe, ctx)
            if not pipe:  # the plan's pipeline bytes are its busiest rank's, not rank 0's
                f += check_plan_bytes(lm, runner, label, run_dir, cfg, lay, ctx, micro)
            print(f"{'FAIL' if f else 'ok  '} {label}: {lay.world()} ranks, {took:.1f} s, "
                  f"max param diff {worst:.1e}")
            fails += f
    return fails


def check_reshard_cp(lm, runner):
    """Checkpoints across context-parallel layouts: train 5 steps at cp2 x
    tp2, resume at fsdp4, train from there at cp4, and from cp4 back at cp2 x
    tp2 (ring); steps 5..9 of each resumed run equal the uninterrupted
    one-rank run's."""
    fails = []
    ref_dir, ref_cfg = runner.config("reshard_cp_ref", micro=4)
    runner.run(1, ref_cfg)
    # (dp, fsdp, tp, cp, cp_comm)
    cp2_tp2, fsdp4, cp4 = (1, 1, 2, 2, "allgather"), (1, 4, 1, 1, "allgather"), (1, 1, 1, 4, "ring")
    cp2_tp2_ring = (1, 1, 2, 2, "ring")

    def layout(x):
        dp, fsdp, tp, cp, comm = x
        return (dp * fsdp * tp * cp,
                lambda name, extra: runner.config(
                    name, dp, fsdp, tp, 3, micro=4 // (dp * fsdp),
                    extra=dict(Ctx(cp, comm, True).overrides(), **extra)))
    for a, b in [(cp2_tp2, fsdp4), (fsdp4, cp4), (cp4, cp2_tp2_ring)]:
        label = "reshard dp={},fsdp={},tp={},cp={} ({}) -> dp={},fsdp={},tp={},cp={} ({})".format(
            *a, *b)
        fails += lm.resume_across(runner, label, ref_dir, layout(a), layout(b))
    return fails
