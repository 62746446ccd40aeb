"""scripts/sweep.py's outputs: from its runs (sweep.Run, measured and with
the plan's prediction attached) the rows of sweep.csv, the Markdown table
sweep.md (fastest first, failures last with their reason) and the plot
sweep.png (throughput and peak memory per layout, measured beside
predicted; needs matplotlib). Standard library only, but for the plot.
"""

import csv
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MIB = 1048576.0


def gap(measured, predicted):
    if not measured or not predicted:
        return None
    return (predicted - measured) / measured * 100.0


def row_of(run):
    m, p = run.measured, run.predicted
    pm = p.get("memory_bytes", {})
    r = {
        "status": run.status, "reason": run.reason,
        "dp": run.dp, "fsdp": run.fsdp, "tp": run.tp, "pp": run.pp, "cp": run.cp,
        "cp_comm": run.cp_comm_used() or "",
        "pp_schedule": run.pp_schedule() or "",
        "pp_virtual_stages": run.pp_vstages() if run.pp > 1 else "",
        "stage": run.stage if run.fsdp > 1 and run.stage is not None else
        (run.config_stage if run.fsdp > 1 else ""),
        "micro_batch": run.micro_batch,
    }
    for k, v in run.grid_values().items():
        if k != "train.micro_batch":
            r[k] = v
    r.update({
        "tokens_per_s": m.get("tokens_per_s"),
        # PaLM 6N+12LTC over the --hardware file's peak (sweep.py); the
        # trainer's own, over its measured peaks, where it logged one.
        "mfu": m.get("mfu_palm_sheet"),
        "mfu_measured_peak": m.get("mfu"),
        "step_ms": m.get("step_ms"),
        "peak_mem_bytes": m.get("peak_mem_bytes"),
        "comm_exposed_ms": m.get("comm_exposed_ms"),
        "bubble_fraction": m.get("bubble_fraction"),
        "pipeline_wait_ms": m.get("pipeline_wait_ms"),
        "pred_step_ms": p.get("step_ms"),
        "pred_tokens_per_s": p.get("tokens_per_s"),
        "pred_mfu": p.get("mfu"),
        "pred_exposed_comm_ms": p.get("exposed_comm_ms"),
        "pred_bubble": p.get("bubble"),
        "pred_mem_bytes": pm.get("total"),
        "pred_params_bytes": pm.get("params"), "pred_grads_bytes": pm.get("grads"),
        "pred_optimizer_bytes": pm.get("optimizer"),
        "pred_activation_bytes": pm.get("activations"),
        "pred_comm_workspace_bytes": pm.get("comm_workspace"),
        "pred_baseline_bytes": pm.get("baseline"),
        "mem_gap_pct": gap(m.get("peak_mem_bytes"), pm.get("total")),
        "step_gap_pct": gap(m.get("step_ms"), p.get("step_ms")),
        "seconds": round(run.seconds, 1), "run_dir": os.path.relpath(run.dir, REPO),
    })
    return r


def fmt(x, f="{:.1f}"):
    return "" if x is None or x == "" else f.format(x)


def pp_cell(r):
    """'1', or '2 1f1b', '2 interleaved_1f1b v=2' for a pipeline."""
    if r["pp"] <= 1:
        return "1"
    v = r["pp_virtual_stages"]
    return f"{r['pp']} {r['pp_schedule']}" + (f" v={v}" if v and v > 1 else "")


def cp_cell(r):
    """'1', or '2 ring', '4 allgather' under context parallelism."""
    return "1" if r["cp"] <= 1 else f"{r['cp']} {r['cp_comm']}"


def write_outputs(args, runs, skipped, hardware_note):
    rows = [row_of(r) for r in runs]
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(os.path.join(args.out, "sweep.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in keys})
    ok = sorted([r for r in rows if r["status"] == "ok"], key=lambda r: -(r["tokens_per_s"] or 0))
    bad = [r for r in rows if r["status"] != "ok"]
    extra = [k for k in keys if "." in k]
    load = f"host load average {args.load[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end, " \
        f"{os.cpu_count()} cores"
    lines = [f"# Sweep: {args.world} ranks, {os.path.relpath(args.config, REPO)}", "",
             f"{len(runs)} runs; {load} (timings on a shared host move with its load).", "",
             f"{args.steps} steps per run; measured = median over steps >= 1 (peak memory: max of "
             "rank 0's peak resident set); predicted = `trainer plan` with "
             f"{hardware_note}; per-process baseline {args.baseline_note}. "
             "Gap = (predicted - measured) / measured.",
             "" if args.glibc_dynamic_mmap else
             f"Runs had MALLOC_MMAP_THRESHOLD_={args.mmap_threshold} (see --glibc-dynamic-mmap).",
             ""]
    if getattr(args, "baseline_failed", ""):
        # Loud, above the table: every "pred MiB" below rests on it.
        lines[2:2] = [f"**WARNING: {args.baseline_failed}.** Every predicted memory figure "
                      "below uses the hardware file's baseline_mib instead of this binary's "
                      "measured one, and can be far off.", ""]
    piped = any(r["pp"] > 1 for r in ok)
    ctx = any(r["cp"] > 1 for r in rows)
    head = ["#", "dp", "fsdp"] + (["cp"] if ctx else []) + ["tp", "pp", "stage", "mb"] + [
        k.split(".")[-1] for k in extra] + [
        "tokens/s", "MFU", "step ms", "peak MiB", "exposed comm ms"] + (
        ["bubble", "pred bubble", "pipeline wait ms"] if piped else []) + [
        "pred step ms", "pred tokens/s", "pred MiB", "mem gap", "step gap"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for i, r in enumerate(ok, 1):
        bubble = []
        if piped:
            bubble = [fmt(r["bubble_fraction"] * 100 if r["bubble_fraction"] is not None
                          else None, "{:.1f}%") or "-",
                      fmt(r["pred_bubble"] * 100 if r["pred_bubble"] is not None
                          else None, "{:.1f}%") or "-",
                      fmt(r["pipeline_wait_ms"]) or "-"]
        cells = [str(i), str(r["dp"]), str(r["fsdp"])] + ([cp_cell(r)] if ctx else []) + [
            str(r["tp"]), pp_cell(r), str(r["stage"] or "-"),
            str(r["micro_batch"])] + [str(r.get(k, "")) for k in extra] + [
            fmt(r["tokens_per_s"], "{:.0f}"),
            fmt(r["mfu"] * 100 if r["mfu"] is not None else None, "{:.2f}%"),
            fmt(r["step_ms"]), fmt(r["peak_mem_bytes"] / MIB if r["peak_mem_bytes"] else None),
            fmt(r["comm_exposed_ms"]) or "n/a"] + bubble + [fmt(r["pred_step_ms"]),
            fmt(r["pred_tokens_per_s"], "{:.0f}"),
            fmt(r["pred_mem_bytes"] / MIB if r["pred_mem_bytes"] else None),
            fmt(r["mem_gap_pct"], "{:+.1f}%"), fmt(r["step_gap_pct"], "{:+.0f}%")]
        lines.append("| " + " | ".join(cells) + " |")
    if ok:
        lines += ["", "MFU: PaLM's 6N+12LTC model FLOPs per token (N the matmul weights) x "
                  "tokens/s over the devices' peak in the hardware file (" + hardware_note +
                  "), as `trainer plan` predicts it; sweep.csv's mfu_measured_peak has the "
                  "trainer's own (over its measured peaks) where metrics.jsonl logged one."]
    if not any(r["comm_exposed_ms"] is not None for r in ok):
        lines += ["", "exposed comm: n/a (metrics.jsonl has no `comm_exposed_ms` in this build)."]
    if piped:
        lines += ["", "pp: pipeline stages (schedule, virtual stages v where > 1). bubble: mean "
                  "`bubble_fraction` of metrics.jsonl over steps >= 1; pred bubble: the plan's "
                  "`bubble` for the same pp, schedule and v; pipeline wait: mean "
                  "`pipeline_wait_ms`."]
        if any(r["pp"] > 1 and r["pred_step_ms"] is None for r in ok):
            lines += ["Pipeline rows without predictions: the plan lists no layout with that "
                      "schedule and v (its pipelines: "
                      + (", ".join(args.plan_pipelines) or "none") + ")."]
    if ctx:
        lines += ["", "cp: context-parallel ranks per sequence and parallel.cp_comm" +
                  ("" if "parallel.cp_load_balance" in extra
                   else f" (parallel.cp_load_balance={args.cp_load_balance})") + "."]
    gaps = [abs(r["mem_gap_pct"]) for r in ok if r["mem_gap_pct"] is not None]
    if gaps:
        lines += ["", f"Memory: predicted vs measured peak within {max(gaps):.1f}% on every "
                  f"layout that ran (mean |gap| {statistics.mean(gaps):.1f}%)."]
    sgaps = [r["step_gap_pct"] for r in ok if r["step_gap_pct"] is not None]
    if sgaps:
        lines += [f"Step time: predicted vs measured from {min(sgaps):+.0f}% to "
                  f"{max(sgaps):+.0f}%."]
    if bad:
        lines += ["", "## Failed", "", "| dp | fsdp | " + ("cp | " if ctx else "") +
                  "tp | pp | stage | mb | reason |",
                  "|---|---|---|---|---|---|" + ("---|" if ctx else "") + "---|"]
        for r in bad:
            lines.append(f"| {r['dp']} | {r['fsdp']} | " + (f"{cp_cell(r)} | " if ctx else "") +
                         f"{r['tp']} | {pp_cell(r)} | {r['stage'] or '-'} | "
                         f"{r['micro_batch']} | {r['reason'].replace('|', '/')} |")
    if any("global_batch" in r["reason"] for r in bad):
        lines += ["", "Batch failures: these layouts have more data ranks than train.global_batch "
                  "/ train.micro_batch allows; sweep a smaller micro-batch "
                  "(`--grid train.micro_batch=...`)."]
    if skipped:
        lines += ["", "Not run (the model rules them out; name parallel.tp, or for pipelines "
                  "parallel.pp, for context parallelism parallel.cp, in --grid to attempt them "
                  "anyway): " + "; ".join(skipped) + "."]
    with open(os.path.join(args.out, "sweep.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return ok


def plot(args, ok):
    path = os.path.join(args.out, "sweep.png")
    if args.no_plot:
        print("sweep.png: skipped (--no-plot)")
        return
    from plotting import pyplot
    plt = pyplot(path)
    labels = [(f"pp{r['pp']} " if r["pp"] > 1 else "") + f"{r['dp']}x{r['fsdp']}x"
              + (f"cp{r['cp']}x" if r["cp"] > 1 else "") + f"{r['tp']}"
              + (f" z{r['stage']}" if r["stage"] else "")
              + f" mb{r['micro_batch']}" for r in ok]
    x = range(len(ok))
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(max(7, 0.9 * len(ok) + 3), 8), sharex=True)
    w = 0.4
    a1.bar([i - w / 2 for i in x], [r["tokens_per_s"] or 0 for r in ok], w, label="measured")
    a1.bar([i + w / 2 for i in x], [r["pred_tokens_per_s"] or 0 for r in ok], w,
           label="predicted", alpha=0.6)
    a1.set_ylabel("tokens/s")
    a1.set_title(f"sweep: {args.world} ranks, {os.path.basename(args.config)} "
                 "([pp] dp x fsdp x [cp] x tp)")
    a1.legend()
    a2.bar([i - w / 2 for i in x], [(r["peak_mem_bytes"] or 0) / MIB for r in ok], w,
           label="measured peak (rank 0)")
    bottom = [0.0] * len(ok)
    for key, name in (("pred_baseline_bytes", "baseline"), ("pred_params_bytes", "params"),
                      ("pred_grads_bytes", "grads"), ("pred_optimizer_bytes", "AdamW"),
                      ("pred_activation_bytes", "activations"),
                      ("pred_comm_workspace_bytes", "MPI temporaries")):
        vals = [(r[key] or 0) / MIB for r in ok]
        a2.bar([i + w / 2 for i in x], vals, w, bottom=bottom, label=f"pred {name}", alpha=0.7)
        bottom = [b + v for b, v in zip(bottom, vals)]
    a2.set_ylabel("MiB per rank")
    a2.set_xticks(list(x))
    a2.set_xticklabels(labels, rotation=30, ha="right")
    a2.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.32))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")
