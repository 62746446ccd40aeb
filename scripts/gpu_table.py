#!/usr/bin/env python3
"""The one table scripts/gpu_check.sh prints, from what its stages left in the
log folder (read through scripts/run_logs.py): every stage's verdict, both
124M runs (tokens/s, MFU, memory, the profiled step's time split and
roofline), each op's floor from `trainer costs` beside its measured time, the
PyTorch agreement, the GPU tests per suite, compute-sanitizer's findings,
gpu_bench's rows and sampled checks, the measured peaks, ours/torch.compile,
and each layout's largest loss difference against one rank. Any FAILED row,
a failed check, or a layout whose losses differ from one rank's by more than
the tolerance makes it report failure; "warn" rows are listed, never failures.
It never makes a figure up: what a stage did not produce is printed as
"not measured" with the stage's status and log.

    python3 scripts/gpu_table.py LOGS [--trial] [--elapsed TEXT] [--tol 1e-4]

Exit status: 0 when nothing failed, 1 when something did, 2 on bad arguments.
Standard library only.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_logs import (  # noqa: E402
    InputError, gpu_bench_attention_ms, gpu_bench_checks, gpu_bench_peak, loss_diff,
    read_gpu_bench, read_json, read_metrics, read_stages, read_test_xml, run_summary,
    sanitizer_errors, time_split)

LOSS_TOL = 1e-4          # max |loss difference| of a layout against one rank
LAYOUTS = ("dp2", "fsdp2", "tp2", "pp2", "cp2", "cp2_ring")
TRAIN_RUNS = (("train-tc", "train_tc", "tensor-core attention"),
              ("train-simt", "train_simt", "SIMT attention"),
              ("train-llama", "train_llama", "Llama 3 8B's layers, 4 of them, tensor-core attention"),
              ("train-fp8", "train_fp8", "tensor-core attention, fp8 tensorwise linears"),
              ("train-llama-fp8", "train_llama_fp8",
               "Llama 3 8B's layers, 4 of them, fp8 tensorwise linears"))
# fp8 against bf16 in the same call, and issue 31's goal for each.
FP8_PAIRS = (("train-fp8", "train-tc", "124M", 1.0), ("train-llama-fp8", "train-llama", "8B layers", 1.3))


# ---------------------------------------------------------------- rendering

def fmt(x, spec=".1f", missing="-"):
    return missing if x is None else format(x, spec)


def gib(b):
    return None if b is None else b / 2**30


class Table:
    def __init__(self):
        self.lines, self.failed = [], []

    def __call__(self, text=""):
        self.lines.append(text)

    def fail(self, what):
        self.failed.append(what)


def stage_note(st):
    if st is None:
        return "not run"
    where = f" (see {os.path.basename(st['log'])})" if st["log"] else ""
    note = f": {st['note']}" if st["note"] else ""
    return f"{st['status']}{note}{where}"


def render_stages(t, stages):
    t("\nStages")
    t(f"  {'stage':<26}{'status':<9}{'time':>6}  log / note")
    for st in stages:
        secs = f"{st['seconds']}s" if st["seconds"] else ""
        log = os.path.basename(st["log"]) if st["log"] else ""
        t(f"  {st['name']:<26}{st['status']:<9}{secs:>6}  {' '.join(x for x in (log, st['note']) if x)}")
        if st["status"] == "FAILED":
            t.fail(f"{st['name']}: {st['note'] or 'failed'}" + (f" (see {log})" if log else ""))


def test_stages(stages):
    """The tests-* stages in the order they ran, with their XML paths."""
    return [st for st in stages if st["name"].startswith("tests-")]


def render_tests(t, logs, stage_list):
    t("\nGPU tests (gt_cuda_tests; one process per stage)")
    rows = test_stages(stage_list)
    if not rows:
        t("  no test stage ran")
        return
    t(f"  {'stage / suite':<44}{'passed':>8}{'failed':>8}{'skipped':>9}")
    tot = [0, 0, 0]
    for st in rows:
        xml = os.path.join(logs, st["name"] + ".xml")
        if not os.path.exists(xml):
            t(f"  {st['name']:<44}  no XML report: {stage_note(st)}")
            continue
        suites, failed = read_test_xml(xml)
        for name, p, f, s in suites:
            tot = [tot[0] + p, tot[1] + f, tot[2] + s]
            label = name if st["name"] == f"tests-{name}" else f"{st['name']}: {name}"
            t(f"  {label:<44}{p:>8}{f:>8}{s:>9}")
        for n in failed:
            t(f"  FAILED {n}")
            t.fail(f"gt_cuda_tests: {n}")
    t(f"  {'total':<44}{tot[0]:>8}{tot[1]:>8}{tot[2]:>9}")


def render_sanitizer(t, logs, stages):
    t("\ncompute-sanitizer (attention, cross-entropy, embedding tests; small shapes; non-fatal)")
    for tool in ("memcheck", "racecheck"):
        st = stages.get(tool)
        n = sanitizer_errors(os.path.join(logs, f"{tool}.log"))
        if st is None or n is None:
            t(f"  {tool:<10} {stage_note(st)}")
        else:
            t(f"  {tool:<10} {n} error(s) reported ({stage_note(st)})")


def render_costs(t, logs, stages):
    """`trainer costs`' floor of every op of the 124M step beside the time the
    profiled training run measured for it (roofline.json: same op names), the
    table of the attention kernels that run used (costs_tc.json for the
    tensor-core run, costs.json for the SIMT one)."""
    t("\nEvery op of the 124M step: its floor on the H200 (trainer costs) beside the measured time")
    measured, source, table = {}, None, "costs.json"
    for stage, run_name, what in TRAIN_RUNS:
        roof_path = os.path.join(logs, run_name, "roofline.json")
        if os.path.exists(roof_path):
            roof = read_json(roof_path)
            measured = {r.get("name"): r for r in roof.get("ops", []) if not r.get("subtotal")}
            source = (f"{what}, {roof.get('profiled_steps', '?')} profiled step(s) of "
                      f"{roof.get('step_ms', 0.0):.2f} ms")
            if stage == "train-tc" and os.path.exists(os.path.join(logs, "costs_tc.json")):
                table = "costs_tc.json"
            break
    path = os.path.join(logs, table)
    if not os.path.exists(path):
        t(f"  not computed: {stage_note(stages.get('costs'))}")
        return
    c = read_json(path)
    t(f"  table: {table} (attention: {c.get('attention', '?')})")
    peaks = c.get("peaks", {})
    t(f"  peaks: {peaks.get('source', '?')}; measured: "
      + (source or "none (no profiled training run: see train-tc)"))
    t(f"    {'class':<14}{'op':<46}{'calls':>6}{'floor ms':>10} {'measured':>10} {'x floor':>9}")
    for r in c.get("ops", []):
        name = r.get("name", "")
        short = name if len(name) <= 45 else name[:44] + "~"
        m = None if r.get("subtotal") else measured.get(name)
        ms = None if m is None else m.get("ms_per_step")
        x = None if not ms or not r.get("floor_ms") else ms / r["floor_ms"]
        ratio = "" if x is None else (f"{x:.2f}" if x < 1000 else f"{x:.3g}")
        t(f"    {r.get('class', ''):<14}{short:<46}{r.get('calls', 0):>6.0f}"
          f"{r.get('floor_ms', 0.0):>10.3f} {fmt(ms, '.3f'):>10} {ratio:>9}")
    t(f"  step floor {c.get('step_floor_ms', 0.0):.2f} ms; non-GEMM traffic "
      f"{c.get('non_gemm_bytes', 0.0) / 1e9:.2f} GB ({c.get('non_gemm_floor_ms', 0.0):.2f} ms of "
      f"the floor)")


def render_pytorch_check(t, logs, stages):
    t("\nAgainst an independent PyTorch GPT-2 (scripts/check_against_pytorch.py, "
      "runtime.device=cuda; torch: CPU fp32)")
    t(f"  {'dtype':<7}{'max rel loss':>14}{'max rel gnorm':>15}{'max weight diff':>17}"
      f"{'tolerance':>11}  result")
    for dt in ("fp32", "bf16"):
        st = stages.get(f"pytorch-{dt}")
        path = os.path.join(logs, f"pytorch-{dt}.json")
        if not os.path.exists(path):
            t(f"  {dt:<7}  not measured: {stage_note(st)}")
            continue
        r = read_json(path)
        tol = r.get("tolerances", {}).get("loss")
        t(f"  {dt:<7}{fmt(r.get('max_rel_loss'), '.2e'):>14}{fmt(r.get('max_rel_grad_norm'), '.2e'):>15}"
          f"{fmt(r.get('max_weight_diff'), '.2e'):>17}{fmt(tol, '.0e'):>11}  "
          + ("pass" if r.get("pass") else "FAILED"))
        if not r.get("pass"):
            t.fail(f"pytorch-{dt}: differs from PyTorch beyond the tolerance (see pytorch-{dt}.log)")


def render_gpu_bench(t, logs, rows, st, torch_res):
    t("\nBenchmark (gpu_bench; GPT-2 124M: B=16 T=1024 C=768, 12 heads of 64, LM head over the padded 50304)")
    if not rows:
        err = os.path.join(logs, "gpu_bench.csv")
        said = open(err).read().strip() if os.path.exists(err) else ""
        t(f"  not measured: {said + ' ' if said else ''}[{stage_note(st)}]")
        return
    peak = gpu_bench_peak(rows)
    t(f"  {'section':<10}{'name':<21}{'dtype':<6}{'M x N x K':>22}{'ms':>10}{'TFLOP/s':>10}"
      f"{'% peak':>8}{'GB/s':>8}")
    for r in rows:
        mem = r["section"] == "memory"
        shape = f"{r['M']}x{r['N']}" + ("" if mem else f"x{r['K']}")
        pct = (f"{100 * float(r['tflops']) / peak:.0f}"
               if peak > 0 and r["dtype"] == "bf16" and not mem else "")
        tf = "" if mem else f"{float(r['tflops']):.1f}"
        gbs = f"{float(r.get('gbs') or 0):.0f}" if mem else ""
        t(f"  {r['section']:<10}{r['name']:<21}{r['dtype']:<6}{shape:>22}{float(r['ms']):>10.3f}"
          f"{tf:>10}{pct:>8}{gbs:>8}")
    t(f"  measured bf16 GEMM peak: {peak:.1f} TFLOP/s (% peak: bf16 rows against it)")
    for line in gpu_bench_checks(os.path.join(logs, "gpu_bench.csv")):
        t(f"  {line}")
        if line.endswith("FAILED"):
            t.fail(f"gpu_bench {line}")
    sdpa = (torch_res or {}).get("sdpa_fwd_bwd_ms")
    for kernels, label in (("tensor_cores", "tensor-core"), ("simt", "SIMT")):
        ours = gpu_bench_attention_ms(rows, kernels=kernels)
        if ours is not None and sdpa:
            t(f"  attention fwd+bwd bf16, {label} kernels: ours {ours:.3f} ms, PyTorch SDPA "
              f"{sdpa:.3f} ms (ours/SDPA time {ours / sdpa:.2f}x)")


def render_peaks(t, logs, st):
    t("\nMeasured peaks (trainer bench, configs/gpt2_124m.yaml's runtime)")
    path = os.path.join(logs, "peaks.json")
    if not os.path.exists(path):
        t(f"  not measured: {stage_note(st)}")
        return None
    b = read_json(path)
    p = b.get("peaks", {})
    t(f"  {b.get('device', '?')} {b.get('dtype', '?')}: GEMM {fmt(p.get('gemm_tflops'))} TFLOP/s, "
      f"memory {fmt(p.get('mem_gbps'), '.0f')} GB/s")
    return b


def llm_c(v):
    """An llm.c-formula MFU was logged (GPT-2 runs only)."""
    return isinstance(v, (int, float))


def render_training(t, logs, stages, bench_rows, warmup):
    """Both 124M runs, side by side; the time split and roofline of the
    profiled one. Returns {stage: summary or None}."""
    t("\nGPT-2 124M bf16 training (configs/gpt2_124m.yaml, B=16 T=1024, 1 GPU, random tokens)")
    peak = gpu_bench_peak(bench_rows)
    sums = {}
    for stage, run_name, what in TRAIN_RUNS:
        run = os.path.join(logs, run_name)
        s = run_summary(run, warmup) if os.path.isdir(run) else None
        sums[stage] = s
        t(f"  {what} ({stage})")
        if s is None or s["tokens_per_s"] is None:
            t(f"    not measured: {stage_note(stages.get(stage))}")
            continue
        steps = s["timed_steps"]
        t(f"    tokens/s            {s['tokens_per_s']:,.0f}  (median of steps {steps[0]}-{steps[-1]},"
          f" {len(steps)} unprofiled steps after {warmup} warm-up; step {fmt(s['step_ms'])} ms)")
        # The headline: PaLM's formula over the datasheet's peak (what
        # Megatron and torchtitan quote), llm.c's formula beside it for
        # GPT-2; then the same FLOPs over the peaks this GPU measured.
        f = s["mfu_formula"]
        if s["mfu_datasheet"] is not None:
            sheet = s["mfu_datasheet_peak_tflops"]
            llmc = s["mfu_llmc_datasheet"]
            t(f"    MFU                 {100 * s['mfu_datasheet']:.1f}% ({f} over the datasheet's "
              f"{fmt(sheet, '.1f')} TFLOP/s bf16, profile.hardware)"
              + (f"; llm.c 6P+6LCT {100 * llmc:.1f}%" if llm_c(llmc) else ""))
        else:
            t("    MFU                 - (no datasheet peak: the run had no profile.hardware)")
        if peak > 0 and s["flops_per_token"]:
            mfu = s["flops_per_token"] * s["tokens_per_s"] / (peak * 1e12)
            t(f"    MFU (measured peak) {100 * mfu:.1f}% ({f} over the measured bf16 GEMM peak, "
              f"{peak:.1f} TFLOP/s, gpu_bench)")
        else:
            t("    MFU (measured peak) - (no bf16 GEMM peak: gpu_bench did not measure one)")
        t(f"    MFU (trainer)       {fmt(None if s['mfu'] is None else 100 * s['mfu'])}% ({f} over "
          f"the trainer's own measured peaks)")
        t(f"    peak memory         {fmt(gib(s['peak_mem_bytes']), '.2f')} GiB")
        t(f"    final loss          {fmt(s['final_loss'], '.4f')}")
    tc, simt = sums.get("train-tc"), sums.get("train-simt")
    if tc and simt and tc["tokens_per_s"] and simt["tokens_per_s"]:
        t(f"  tensor-core / SIMT tokens/s: {tc['tokens_per_s'] / simt['tokens_per_s']:.2f}x")
    for fp8, bf16, what, goal in FP8_PAIRS:
        a, b = sums.get(fp8), sums.get(bf16)
        if a and b and a["tokens_per_s"] and b["tokens_per_s"]:
            x = a["tokens_per_s"] / b["tokens_per_s"]
            t(f"  fp8 / bf16 tokens/s, {what}: {x:.2f}x (goal >= {goal:.1f}x: "
              f"{'met' if x >= goal else 'not met'})")
        else:
            t(f"  fp8 / bf16 tokens/s, {what}: not measured ({fp8}: "
              f"{stage_note(stages.get(fp8))}; {bf16}: {stage_note(stages.get(bf16))})")
    for stage, run_name, what in TRAIN_RUNS:
        roof_path = os.path.join(logs, run_name, "roofline.json")
        if not os.path.exists(roof_path):
            continue
        roof = read_json(roof_path)
        split, step_ms = time_split(roof)
        t(f"\n  Time split of a profiled step, {what} ({roof.get('profiled_steps', '?')} profiled "
          f"step(s), {step_ms:.2f} ms each; profiled steps synchronise after every op)")
        for name, ms in split:
            share = 100 * ms / step_ms if step_ms > 0 else 0.0
            t(f"    {name:<26}{ms:>10.2f} ms{share:>7.1f}%")
        render_roofline(t, roof)
    return sums


def render_roofline(t, roof):
    t(f"\n  Roofline (roofline.json; peaks: {roof.get('peaks', {}).get('source', '?')})")
    t(f"    {'class':<14}{'op':<46}{'calls':>6}{'ms':>9}{'step%':>7}{'TFLOP/s':>9}{'GB/s':>8}"
      f"{'bound':>9}{'%roof':>7}")

    def pct(x):
        return "" if x is None or x < 0 else f"{100 * x:.0f}"
    for r in roof.get("ops", []):
        name = r.get("name", "")
        name = name if len(name) <= 45 else name[:44] + "~"
        t(f"    {r.get('class', ''):<14}{name:<46}{r.get('calls_per_step', 0):>6.0f}"
          f"{r.get('ms_per_step', 0):>9.3f}{100 * r.get('step_share', 0):>7.1f}"
          f"{r.get('tflops', 0):>9.1f}{r.get('gbps', 0):>8.0f}{r.get('bound', ''):>9}"
          f"{pct(r.get('fraction_of_roofline')):>7}")
    for r in roof.get("comms", []):
        t(f"    {'comm':<14}{r.get('name', ''):<46}{r.get('calls_per_step', 0):>6.0f}"
          f"{r.get('exposed_ms_per_step', 0):>9.3f}{100 * r.get('step_share', 0):>7.1f}"
          f"{'':>9}{r.get('gbps', 0):>8.1f}{'network':>9}{pct(r.get('fraction_of_roofline')):>7}")


def render_layouts(t, logs, stages, tol):
    t(f"\nLayouts on one GPU (small GPT, fp32, parallel.comm=mpi) against 1 rank, "
      f"same global batch")
    t(f"  {'layout':<10}{'steps':>6}{'max |dloss|':>14}{'at step':>9}{'tol':>9}  result")
    ref_dir = os.path.join(logs, "layouts", "ref")
    ref_st = stages.get("layout-ref")
    ref = read_metrics(os.path.join(ref_dir, "metrics.jsonl")) \
        if ref_st and ref_st["status"] == "ok" else None
    for name in LAYOUTS:
        st = stages.get(f"layout-{name}")
        got_path = os.path.join(logs, "layouts", name, "metrics.jsonl")
        if st is None or st["status"] != "ok" or not os.path.exists(got_path):
            t(f"  {name:<10}{'':>6}{'':>14}{'':>9}{'':>9}  {stage_note(st)}")
            continue
        if ref is None:
            t(f"  {name:<10}{'':>6}{'':>14}{'':>9}{'':>9}  FAILED: no 1-rank reference "
              f"({stage_note(ref_st)})")
            t.fail(f"layout {name}: no 1-rank reference")
            continue
        worst, at, n = loss_diff(ref, read_metrics(got_path))
        ok = n > 0 and worst <= tol
        t(f"  {name:<10}{n:>6}{worst:>14.3e}{fmt(at, 'd'):>9}{tol:>9.0e}  "
          + ("pass" if ok else "FAILED"))
        if not ok:
            t.fail(f"layout {name}: losses differ from one rank's by {worst:.3e} > {tol:g} "
                   f"at step {at}")


def render_pytorch(t, logs, st):
    t("\nAgainst torch.compile (scripts/bench_vs_pytorch.py: the same GPT-2 124M step, bf16)")
    path = os.path.join(logs, "pytorch.json")
    if not os.path.exists(path):
        t(f"  not measured: {stage_note(st)}")
        return None
    r = read_json(path)
    t(f"  PyTorch {r.get('torch_version', '?')}{' (compiled)' if r.get('compiled') else ' (eager)'}"
      f": {fmt(r.get('pytorch_tokens_per_s'), ',.0f')} tokens/s; "
      f"ours {fmt(r.get('ours_tokens_per_s'), ',.0f')} tokens/s; "
      f"ours/PyTorch {fmt(r.get('ratio'), '.2f')}x")
    if r.get("sdpa_fwd_bwd_ms"):
        t(f"  SDPA causal attention fwd+bwd (B=16 T=1024 H=12 hs=64, bf16): "
          f"{r['sdpa_fwd_bwd_ms']:.3f} ms")
    for note in r.get("notes", []):
        t(f"  note: {note}")
    return r


def render(logs, trial=False, elapsed="", tol=LOSS_TOL, warmup=5, rehearsal=False):
    """The whole table as (text, list of failures)."""
    t = Table()
    gpu_txt = os.path.join(logs, "gpu.txt")
    gpu = open(gpu_txt).read().strip() if os.path.exists(gpu_txt) else "no nvidia-smi output"
    t(f"==== gpu_check ({'trial, no GPU' if trial else gpu}) ====")
    if rehearsal:
        t("  REHEARSAL on the emulated device, 124M shrunk to 2 layers of 128 at T=64: the commands "
          "and the plumbing are checked; no time, rate or MFU below is a GPU measurement")
    machine = os.path.join(logs, "machine.txt")
    if os.path.exists(machine):
        with open(machine) as f:
            for line in f:
                t(f"  {line.rstrip()}")
    stage_list = read_stages(os.path.join(logs, "stages.tsv"))
    stages = {s["name"]: s for s in stage_list}
    render_stages(t, stage_list)
    bench_rows = read_gpu_bench(os.path.join(logs, "gpu_bench.csv"))
    torch_path = os.path.join(logs, "pytorch.json")
    torch_res = read_json(torch_path) if os.path.exists(torch_path) else None
    render_training(t, logs, stages, bench_rows, warmup)
    render_costs(t, logs, stages)
    render_pytorch_check(t, logs, stages)
    render_tests(t, logs, stage_list)
    render_sanitizer(t, logs, stages)
    render_gpu_bench(t, logs, bench_rows, stages.get("gpu-bench"), torch_res)
    render_peaks(t, logs, stages.get("peaks"))
    render_pytorch(t, logs, stages.get("torch-compile"))
    render_layouts(t, logs, stages, tol)
    warned = [s["name"] for s in stage_list if s["status"] == "warn"]
    t(f"\nlogs: {logs}" + (f"   elapsed: {elapsed}" if elapsed else ""))
    if warned:
        t(f"warnings (non-fatal): {', '.join(warned)}")
    if t.failed:
        t(f"FAILED ({len(t.failed)}):")
        for f in t.failed:
            t(f"  - {f}")
    return "\n".join(t.lines) + "\n", t.failed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", help="gpu_check's log folder")
    ap.add_argument("--trial", action="store_true", help="the run was gpu_check.sh --trial")
    ap.add_argument("--rehearsal", action="store_true",
                    help="the run was gpu_check.sh --rehearse (the emulated device)")
    ap.add_argument("--elapsed", default="", help="printed as is")
    ap.add_argument("--tol", type=float, default=LOSS_TOL,
                    help=f"max |loss difference| of a layout against one rank (default {LOSS_TOL})")
    ap.add_argument("--warmup", type=int, default=5,
                    help="steps left out of the tokens/s median (default 5)")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.logs):
        ap.error(f"{a.logs} is not a directory")
    if a.tol <= 0 or a.warmup < 0:
        ap.error("--tol must be > 0 and --warmup >= 0")
    try:
        text, failed = render(a.logs, a.trial, a.elapsed, a.tol, a.warmup, a.rehearsal)
    except (InputError, OSError) as e:
        print(f"gpu_table: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
