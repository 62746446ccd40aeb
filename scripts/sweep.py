#!/usr/bin/env python3
"""Run every parallel layout of N ranks and tabulate what each achieved.

    scripts/sweep.py --world 4 --config configs/sweep.yaml
    scripts/sweep.py --world 4 --config configs/default.yaml \\
        --grid parallel.fsdp_stage=1,2,3 train.micro_batch=2,4

Layouts: every factorisation pp x dp x fsdp x cp x tp = N whose tp divides
the model's heads, channels and vocabulary, whose pipeline has at most one
chunk per layer (pp x parallel.pp_virtual_stages <= model.n_layer) and whose
cp cuts train.seq_len into equal chunks (2 cp of them with
parallel.cp_load_balance), with FSDP stages only where fsdp > 1, crossed with
the grid. A layout axis named in the grid (parallel.pp, parallel.dp,
parallel.fsdp, parallel.cp, parallel.tp) restricts the enumeration to those
values, and a value that cannot make N ranks or that the model rules out is
still attempted, so its failure is recorded with the trainer's own error
line. Pipeline runs (pp > 1) use the config's parallel.pp_schedule and
parallel.pp_virtual_stages unless the grid names them; like
parallel.fsdp_stage, those two apply only where pp > 1, and
parallel.cp_comm only where cp > 1 (parallel.cp_load_balance is an ordinary
key: the planner reads it from the config it is given). For a mixture,
parallel.ep is a grid key too (`--grid parallel.ep=1,2`; folded out of the
data ranks, it is not a factor of N): each run is matched with the plan's
layout of the same ep, and an ep that does not divide the run's data ranks
fails with the trainer's error line.

Each run is `mpirun --oversubscribe -np N build/trainer --config FILE ...` for
--steps steps (evaluation off), under a timeout. A run that fails (invalid
layout, out of memory, timeout) is recorded with its reason; the sweep goes on.

Predictions come from `build/trainer plan --json -` with --hardware (default
configs/hardware/cpu_reference.yaml) and are printed beside the measurements;
the gaps are reported as they are. The per-process memory they add is
measured first with the binary in use (rank 0's peak resident set of a
1-layer, 16-channel run, less the planner's prediction for it), not taken
from the hardware file: a build with CUDA maps its libraries (~200 MiB) into
every process, CPU runs included. --baseline-mib gives it instead.

Writes into --out (default runs/sweep-<timestamp>; sweep_report.py):
  sweep.csv   one row per run, measured and predicted
  sweep.md    the Markdown table, fastest first, failures last with their reason
  sweep.png   throughput and peak memory per layout (needs matplotlib)
  runs/<layout>/  each run's log.dir (metrics.jsonl, output.txt)

Measured: median tokens/s and step_ms over the steps after the first,
max peak_mem_bytes (rank 0's peak resident set), mean comm_exposed_ms; MFU
by one formula and one peak for every run: PaLM's 6N+12LTC model FLOPs over
the --hardware file's peak, from the measured step time (the plan's MFU x
predicted / measured step time: the same FLOPs and peak the prediction
divides); the trainer's own mfu (over its measured peaks) when
metrics.jsonl has one, in sweep.csv's mfu_measured_peak; for
pipeline runs the mean bubble_fraction and pipeline_wait_ms, beside the
plan's predicted bubble for the same pp, schedule and virtual stages (a run
whose schedule and virtual stages the plan does not list, gpipe for one, has
no prediction).

Standard library only, except matplotlib for the plot.
"""

import argparse
import csv
import datetime
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import progress  # scripts/: the shared progress line
import run_logs  # scripts/, standard library only
import sweep_report  # scripts/: sweep.csv, sweep.md, sweep.png
from sweep_report import MIB, gap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LAYOUT_KEYS = ("parallel.dp", "parallel.fsdp", "parallel.tp", "parallel.pp", "parallel.cp")
# Keys that apply only where pp > 1 (as parallel.fsdp_stage does where fsdp
# > 1, and parallel.cp_comm where cp > 1: the planner lists both modes).
PP_KEYS = ("parallel.pp_schedule", "parallel.pp_virtual_stages")
PER_LAYOUT_KEYS = ("parallel.fsdp_stage", "parallel.cp_comm") + PP_KEYS
# glibc raises its mmap threshold to the size of each large block freed, after
# which MPI's collective temporaries come from the heap and stay resident: the
# peak then depends on allocation history. Pinned, they are mapped and
# returned when freed, and the peak is what is live (what the planner models).
MMAP_THRESHOLD = 1 << 20


def parse_grid(items):
    """['a.b=1,2', 'c.d=x'] -> [('a.b', ['1', '2']), ('c.d', ['x'])]"""
    grid = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or "." not in key or not values:
            raise SystemExit(f"error: --grid {item!r}: expected section.key=v1,v2,...")
        if key in (k for k, _ in grid):
            raise SystemExit(f"error: --grid names {key} twice")
        grid.append((key, [v for v in values.split(",") if v != ""]))
    return grid


def parse_set(items):
    """--set's 'section.key=value' items, checked: one clear error for a
    malformed one (the trainer would refuse it in every run)."""
    for item in items:
        key, sep, _ = item.partition("=")
        if not sep or "." not in key:
            raise SystemExit(f"error: --set {item!r}: expected section.key=value")
    return list(items)


def merge_overrides(*groups):
    """One 'key=value' per key from lists of overrides, a later list's value
    winning (the trainer takes each key once): --set first, then what a run
    must set itself (its layout, its grid point, the sweep's own keys), so
    `--set train.micro_batch=2` and a grid or baseline micro-batch merge
    instead of failing the run."""
    merged = {}
    for group in groups:
        for item in group:
            key, _, value = item.partition("=")
            merged.pop(key, None)  # the winner goes where it was given
            merged[key] = value
    return [f"{k}={v}" for k, v in merged.items()]


def factorisations(n):
    """(dp, fsdp, tp, pp, cp) with dp x fsdp x cp x tp x pp = n; pp = 1 and
    cp = 1 first, so the layouts without them come in the order they always
    did."""
    for pp in range(1, n + 1):
        if n % pp:
            continue
        m = n // pp
        for tp in range(1, m + 1):
            if m % tp:
                continue
            for cp in range(1, m // tp + 1):
                if (m // tp) % cp:
                    continue
                d = m // tp // cp
                for fsdp in range(1, d + 1):
                    if d % fsdp == 0:
                        yield d // fsdp, fsdp, tp, pp, cp


class Run:
    """One attempt: a layout, the non-layout grid values, and what came of it."""

    def __init__(self, dp, fsdp, tp, stage, point, pp=1, schedule=None, vstages=None, cp=1,
                 cp_comm=None):
        self.dp, self.fsdp, self.tp, self.stage = dp, fsdp, tp, stage
        self.pp = pp
        # Context parallelism: the grid's parallel.cp_comm, or None for the config's.
        self.cp, self.cp_comm = cp, cp_comm
        self.config_cp_comm = "allgather"  # the config's (enumerate_runs)
        # Pipeline runs only: the grid's parallel.pp_schedule /
        # pp_virtual_stages, or None for the config's.
        self.schedule, self.vstages = schedule, vstages
        self.point = dict(point)  # non-layout grid key -> value
        self.config_schedule, self.config_vstages = "1f1b", 1  # the config's (enumerate_runs)
        self.status, self.reason = "pending", ""
        self.measured, self.predicted = {}, {}
        self.micro_batch = None
        self.seconds = 0.0
        self.dir = ""

    def label(self):
        s = f"dp={self.dp} fsdp={self.fsdp}"
        if self.cp > 1:
            s += f" cp={self.cp} {self.cp_comm_used()}"
        s += f" tp={self.tp}"
        if self.fsdp > 1 and self.stage is not None:
            s += f" stage={self.stage}"
        if self.pp > 1:
            s += f" pp={self.pp} {self.pp_schedule()}"
            if self.pp_vstages() > 1:
                s += f" v={self.pp_vstages()}"
        for k, v in self.point.items():
            if k not in PER_LAYOUT_KEYS:
                s += f" {k.split('.')[-1]}={v}"
        return s

    def pp_schedule(self):
        """The schedule this run uses (None without a pipeline)."""
        if self.pp <= 1:
            return None
        return self.schedule if self.schedule is not None else self.config_schedule

    def cp_comm_used(self):
        """parallel.cp_comm of this run (None without context parallelism)."""
        if self.cp <= 1:
            return None
        return self.cp_comm if self.cp_comm is not None else self.config_cp_comm

    def grid_values(self):
        """The grid's values of keys that are not a layout's (the planner's overrides too)."""
        return {k: v for k, v in self.point.items() if k not in PER_LAYOUT_KEYS}

    def pp_vstages(self):
        if self.pp <= 1:
            return 1
        return int(self.vstages if self.vstages is not None else self.config_vstages)

    def name(self):
        return self.label().replace(" ", "_").replace("=", "")

    def overrides(self):
        o = [f"parallel.dp={self.dp}", f"parallel.fsdp={self.fsdp}", f"parallel.tp={self.tp}",
             f"parallel.pp={self.pp}", f"parallel.cp={self.cp}"]
        if self.cp_comm is not None:
            o.append(f"parallel.cp_comm={self.cp_comm}")
        if self.stage is not None:
            o.append(f"parallel.fsdp_stage={self.stage}")
        if self.schedule is not None:
            o.append(f"parallel.pp_schedule={self.schedule}")
        if self.vstages is not None:
            o.append(f"parallel.pp_virtual_stages={self.vstages}")
        o += [f"{k}={v}" for k, v in self.point.items() if k not in PER_LAYOUT_KEYS]
        return o


def plan_predictions(args, point, baseline_mib=None):
    """(predictions keyed by pred_key, plan json, error).
    baseline_mib: the per-process memory to add (default: args.baseline_mib,
    else the hardware file's)."""
    cmd = [args.trainer, "plan", "--config", args.config, "--hardware", args.hardware,
           "--gpus", str(args.world), "--json", "-"]
    if args.peaks:
        cmd += ["--peaks", args.peaks]
    if baseline_mib is None:
        baseline_mib = args.baseline_mib
    if baseline_mib is not None:
        cmd += ["--baseline-mib", f"{baseline_mib:.1f}"]
    # parallel.ep is the plan's to enumerate (like the per-layout keys): the
    # config it loads has one rank's dp, which no ep > 1 divides.
    cmd += merge_overrides(args.set, [f"{k}={v}" for k, v in point.items()
                                      if k not in PER_LAYOUT_KEYS and k != "parallel.ep"])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {}, None, error_line(p.stdout + p.stderr) or f"plan exited {p.returncode}"
    plan = json.loads(p.stdout)[0]
    out = {}
    for lay in plan["layouts"]:
        pp = lay.get("pp", 1)
        out[pred_key(lay["dp"], lay["fsdp"], lay["tp"], pp, lay["stage"], lay["micro_batch"],
                     lay.get("pp_schedule"), lay.get("pp_virtual_stages", 1), lay.get("cp", 1),
                     lay.get("cp_comm"), lay.get("ep", 1))] = lay
    return out, plan, ""


def pred_key(dp, fsdp, tp, pp, stage, mb, schedule=None, vstages=1, cp=1, cp_comm=None, ep=1):
    """A plan layout's identity: the schedule and virtual stages count only
    for a pipeline (the plan lists 1f1b and interleaved_1f1b for each pp),
    parallel.cp_comm only under context parallelism (it lists both modes),
    parallel.ep for a mixture (the plan lists each ep; a grid key here)."""
    ctx = ((cp, cp_comm) if cp > 1 else (1, None)) + (int(ep),)
    if pp > 1:
        return (dp, fsdp, tp, pp, stage, mb, schedule, int(vstages)) + ctx
    return (dp, fsdp, tp, 1, stage, mb, None, 1) + ctx


def error_line(text):
    """The trainer's own 'error: ...' line, without the log prefix."""
    for line in text.splitlines():
        i = line.find("error: ")
        if i >= 0:
            return line[i + len("error: "):].strip()
    for line in text.splitlines():
        if "signal 9" in line or "Killed" in line:
            return "killed by signal 9 (out of memory?)"
    return ""


def enumerate_runs(args, grid, plan_of):
    """Every Run to attempt, and lines about layouts left out."""
    layout_grid = {k: [int(v) for v in vals] for k, vals in grid if k in LAYOUT_KEYS}
    stages = next((vals for k, vals in grid if k == "parallel.fsdp_stage"), None)
    schedules = next((vals for k, vals in grid if k == "parallel.pp_schedule"), None)
    vstages = next((vals for k, vals in grid if k == "parallel.pp_virtual_stages"), None)
    cp_comms = next((vals for k, vals in grid if k == "parallel.cp_comm"), None)
    other = [(k, vals) for k, vals in grid if k not in LAYOUT_KEYS + PER_LAYOUT_KEYS]
    other_points = [dict(zip([k for k, _ in other], combo))
                    for combo in itertools.product(*[vals for _, vals in other])] or [{}]
    config_v = config_value(args, "parallel", "pp_virtual_stages", "1")
    runs, skipped = [], []
    for point in other_points:
        preds, plan, _ = plan_of(point)
        # What the model rules out, by the axis whose value does (a layout
        # named in the grid is attempted anyway): tp not dividing it, cp not
        # cutting the sequence or leaving rows tp cannot split.
        invalid = {}
        for lay in (plan or {}).get("layouts", []):
            why = lay.get("invalid", "")
            axis = ("parallel.tp" if "does not divide" in why else
                    "parallel.cp" if why.startswith("cp=") or "per cp rank" in why else None)
            if axis:
                key = (lay["dp"], lay["fsdp"], lay["tp"], lay.get("pp", 1), lay.get("cp", 1))
                invalid[key] = (axis, why)
        n_layer = (plan or {}).get("model", {}).get("n_layer")
        if n_layer is None:
            n_layer = int(point.get("model.n_layer", config_value(args, "model", "n_layer", "0")))
        layouts = []
        for lay in factorisations(args.world):
            if any(dict(zip(LAYOUT_KEYS, lay))[k] not in vals for k, vals in layout_grid.items()):
                continue
            dp, fsdp, tp, pp, cp = lay
            if lay in invalid and not layout_grid.get(invalid[lay][0]):
                skipped.append(f"dp={dp} fsdp={fsdp}" + (f" cp={cp}" if cp > 1 else "") +
                               f" tp={tp}" + (f" pp={pp}" if pp > 1 else "") +
                               f": {invalid[lay][1]}")
                continue
            layouts.append(lay)
        # Grid values that make no factorisation of N: attempted as given.
        named = [k for k in LAYOUT_KEYS if k in layout_grid]
        for combo in itertools.product(*[layout_grid[k] for k in named]):
            given = dict(zip(named, combo))
            if any(all(dict(zip(LAYOUT_KEYS, l))[k] == v for k, v in given.items())
                   for l in factorisations(args.world)):
                continue
            free = [k for k in LAYOUT_KEYS if k not in given]
            prod = 1
            for v in given.values():
                prod *= v
            vals = {k: 1 for k in free}
            if free and args.world % prod == 0:
                vals[free[0]] = args.world // prod
            vals.update(given)
            layouts.append(tuple(vals[k] for k in LAYOUT_KEYS))
        for dp, fsdp, tp, pp, cp in layouts:
            for stage in (stages if fsdp > 1 and stages else [None]):
                for comm in (cp_comms if cp > 1 and cp_comms else [None]):
                    if pp == 1:
                        runs.append(Run(dp, fsdp, tp, stage, point, cp=cp, cp_comm=comm))
                        continue
                    for sched in (schedules or [None]):
                        for v in (vstages or [None]):
                            # One block per chunk at least: pp x v chunks
                            # need n_layer >= pp x v (attempted anyway where
                            # the grid names parallel.pp or
                            # parallel.pp_virtual_stages).
                            v_run = int(v if v is not None else config_v)
                            if (n_layer and pp * v_run > n_layer and not vstages
                                    and not layout_grid.get("parallel.pp")):
                                if (stage == (stages[0] if fsdp > 1 and stages else None)
                                        and comm == (cp_comms[0] if cp > 1 and cp_comms
                                                     else None)):
                                    skipped.append(
                                        f"dp={dp} fsdp={fsdp} tp={tp} pp={pp}: pp x v = {pp} x "
                                        f"{v_run} chunks need model.n_layer >= {pp * v_run} "
                                        f"(it is {n_layer})")
                                continue
                            runs.append(Run(dp, fsdp, tp, stage, point, pp, sched, v, cp, comm))
    config_schedule = config_value(args, "parallel", "pp_schedule", "1f1b")
    config_cp_comm = config_value(args, "parallel", "cp_comm", "allgather")
    for run in runs:
        run.config_schedule, run.config_vstages = config_schedule, int(config_v)
        run.config_cp_comm = config_cp_comm
    return runs, skipped


def read_metrics(path):
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                recs.append(json.loads(line))
    return recs


def summarise(recs):
    """Measured figures from metrics.jsonl records."""
    steady = [r for r in recs if r.get("step", 0) >= 1] or recs
    m = {}
    tps = [r["tokens_per_s"] for r in steady if r.get("tokens_per_s") is not None]
    ms = [r["step_ms"] for r in steady if r.get("step_ms") is not None]
    if tps:
        m["tokens_per_s"] = statistics.median(tps)
    if ms:
        m["step_ms"] = statistics.median(ms)
    peaks = [r["peak_mem_bytes"] for r in recs if r.get("peak_mem_bytes")]
    if peaks:
        m["peak_mem_bytes"] = max(peaks)
    exposed = [r["comm_exposed_ms"] for r in steady if r.get("comm_exposed_ms") is not None]
    if exposed:
        m["comm_exposed_ms"] = statistics.mean(exposed)
    mfu = [r["mfu"] for r in steady if r.get("mfu") is not None]
    if mfu:
        m["mfu"] = statistics.median(mfu)
    for key in ("bubble_fraction", "pipeline_wait_ms"):  # pipeline runs
        vals = [r[key] for r in steady if r.get(key) is not None]
        if vals:
            m[key] = statistics.mean(vals)
    m["steps"] = len(recs)
    return m


# The smallest model the sweep's data still trains: what it holds is a few
# hundred KiB, so its peak is the process itself (binary, the libraries it
# maps, MPI, BLAS). A Llama's one head shares one key/value head (its
# config's n_kv_head would exceed it).
BASELINE_MODEL = {"model.n_layer": 1, "model.n_embd": 16, "model.n_head": 1,
                  "train.micro_batch": 1}
BASELINE_LLAMA = {"model.n_kv_head": 1}


def config_value(args, section, key, default):
    """section.key of the swept config as text: a --set override, else the
    file's, else default (the trainer's default)."""
    for item in reversed(args.set):
        k, sep, value = item.partition("=")
        if sep and k == f"{section}.{key}":
            return value
    value = run_logs.read_resolved_config(args.config).get(section, {}).get(key, default)
    return value.strip("'\"")


def model_arch(args):
    """model.arch of the swept config (gpt2 when it names none)."""
    return config_value(args, "model", "arch", "gpt2")


def measure_baseline(args):
    """Per-process memory of this binary under the sweep's launcher, in MiB:
    rank 0's peak resident set training BASELINE_MODEL for one step at dp =
    world, less what the planner predicts that run holds. (None, why) when
    the run or the planner fails."""
    point = dict(BASELINE_MODEL, **{"train.global_batch": args.world})
    if model_arch(args) in ("llama", "mixtral"):
        point.update(BASELINE_LLAMA)
    run = Run(args.world, 1, 1, None, point)
    run.dir = os.path.join(args.out, "runs", "baseline")
    os.makedirs(run.dir, exist_ok=True)
    cmd, env = launch(args, run, run.dir, steps=1)
    with open(os.path.join(run.dir, "output.txt"), "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        try:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            return None, f"the baseline run timed out after {args.timeout:.0f} s"
    metrics = os.path.join(run.dir, "metrics.jsonl")
    if rc != 0 or not os.path.exists(metrics):
        return None, f"the baseline run failed (exit {rc}; see {run.dir}/output.txt)"
    peak = summarise(read_metrics(metrics)).get("peak_mem_bytes")
    preds, _, err = plan_predictions(args, point, baseline_mib=0.0)
    pred = preds.get(pred_key(args.world, 1, 1, 1, None, 1), {}).get("memory_bytes", {}).get("total")
    if not peak or pred is None:
        return None, f"no peak memory or prediction for the baseline run ({err or 'no layout'})"
    return max(0.0, (peak - pred) / MIB), ""


def launch(args, run, run_dir, steps=None):
    cmd = [args.trainer, "--config", args.config] + merge_overrides(args.set, run.overrides(), [
        f"train.steps={steps or args.steps}", "train.eval_every=0", "checkpoint.every=0",
        "checkpoint.resume=none", f"log.dir={run_dir}", "log.every=1"])
    if args.world > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(args.world)] + cmd
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if not args.glibc_dynamic_mmap:
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
        if args.world > 1:
            cmd[1:1] = ["-x", "MALLOC_MMAP_THRESHOLD_"]
    return cmd, env


def execute(args, run, index, total):
    run.dir = os.path.join(args.out, "runs", f"{index:03d}_{run.name()}")
    os.makedirs(run.dir, exist_ok=True)
    cmd, env = launch(args, run, run.dir)
    print(f"[{index}/{total}] {run.label()}: running", flush=True)
    t0 = time.time()
    with open(os.path.join(run.dir, "output.txt"), "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = None
    run.seconds = time.time() - t0
    with open(os.path.join(run.dir, "output.txt")) as f:
        output = f.read()
    metrics = os.path.join(run.dir, "metrics.jsonl")
    if rc is None:
        run.status, run.reason = "failed", f"timeout after {args.timeout:.0f} s"
    elif rc != 0:
        run.status = "failed"
        run.reason = error_line(output) or f"exit code {rc} (see {run.dir}/output.txt)"
    elif not os.path.exists(metrics) or not read_metrics(metrics):
        run.status, run.reason = "failed", "no metrics.jsonl written"
    else:
        run.status = "ok"
    if os.path.exists(metrics):
        run.measured = summarise(read_metrics(metrics))
    if not args.keep:  # checkpoints and exports are large and not what a sweep is for
        shutil.rmtree(os.path.join(run.dir, "checkpoints"), ignore_errors=True)
        try:
            os.remove(os.path.join(run.dir, "model.safetensors"))
        except FileNotFoundError:
            pass


def attach_prediction(run, preds, config_mb):
    mb = int(run.point.get("train.micro_batch", config_mb))
    run.micro_batch = mb
    stage = run.stage if run.fsdp > 1 else None
    if run.fsdp > 1 and stage is None:
        stage = run.config_stage
    p = preds.get(pred_key(run.dp, run.fsdp, run.tp, run.pp,
                           int(stage) if stage is not None else None, mb,
                           run.pp_schedule(), run.pp_vstages(), run.cp, run.cp_comm_used(),
                           run.point.get("parallel.ep", 1)))
    if p and "invalid" not in p:
        run.predicted = p
    # MFU x step time is the model FLOPs over the devices' peak: the same for
    # every layout of this point, so a run the plan does not list (gpipe)
    # takes it from any layout the plan predicts.
    m = run.measured
    q = run.predicted or next((v for v in preds.values()
                               if "invalid" not in v and v.get("mfu") and v.get("step_ms")), None)
    if q and m.get("step_ms"):
        m["mfu_palm_sheet"] = q["mfu"] * q["step_ms"] / m["step_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--world", type=int, required=True, help="ranks per run")
    ap.add_argument("--config", required=True)
    ap.add_argument("--grid", nargs="*", default=[], metavar="KEY=V1,V2",
                    help="config keys to sweep (parallel.fsdp_stage applies where fsdp > 1, "
                    "parallel.pp_schedule and parallel.pp_virtual_stages where pp > 1, "
                    "parallel.cp_comm where cp > 1)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=V",
                    help="overrides applied to every run and to the planner")
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per run (default 6)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    ap.add_argument("--out", default=None, help="default runs/sweep-<timestamp>")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--hardware", default=os.path.join(REPO, "configs/hardware/cpu_reference.yaml"))
    ap.add_argument("--peaks", default="", help="bench JSON for the planner (trainer bench --out)")
    ap.add_argument("--baseline-mib", type=float, default=None, metavar="MIB",
                    help="per-process memory the predictions add (default: measured with "
                    "this binary, see BASELINE_MODEL; the hardware file's baseline_mib "
                    "if that fails)")
    ap.add_argument("--keep", action="store_true", help="keep checkpoints and model exports")
    ap.add_argument("--no-plot", action="store_true", help="write no sweep.png")
    ap.add_argument("--glibc-dynamic-mmap", action="store_true",
                    help="leave glibc's dynamic mmap threshold alone (by default the runs get "
                    "MALLOC_MMAP_THRESHOLD_=1 MiB, so freed MPI temporaries leave the peak)")
    args = ap.parse_args()
    args.set = parse_set(args.set)
    args.baseline_failed = ""
    if not args.no_plot:
        sys.path.insert(0, HERE)
        from plotting import use_an_interpreter_with_matplotlib
        use_an_interpreter_with_matplotlib()
    if args.world < 1:
        ap.error("--world must be >= 1")
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    args.trainer = os.path.join(os.path.abspath(args.build), "trainer")
    if not os.path.exists(args.trainer):
        raise SystemExit(f"error: {args.trainer} not found (build first: cmake --build build)")
    for path in (args.config, args.hardware):
        if not os.path.exists(path):
            raise SystemExit(f"error: {path} not found")
    if args.world > 1 and not shutil.which("mpirun"):
        raise SystemExit("error: mpirun not found (scripts/install_deps.sh installs Open MPI)")
    args.config = os.path.abspath(args.config)
    args.out = os.path.abspath(args.out or os.path.join(
        REPO, "runs", "sweep-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")))
    os.makedirs(args.out, exist_ok=True)
    grid = parse_grid(args.grid)
    args.load = os.getloadavg()
    args.mmap_threshold = MMAP_THRESHOLD
    args.cp_load_balance = config_value(args, "parallel", "cp_load_balance", "true")
    if args.baseline_mib is None:
        print("sweep: measuring this binary's per-process memory (a 1-layer, 16-channel run)",
              flush=True)
        args.baseline_mib, why = measure_baseline(args)
        args.baseline_failed = why
        if args.baseline_mib is None:
            print(f"sweep: WARNING: {why}; every memory prediction uses the hardware file's "
                  "baseline_mib instead, which can be far from this binary's", flush=True)
            args.baseline_note = "the hardware file's baseline_mib (measuring it failed)"
        else:
            print(f"sweep: baseline {args.baseline_mib:.1f} MiB per process", flush=True)
            args.baseline_note = (f"{args.baseline_mib:.1f} MiB measured: rank 0's peak resident "
                                  "set of a 1-layer, 16-channel run of this binary less its "
                                  "predicted buffers")
    else:
        args.baseline_note = f"{args.baseline_mib:.1f} MiB (--baseline-mib)"

    cache = {}

    def plan_of(point):
        key = tuple(sorted((k, v) for k, v in point.items() if k not in PER_LAYOUT_KEYS))
        if key not in cache:
            cache[key] = plan_predictions(args, dict(key))
            if cache[key][2]:
                print(f"planner: no predictions for {dict(key) or 'the config'}: {cache[key][2]}")
        return cache[key]

    runs, skipped = enumerate_runs(args, grid, plan_of)
    base_plan = plan_of({})[1]
    config_mb = base_plan["config"]["micro_batch"] if base_plan else 0
    cfg_stage = base_plan["config"]["fsdp_stage"] if base_plan else None
    hardware_note = os.path.relpath(args.hardware, REPO)
    if base_plan:
        hardware_note += f": matmuls at {base_plan['hardware']['efficiency']}".replace(REPO + "/", "")
    for s in skipped:
        print(f"skipped {s}")
    print(f"sweep: {len(runs)} runs of {args.world} rank(s), {args.steps} steps each, "
          f"into {os.path.relpath(args.out, REPO)}", flush=True)
    args.plan_pipelines = sorted({f"{l['pp_schedule']}" + (
        f" v={l['pp_virtual_stages']}" if l.get("pp_virtual_stages", 1) > 1 else "")
        for l in (base_plan or {}).get("layouts", [])
        if l.get("pp", 1) > 1 and "invalid" not in l and l.get("pp_schedule")})
    started = time.monotonic()
    for i, run in enumerate(runs, 1):
        run.config_stage = cfg_stage
        execute(args, run, i, len(runs))
        attach_prediction(run, plan_of(run.point)[0], config_mb)
        m, p = run.measured, run.predicted
        if run.status == "ok":
            mem = m.get("peak_mem_bytes")
            pm = p.get("memory_bytes", {}).get("total")
            msg = (f"ok in {run.seconds:.1f} s: {m.get('tokens_per_s', 0):.0f} tokens/s, "
                   f"{m.get('step_ms', 0):.1f} ms/step")
            if mem:
                msg += f", peak {mem / MIB:.0f} MiB"
            if mem and pm:
                msg += f" (predicted {pm / MIB:.0f} MiB, {gap(mem, pm):+.1f}%)"
        else:
            msg = f"FAILED in {run.seconds:.1f} s: {run.reason}"
        print(f"[{i}/{len(runs)}] {run.label()}: {msg}", flush=True)
        failed = sum(r.status != "ok" for r in runs[:i])
        print(progress.format_line("sweep", i, len(runs), "runs", time.monotonic() - started,
                                   [f"{failed} failed"]), flush=True)
    ok = sweep_report.write_outputs(args, runs, skipped, hardware_note)
    print(f"wrote {os.path.join(args.out, 'sweep.csv')} and sweep.md "
          f"({len(ok)} ok, {len(runs) - len(ok)} failed)")
    if args.baseline_failed:
        print(f"sweep: WARNING: {args.baseline_failed}: the predicted memory uses the hardware "
              "file's baseline_mib (see the warning in sweep.md)")
    if any("global_batch" in r.reason for r in runs if r.status != "ok"):
        print("hint: some layouts need a smaller train.micro_batch (--grid train.micro_batch=...)")
    sweep_report.plot(args, ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
