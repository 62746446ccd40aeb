#!/usr/bin/env python3
"""Training on the emulated device agrees with the CPU backend.

build/trainer with runtime.device=cuda in an emulator build (docs/EMULATOR.md)
trains a small GPT through the real CUDA backend: every kernel, cuBLASLt,
and, for several ranks, the staged MPI mesh (parallel.comm=mpi) or the
emulated NCCL (parallel.comm=nccl). Each run is compared with the CPU
backend's one-rank run of the same config, at the tolerances the whole-model
GPU tests use (tests/cuda/test_cuda_training.cpp):
  * fp32: every step's loss and grad norm to 1e-4 relative, the final
    parameters to 1e-4;
  * bf16 (bf16 activation storage): the emulated one-rank run against the
    CPU backend's bf16 run, which computes the same function: losses and
    grad norms at the layout matrix's bf16 tolerance (lm.BF16_TOL), final
    parameters to 1e-2 (key biases left out: lm.key_bias). cuBLASLt and our
    kernels sum in another order than OpenBLAS, which flips a bf16 rounding
    here and there, and AdamW turns the small gradients so perturbed into
    lr-sized steps (measured: 2.1e-3, against 8.7e-3 from the CPU fp32 run);
    every layout against the emulated one-rank bf16 run: losses and grad
    norms to 1e-2, final parameters at the layout matrix's bound for the
    family (lm.BF16_PARAM_TOL: GPT-2 1e-2, Llama 2e-2; key biases left out),
    the layouts with a data axis (dp2, fsdp2) also with their gradients
    summed in bf16 (parallel.reduce_dtype=bf16: ncclBfloat16, or the staged
    MPI user operation); and the one-rank run against the CPU fp32 run to
    5e-2 (what bf16 storage costs over a few steps). Llama's bound is the
    matrix's because at 1e-2 this model is at its noise floor: its untied
    embedding's rows take gradients whose near-zero elements change sign
    with any summation order (measured after 6 steps, the largest element
    difference: emulated one rank against the CPU's one rank 1.42e-2, the
    CPU's cp2 against its one rank 9.7e-3, at embedding elements near 0;
    fp32 runs of the same layouts 1.5e-6).
The model has two heads of 16, so the bf16 runs take the tensor-core
attention kernels (runtime.attention=auto, the default); the one-rank check
also runs the SIMT ones (runtime.attention=simt) against the CPU bf16 run.
With --attention wgmma (one_rank) the heads are two of 64 (Llama: over one
key/value head) and the bf16 run takes the sm_90 forward
(runtime.attention=wgmma: TMA copies, mbarriers and wgmma under the
emulator's rules) with the tensor-core backward, against the CPU's bf16 run
and the emulated tensor-core run.

    python3 tests/emulator/emulated_training.py --build build-emu --layout dp2
    python3 tests/emulator/emulated_training.py --build build-emu --layout tp2 --arch llama
    python3 tests/emulator/emulated_training.py --build build-emu --layout cp2_tp2 \
        --cp-comm ring --comm nccl

With --arch mixtral the model is that Llama with 4 experts of width 32, 2
per token (the router, permutation, grouped GEMMs and combine kernels), and
every one-rank run accumulates the layout's micro-batches (the aux loss pools
a micro-batch); dp2_ep2 splits the experts over the two ranks, tokens moving
all-to-all (grouped ncclSend/ncclRecv, or staged MPI_Alltoallv); fsdp4_ep2
(4 ranks) also shards each rank's two experts over the two ranks holding
them (ZeRO-3 over the expert-data-parallel group: their own gathers and
reduce-scatters on the edp communicator); and pp2
passes each micro-batch's router statistics between the stages with the
residual stream. --capacity-factor puts a capacity on every run: on tp2 the
drops are planned over the whole micro-batch, gathered from both ranks.
Layouts: one_rank, dp2, fsdp2 (stage 3), tp2, pp2 (1f1b, 4 micro-batches),
and context parallelism (parallel.cp, sequences load balanced): cp2, cp2_tp2
(4 ranks) and cp4 (4 ranks: a ring of three hops, where cp2's has one).
Each runs over both meshes (--comm picks) and a cp layout in both
parallel.cp_comm modes (--cp-comm picks: K|V all-gathered, or passed round
the ring by grouped send/receive); a cp run's bytes per step on every axis
must also equal the layout matrix's formulas (tests/layouts/cp_layouts.py),
so the CUDA path moves K|V in the activations' dtype as the CPU's does.
With --arch llama the model is
the layout matrix's Llama at 4 query heads of 16 over 2 key/value heads (so
tp2 splits both, and bf16 takes the tensor-core attention with grouped-query
attention). --steps shortens every run. With --fp8 tensorwise|rowwise the
runs are fp8 instead (runtime.fp8, every block linear: fp8_min_dim=0):
the layout on the emulated device against the CPU backend's one-rank fp8
run with the same micro-batches, at the fp8 layout tolerances
(tests/layouts/fp8_layouts.py); fsdp2 tensorwise gathers its weights as
fp8 codes (parallel.fp8_allgather), over the emulated NCCL or the staged
MPI mesh. Exit status 1 on any mismatch.
"""

import argparse
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "layouts"))
import layout_matrix as lm  # noqa: E402  (the layout matrix's runner and readers)
import fp8_layouts  # noqa: E402  (the fp8 tolerances)

STEPS = 6
# name: (dp, fsdp, tp, pp, cp); a pipeline runs 4 micro-batches per step (1f1b).
LAYOUTS = {"dp2": (2, 1, 1, 1, 1), "fsdp2": (1, 2, 1, 1, 1), "tp2": (1, 1, 2, 1, 1),
           "pp2": (1, 1, 1, 2, 1), "cp2": (1, 1, 1, 1, 2), "cp2_tp2": (1, 1, 2, 1, 2),
           "cp4": (1, 1, 1, 1, 4), "dp2_ep2": (2, 1, 1, 1, 1), "fsdp4_ep2": (1, 4, 1, 1, 1)}
# Expert parallelism (--arch mixtral only): parallel.ep of a layout.
EP = {"dp2_ep2": 2, "fsdp4_ep2": 2}
CP_COMMS = ("allgather", "ring")
COMMS = ("mpi", "nccl")
FP32_TOL = 1e-4
BF16_LAYOUT_TOL = 1e-2
BF16_VS_FP32_TOL = 5e-2
# A mixture's grad norms in bf16 runs that sum in another order (another
# backend, attention kernel or reduce_dtype): bf16 rounding of a router's
# input flips a near-tied top-k choice here and there, and the token's
# gradient goes to another expert (measured over 6 steps: 1.5e-2 against the
# CPU's bf16 run, 5.9e-2 against its fp32 run, 4.6e-2 for reduce_dtype=bf16;
# losses stay within 1e-3, and the same summation order gives the same bits:
# dp2_ep2 bf16 against the emulated one-rank bf16 run, 0). The fp32 runs,
# which no flip reaches, are held to FP32_TOL.
MOE_BF16_NORM_TOL = 1e-1
# fp8 one rank, the emulated device against the CPU backend (fp8_runs):
# measured over 6 steps, Llama tensorwise loss 1.2e-3 and grad norm 5.5e-2,
# GPT-2 rowwise 2.0e-5 and 5.6e-3 (the layouts against the emulated one
# rank: 3.4e-9 for fsdp2 with fp8 all-gather, 6.5e-5 for tp2).
FP8_BACKEND_TOL = 2e-3
FP8_BACKEND_NORM_TOL = 1e-1


def worst_rel(ref_dir, got_dir, key):
    """The largest relative difference of a metrics.jsonl value over the steps
    both runs logged (what the report prints; compare_runs judges)."""
    ref, got = (lm.read_metrics(os.path.join(d, "metrics.jsonl")) for d in (ref_dir, got_dir))
    return max((abs(got[s][key] - r[key]) / abs(r[key]) for s, r in ref.items()
                if key in r and key in got.get(s, {})), default=0.0)


def compare(label, ref_dir, got_dir, tol, skip_key_bias=False, param_tol=None, norm_tol=None):
    """The layout matrix's comparison (losses, grad norms, final parameters)
    at one tolerance for all three (param_tol, norm_tol: the parameters' and
    the grad norms' own)."""
    param_tol = tol if param_tol is None else param_tol
    norm_tol = tol if norm_tol is None else norm_tol
    fails, worst = lm.compare_runs(label, ref_dir, got_dir, loss_rtol=tol, norm_rtol=norm_tol,
                                   param_tol=param_tol, skip_key_bias=skip_key_bias)
    print(f"{'FAIL' if fails else 'ok  '} {label}: max loss diff "
          f"{worst_rel(ref_dir, got_dir, 'loss'):.1e}, grad norm "
          f"{worst_rel(ref_dir, got_dir, 'grad_norm'):.1e}, param {worst:.1e} "
          f"(tolerances {tol}, {param_tol})")
    return fails


def cp_bytes(label, run_dir, dims, dtype, cp_comm):
    """A cp layout's bytes per step on every axis against the layout matrix's
    formulas (tests/layouts/cp_layouts.py): K|V in the activations' dtype,
    their gradients in fp32, the gradients' sums over the dp x cp group, as
    the CPU backend moves them. Nothing for the other layouts."""
    dp, fsdp, tp, _, cp = dims
    if cp == 1:
        return []
    fails = lm.check_bytes(label, run_dir, dp, fsdp, tp, 3, lm.TRAIN["global_batch"] // (dp * fsdp),
                           dtype=dtype, ctx=lm.cp_layouts.Ctx(cp, cp_comm, True))
    print(f"{'FAIL' if fails else 'ok  '} {label}: bytes per step on every axis as the "
          "layout matrix's formulas")
    return fails


def fp8_runs(args, r, common, cuda_run):
    """--fp8: the emulated one-rank fp8 run against the CPU's (the backends
    quantise the same bf16 values wherever their bf16 activations agree,
    and a summation order that moves one across a rounding boundary moves
    its code a whole e4m3 step: FP8_BACKEND_*), and the layout against the
    emulated one rank with the same micro-batches at the fp8 layout
    tolerances."""
    # fp8_check_amax: the device kernels' fused amaxes against their own pass.
    fp8 = {"runtime.dtype": "bf16", "runtime.fp8": args.fp8, "runtime.fp8_min_dim": 0,
           "runtime.fp8_check_amax": "true"}
    dims = LAYOUTS.get(args.layout, (1, 1, 1, 1, 1))
    micro = lm.TRAIN["global_batch"] // (dims[0] * dims[1] * (4 if dims[3] > 1 else 1))
    ref_dir, ref_cfg = r.config("cpu_fp8", micro=micro, extra=dict(common, **fp8))
    r.run(1, ref_cfg)
    one = cuda_run("cuda_fp8_one_rank", 1, (1, 1, 1, 1, 1), "bf16", "auto", more=fp8,
                   one_micro=micro)
    fails = compare(f"one rank fp8={args.fp8} vs CPU fp8", ref_dir, one, FP8_BACKEND_TOL,
                    norm_tol=FP8_BACKEND_NORM_TOL, param_tol=fp8_layouts.FP8_PARAM_TOL)
    if args.layout == "one_rank":
        return fails
    tols = dict(norm_tol=fp8_layouts.FP8_NORM_TOL, param_tol=fp8_layouts.FP8_PARAM_TOL)
    for comm in args.comm or COMMS:
        d = cuda_run(f"{args.layout}_fp8_{comm}", math.prod(dims), dims, "bf16", comm, more=fp8)
        fails += compare(f"{args.layout} fp8={args.fp8} comm={comm} vs emulated one rank fp8",
                         one, d, fp8_layouts.FP8_LOSS_TOL, **tols)
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="an emulator build (TRAINER_CUDA_EMULATOR=ON)")
    ap.add_argument("--layout", required=True, choices=["one_rank", *LAYOUTS])
    ap.add_argument("--arch", choices=sorted(lm.MODELS), default="gpt2")
    ap.add_argument("--steps", type=int, default=STEPS, help="training steps of every run")
    ap.add_argument("--capacity-factor", type=float, default=0.0,
                    help="--arch mixtral: model.capacity_factor of every run (a split "
                         "layout's drops are planned over the whole micro-batch)")
    ap.add_argument("--comm", action="append", choices=COMMS,
                    help="parallel.comm of the layout's runs (repeatable; default: both)")
    ap.add_argument("--cp-comm", action="append", choices=CP_COMMS,
                    help="parallel.cp_comm of a cp layout's runs (repeatable; default: both)")
    ap.add_argument("--fp8", choices=("tensorwise", "rowwise"),
                    help="fp8 runs (module docstring) instead of fp32 and bf16")
    ap.add_argument("--attention", choices=("wgmma",),
                    help="one_rank only: bf16 with runtime.attention=wgmma (heads of 64)")
    args = ap.parse_args()
    if args.attention and (args.layout != "one_rank" or args.fp8):
        sys.exit("error: --attention wgmma goes with --layout one_rank and no --fp8")
    cache = open(os.path.join(args.build, "CMakeCache.txt")).read()
    if "TRAINER_CUDA_EMULATOR:BOOL=ON" not in cache:
        sys.exit(f"error: {args.build} is not an emulator build (-DTRAINER_CUDA_EMULATOR=ON)")
    lm.TRAIN["steps"] = args.steps
    # Two heads of 16: a head size the tensor-core attention kernels take, so
    # the bf16 runs train on them (runtime.attention=auto), as on a GPU.
    if args.capacity_factor and args.arch != "mixtral":
        sys.exit("error: --capacity-factor needs --arch mixtral")
    if args.layout in EP and args.arch != "mixtral":
        sys.exit(f"error: --layout {args.layout} is expert-parallel: it needs --arch mixtral")
    lm.MODEL = dict(lm.MODELS[args.arch])
    lm.MODEL["n_head"] = 2
    if args.arch in ("llama", "mixtral"):  # 4 heads of 16 over 2 key/value heads
        lm.MODEL.update(n_head=4, n_kv_head=2, n_embd=64)
    if args.capacity_factor:
        lm.MODEL["capacity_factor"] = args.capacity_factor
    if args.attention == "wgmma":  # the sm_90 kernels' head size: two heads of 64
        lm.MODEL.update(n_head=2, n_embd=128)
        if args.arch in ("llama", "mixtral"):
            lm.MODEL["n_kv_head"] = 1
    dims0 = LAYOUTS.get(args.layout, (1, 1, 1, 1, 1))
    # A mixture's aux loss pools each micro-batch: every one-rank run
    # accumulates the layout's micro-batches (one per data rank).
    micro_batches0 = 4 if dims0[3] > 1 else 1  # a pipeline's per step (cuda_run's)
    ref_micro = (lm.TRAIN["global_batch"] // (dims0[0] * dims0[1] * micro_batches0)
                 if args.arch == "mixtral" else lm.TRAIN["global_batch"])
    # bf16 comparisons across summation orders: a mixture's looser bounds
    # (MOE_BF16_NORM_TOL; its parameters at the layout matrix's bound).
    moe = args.arch == "mixtral"
    moe16 = dict(norm_tol=MOE_BF16_NORM_TOL, param_tol=lm.BF16_PARAM_TOL["mixtral"]) if moe else {}
    fails = []
    with tempfile.TemporaryDirectory(prefix="emulated_training_") as work:
        r = lm.Runner(args.build, work)
        common = {"train.eval_every": 0, "checkpoint.every": 0}
        cpu_dir, cpu_cfg = r.config("cpu_fp32", micro=ref_micro, extra=common)
        r.run(1, cpu_cfg)

        def cuda_run(name, world, dims, dtype, comm, reduce_dtype="fp32", cp_comm="allgather",
                     more=None, one_micro=None):
            dp, fsdp, tp, pp, cp = dims
            extra = dict(dict(common, **(more or {})), **{"runtime.device": "cuda",
                                                         "runtime.dtype": dtype,
                                    "parallel.comm": comm,
                                    "parallel.reduce_dtype": reduce_dtype, "parallel.pp": pp})
            if cp > 1:
                extra.update({"parallel.cp": cp, "parallel.cp_comm": cp_comm})
            if args.layout in EP and world > 1:
                extra["parallel.ep"] = EP[args.layout]
            micro_batches = 4 if pp > 1 else 1
            micro = lm.TRAIN["global_batch"] // (dp * fsdp * micro_batches)
            if world == 1:
                micro = ref_micro if one_micro is None else one_micro
            d, cfg = r.config(name, dp, fsdp, tp, 3, micro, True, extra)
            _, took = r.run(world, cfg, timeout=900)
            print(f"     {name}: {world} rank(s) on the emulated device, {took:.1f} s")
            return d

        if args.fp8:
            fails += fp8_runs(args, r, common, cuda_run)
        elif args.attention == "wgmma":
            # The sm_90 forward (TMA, mbarriers, wgmma on the emulated
            # device) with the tensor-core backward, against the CPU's bf16
            # run and the emulated tensor-core run of the same model.
            wg = cuda_run("cuda_bf16_wgmma_one_rank", 1, (1, 1, 1, 1, 1), "bf16", "auto",
                          more={"runtime.attention": "wgmma"})
            tc = cuda_run("cuda_bf16_one_rank", 1, (1, 1, 1, 1, 1), "bf16", "auto")
            cpu16_dir, cpu16_cfg = r.config("cpu_bf16", micro=ref_micro,
                                            extra=dict(common, **{"runtime.dtype": "bf16"}))
            r.run(1, cpu16_cfg)
            # Against the tensor-core run (the same function: S in fp32,
            # P rounded to bf16 for P V) at the layouts' bf16 tolerance; on
            # the emulated device both sum every product in k order, and
            # the runs agree bit for bit (measured 2026-12-07). Against the
            # CPU's bf16 run at what bf16 costs over the steps: heads of 64
            # at width 128 drift further from OpenBLAS's sums than the
            # default model's heads of 16 (the tensor-core run alike:
            # measured 4.2e-2 on a grad norm at step 4, 1.3e-2 on a weight).
            tols = dict(skip_key_bias=True, **moe16)
            fails += compare("one rank bf16 wgmma attention vs tensor-core attention", tc, wg,
                             lm.BF16_TOL, param_tol=BF16_LAYOUT_TOL, **tols)
            fails += compare("one rank bf16 wgmma attention vs CPU bf16", cpu16_dir, wg,
                             BF16_VS_FP32_TOL, **tols)
        elif args.layout == "one_rank":
            one_fp32 = cuda_run("cuda_fp32_one_rank", 1, (1, 1, 1, 1, 1), "fp32", "auto")
            fails += compare("one rank fp32 vs CPU", cpu_dir, one_fp32, FP32_TOL)
            one_bf16 = cuda_run("cuda_bf16_one_rank", 1, (1, 1, 1, 1, 1), "bf16", "auto")
            cpu16_dir, cpu16_cfg = r.config("cpu_bf16", micro=ref_micro,
                                            extra=dict(common, **{"runtime.dtype": "bf16"}))
            r.run(1, cpu16_cfg)
            fails += compare("one rank bf16 vs CPU bf16", cpu16_dir, one_bf16, lm.BF16_TOL,
                             skip_key_bias=True, **dict(dict(param_tol=BF16_LAYOUT_TOL), **moe16))
            fails += compare("one rank bf16 vs CPU fp32", cpu_dir, one_bf16, BF16_VS_FP32_TOL,
                             **({"norm_tol": MOE_BF16_NORM_TOL} if moe else {}))
            simt = dict(common, **{"runtime.device": "cuda", "runtime.dtype": "bf16",
                                   "runtime.attention": "simt"})
            simt_dir, simt_cfg = r.config("cuda_bf16_simt_one_rank", micro=ref_micro, extra=simt)
            _, took = r.run(1, simt_cfg, timeout=900)
            print(f"     cuda_bf16_simt_one_rank: 1 rank(s) on the emulated device, {took:.1f} s")
            fails += compare("one rank bf16 SIMT attention vs CPU bf16", cpu16_dir, simt_dir,
                             lm.BF16_TOL, skip_key_bias=True,
                             **dict(dict(param_tol=BF16_LAYOUT_TOL), **moe16))
        else:
            one_bf16 = cuda_run("cuda_bf16_one_rank", 1, (1, 1, 1, 1, 1), "bf16", "auto")
            dims = LAYOUTS[args.layout]
            # The family's bound on the final parameters, the layout
            # matrix's (Llama's looser: module docstring).
            bf16_tols = dict(skip_key_bias=True, param_tol=lm.BF16_PARAM_TOL[args.arch])
            world = math.prod(dims)
            cp_comms = [None] if dims[4] == 1 else (args.cp_comm or list(CP_COMMS))
            for comm in args.comm or COMMS:
                for cp_comm in cp_comms:
                    name = args.layout + (f"_{cp_comm}" if cp_comm else "")
                    label = args.layout + (f" cp_comm={cp_comm}" if cp_comm else "")
                    more = {"cp_comm": cp_comm} if cp_comm else {}
                    d = cuda_run(f"{name}_fp32_{comm}", world, dims, "fp32", comm, **more)
                    fails += compare(f"{label} fp32 comm={comm} vs CPU one rank", cpu_dir, d,
                                     FP32_TOL)
                    fails += cp_bytes(f"{label} fp32 comm={comm}", d, dims, "fp32", cp_comm)
                    d = cuda_run(f"{name}_bf16_{comm}", world, dims, "bf16", comm, **more)
                    fails += compare(f"{label} bf16 comm={comm} vs emulated one rank bf16",
                                     one_bf16, d, BF16_LAYOUT_TOL, **bf16_tols)
                    fails += cp_bytes(f"{label} bf16 comm={comm}", d, dims, "bf16", cp_comm)
                    if dims[0] * dims[1] > 1:
                        d = cuda_run(f"{name}_bf16_reduce_bf16_{comm}", world, dims, "bf16",
                                     comm, "bf16", **more)
                        fails += compare(f"{label} bf16 reduce_dtype=bf16 comm={comm} vs "
                                         "emulated one rank bf16", one_bf16, d, BF16_LAYOUT_TOL,
                                         **dict(bf16_tols, **moe16))
    if fails:
        print("\n".join(["", "FAIL:"] + fails))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
