#!/usr/bin/env python3
"""fp8 loss parity: one config trained in bf16 and in fp8, the curves side by side.

    python3 scripts/prepare_data.py                       # data/repo, once
    python3 scripts/fp8_parity.py                         # llama_tiny, 500 steps, both scalings
    python3 scripts/fp8_parity.py --config configs/gpt2_tiny.yaml --steps 200 --recipe rowwise

Every run takes the same config, seed and data order, with runtime.dtype=bf16;
each evaluation reads --eval-batches validation batches (32 by default, so
that the gap measures the models, not which 4 batches were read); the fp8
runs add runtime.fp8=<recipe> and runtime.fp8_min_dim=0, so every
block linear layer really runs in fp8 (the LM head, embeddings, norms and
attention stay bf16, as docs/TRAINING.md says). Written to --out:

    <run>/                the trainer's log.dir of each run (bf16, fp8_tensorwise, ...)
    curves.csv            step, split (train|val), each run's loss, each fp8 run's
                          relative gap (fp8 - bf16) / bf16
    parity.png            the losses and the relative gaps over the steps
    summary.md            the final validation losses and gaps, as the README shows them

Exit status 0 when every fp8 run's final validation loss is within --max-gap
(default 1%) of bf16's, 1 when one is not or a run fails (its log is named),
2 on bad arguments. The trainer's progress lines stream through.
"""

import argparse
import csv
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import plotting  # noqa: E402
import run_logs  # noqa: E402

RECIPES = ("tensorwise", "rowwise")
STEP_LINE = re.compile(r"\bstep\s+(\d+)/")


def run_one(args, name, overrides):
    """Trains one run into <out>/<name>; returns its metrics records."""
    log_dir = os.path.join(args.out, name)
    cmd = [args.trainer, "--config", args.config, f"log.dir={log_dir}",
           f"train.steps={args.steps}", f"train.eval_batches={args.eval_batches}",
           "runtime.dtype=bf16"] + overrides + args.set
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, "run.log")
    start = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=ROOT)
        for line in proc.stdout:
            log.write(line)
            # The trainer's step lines ("info step   50/500 | loss ..."): every
            # 50th, the evaluations and any error pass through.
            m = STEP_LINE.search(line)
            if (m and int(m.group(1)) % 50 == 0) or "val loss" in line or "error" in line.lower():
                print(f"  [{name}] {line.rstrip()}", flush=True)
        rc = proc.wait()
    if rc != 0:
        raise SystemExit(f"error: the {name} run failed (exit {rc}); its output is in {log_path}")
    print(f"== {name}: {time.time() - start:.0f} s", flush=True)
    return run_logs.read_metrics(os.path.join(log_dir, "metrics.jsonl"))


def series(recs, key):
    """{step: value} of the records that have a finite `key`."""
    return {r["step"]: r[key] for r in recs if isinstance(r.get(key), (int, float))}


def gap(fp8, ref):
    return (fp8 - ref) / ref


def write_csv(path, names, curves):
    """curves: {name: {"train": {step: loss}, "val": {...}}}; names[0] is bf16."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "split"] + list(names) + [f"gap_{n}" for n in names[1:]])
        for split in ("train", "val"):
            ref = curves[names[0]][split]
            for step in sorted(ref):
                row = [step, split] + [curves[n][split].get(step, "") for n in names]
                row += [f"{gap(curves[n][split][step], ref[step]):.6f}"
                        if step in curves[n][split] else "" for n in names[1:]]
                w.writerow(row)


def smooth(values, window):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot(path, names, curves, title):
    plt = plotting.pyplot("the parity plot")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    colors = {"bf16": "black", "fp8_tensorwise": "tab:blue", "fp8_rowwise": "tab:orange"}
    for n in names:
        train, val = curves[n]["train"], curves[n]["val"]
        steps = sorted(train)
        c = colors.get(n)
        top.plot(steps, smooth([train[s] for s in steps], 20), color=c, lw=1, alpha=0.7,
                 label=f"{n} train (20-step mean)")
        vs = sorted(val)
        top.plot(vs, [val[s] for s in vs], "o-", color=c, ms=3, lw=1.5, label=f"{n} val")
    top.set_ylabel("loss")
    top.set_title(title)
    top.legend(fontsize=8)
    ref = curves[names[0]]
    for n in names[1:]:
        c = colors.get(n)
        steps = sorted(s for s in ref["train"] if s in curves[n]["train"])
        g = [100 * gap(curves[n]["train"][s], ref["train"][s]) for s in steps]
        bottom.plot(steps, smooth(g, 20), color=c, lw=1, alpha=0.7, label=f"{n} train (20-step mean)")
        vs = sorted(s for s in ref["val"] if s in curves[n]["val"])
        bottom.plot(vs, [100 * gap(curves[n]["val"][s], ref["val"][s]) for s in vs], "o-",
                    color=c, ms=3, lw=1.5, label=f"{n} val")
    bottom.axhline(0, color="black", lw=0.5)
    for y in (-1, 1):
        bottom.axhline(y, color="gray", lw=0.5, ls="--")
    bottom.set_ylabel("(fp8 - bf16) / bf16, %")
    bottom.set_xlabel("step")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    plotting.use_an_interpreter_with_matplotlib()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "llama_tiny.yaml"))
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--recipe", action="append", choices=RECIPES, default=[],
                    help="an fp8 scaling to run (repeatable; default both)")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "fp8_parity"))
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build", "trainer"))
    ap.add_argument("--eval-batches", type=int, default=32,
                    help="train.eval_batches of every run: validation batches per evaluation "
                         "(default 32: 32,768 tokens at llama_tiny's 8 x 128; the config's 4 "
                         "leave the gap within a percent of noise)")
    ap.add_argument("--max-gap", type=float, default=0.01,
                    help="largest accepted relative final val-loss gap (default 0.01)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a config override for every run (repeatable)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if not os.access(args.trainer, os.X_OK):
        ap.error(f"--trainer {args.trainer}: not an executable (build it: cmake -S . -B build "
                 "&& cmake --build build)")
    if not os.path.exists(args.config):
        ap.error(f"--config {args.config}: no such file")
    args.out = os.path.abspath(args.out)
    args.config = os.path.abspath(args.config)
    os.makedirs(args.out, exist_ok=True)

    names = ["bf16"] + [f"fp8_{r}" for r in (args.recipe or RECIPES)]
    overrides = {"bf16": ["runtime.fp8=off"]}
    for r in args.recipe or RECIPES:
        overrides[f"fp8_{r}"] = [f"runtime.fp8={r}", "runtime.fp8_min_dim=0"]
    curves, seconds = {}, {}
    for n in names:
        start = time.time()
        recs = run_one(args, n, overrides[n])
        seconds[n] = time.time() - start
        curves[n] = {"train": series(recs, "loss"), "val": series(recs, "val_loss")}
        if not curves[n]["val"]:
            raise SystemExit(f"error: the {n} run logged no val_loss (set train.eval_every or "
                             "data.val in the config)")

    csv_path = os.path.join(args.out, "curves.csv")
    write_csv(csv_path, names, curves)
    ref_val = curves["bf16"]["val"]
    last = max(ref_val)
    lines = [f"fp8 loss parity: {os.path.relpath(args.config, ROOT)}, {args.steps} steps, "
             f"final validation loss at step {last}",
             "",
             "| run | final val loss | gap to bf16 | wall time |",
             "| --- | --- | --- | --- |"]
    failed = []
    for n in names:
        v = curves[n]["val"].get(last)
        if v is None:
            failed.append(f"{n}: no val_loss at step {last}")
            continue
        g = gap(v, ref_val[last])
        lines.append(f"| {n} | {v:.4f} | {'' if n == 'bf16' else f'{100 * g:+.2f}%'} | "
                     f"{seconds[n]:.0f} s |")
        if n != "bf16" and abs(g) > args.max_gap:
            failed.append(f"{n}: final val-loss gap {100 * g:+.2f}% exceeds "
                          f"{100 * args.max_gap:.2f}%")
    summary = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary)
    print(summary)
    print(f"wrote {csv_path}, {os.path.join(args.out, 'summary.md')}")
    png = os.path.join(args.out, "parity.png")
    plot(png, names, curves, f"bf16 vs fp8, {os.path.basename(args.config)}, {args.steps} steps")
    print(f"wrote {png}")
    for f in failed:
        print(f"FAIL {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
