#!/usr/bin/env python3
"""Fingerprints of a few layouts' training runs, for refactors that must not
change a bit: the sha256 of each run's exported model.safetensors and its
metrics.jsonl values (loss, val_loss, grad_norm, comm_bytes; no timings).

Record before a change, compare after it:

    python3 scripts/layout_fingerprints.py --build build --out /tmp/before.json
    # ... change, rebuild ...
    python3 scripts/layout_fingerprints.py --build build --compare /tmp/before.json

The layouts cover tensor parallelism at 2 and 4 ranks with the ring overlap
on and off, fsdp x tp (ZeRO-2), dp x tp with gradient accumulation, every
gradient reducer (DDP buckets, ZeRO-1, ZeRO-2/3, HSDP), bf16 storage, and
both recompute modes, on the layout matrix's small GPT and data
(tests/layouts/layout_matrix.py), 10 steps each on the CPU (about 10 s).
Runs are deterministic, so any difference is a change in behaviour. Exit
status 1 when --compare finds one. Standard library only.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "layouts"))
import layout_matrix  # noqa: E402

# name: (world, Runner.config keyword arguments, runtime.dtype)
CASES = {
    "one_fp32": (1, {}, "fp32"),
    "tp2": (2, dict(tp=2), "fp32"),
    "tp2_no_overlap": (2, dict(tp=2, overlap=False), "fp32"),
    "tp4": (4, dict(tp=4), "fp32"),
    "fsdp2_tp2_stage2": (4, dict(fsdp=2, tp=2, stage=2, micro=4), "fp32"),
    "dp2_tp2_accumulate": (4, dict(dp=2, tp=2, micro=2), "fp32"),
    "one_bf16": (1, {}, "bf16"),
    "tp2_bf16": (2, dict(tp=2), "bf16"),
    "tp2_bf16_no_overlap": (2, dict(tp=2, overlap=False), "bf16"),
    "tp2_recompute_block": (2, dict(tp=2, extra={"train.recompute": "block"}), "fp32"),
    "fsdp2_stage3_bf16_recompute_mlp":
        (2, dict(fsdp=2, stage=3, micro=4, extra={"train.recompute": "mlp"}), "bf16"),
    "fsdp2_stage1_accumulate": (2, dict(fsdp=2, stage=1, micro=4), "fp32"),
    "hsdp_dp2_fsdp2_stage1": (4, dict(dp=2, fsdp=2, stage=1, micro=2), "fp32"),
    "hsdp_dp2_fsdp2_stage3": (4, dict(dp=2, fsdp=2, stage=3, micro=2), "fp32"),
}
METRIC_KEYS = ("step", "loss", "val_loss", "grad_norm", "comm_bytes")


def fingerprint(build, name, world, kwargs, dtype, work):
    runner = layout_matrix.Runner(build, os.path.join(work, name), dtype=dtype)
    run, cfg = runner.config(name, **kwargs)
    runner.run(world, cfg)
    with open(os.path.join(run, "model.safetensors"), "rb") as f:
        weights = hashlib.sha256(f.read()).hexdigest()
    metrics = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            metrics.append({k: record[k] for k in METRIC_KEYS if k in record})
    return {"weights_sha256": weights, "metrics": metrics}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", help="write the fingerprints here (JSON)")
    ap.add_argument("--compare", help="compare with fingerprints written by --out")
    args = ap.parse_args()
    got = {}
    with tempfile.TemporaryDirectory(prefix="fingerprints_") as work:
        for name, (world, kwargs, dtype) in CASES.items():
            got[name] = fingerprint(args.build, name, world, kwargs, dtype, work)
            print(f"{name:<34} {got[name]['weights_sha256'][:16]}  final loss "
                  f"{got[name]['metrics'][-1]['loss']:.10f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(got, f, indent=1, sort_keys=True)
    if not args.compare:
        return 0
    with open(args.compare) as f:
        want = json.load(f)
    differ = [n for n in CASES if want.get(n) != got[n]]
    if differ:
        print(f"FAIL: {len(differ)} of {len(CASES)} layouts changed: " + ", ".join(differ))
        return 1
    print(f"identical: all {len(CASES)} layouts' weights and metrics match {args.compare}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
