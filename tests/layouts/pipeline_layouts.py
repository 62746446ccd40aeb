"""The layout matrix's pipeline cases (parallel.pp): the layouts, the
schedule-dependent part of their bytes formula, and the runs against one
rank, resharding across pipelines included. Used by layout_matrix.py, which
passes itself as `lm` (the module whose MODEL its main() set to the family
under test) to the functions that run the trainer.

    python3 tests/layouts/layout_matrix.py --build build --layout pp2_1f1b
    python3 tests/layouts/layout_matrix.py --build build --check reshard_pp

Standard library only.
"""

import os

# Pipeline layouts, on the family's model with PP_LAYERS blocks unless the
# layout names more (the one-rank reference too): name -> Pipe. Each runs
# with PP_MICRO_BATCHES micro-batches per step on each data rank
# (interleaved: multiples of pp).
class Pipe:
    def __init__(self, pp, schedule, dp=1, fsdp=1, tp=1, stage=2, v=1, layers=None,
                 recompute="none", n_layer=None):
        self.pp, self.schedule, self.dp, self.fsdp, self.tp = pp, schedule, dp, fsdp, tp
        self.stage, self.v, self.recompute = stage, v, recompute
        self.n_layer = n_layer or PP_LAYERS
        # blocks per chunk, given (the default split is tests/cpu's to check)
        self.layers = layers or [self.n_layer // (pp * v)] * (pp * v)


PP_LAYERS = 4
PP_LAYOUTS = {
    "pp2_gpipe": Pipe(2, "gpipe"), "pp2_1f1b": Pipe(2, "1f1b"),
    "pp2_interleaved": Pipe(2, "interleaved_1f1b", v=2),
    "pp2_dp2_interleaved": Pipe(2, "interleaved_1f1b", dp=2, v=2),
    "pp2_tp2_interleaved": Pipe(2, "interleaved_1f1b", tp=2, v=2),
    "pp2_fsdp2_stage2_interleaved": Pipe(2, "interleaved_1f1b", fsdp=2, stage=2, v=2),
    "pp2_tp2_recompute_block": Pipe(2, "1f1b", tp=2, recompute="block"),
    "pp2_fsdp2_stage3_interleaved": Pipe(2, "interleaved_1f1b", fsdp=2, stage=3, v=2),
    "pp4_gpipe": Pipe(4, "gpipe"), "pp4_1f1b": Pipe(4, "1f1b"),
    "pp4_interleaved": Pipe(4, "interleaved_1f1b", v=2, n_layer=8),
    "pp2_tp2_gpipe": Pipe(2, "gpipe", tp=2),
    "pp2_dp2_1f1b": Pipe(2, "1f1b", dp=2), "pp2_tp2_1f1b": Pipe(2, "1f1b", tp=2),
    "pp2_fsdp2_stage2_1f1b": Pipe(2, "1f1b", fsdp=2, stage=2),
    "pp2_dp2_gpipe": Pipe(2, "gpipe", dp=2),
    "pp2_fsdp2_stage3_1f1b": Pipe(2, "1f1b", fsdp=2, stage=3),
    "pp2_fsdp2_stage3_gpipe": Pipe(2, "gpipe", fsdp=2, stage=3),
}
PP_MICRO_BATCHES = (1, 4)
# The grad norm of a bf16 pipeline run against the layout without stages:
# looser than BF16_TOL because the models are deeper (pp4_interleaved has 8
# blocks) and the norm sums every block's squares, so ten steps of bf16
# rounding flips move it more than the loss (measured: Llama pp4
# interleaved 2.5e-3 at step 9, its loss within 2e-3 and its fp32 run
# within 1e-5 of one rank).
PP_BF16_NORM_TOL = 5e-3


def rank0_compute_order(pipe, m):
    """Pipeline rank 0's forwards and backwards, (is_forward, chunk), in the
    order of its schedule (trainer/parallelize/pipeline_schedule.cpp)."""
    p, v = pipe.pp, pipe.v
    if pipe.schedule == "gpipe":
        return [(True, 0)] * m + [(False, 0)] * m
    if pipe.schedule == "1f1b":
        w = min(p - 1, m)
        return [(True, 0)] * w + [(True, 0), (False, 0)] * (m - w) + [(False, 0)] * w
    K = m * v  # interleaved_1f1b: groups of p micro-batches sweep the chunks
    w = min((p - 1) * 2 + (v - 1) * p, K)
    f = [(True, (k // p) % v) for k in range(K)]
    b = [(False, v - 1 - (k // p) % v) for k in range(K)]
    order = f[:w]
    for i in range(K - w):
        order += [f[w + i], b[i]]
    return order + b[K - w:]


def stage3_regathers(pipe, m, embed, block):
    """Floats rank 0 gathers again in its backwards at ZeRO-3 beyond one
    gather of each unit per forward, from the rules of the stage-3 slots
    (trainer/sharding/unit_parameters.cpp): a pass gathers what it asks for
    unless it is resident; every forward starts with nothing resident (the
    parameters may have changed); the embedding is released after its
    backward; a chunk's blocks stay resident (at most two, one slot each:
    asserted). Rank 0 holds the embedding (chunk 0) and no head."""
    chunks = [pipe.layers[c * pipe.pp] for c in range(pipe.v)]
    assert sum(chunks) <= 2, "the two block slots would evict each other: not modelled"
    resident, extra = set(), 0
    for forward, c in rank0_compute_order(pipe, m):
        units = [("block", c, i) for i in range(chunks[c])] + ([("embed",)] if c == 0 else [])
        if forward:
            resident = set(units)
            continue
        for u in units:
            if u not in resident:
                extra += embed if u[0] == "embed" else block
                resident.add(u)
        resident.discard(("embed",))
    return extra


def run_pp_layout(lm, runner, name):
    """A pipeline layout against one rank with the same blocks (fp32). In
    bf16 (either dtype) against the same dp x fsdp x tp layout without
    stages (itself checked against one rank above), at the bf16 tolerances
    (grad norms at PP_BF16_NORM_TOL):
    the grad norm is summed in another order over the stages, its clip
    factor differs in the last bits, and bf16 storage turns that into whole
    bf16 steps as it does between any two layouts (GPT-2 stays within 1e-7
    of the layout without stages, Llama's untied head drifts to 1e-3 in 10
    steps). With reduce_dtype=bf16 a tied wte's gradient is also rounded to
    bf16 in two halves (the embedding's on the first stage, the head's on the
    last) before they are summed in fp32."""
    pipe = PP_LAYOUTS[name]
    D = pipe.dp * pipe.fsdp
    world = pipe.pp * D * pipe.tp
    model = {"model.n_layer": pipe.n_layer}
    bf16 = runner.dtype == "bf16" or runner.reduce_dtype == "bf16"
    tag = (" bf16" if runner.dtype == "bf16" else "") + (
        " reduce_dtype=bf16" if runner.reduce_dtype == "bf16" else "")
    fails = []
    # Interleaving needs a multiple of pp: the smallest stands in for 1.
    interleaved = pipe.schedule == "interleaved_1f1b"
    for m in sorted({pipe.pp if interleaved and m % pipe.pp else m for m in PP_MICRO_BATCHES}):
        micro = lm.TRAIN["global_batch"] // (D * m)
        if bf16:
            ref_dir, ref_cfg = runner.config(f"ref_{name}_m{m}", pipe.dp, pipe.fsdp, pipe.tp,
                                             pipe.stage, micro, extra=model)
            runner.run(D * pipe.tp, ref_cfg)
        else:
            ref_dir, ref_cfg = runner.config(f"ref_pp_m{m}", micro=lm.TRAIN["global_batch"] // m,
                                             extra=model)
            runner.run(1, ref_cfg)
        extra = dict(model, **{"parallel.pp": pipe.pp, "parallel.pp_schedule": pipe.schedule,
                               "parallel.pp_virtual_stages": pipe.v,
                               "parallel.pp_layers": pipe.layers,
                               "train.recompute": pipe.recompute})
        label = f"{name}{tag} micro-batches={m}"
        run_dir, cfg = runner.config(name, pipe.dp, pipe.fsdp, pipe.tp, pipe.stage, micro,
                                     extra=extra)
        _, took = runner.run(world, cfg)
        tols = (dict(loss_rtol=lm.BF16_TOL, norm_rtol=PP_BF16_NORM_TOL,
                     param_tol=lm.BF16_PARAM_TOL[lm.MODEL.get("arch", "gpt2")], skip_key_bias=True,
                     rms_tol=lm.BF16_RMS_TOL) if bf16 else {})
        f, worst = lm.compare_runs(label, ref_dir, run_dir, **tols)
        f += lm.check_bytes(label, run_dir, pipe.dp, pipe.fsdp, pipe.tp, pipe.stage, micro,
                         pipe.recompute, runner.dtype, runner.reduce_dtype, pipe)
        f += check_bubble(lm, label, run_dir)
        against = "the same layout without pp" if bf16 else "one rank"
        print(f"{'FAIL' if f else 'ok  '} {label}: {world} ranks, {took:.1f} s, "
              f"max param diff {worst:.1e} against {against}")
        fails += f
    return fails


def check_bubble(lm, label, run_dir):
    """Every step of a pipeline run reports its bubble, a fraction of the step."""
    fails = []
    for step, rec in sorted(lm.read_metrics(os.path.join(run_dir, "metrics.jsonl")).items()):
        b = rec.get("bubble_fraction")
        if b is None or not 0 <= b <= 1 or rec.get("pipeline_wait_ms") is None:
            fails.append(f"{label}: step {step} bubble_fraction {b}, pipeline_wait_ms "
                         f"{rec.get('pipeline_wait_ms')}")
    return fails


def check_reshard_pp(lm, runner):
    """Checkpoints across pipeline layouts (PP_LAYERS blocks): train 5 steps
    at pp=2 x tp=2, resume at fsdp=4 and at pp=4, and from fsdp=4 at
    pp=2 x tp=2; steps 5..9 equal the uninterrupted one-rank run's."""
    fails = []
    model = {"model.n_layer": PP_LAYERS}
    ref_dir, ref_cfg = runner.config("reshard_pp_ref", micro=4, extra=model)
    runner.run(1, ref_cfg)
    # (pp, dp, fsdp, tp)
    pp2_tp2, fsdp4, pp4 = (2, 1, 1, 2), (1, 1, 4, 1), (4, 1, 1, 1)

    def layout(x):
        pp, dp, fsdp, tp = x
        return (pp * dp * fsdp * tp,
                lambda name, extra: runner.config(
                    name, dp, fsdp, tp, 2, micro=4 // (dp * fsdp),
                    extra=dict(model, **{"parallel.pp": pp}, **extra)))
    for a, b in [(pp2_tp2, fsdp4), (pp2_tp2, pp4), (fsdp4, pp2_tp2)]:
        label = "reshard pp={},dp={},fsdp={},tp={} -> pp={},dp={},fsdp={},tp={}".format(*a, *b)
        fails += lm.resume_across(runner, label, ref_dir, layout(a), layout(b))
    return fails
