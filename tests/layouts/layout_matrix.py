#!/usr/bin/env python3
"""Every parallel layout trains like one rank, and moves the bytes it should.

For each layout (dp x fsdp x tp, FSDP stage, with and without gradient
accumulation, with tp_overlap on and off) this runs build/trainer under
`mpirun --oversubscribe` for 10 steps on a small GPT-2 (or, with --arch
llama, a small Llama) and compares with one process on the same global batch:
  * every step's loss (and the val loss) to 1e-5 relative,
  * the final parameters (model.safetensors) to 1e-4,
  * the bytes each rank sent per step on each mesh axis (metrics.jsonl
    comm_bytes) to the ring formula of that layout, within 1%.
With --dtype bf16 (runtime.dtype=bf16: bf16 activation storage, fp32 math)
each layout (with and without gradient accumulation) is
compared with the one-rank bf16 run, losses and grad norms at BF16_TOL: a
different summation order in fp32 can round an activation to the
neighbouring bf16 value, so layouts agree to bf16's precision, not fp32's.
The final parameters agree to BF16_PARAM_TOL: a weight whose gradient is
near zero takes AdamW steps of about lr whose sign that rounding can flip
(measured: 3e-3 after 10 steps at lr 3e-3, each tensor's RMS difference
2-3e-3 of its norm, about one bf16 step), and the key biases, which the loss
does not depend on at all, are left out (key_bias).
Llama's untied head is looser (2e-2): its rows take gradient only through
the softmax, small sums whose rounding flips AdamW's sign more often than
GPT-2's tied wte, which the embedding's gradient joins (measured: 1.26e-2
worst, at lm_head, over the 14 layouts with reduce_dtype bf16). Every bf16
comparison also bounds each tensor as a whole: its RMS difference within
BF16_RMS_TOL of its RMS (measured: 1.5e-2 worst, GPT-2's small bias
vectors; 1.2e-2 for Llama), which an op or layout error exceeds by far.
The bytes formula counts the all-gathers that move bf16 activations at 2
bytes an element.
With --reduce-dtype bf16 (parallel.reduce_dtype=bf16, in every run: a no-op
at one rank) the gradients are summed over dp and fsdp in bf16: each
rank's contribution and each partial sum rounded to bf16, half the bytes on
those axes. The layouts then agree with one rank at the bf16 tolerances
above (the gradients carry bf16 rounding, AdamW normalises it into
lr-sized steps), and the bytes formula counts those reductions at 2 bytes.
Other checks, each its own --check: resharding a checkpoint between layouts,
a 6-head GPT-2 with a 256-token vocabulary at tp=3 resuming at tp=2 and 1
(tp3_vocab: the vocabulary pads to 128 x tp), and a rank that fails or is
killed ending the whole job quickly. The
pipeline layouts (pp*) and their resharding (--check reshard_pp) are in
pipeline_layouts.py beside this file, the context-parallel ones (cp*,
--check reshard_cp) in cp_layouts.py, the expert-parallel ones (*_ep*, with
--arch mixtral only) in moe_layouts.py.

    python3 tests/layouts/layout_matrix.py --build build --layout dp2
    python3 tests/layouts/layout_matrix.py --build build --layout dp2 --dtype bf16
    python3 tests/layouts/layout_matrix.py --build build --layout dp2 --reduce-dtype bf16
    python3 tests/layouts/layout_matrix.py --build build --check reshard
    python3 tests/layouts/layout_matrix.py --build build --arch llama --layout tp2
    python3 tests/layouts/layout_matrix.py --list

Standard library only (CI has no numpy). Exit status 1 on any mismatch.
"""

import argparse
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import prepare_data  # noqa: E402  (pure standard library)
import cp_layouts  # noqa: E402  (tests/layouts/, beside this file)
import moe_layouts  # noqa: E402  (tests/layouts/, beside this file)
import pipeline_layouts  # noqa: E402  (tests/layouts/, beside this file)

# The model of every run, per family (--arch). The Llama has grouped-query
# attention (8 query heads over 4 key/value heads, so tp = 4 still splits the
# key/value heads), an untied head and an MLP width every tp here divides.
MODELS = {
    "gpt2": dict(n_layer=3, n_head=4, n_embd=32, vocab_size=256, block_size=16),
    "llama": dict(arch="llama", n_layer=3, n_head=8, n_kv_head=4, n_embd=32, ffn_hidden=64,
                  vocab_size=256, block_size=16, rope_theta=10000.0, tie_embeddings=False),
    # The Llama's attention with 4 experts of width 32, 2 per token
    # (tests/layout_matrix_models.hpp's matrix_mixtral): its layouts are the
    # expert-parallel ones, moe_layouts.py.
    "mixtral": dict(arch="mixtral", n_layer=3, n_head=8, n_kv_head=4, n_embd=32, ffn_hidden=32,
                    n_experts=4, experts_per_token=2, router_aux_loss_coef=0.02,
                    vocab_size=256, block_size=16, rope_theta=10000.0, tie_embeddings=False),
}
MODEL = MODELS["gpt2"]  # main() sets the family's
TRAIN = dict(seq_len=16, global_batch=8, steps=10, lr=3e-3, lr_schedule="cosine",
             warmup_steps=2, min_lr=3e-4, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8,
             grad_clip=1.0, seed=7, eval_every=5, eval_batches=1, max_skipped=5)

# name: (dp, fsdp, tp, fsdp_stage[, train.recompute])
LAYOUTS = {
    "dp2": (2, 1, 1, 3), "dp4": (4, 1, 1, 3),
    "fsdp2_stage1": (1, 2, 1, 1), "fsdp2_stage2": (1, 2, 1, 2), "fsdp2_stage3": (1, 2, 1, 3),
    "fsdp4_stage3": (1, 4, 1, 3),
    "tp2": (1, 1, 2, 3), "tp4": (1, 1, 4, 3),
    "dp2_tp2": (2, 1, 2, 3), "fsdp2_tp2": (1, 2, 2, 3), "dp2_fsdp2": (2, 2, 1, 3),
    # Beyond the required matrix: the other stages under HSDP and under tp.
    "dp2_fsdp2_stage1": (2, 2, 1, 1), "fsdp2_tp2_stage2": (1, 2, 2, 2),
    # Activation recomputation under tp: the recomputed block repeats its
    # tp collectives inside backward (with FSDP: tests/mpi/test_recompute_mpi.cpp).
    "tp2_recompute_block": (1, 1, 2, 3, "block"),
}

LOSS_RTOL = 1e-5
PARAM_TOL = 1e-4
BF16_TOL = 2e-3        # losses and grad norms
BF16_PARAM_TOL = {"gpt2": 1e-2, "llama": 2e-2, "mixtral": 2e-2}  # final parameters (module docstring)
BF16_RMS_TOL = 2e-2    # each final tensor's RMS difference over its RMS
BYTES_RTOL = 0.01


def yaml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    if isinstance(v, str):  # plain scalars: the config reads enums unquoted
        return v if re.fullmatch(r"[A-Za-z0-9_./*-]+", v) else json.dumps(v)
    return repr(v)


def write_config(path, sections):
    with open(path, "w") as f:
        for section, keys in sections.items():
            f.write(f"{section}:\n")
            for k, v in keys.items():
                f.write(f"  {k}: {yaml_value(v)}\n")


def read_safetensors(path):
    """name -> list of floats (F32 only)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = struct.unpack(f"<{(e - b) // 4}f", data[b:e])
    return out


def keep_or_remove(work, keep):
    """A script's run directories: kept (and said where) or removed."""
    if keep:
        print(f"run directories kept in {work}")
    else:
        subprocess.run(["rm", "-rf", work])


def report(fails):
    """Each failure on stderr; the exit status."""
    for f in fails:
        print(f, file=sys.stderr)
    return 1 if fails else 0


def read_metrics(path):
    with open(path) as f:
        return {r["step"]: r for r in (json.loads(line) for line in f if line.strip())}


class Runner:
    def __init__(self, build, work, dtype="fp32", reduce_dtype="fp32"):
        self.dtype = dtype
        self.reduce_dtype = reduce_dtype
        self.exe = os.path.join(os.path.abspath(build), "trainer")
        if not os.path.exists(self.exe):
            sys.exit(f"error: {self.exe} not found (build first)")
        self.work = work
        self.data = os.path.join(work, "data")
        os.makedirs(self.data, exist_ok=True)
        rng = random.Random(1234)
        # A learnable stream (repeated phrases with noise) so the loss moves.
        words = [[rng.randrange(256) for _ in range(rng.randrange(3, 9))] for _ in range(40)]
        toks = []
        while len(toks) < 20000:
            toks += rng.choice(words) + ([rng.randrange(256)] if rng.random() < 0.1 else [])
        prepare_data.write_shard(os.path.join(self.data, "train_000000.bin"), toks[:16000])
        prepare_data.write_shard(os.path.join(self.data, "val_000000.bin"), toks[16000:20000])
        self.count = 0

    def config(self, name, dp=1, fsdp=1, tp=1, stage=3, micro=8, overlap=True, extra=None):
        self.count += 1
        run = os.path.join(self.work, f"{self.count:03d}_{name}")
        os.makedirs(run, exist_ok=True)
        sections = {
            "model": dict(MODEL),
            "data": dict(train=[os.path.join(self.data, "train_*.bin")],
                         val=[os.path.join(self.data, "val_*.bin")], shuffle=True),
            "train": dict(TRAIN, micro_batch=micro),
            "runtime": dict(device="cpu", dtype=self.dtype, threads=1, collective_timeout_s=60.0),
            "parallel": dict(dp=dp, fsdp=fsdp, tp=tp, fsdp_stage=stage, tp_overlap=overlap,
                             reduce_dtype=self.reduce_dtype),
            "log": dict(dir=run, every=5),
            "checkpoint": dict(every=5, keep=3, resume="none"),
        }
        for key, value in (extra or {}).items():
            section, k = key.split(".")
            sections[section][k] = value
        path = os.path.join(run, "config.in.yaml")
        write_config(path, sections)
        return run, path

    def launch(self, world, cfg, extra_args=(), mpmd=None):
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        if world == 1 and not mpmd:
            cmd = [self.exe, "--config", cfg, *extra_args]
        else:
            cmd = ["mpirun", "--oversubscribe", "-np", str(world), self.exe, "--config", cfg,
                   *extra_args]
            for n, other in mpmd or []:
                cmd += [":", "-np", str(n), self.exe, "--config", other, *extra_args]
        return cmd, env

    def run(self, world, cfg, timeout=300, expect_ok=True, mpmd=None):
        cmd, env = self.launch(world, cfg, mpmd=mpmd)
        t0 = time.time()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        took = time.time() - t0
        if expect_ok and p.returncode != 0:
            raise SystemExit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-3000:]}\n"
                             f"{p.stderr[-3000:]}")
        return p, took


def key_bias(name, i):
    """Whether element i of `name` is a key bias (c_attn.bias's middle third).
    The loss does not depend on it (softmax is invariant to a shift of every
    score of a row, and q . b_k is one), so its gradient is rounding noise,
    which AdamW turns into lr-sized steps of random sign: in bf16 two layouts'
    noise differs, and so do these parameters, by up to steps x lr."""
    C = MODEL["n_embd"]
    return name.endswith("attn.c_attn.bias") and C <= i < 2 * C


def compare_runs(label, ref_dir, got_dir, first_step=0, loss_rtol=LOSS_RTOL, norm_rtol=1e-4,
                 param_tol=PARAM_TOL, skip_key_bias=False, rms_tol=None):
    """Losses, val losses, grad norms and final parameters (the key biases
    left out when skip_key_bias; with rms_tol, each tensor's RMS difference
    relative to its RMS too); returns failures and the largest parameter
    difference."""
    fails = []
    ref, got = read_metrics(os.path.join(ref_dir, "metrics.jsonl")), read_metrics(
        os.path.join(got_dir, "metrics.jsonl"))
    for step in range(first_step, TRAIN["steps"]):
        for key in ("loss", "val_loss", "grad_norm"):
            if key not in ref[step]:
                continue
            a, b = got.get(step, {}).get(key), ref[step][key]
            tol = loss_rtol if key != "grad_norm" else norm_rtol
            if a is None or abs(a - b) > tol * abs(b):
                fails.append(f"{label}: step {step} {key} {a} vs one rank {b} "
                             f"(rel {abs((a or 0) - b) / abs(b):.2e} > {tol})")
    pr = read_safetensors(os.path.join(ref_dir, "model.safetensors"))
    pg = read_safetensors(os.path.join(got_dir, "model.safetensors"))
    worst, where = 0.0, ""
    worst_rms, rms_where = 0.0, ""
    for name, ref_vals in pr.items():
        sq_diff = sq_ref = 0.0
        for i, (a, b) in enumerate(zip(pg[name], ref_vals)):
            if skip_key_bias and key_bias(name, i):
                continue
            sq_diff += (a - b) ** 2
            sq_ref += b * b
            d = abs(a - b) / max(1.0, abs(b))
            if d > worst:
                worst, where = d, f"{name}[{i}] {a} vs {b}"
        rms = (sq_diff / sq_ref) ** 0.5 if sq_ref > 0 else 0.0
        if rms > worst_rms:
            worst_rms, rms_where = rms, name
    if worst > param_tol:
        fails.append(f"{label}: final parameters differ by {worst:.2e} > {param_tol} at {where}")
    if rms_tol is not None and worst_rms > rms_tol:
        fails.append(f"{label}: {rms_where} differs by {worst_rms:.2e} of its RMS > {rms_tol}")
    return fails, worst


def padded(n):
    return (n + 15) // 16 * 16


def unit_sizes(tp, fsdp):
    """Flat sizes of the units (embed, one block, head) of one tp rank, as
    ParameterLayout pads them: each tensor to 16 floats, each unit to fsdp.
    The tensors of each unit in layout order, as the placement tables
    (trainer/parallelize/*_placement.cpp) list them."""
    C, V, P = MODEL["n_embd"], MODEL["vocab_size"], MODEL["block_size"]

    def unit(numels):
        raw = sum(padded(n) for n in numels)
        return (raw + fsdp - 1) // fsdp * fsdp
    if MODEL.get("arch") == "llama":
        hs = C // MODEL["n_head"]
        Q, K, F = MODEL["n_head"] * hs, MODEL["n_kv_head"] * hs, MODEL["ffn_hidden"]
        embed = unit([V // tp * C])
        block = unit([C, Q // tp * C, K // tp * C, K // tp * C, C * Q // tp, C,
                      F // tp * C, F // tp * C, C * F // tp])
        head = unit([C] + ([] if MODEL.get("tie_embeddings") else [V // tp * C]))
        return embed, block, head
    embed = unit([V // tp * C, P * C])
    block = unit([C, C, 3 * C // tp * C, 3 * C // tp, C * C // tp, C, C, C,
                  4 * C // tp * C, 4 * C // tp, C * 4 * C // tp, C])
    head = unit([C, C])
    return embed, block, head


def expected_bytes(dp, fsdp, tp, stage, micro, recompute="none", dtype="fp32",
                   reduce_dtype="fp32", pipe=None, ctx=None):
    """Bytes one rank sends per optimizer step on each axis (ring volumes).
    Recomputation repeats per block c_fc's all-gather (mlp), and c_attn's
    all-gather and attn.c_proj's reduce-scatter too (block). In bf16 the
    forward's all-gathers of activations (c_attn's and c_fc's inputs per
    block, recomputed ones included, and the LM head's) move 2-byte
    elements; reduce-scatters sum in fp32 and the backward's gathers move
    the fp32 residual-stream gradient. reduce_dtype bf16: the gradients'
    reduce-scatters (fsdp) and all-reduces (dp) at 2 bytes an element; the
    parameters' all-gathers stay fp32.
    pipe (a Pipe): the bytes of rank 0, pipeline rank 0: its chunks' blocks
    and the embedding, no head; on pp, each micro-batch's residual stream
    (R/tp rows, activations' dtype) sent on from every chunk, its fp32
    gradient sent back from every chunk after the first, the tied
    embedding's gradient sum with the last stage (its owned shard of the
    embed unit), and the loss shared over pp (an 8-byte all-reduce).
    ctx (cp_layouts.Ctx): context parallelism; its formulas are
    cp_layouts.cp_bytes, and the gradients' reductions move to the groups
    that fold cp in (trainer/sharding/data_parallel_groups.hpp): dp x cp
    ("dp_cp") at fsdp 1, ZeRO over fsdp x cp ("fsdp_cp") beyond."""
    L, C, P = MODEL["n_layer"], MODEL["n_embd"], MODEL["block_size"]
    cp = ctx.cp if ctx else 1
    A = TRAIN["global_batch"] // (micro * dp * fsdp)
    # The data-parallel groups: f shards, d replicas (cp folded into one).
    f = fsdp * cp if fsdp > 1 else 1
    d = dp if fsdp > 1 else dp * cp
    rep_key = "dp" if cp == 1 or fsdp > 1 else "dp_cp"
    shard_key = "fsdp" if cp == 1 else "fsdp_cp"
    embed, block, head = unit_sizes(tp, f)
    has_head = pipe is None
    if pipe is not None:
        L = sum(pipe.layers[c * pipe.pp] for c in range(pipe.v))
        head = 0
    total = embed + L * block + head
    out = {"dp": 0.0, "fsdp": 0.0, "tp": 0.0}
    if cp > 1:
        out.update({"dp_cp": 0.0, "fsdp_cp": 0.0})
    R = micro * TRAIN["seq_len"] // cp  # a rank's rows of a micro-batch
    if pipe is not None:
        boundary = R // tp * C
        act = 2 if dtype == "bf16" else 4
        tied = MODEL.get("arch") != "llama" or MODEL.get("tie_embeddings", True)
        out["pp"] = (A * pipe.v * boundary * act + A * (pipe.v - 1) * boundary * 4 +
                     (embed // f * 4 if tied else 0) +
                     2 * (pipe.pp - 1) / pipe.pp * 8)
    if tp > 1:
        chunk = R // tp * C * 4
        again = {"none": 0, "mlp": 1, "block": 3}[recompute] * L
        # AG/RS of the sequence shards: 8 per block, 2 for the embedding's
        # and 2 for the LM head's (its stage's).
        per_micro = (8 * L + 2 + 2 * has_head + again) * (tp - 1) * chunk
        if dtype == "bf16":
            bf16_gathers = 2 * L + has_head + {"none": 0, "mlp": 1, "block": 2}[recompute] * L
            per_micro -= bf16_gathers * (tp - 1) * chunk / 2
        if has_head:
            per_micro += 2 * (tp - 1) / tp * 3 * R * 4      # vocab-parallel cross-entropy
        if MODEL.get("arch") == "llama":
            partial = 2 * C * L + C * has_head               # the RMSNorms' weights
        else:
            partial = 4 * C * L + P * C + 2 * C * has_head   # LayerNorms, wpe, ln_f
        reductions = A if (fsdp > 1 and stage >= 2) else 1
        out["tp"] = A * per_micro + reductions * 2 * (tp - 1) / tp * 4 * partial
    if cp > 1:
        out["cp"] = cp_layouts.cp_bytes(sys.modules[__name__], ctx, tp, L, R, A, recompute,
                                        dtype)
    grad = 2 if reduce_dtype == "bf16" else 4
    if f > 1:
        ring = (f - 1) / f * 4
        rs = (f - 1) / f * grad  # the gradients' reduce-scatter
        if stage == 1:
            out[shard_key] = rs * total + ring * total
        elif stage == 2:
            out[shard_key] = A * rs * total + ring * total
        else:
            out[shard_key] = A * rs * total + A * ring * (total + max(0, L - 2) * block)
            if pipe is not None:
                out[shard_key] += ring * pipeline_layouts.stage3_regathers(pipe, A, embed, block)
    if d > 1:
        out[rep_key] = 2 * (d - 1) / d * grad * (total if f == 1 else total // f)
    return out


def check_bytes(label, run_dir, dp, fsdp, tp, stage, micro, recompute="none", dtype="fp32",
                reduce_dtype="fp32", pipe=None, ctx=None):
    fails = []
    want = expected_bytes(dp, fsdp, tp, stage, micro, recompute, dtype, reduce_dtype, pipe, ctx)
    for step, rec in sorted(read_metrics(os.path.join(run_dir, "metrics.jsonl")).items()):
        got = rec["comm_bytes"]
        for axis, w in want.items():
            g = got[axis]
            if (w == 0 and g != 0) or (w > 0 and abs(g - w) > BYTES_RTOL * w):
                fails.append(f"{label}: step {step} {axis} sent {g:.0f} bytes, formula {w:.0f}")
    return fails


def run_layout(runner, name):
    dp, fsdp, tp, stage, *rest = LAYOUTS[name]
    recompute = rest[0] if rest else "none"
    extra = {"train.recompute": recompute} if rest else None
    world, D = dp * fsdp * tp, dp * fsdp
    fails = []
    bf16 = runner.dtype == "bf16"
    arch = MODEL.get("arch", "gpt2")
    tols = (dict(loss_rtol=BF16_TOL, norm_rtol=BF16_TOL, param_tol=BF16_PARAM_TOL[arch],
                 skip_key_bias=True, rms_tol=BF16_RMS_TOL)
            if bf16 or runner.reduce_dtype == "bf16" else {})
    tag = (" bf16" if bf16 else "") + (" reduce_dtype=bf16" if runner.reduce_dtype == "bf16" else "")
    for accum in (1, 2):
        micro = TRAIN["global_batch"] // (D * accum)
        ref_dir, ref_cfg = runner.config(f"ref_accum{accum}", micro=TRAIN["global_batch"] // accum)
        runner.run(1, ref_cfg)
        for overlap in ((True, False) if tp > 1 else (True,)):
            label = (f"{name}{tag} accum={accum}" +
                     (f" tp_overlap={overlap}" if tp > 1 else ""))
            run_dir, cfg = runner.config(name, dp, fsdp, tp, stage, micro, overlap, extra)
            _, took = runner.run(world, cfg)
            f, worst = compare_runs(label, ref_dir, run_dir, **tols)
            f += check_bytes(label, run_dir, dp, fsdp, tp, stage, micro, recompute, runner.dtype,
                             runner.reduce_dtype)
            print(f"{'FAIL' if f else 'ok  '} {label}: {world} ranks, {took:.1f} s, "
                  f"max param diff {worst:.1e}")
            fails += f
    return fails


def resume_across(runner, label, ref_dir, first, second):
    """Train 5 steps at one layout, resume at another for 5: steps 5..9 equal
    the uninterrupted run in ref_dir. first, second: (ranks, config(name,
    extra) -> (run dir, config path)). Returns the failures."""
    (world_a, config_a), (world_b, config_b) = first, second
    first_dir, first_cfg = config_a("reshard_from", {})
    runner.run(world_a, first_cfg)
    ckpt = os.path.join(first_dir, "checkpoints", "step_00000005")
    second_dir, second_cfg = config_b("reshard_to", {"checkpoint.resume": ckpt})
    runner.run(world_b, second_cfg)
    f, worst = compare_runs(label, ref_dir, second_dir, first_step=5)
    print(f"{'FAIL' if f else 'ok  '} {label}: steps 5..9 after resume, "
          f"max param diff {worst:.1e}")
    return f


def check_reshard(runner):
    """Train 5 steps at one layout, resume at another for 5: the losses equal an
    uninterrupted one-rank run's."""
    fails = []
    ref_dir, ref_cfg = runner.config("reshard_ref", micro=4)
    runner.run(1, ref_cfg)

    def layout(x):
        return (x[0] * x[1] * x[2],
                lambda name, extra: runner.config(name, *x, micro=4 // (x[0] * x[1]) or 1,
                                                  extra=extra))
    for (a, b) in [((2, 1, 2, 3), (1, 4, 1, 3)), ((1, 4, 1, 3), (1, 1, 2, 3)),
                   ((1, 1, 1, 3), (2, 2, 1, 1)), ((1, 2, 2, 2), (1, 1, 1, 3))]:
        label = f"reshard dp={a[0]},fsdp={a[1]},tp={a[2]} -> dp={b[0]},fsdp={b[1]},tp={b[2]}"
        fails += resume_across(runner, label, ref_dir, layout(a), layout(b))
    return fails


def check_tp3_vocab(runner):
    """A GPT-2 with 6 heads and a 256-token vocabulary at tp=3: the vocabulary
    pads to 128 x tp = 384 rows (Megatron's rule), so tp=3 splits it. It trains
    like one rank; its checkpoint holds wte's 256 real rows, and resumes at
    tp=2 (256 rows padded) and tp=1: steps 5..9 equal the uninterrupted
    one-rank run."""
    global MODEL, TRAIN
    saved = MODEL, TRAIN
    # 6 heads of 8 channels; 12-token rows so that every micro-batch's rows
    # split over 3 (sequence parallelism) and over 2.
    MODEL = dict(MODELS["gpt2"], n_head=6, n_embd=48)
    TRAIN = dict(TRAIN, seq_len=12)
    try:
        fails = []
        ref_dir, ref_cfg = runner.config("tp3_vocab_ref", micro=8)
        runner.run(1, ref_cfg)
        run_dir, cfg = runner.config("tp3_vocab", tp=3, micro=8)
        _, took = runner.run(3, cfg)
        f, worst = compare_runs("tp3 vocab=256", ref_dir, run_dir)
        print(f"{'FAIL' if f else 'ok  '} tp3 vocab=256: 3 ranks, {took:.1f} s, "
              f"max param diff {worst:.1e}")
        fails += f
        ckpt = os.path.join(run_dir, "checkpoints", "step_00000005")
        with open(os.path.join(ckpt, "manifest.json")) as fh:
            shape = json.load(fh)["tensors"]["param.wte.weight"]["shape"]
        if shape != [MODEL["vocab_size"], MODEL["n_embd"]]:
            fails.append(f"tp3 vocab=256: the checkpoint's wte is {shape}, expected the real "
                         f"rows [{MODEL['vocab_size']}, {MODEL['n_embd']}]")
        for tp in (2, 1):
            label = f"tp3 vocab=256 -> tp={tp}"
            to_dir, to_cfg = runner.config(f"tp3_vocab_to_tp{tp}", tp=tp, micro=8,
                                           extra={"checkpoint.resume": ckpt})
            runner.run(tp, to_cfg)
            f, worst = compare_runs(label, ref_dir, to_dir, first_step=5)
            print(f"{'FAIL' if f else 'ok  '} {label}: steps 5..9 after resume, "
                  f"max param diff {worst:.1e}")
            fails += f
        return fails
    finally:
        MODEL, TRAIN = saved


def check_rank_failure(runner):
    """A bad data file on rank 3 only: every rank exits non-zero fast, and the
    message comes from rank 3."""
    fails = []
    _, good = runner.config("fail_good", dp=4, micro=2)
    bad_data = os.path.join(runner.work, "not_a_shard.bin")
    with open(bad_data, "wb") as f:
        f.write(b"this is not an llm.c shard" * 100)
    _, bad = runner.config("fail_bad", dp=4, micro=2, extra={"data.train": [bad_data]})
    p, took = runner.run(3, good, expect_ok=False, timeout=120, mpmd=[(1, bad)])
    out = p.stdout + p.stderr
    ok = p.returncode != 0 and took < 30 and "[rank 3]" in out and "not_a_shard.bin" in out
    print(f"{'ok  ' if ok else 'FAIL'} bad data on rank 3: exit {p.returncode} in {took:.1f} s")
    if not ok:
        fails.append(f"bad data on rank 3: exit {p.returncode} after {took:.1f} s; output:\n"
                     f"{out[-2000:]}")
    # Killing one rank mid-run ends the job too.
    run_dir, long_cfg = runner.config("kill", dp=2, micro=4, extra={"train.steps": 100000,
                                                                     "train.eval_every": 0})
    cmd, env = runner.launch(2, long_cfg)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.time() + 120
    while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics)):
        time.sleep(0.2)
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True,
                              text=True).stdout.split()
    if not children:
        fails.append("kill: no trainer processes found under mpirun")
        os.killpg(proc.pid, signal.SIGKILL)
        return fails
    t0 = time.time()
    os.kill(int(children[-1]), signal.SIGKILL)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    took = time.time() - t0
    ok = proc.returncode != 0 and took < 30
    print(f"{'ok  ' if ok else 'FAIL'} kill -9 of one rank: mpirun exit {proc.returncode} "
          f"{took:.1f} s later")
    if not ok:
        fails.append(f"kill: mpirun exit {proc.returncode} after {took:.1f} s")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--layout", action="append", default=[],
                    choices=sorted(LAYOUTS) + sorted(pipeline_layouts.PP_LAYOUTS) +
                    sorted(cp_layouts.CP_LAYOUTS) + sorted(moe_layouts.EP_LAYOUTS))
    ap.add_argument("--check", action="append", default=[],
                    choices=("reshard", "reshard_pp", "reshard_cp", "reshard_ep", "tp3_vocab",
                             "failure"))
    ap.add_argument("--cp-comm", choices=cp_layouts.CP_COMMS,
                    help="context-parallel layouts: only this parallel.cp_comm (default: both)")
    ap.add_argument("--cp-load-balance", choices=("true", "false"),
                    help="context-parallel layouts: only this parallel.cp_load_balance "
                         "(default: both)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="runtime.dtype of every run (bf16: --layout only)")
    ap.add_argument("--reduce-dtype", choices=("fp32", "bf16"), default="fp32",
                    help="parallel.reduce_dtype of every run (bf16: --layout only)")
    ap.add_argument("--arch", choices=sorted(MODELS), default="gpt2",
                    help="the model family of every run")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    global MODEL
    MODEL = MODELS[args.arch]
    every = sorted(LAYOUTS) + sorted(pipeline_layouts.PP_LAYOUTS) + sorted(cp_layouts.CP_LAYOUTS)
    if args.arch == "mixtral":
        every = sorted(moe_layouts.EP_LAYOUTS)
        if (set(args.check) - {"reshard_ep"} or
                any(x not in moe_layouts.EP_LAYOUTS for x in args.layout)):
            sys.exit("error: --arch mixtral runs the expert-parallel and pipeline layouts (" +
                     ", ".join(every) + ") and --check reshard_ep; the others' byte formulas "
                     "are the dense families'")
    elif "reshard_ep" in args.check:
        sys.exit("error: --check reshard_ep needs --arch mixtral")
    elif any(x in moe_layouts.EP_LAYOUTS and x not in pipeline_layouts.PP_LAYOUTS
             for x in args.layout):
        sys.exit("error: the expert-parallel layouts need --arch mixtral")
    if args.list:
        print("\n".join(every))
        return 0
    if not args.layout and not args.check:
        args.layout = every
    work = tempfile.mkdtemp(prefix="gt_layouts_")
    if (args.dtype == "bf16" or args.reduce_dtype == "bf16") and args.check:
        sys.exit("error: --dtype/--reduce-dtype bf16 apply to --layout runs; the checks run in "
                 "fp32")
    runner = Runner(args.build, work, args.dtype, args.reduce_dtype)
    this = sys.modules[__name__]  # the family MODEL was set on, for the pipeline cases
    fails = []
    try:
        for name in args.layout:
            if args.arch == "mixtral":  # (its pipeline layouts are moe_layouts')
                fails += moe_layouts.run_ep_layout(this, runner, name)
            elif name in pipeline_layouts.PP_LAYOUTS:
                fails += pipeline_layouts.run_pp_layout(this, runner, name)
            elif name in cp_layouts.CP_LAYOUTS:
                fails += cp_layouts.run_cp_layout(this, runner, name, args)
            else:
                fails += run_layout(runner, name)
        if "reshard" in args.check:
            fails += check_reshard(runner)
        if "reshard_pp" in args.check:
            fails += pipeline_layouts.check_reshard_pp(this, runner)
        if "reshard_ep" in args.check:
            fails += moe_layouts.check_reshard_ep(this, runner)
        if "reshard_cp" in args.check:
            fails += cp_layouts.check_reshard_cp(this, runner)
        if "tp3_vocab" in args.check:
            fails += check_tp3_vocab(runner)
        if "failure" in args.check:
            fails += check_rank_failure(runner)
    finally:
        keep_or_remove(work, args.keep or fails)
    return report(fails)


if __name__ == "__main__":
    sys.exit(main())
