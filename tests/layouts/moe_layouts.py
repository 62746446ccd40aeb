"""The layout matrix's Mixtral cases (model.arch=mixtral): expert
parallelism (parallel.ep) and pipeline stages (parallel.pp, whose stages
pass each micro-batch's router statistics along), the layouts and the runs
against one rank. Used by layout_matrix.py with --arch mixtral, which passes
itself as `lm`.

Each layout runs with one and with two micro-batches per step and is
compared with one rank at the same global batch and micro-batch (the aux
loss pools a micro-batch, so one rank accumulates the layout's micro-batches): losses, aux losses and
grad norms to 1e-5, final weights to 1e-4 in fp32; in bf16 at the layout
matrix's bf16 tolerances against the one-rank bf16 run (a pipeline against
the same layout without stages, as pipeline_layouts.py). The bytes, against
the same layout without ep (run beside it): ep is folded out of the data
ranks, so cp and pp carry exactly what they carry there; each rank stores
only its experts, whose gradients are reduced over the expert-data-parallel
group (edp) instead of the data axes, so those carry less, as does tp (it
sums the gradients of this rank's experts only), and edp carries bytes
exactly when it has two ranks; and the ep axis, whose
volume depends on where the router sends each token, at most the bound a
dropless layer can reach: per block and micro-batch, the rows out and back
in the forward and again in the backward, 4 R k C bytes-per-element (R =
this rank's rows, k experts per token, C the width), plus the counts. A
rank that sends every row to itself would send nothing, so the bound is
checked, not equality.

    python3 tests/layouts/layout_matrix.py --build build --arch mixtral --layout dp2_ep2
    python3 tests/layouts/layout_matrix.py --build build --arch mixtral --layout dp2_ep2 \\
        --dtype bf16
    python3 tests/layouts/layout_matrix.py --build build --arch mixtral --layout dp2_ep2_pp2

Standard library only.
"""


# Grad norms with parallel.reduce_dtype=bf16: the mixture's gradients summed
# in bf16 drift from one rank's by 2.2e-3 at step 9 of dp2 with or without
# ep alike (measured), past the dense families' 2e-3.
REDUCE_BF16_NORM_TOL = 5e-3


class EpLayout:
    """name -> ep and the other degrees (dp, fsdp, tp), the ZeRO stage, and
    pipeline stages (pp, their schedule and chunks per rank v)."""

    def __init__(self, ep, dp=1, fsdp=1, tp=1, stage=3, pp=1, schedule="1f1b", v=1, bias=0.0,
                 cp=1, capacity=0.0):
        self.ep, self.dp, self.fsdp, self.tp, self.stage = ep, dp, fsdp, tp, stage
        self.pp, self.schedule, self.v, self.bias = pp, schedule, v, bias
        self.cp, self.capacity = cp, capacity

    def world(self):
        return self.dp * self.fsdp * self.tp * self.pp * self.cp

    def model(self):
        """The model keys of the run and of its references (pp: four blocks,
        so every chunk of pp 2 x v 2 has one; aux-loss-free balancing; a
        capacity factor)."""
        keys = {"model.n_layer": PP_LAYERS} if self.pp > 1 else {}
        if self.bias:
            keys["model.router_bias_update_rate"] = self.bias
        if self.capacity:
            keys["model.capacity_factor"] = self.capacity
        return keys

    def extra(self):
        """The run's keys beyond the runner's dp/fsdp/tp/stage/micro."""
        keys = self.model()
        if self.cp > 1:
            keys["parallel.cp"] = self.cp
        if self.pp > 1:
            keys.update({"parallel.pp": self.pp, "parallel.pp_schedule": self.schedule,
                         "parallel.pp_virtual_stages": self.v})
        return keys


# Pipeline stages pass each micro-batch's router statistics along with the
# residual stream (the aux loss pools every layer), so they are checked with
# ep 1 too: the stages alone, and the stages under expert parallelism.
PP_LAYERS = 4
# A rate that moves the selection within the runs' ten steps (the router's
# probabilities over 4 experts differ by a few hundredths).
BIAS_RATE = 0.01
# Each expert takes at most capacity x k x N / E of a micro-batch's N tokens:
# at 1.0 an expert above the mean load drops its lowest-weight slots.
CAPACITY = 1.0
EP_LAYOUTS = {
    "dp2_ep2": EpLayout(2, dp=2), "dp4_ep4": EpLayout(4, dp=4), "dp4_ep2": EpLayout(2, dp=4),
    "dp2_ep2_tp2": EpLayout(2, dp=2, tp=2), "fsdp2_ep2_stage3": EpLayout(2, fsdp=2, stage=3),
    "dp2_fsdp2_ep4_stage2": EpLayout(4, dp=2, fsdp=2, stage=2),
    # Experts sharded over an expert-data-parallel group of two (ZeRO-3 over
    # edp), and HSDP's replicas with the experts sharded over all of edp.
    "fsdp4_ep2_stage3": EpLayout(2, fsdp=4, stage=3),
    "fsdp4_ep2_stage1": EpLayout(2, fsdp=4, stage=1),
    "dp2_fsdp2_ep2_stage2": EpLayout(2, dp=2, fsdp=2, stage=2),
    "dp2_ep2_cp2": EpLayout(2, dp=2, cp=2),
    "pp2_1f1b": EpLayout(1, pp=2), "pp2_interleaved": EpLayout(1, pp=2,
                                                              schedule="interleaved_1f1b", v=2),
    "dp2_ep2_pp2": EpLayout(2, dp=2, pp=2),
    "fsdp2_ep2_pp2_stage3_gpipe": EpLayout(2, fsdp=2, stage=3, pp=2, schedule="gpipe"),
    # Aux-loss-free balancing (model.router_bias_update_rate): every rank
    # must move its biases as one rank does, from the global batch's counts
    # (summed over the data ranks, pooled over tp, per stage under pp).
    "dp2_ep2_tp2_bias": EpLayout(2, dp=2, tp=2, bias=BIAS_RATE),
    "dp2_ep2_pp2_bias": EpLayout(2, dp=2, pp=2, bias=BIAS_RATE),
    # A capacity over a micro-batch split across tp and cp ranks: the same
    # slots dropped as on one rank (dropped_tokens equal, and some dropped).
    "tp2_capacity": EpLayout(1, tp=2, capacity=CAPACITY),
    "cp2_capacity": EpLayout(1, cp=2, capacity=CAPACITY),
    "cp2_tp2_capacity": EpLayout(1, cp=2, tp=2, capacity=CAPACITY),
    "dp2_ep2_tp2_capacity": EpLayout(2, dp=2, tp=2, capacity=CAPACITY),
}


def ep_bytes_bound(lm, lay, micro, micro_batches, dtype):
    """The most bytes one rank can send on the ep axis in a step."""
    m = lm.MODEL
    rows = micro * lm.TRAIN["seq_len"] // lay.tp
    elem = 2 if dtype == "bf16" else 4
    per_block = 4 * rows * m["experts_per_token"] * m["n_embd"] * elem + 4 * m["n_experts"]
    # rank 0 (the first stage) runs its share of the blocks
    blocks = m["n_layer"] if lay.pp == 1 else -(-PP_LAYERS // lay.pp)
    return blocks * micro_batches * per_block


def run_ep_layout(lm, runner, name):
    """An expert-parallel layout against one rank (module docstring)."""
    lay = EP_LAYOUTS[name]
    D = lay.dp * lay.fsdp
    bf16 = runner.dtype == "bf16" or runner.reduce_dtype == "bf16"
    tag = (" bf16" if runner.dtype == "bf16" else "") + (
        " reduce_dtype=bf16" if runner.reduce_dtype == "bf16" else "")
    tols = (dict(loss_rtol=lm.BF16_TOL,
                 norm_rtol=REDUCE_BF16_NORM_TOL if runner.reduce_dtype == "bf16" else lm.BF16_TOL,
                 param_tol=lm.BF16_PARAM_TOL["mixtral"], skip_key_bias=True,
                 rms_tol=lm.BF16_RMS_TOL)
            if bf16 else {})
    aux_tol = tols.get("loss_rtol", lm.LOSS_RTOL)
    fails = []
    model = lay.model()
    # micro-batches per step on each data rank (interleaving needs a multiple of pp)
    for m in (2,) if lay.schedule == "interleaved_1f1b" else (1, 2):
        micro = lm.TRAIN["global_batch"] // (D * m)
        # One rank with the layout's micro-batches, accumulated: the aux loss
        # pools each micro-batch's rows (transformers' definition), so the
        # one-rank run must see the same micro-batches, in the same order.
        if bf16 and lay.pp > 1:
            # bf16 pipelines against the same layout without stages (as
            # pipeline_layouts.py): what the stages change, apart from the
            # data ranks' bf16 sums, which the layouts without pp check.
            ref_dir, ref_cfg = runner.config(f"ref_{name}_without_pp_micro{micro}", lay.dp,
                                             lay.fsdp, lay.tp, lay.stage, micro,
                                             extra=dict(model, **{"parallel.ep": lay.ep}))
            runner.run(lay.world() // lay.pp, ref_cfg)
        else:
            ref_dir, ref_cfg = runner.config(f"ref_ep_micro{micro}", micro=micro, extra=model)
            runner.run(1, ref_cfg)
        label = f"{name}{tag} micro-batches={m}"
        run_dir, cfg = runner.config(name, lay.dp, lay.fsdp, lay.tp, lay.stage, micro,
                                     extra=dict(lay.extra(), **{"parallel.ep": lay.ep}))
        _, took = runner.run(lay.world(), cfg)
        f, worst = lm.compare_runs(label, ref_dir, run_dir, **tols)
        ref = lm.read_metrics(lm.os.path.join(ref_dir, "metrics.jsonl"))
        got = lm.read_metrics(lm.os.path.join(run_dir, "metrics.jsonl"))
        for step, rec in got.items():
            a, b = rec.get("aux_loss"), ref[step]["aux_loss"]
            if a is None or abs(a - b) > aux_tol * abs(b):
                f.append(f"{label}: step {step} aux_loss {a} vs the reference's {b}")
            if lay.capacity and rec.get("dropped_tokens") != ref[step]["dropped_tokens"]:
                f.append(f"{label}: step {step} dropped_tokens {rec.get('dropped_tokens')} vs "
                         f"the reference's {ref[step]['dropped_tokens']}")
        if lay.capacity and not any(r["dropped_tokens"] > 0 for r in ref.values()):
            f.append(f"{label}: the reference dropped nothing: the capacity is not exercised")
        if lay.capacity:  # the step's training forwards only, not the evaluation's
            quiet_dir, quiet_cfg = runner.config(
                f"{name}_no_eval", lay.dp, lay.fsdp, lay.tp, lay.stage, micro,
                extra=dict(lay.extra(), **{"parallel.ep": lay.ep, "train.eval_every": 0}))
            runner.run(lay.world(), quiet_cfg)
            quiet = lm.read_metrics(lm.os.path.join(quiet_dir, "metrics.jsonl"))
            for step, rec in quiet.items():
                if rec["dropped_tokens"] != got[step]["dropped_tokens"]:
                    f.append(f"{label}: step {step} dropped_tokens {got[step]['dropped_tokens']} "
                             f"with evaluations, {rec['dropped_tokens']} without")
        if lay.ep > 1:
            f += check_ep_bytes(lm, runner, name, lay, micro, m, label, got)
        print(f"{'FAIL' if f else 'ok  '} {label}: {lay.world()} ranks, {took:.1f} s, "
              f"max param diff {worst:.1e}")
        fails += f
    return fails


# The axes expert parallelism's storage moves bytes off: the data axes the
# gradients are reduced and the state sharded over (data_parallel_groups.hpp),
# and tp, which sums the experts' gradients over its ranks (each rank routes
# its own rows), now only of this rank's experts.
FEWER_AXES = ("dp", "fsdp", "dp_cp", "fsdp_cp", "tp")


def edp_size(lay):
    """The expert-data-parallel group: the ranks holding the same experts."""
    return lay.dp * lay.fsdp // lay.ep * lay.cp


def check_ep_bytes(lm, runner, name, lay, micro, m, label, got):
    """Against the same layout without ep (run beside it): cp and pp carry
    the same bytes; the data axes and tp less, the experts' reductions having
    moved to edp (which carries bytes exactly when it has two ranks or more)
    and tp summing only this rank's experts; ep at most the dropless bound
    (module docstring)."""
    f = []
    base_dir, base_cfg = runner.config(f"{name}_without_ep", lay.dp, lay.fsdp, lay.tp,
                                       lay.stage, micro, extra=lay.extra())
    runner.run(lay.world(), base_cfg)
    base = lm.read_metrics(lm.os.path.join(base_dir, "metrics.jsonl"))
    bound = ep_bytes_bound(lm, lay, micro, m, runner.dtype)
    for step, rec in got.items():
        sent = rec["comm_bytes"]
        for axis, want in base[step]["comm_bytes"].items():
            have = sent.get(axis)
            if axis in FEWER_AXES:
                if want > 0 and not (have is not None and have < want):
                    f.append(f"{label}: step {step} {axis} sent {have} bytes, expected fewer "
                             f"than the {want} without ep (each rank reduces its experts only)")
            elif have != want:
                f.append(f"{label}: step {step} {axis} sent {have} bytes, {want} without ep")
        edp = sent.get("edp")
        if edp is None or (edp > 0) != (edp_size(lay) > 1):
            f.append(f"{label}: step {step} edp sent {edp} bytes over {edp_size(lay)} "
                     f"rank(s): expected bytes exactly when it has two ranks or more")
        ep = sent.get("ep")
        if ep is None or not 0 < ep <= bound:
            f.append(f"{label}: step {step} ep sent {ep} bytes, expected (0, {bound}]")
    return f


def check_reshard_ep(lm, runner):
    """Checkpoints across expert-parallel and pipeline layouts (PP_LAYERS
    blocks, micro-batches of 2 rows everywhere, so each pools the same rows'
    router statistics; aux-loss-free balancing on, so the routers' biases
    must come back from the checkpoint too): train 5 steps at one layout,
    resume at another; steps 5..9 equal the uninterrupted one-rank run's."""
    fails = []
    model = {"model.n_layer": PP_LAYERS, "model.router_bias_update_rate": BIAS_RATE}
    ref_dir, ref_cfg = runner.config("reshard_ep_ref", micro=2, extra=model)
    runner.run(1, ref_cfg)

    def layout(name):
        lay = EP_LAYOUTS[name]
        return (lay.world(),
                lambda run, extra: runner.config(
                    run, lay.dp, lay.fsdp, lay.tp, lay.stage, micro=2,
                    extra=dict(model, **lay.extra(), **{"parallel.ep": lay.ep}, **extra)))
    for a, b in [("dp2_ep2_pp2", "dp4_ep4"), ("dp4_ep2", "pp2_1f1b"),
                 ("fsdp2_ep2_stage3", "dp2_ep2_tp2")]:
        fails += lm.resume_across(runner, f"reshard {a} -> {b}", ref_dir, layout(a), layout(b))
    return fails
