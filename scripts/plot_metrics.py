#!/usr/bin/env python3
"""Plot one run's metrics.jsonl: loss and val loss, tokens/s, and MFU over steps
(over the datasheet peak where the run logged one, the panel naming the
formula and the peak).

    scripts/plot_metrics.py runs/default                          # -> runs/default/metrics.png
    scripts/plot_metrics.py runs/default/metrics.jsonl            # the same
    scripts/plot_metrics.py runs/a --out a.png

Takes a run folder (a log.dir, as every other command does) or its
metrics.jsonl.
Reads the trainer's metrics.jsonl (one JSON object per optimizer step: step,
loss, val_loss on eval steps, tokens_per_s, mfu when the build logs it).
Non-finite losses are logged as null and left out of the curve; skipped steps
are marked. The MFU panel is drawn only when the file has `mfu`.
Exit status 1 with one error line for anything it cannot read (a missing,
unreadable, empty or malformed file, a folder without metrics.jsonl), or
when matplotlib is not installed.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def metrics_path(arg):
    """The metrics.jsonl of a run folder, or the file given."""
    if os.path.isdir(arg):
        path = os.path.join(arg, "metrics.jsonl")
        if not os.path.exists(path):
            raise SystemExit(f"error: {arg}: no metrics.jsonl in this folder (is it a run's "
                             "log.dir? a run writes it at its first step)")
        return path
    if not os.path.exists(arg):
        raise SystemExit(f"error: {arg}: no such file or folder")
    return arg


def read_records(path):
    recs = []
    try:
        # Damaged bytes read as U+FFFD, so they fail as a line that is not
        # JSON instead of echoing raw bytes or a decoder's traceback.
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit(f"error: {path}:{n}: not JSON ({e.msg})")
                if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                    raise SystemExit(f"error: {path}:{n}: expected an object with an integer "
                                     "'step'")
                recs.append(rec)
    except OSError as e:
        raise SystemExit(f"error: {path}: cannot read it ({e.strerror or e})")
    if not recs:
        raise SystemExit(f"error: {path}: empty (no steps logged yet?)")
    return recs


def series(recs, key):
    pts = [(r["step"], r[key]) for r in recs if isinstance(r.get(key), (int, float))]
    return [s for s, _ in pts], [v for _, v in pts]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("metrics", metavar="RUN", help="a run folder (log.dir) or its metrics.jsonl")
    ap.add_argument("--out", help="PNG path (default: metrics.png beside the input)")
    args = ap.parse_args()
    args.metrics = metrics_path(args.metrics)
    recs = read_records(args.metrics)  # what cannot be read says so before anything else
    from plotting import use_an_interpreter_with_matplotlib
    use_an_interpreter_with_matplotlib()
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.metrics)), "metrics.png")
    from plotting import pyplot
    plt = pyplot(out)

    # The headline MFU (over the datasheet peak) where the run logged one,
    # else the one over the measured peak; the panel names formula and peak.
    mfu_key = "mfu_datasheet" if any(isinstance(r.get("mfu_datasheet"), (int, float))
                                     for r in recs) else "mfu"
    has_mfu = any(isinstance(r.get(mfu_key), (int, float)) for r in recs)
    panels = 3 if has_mfu else 2
    fig, axes = plt.subplots(panels, 1, figsize=(8, 2.8 * panels), sharex=True)
    ax = axes[0]
    s, v = series(recs, "loss")
    ax.plot(s, v, label="train loss", lw=1.2)
    s, v = series(recs, "val_loss")
    if s:
        ax.plot(s, v, "o-", label="val loss", ms=4)
    skipped = [r["step"] for r in recs if r.get("skipped")]
    for k in skipped:
        ax.axvline(k, color="red", alpha=0.3, lw=0.8)
    if skipped:
        ax.plot([], [], color="red", alpha=0.3, label="skipped step")
    ax.set_ylabel("loss")
    ax.legend()
    ax.set_title(os.path.relpath(args.metrics))
    ax = axes[1]
    s, v = series(recs, "tokens_per_s")
    ax.plot(s, v, color="tab:green")
    ax.set_ylabel("tokens/s")
    if has_mfu:
        ax = axes[2]
        s, v = series(recs, mfu_key)
        ax.plot(s, [x * 100 for x in v], color="tab:purple")
        ax.set_ylabel("MFU (%)")
        last = next((r for r in reversed(recs) if isinstance(r.get(mfu_key), (int, float))), {})
        peak = last.get(mfu_key + "_peak_tflops" if mfu_key == "mfu_datasheet"
                        else "mfu_peak_tflops")
        ax.set_title(f"MFU: {last.get('mfu_formula', 'PaLM 6N+12LTC')} over the "
                     f"{'datasheet' if mfu_key == 'mfu_datasheet' else 'measured'} peak"
                     + (f", {peak:.4g} TFLOP/s per rank" if isinstance(peak, (int, float)) else ""),
                     fontsize=9)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out} ({len(recs)} steps{', MFU' if has_mfu else ', no mfu in the file'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
