#!/usr/bin/env python3
"""fp8 layouts (runtime.fp8) train like one fp8 rank.

Each layout runs the layout matrix's small Llama (4 blocks, so pp=2 splits
it) in bf16 with runtime.fp8=<recipe> for 10 steps and is compared with one
process in fp8 that takes the same micro-batches (the same rows per
micro-batch, accumulated): an fp8 scale is computed from the amax of the
micro-batch it scales, so one rank with larger micro-batches would scale
differently and the comparison would measure that, not the layout.

What can differ is summation order: tp and cp ranks reduce their amaxes
(trainer/parallelize/fp8_linear.hpp), so every layout computes one rank's
scales, but a partial sum added in another order can round an activation
to the neighbouring bf16 value, and then, where it sits next to a rounding
boundary, a whole e4m3 step (~6%) away in the next GEMM's operand. The
tolerances below are bf16's widened for that, measured on these runs
(printed on every run: the worst step's loss and grad-norm differences,
the worst parameter and the worst tensor's RMS difference):

    python3 tests/layouts/fp8_layouts.py --build build --layout tp2 --fp8 tensorwise
    python3 tests/layouts/fp8_layouts.py --build build          # every layout, both recipes

Besides: under ZeRO-3 with tensorwise fp8 the weights are gathered as fp8
codes (parallel.fp8_allgather); that run's losses must equal the same
layout gathering fp32 bit for bit, in under 0.8x its ZeRO-3 bytes, and
ZeRO-3 over tp-split weights must match dp2 x tp2 to 1e-6. Every layout's
logged bytes are `trainer plan`'s prediction for it, axis by axis.

Standard library only. Exit status 1 on any mismatch.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import layout_matrix as lm  # noqa: E402  (beside this file)

# name -> (ranks, micro_batch, config overrides); every layout at global
# batch 8, the one-rank reference at the same micro_batch.
FP8_LAYOUTS = {
    "dp2": (2, 4, {"parallel.dp": 2}),
    # Tensorwise: the blocks' fp8 weights gathered as codes (fp8_allgather
    # auto); fp32_gather: the same layout gathering fp32 (check_fp8_gather).
    "fsdp2_stage3": (2, 4, {"parallel.fsdp": 2, "parallel.fsdp_stage": 3}),
    "fsdp2_stage3_fp32_gather": (2, 4, {"parallel.fsdp": 2, "parallel.fsdp_stage": 3,
                                        "parallel.fp8_allgather": "false"}),
    "tp2": (2, 8, {"parallel.tp": 2}),
    # Recomputation reruns q|k|v, the output projection and the up layer,
    # whose amaxes are reduced over tp again (trainer plan counts them).
    "tp2_recompute_block": (2, 8, {"parallel.tp": 2, "train.recompute": "block"}),
    # ZeRO-3 over tp-split weights: each fp8 weight's amax over shards and tp.
    "fsdp2_tp2_stage3": (4, 4, {"parallel.fsdp": 2, "parallel.tp": 2, "parallel.fsdp_stage": 3}),
    "pp2": (2, 2, {"parallel.pp": 2, "parallel.pp_schedule": "1f1b"}),
    "cp2": (2, 8, {"parallel.cp": 2}),
    "dp2_tp2": (4, 4, {"parallel.dp": 2, "parallel.tp": 2}),
}
RECIPES = ("tensorwise", "rowwise")

# Measured (see the module docstring) and written down in docs/PARALLELISM.md
# beside the layout matrix's other tolerances. Worst seen over both recipes
# (2026-12-06, CPU): tp2 loss 1.5e-4, norm 4.7e-3, param 3.2e-3, RMS 6.8e-3;
# cp2 tensorwise loss 4.7e-4, norm 3.1e-2, param 1.8e-2, RMS 4.5e-2;
# dp2_tp2 tensorwise norm 3.1e-2, RMS 4.2e-2; pp2 tensorwise RMS 4.3e-3;
# dp2 and fsdp2_stage3 about 1e-8 (they change no summation an amax or GEMM
# sees). bf16 (--fp8 off) on
# the same cp2 run: RMS 5.4e-3, so fp8 widens bf16's differences ~8x.
FP8_LOSS_TOL = 1.5e-3   # relative, every step's loss and val loss
FP8_NORM_TOL = 5e-2     # relative, every step's grad norm
FP8_PARAM_TOL = 4e-2    # the final parameters, |a - b| / max(1, |b|)
FP8_RMS_TOL = 6e-2      # each final tensor's RMS difference over its RMS


def measure(ref_dir, got_dir):
    """The worst relative differences: loss (and val loss), grad norm,
    parameter, tensor RMS, with where each was."""
    ref = lm.read_metrics(os.path.join(ref_dir, "metrics.jsonl"))
    got = lm.read_metrics(os.path.join(got_dir, "metrics.jsonl"))
    out = {"loss": (0.0, ""), "grad_norm": (0.0, ""), "param": (0.0, ""), "rms": (0.0, "")}
    for step, r in ref.items():
        for key, slot in (("loss", "loss"), ("val_loss", "loss"), ("grad_norm", "grad_norm")):
            if key not in r:
                continue
            g = got.get(step, {}).get(key)
            d = float("inf") if g is None else abs(g - r[key]) / abs(r[key])
            if d > out[slot][0]:
                out[slot] = (d, f"step {step} {key} {g} vs {r[key]}")
    pr = lm.read_safetensors(os.path.join(ref_dir, "model.safetensors"))
    pg = lm.read_safetensors(os.path.join(got_dir, "model.safetensors"))
    for name, ref_vals in pr.items():
        sq_diff = sq_ref = 0.0
        for i, (a, b) in enumerate(zip(pg[name], ref_vals)):
            d = abs(a - b) / max(1.0, abs(b))
            if d > out["param"][0]:
                out["param"] = (d, f"{name}[{i}] {a} vs {b}")
            sq_diff += (a - b) ** 2
            sq_ref += b * b
        rms = (sq_diff / sq_ref) ** 0.5 if sq_ref else 0.0
        if rms > out["rms"][0]:
            out["rms"] = (rms, name)
    return out


def check_same_losses(label, got_dir, want_dir, rtol=1e-6):
    """Two runs that compute the same products (the sharded gradient norm
    sums in its own order): their losses to fp32 rounding, rtol, far
    inside the fp8 tolerances (a missing amax reduction moves them ~1e-3)."""
    a = lm.read_metrics(os.path.join(got_dir, "metrics.jsonl"))
    b = lm.read_metrics(os.path.join(want_dir, "metrics.jsonl"))
    worst, fails = 0.0, []
    for s, r in b.items():
        g = a.get(s, {}).get("loss")
        d = float("inf") if g is None else abs(g - r["loss"]) / abs(r["loss"])
        worst = max(worst, d)
        if d > rtol:
            fails.append(f"{label}: step {s} loss {g} vs {r['loss']} (rel {d:.1e} > {rtol})")
    print(f"{'FAIL' if fails else 'ok  '} {label}: losses within {worst:.1e} (tolerance {rtol})")
    return fails


def check_fp8_gather(gathered_dir, fp32_dir):
    """parallel.fp8_allgather: the same losses as gathering fp32, bit for bit
    (the same codes and scales reach every GEMM), in fewer ZeRO-3 bytes."""
    a = lm.read_metrics(os.path.join(gathered_dir, "metrics.jsonl"))
    b = lm.read_metrics(os.path.join(fp32_dir, "metrics.jsonl"))
    fails = [f"fp8 all-gather: step {s} loss {a[s].get('loss')} vs {r.get('loss')} gathering fp32"
             for s, r in b.items() if a.get(s, {}).get("loss") != r.get("loss")]
    fsdp = [sum(m[s]["comm_bytes"]["fsdp"] for s in m) for m in (a, b)]
    print(f"{'FAIL' if fails or not fsdp[0] < 0.8 * fsdp[1] else 'ok  '} fp8 all-gather: losses "
          f"{'equal' if not fails else 'differ'} to gathering fp32; ZeRO-3 bytes "
          f"{fsdp[0]:.0f} vs {fsdp[1]:.0f} ({fsdp[0] / fsdp[1]:.2f}x)")
    if not fsdp[0] < 0.8 * fsdp[1]:
        fails.append(f"fp8 all-gather moved {fsdp[0]:.0f} fsdp bytes, not under 0.8 x the fp32 "
                     f"gather's {fsdp[1]:.0f}")
    return fails


def check_plan_bytes(runner, label, run_dir, cfg, world, micro, overrides):
    """The bytes `trainer plan` predicts for this layout (an fp8 run plans
    on a GPU's hardware file: h100) against what every step logged, axis by
    axis within BYTES_RTOL: under fp8 all-gather the blocks' codes and fp32
    sides and the amaxes' all-reduce (trainer/sharding/fp8_gather_plan.hpp).
    The pipeline's bytes are the busiest rank's, not rank 0's: not compared."""
    cmd = [runner.exe, "plan", "--config", cfg, "--gpus", str(world), "--json", "-",
           "--hardware", os.path.join(lm.REPO, "configs", "hardware", "h100.yaml")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return [f"{label}: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-500:]}"]
    deg = {k: int(overrides.get(f"parallel.{k}", 1)) for k in ("dp", "fsdp", "tp", "pp", "cp")}
    stage = int(overrides.get("parallel.fsdp_stage", 3))
    # The plan lists both cp_comm modes and the pipeline's schedules: the run's.
    cp_comm = overrides.get("parallel.cp_comm", "allgather")
    schedule = overrides.get("parallel.pp_schedule", "1f1b")
    want = None
    for got in json.loads(p.stdout)[0]["layouts"]:
        if "invalid" in got or got["micro_batch"] != micro:
            continue
        if all(got.get(k, 1) == v for k, v in deg.items()) and \
                (deg["fsdp"] == 1 or got["stage"] == stage) and \
                (deg["cp"] == 1 or got.get("cp_comm") == cp_comm) and \
                (deg["pp"] == 1 or got.get("pp_schedule", schedule) == schedule):
            want = got["comm_bytes"]
            break
    if want is None:
        return [f"{label}: trainer plan lists no layout {deg} stage {stage} mb={micro}"]
    fails, worst = [], 0.0
    for step, rec in sorted(lm.read_metrics(os.path.join(run_dir, "metrics.jsonl")).items()):
        for axis, w in want.items():
            if axis == "pp":
                continue
            g = rec["comm_bytes"].get(axis, 0.0)
            d = abs(g - w) / w if w > 0 else (0.0 if g == 0 else float("inf"))
            worst = max(worst, d)
            if d > lm.BYTES_RTOL:
                fails.append(f"{label}: step {step} {axis} sent {g:.0f} bytes, trainer plan "
                             f"predicts {w:.0f}")
    print(f"{'FAIL' if fails else 'ok  '} {label}: trainer plan's bytes within {worst:.1e} of "
          f"the logged ones (tolerance {lm.BYTES_RTOL})")
    return fails[:5]


def run_fp8_layout(runner, name, recipe, refs):
    world, micro, overrides = FP8_LAYOUTS[name]
    # fp8_check_amax: every amax a producer took in its own pass (norms,
    # activations and their backward) is retaken and must be equal, on
    # every layout: which producer feeds which layer is layout-dependent.
    fp8 = {"runtime.fp8": recipe, "model.n_layer": 4, "runtime.fp8_check_amax": "true"}
    if micro not in refs:
        ref_dir, ref_cfg = runner.config(f"ref_{recipe}_m{micro}", micro=micro, extra=fp8)
        runner.run(1, ref_cfg)
        refs[micro] = ref_dir
    run_dir, cfg = runner.config(f"{name}_{recipe}", micro=micro, extra=dict(fp8, **overrides))
    _, took = runner.run(world, cfg)
    refs[name] = run_dir
    m = measure(refs[micro], run_dir)
    label = f"{name} fp8={recipe}"
    fails = []
    for key, tol in (("loss", FP8_LOSS_TOL), ("grad_norm", FP8_NORM_TOL),
                     ("param", FP8_PARAM_TOL), ("rms", FP8_RMS_TOL)):
        if m[key][0] > tol:
            fails.append(f"{label}: {key} differs by {m[key][0]:.2e} > {tol} ({m[key][1]})")
    print(f"{'FAIL' if fails else 'ok  '} {label}: {world} ranks, {took:.1f} s; worst loss "
          f"{m['loss'][0]:.1e}, grad norm {m['grad_norm'][0]:.1e}, parameter "
          f"{m['param'][0]:.1e}, tensor RMS {m['rms'][0]:.1e}")
    return fails + check_plan_bytes(runner, label, run_dir, cfg, world, micro, overrides)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                    "build"))
    ap.add_argument("--layout", action="append", default=[], choices=sorted(FP8_LAYOUTS))
    ap.add_argument("--fp8", action="append", default=[], choices=RECIPES + ("off",),
                    help="runtime.fp8 of every run (default: both recipes; off: the same "
                         "comparison in bf16, for scale)")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    lm.MODEL = lm.MODELS["llama"]
    work = tempfile.mkdtemp(prefix="gt_fp8_layouts_")
    runner = lm.Runner(args.build, work, "bf16")
    fails = []
    try:
        for recipe in args.fp8 or RECIPES:
            refs = {}
            for name in args.layout or sorted(FP8_LAYOUTS):
                fails += run_fp8_layout(runner, name, recipe, refs)
            if recipe == "tensorwise" and "fsdp2_stage3" in refs and \
                    "fsdp2_stage3_fp32_gather" in refs:
                fails += check_fp8_gather(refs["fsdp2_stage3"], refs["fsdp2_stage3_fp32_gather"])
            # ZeRO-3 with fp8 all-gather over tp-split weights (each amax
            # reduced over the shards and tp) multiplies what dp2 x tp2 does.
            if "fsdp2_tp2_stage3" in refs and "dp2_tp2" in refs:
                fails += check_same_losses(f"fsdp2_tp2_stage3 vs dp2_tp2 fp8={recipe}",
                                           refs["fsdp2_tp2_stage3"], refs["dp2_tp2"])
    finally:
        lm.keep_or_remove(work, args.keep or fails)
    return lm.report(fails)


if __name__ == "__main__":
    sys.exit(main())
