#!/usr/bin/env python3
"""Readers of what the trainer and gpu_check's stages leave on disk, and the
figures derived from them, shared by scripts/gpu_table.py (gpu_check's
table) and scripts/bench_vs_pytorch.py.

Readers: metrics.jsonl, the resolved config.yaml the trainer writes to
log.dir, JSON files (roofline.json, `trainer bench --out`, `trainer costs
--json`, check_against_pytorch.py --json), gpu_bench's CSV and its "# check"
lines, GoogleTest XML, compute-sanitizer's ERROR SUMMARY, and stages.tsv
(gpu_check's record: name TAB status TAB seconds TAB log TAB note; status ok |
FAILED | warn | skipped). A file that exists but cannot be read as what it
should be raises InputError naming it.

Figures: median tokens/s over the timed steps (after the warm-up,
unprofiled), MFU's numerator from the model FLOPs formula the trainer uses
(6 N + 12 L T C per token, N = matmul weights incl. the LM head), the time
split of a profiled step, the largest loss difference between two runs.
Standard library only.
"""

import csv
import json
import math
import os
import statistics
import xml.etree.ElementTree as ET


class InputError(Exception):
    """A file that exists but cannot be read as what it should be."""


# ---------------------------------------------------------------- readers

def read_metrics(path):
    """metrics.jsonl -> list of records in file order (each a dict with "step")."""
    recs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                raise InputError(f"{path}:{n}: expected an object with an integer 'step'")
            recs.append(rec)
    return recs


def read_resolved_config(path):
    """The trainer's <log.dir>/config.yaml (section:, then '  key: value' lines,
    as trainer/config's to_yaml writes it; also a hand-written config of that
    two-level shape, inline '# ...' comments dropped) -> {section: {key: text}}."""
    out, section = {}, None
    with open(path) as f:
        for line in f:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if not line.startswith(" "):
                section = line.strip().rstrip(":")
                out[section] = {}
            elif section is not None and ":" in line:
                key, _, value = line.strip().partition(":")
                out[section][key.strip()] = value.split(" #")[0].strip()
    return out


def config_int(cfg, section, key, default=0):
    try:
        return int(cfg[section][key])
    except (KeyError, ValueError):
        return default


def read_json(path):
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None


def read_stages(path):
    """stages.tsv -> list of dicts name, status, seconds, log, note."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 2:
                continue
            parts += [""] * (5 - len(parts))
            rows.append(dict(name=parts[0], status=parts[1], seconds=parts[2], log=parts[3],
                             note=parts[4]))
    return rows


def read_gpu_bench(path):
    """gpu_bench's CSV (section,name,dtype,M,N,K,gflop,ms,tflops,gbs; '#' lines
    are comments) -> list of dicts."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = [l for l in f if l.strip() and not l.startswith("#")]
    return list(csv.DictReader(lines))


def gpu_bench_checks(path):
    """gpu_bench's '# check ...' lines (the sampled double-precision checks)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [l[2:].strip() for l in f if l.startswith("# check ")]


def gpu_bench_peak(rows):
    """The measured bf16 GEMM peak in TFLOP/s (section peak), 0 if none."""
    return max((float(r["tflops"]) for r in rows if r.get("section") == "peak"), default=0.0)


def gpu_bench_attention_ms(rows, dtype="bf16", kernels="simt"):
    """attn_fwd + attn_bwd ms of gpu_bench's SIMT kernels (kernels="simt", the
    attn_* rows) or tensor-core ones ("tensor_cores", attn_*_tc), or None."""
    suffix = "_tc" if kernels == "tensor_cores" else ""
    ms = {r["name"]: float(r["ms"]) for r in rows
          if r.get("section") == "attention" and r.get("dtype") == dtype}
    if f"attn_fwd{suffix}" in ms and f"attn_bwd{suffix}" in ms:
        return ms[f"attn_fwd{suffix}"] + ms[f"attn_bwd{suffix}"]
    return None


def read_test_xml(path):
    """GoogleTest XML -> ([(suite, passed, failed, skipped)], [failed test names])."""
    suites, failed = [], []
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise InputError(f"{path}: not XML ({e})") from None
    for suite in root.iter("testsuite"):
        p = f = s = 0
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                f += 1
                failed.append(f"{suite.get('name')}.{case.get('name')}")
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                s += 1
            else:
                p += 1
        suites.append((suite.get("name"), p, f, s))
    return suites, failed


# ---------------------------------------------------------------- figures

def profiled(step, every, steps):
    """trainer/profile/profiler.hpp's ProfileSchedule::profiled."""
    return every > 0 and step >= 0 and step % every >= every - steps


def timed_records(recs, warmup, profile_every=0, profile_steps=1):
    """The records a speed is measured on: after the first `warmup` steps,
    not profiled (profiled steps synchronise after every op), not skipped."""
    first = min((r["step"] for r in recs), default=0)
    return [r for r in recs
            if r["step"] >= first + warmup and not profiled(r["step"], profile_every, profile_steps)
            and not r.get("skipped") and isinstance(r.get("tokens_per_s"), (int, float))]


def median_of(recs, key):
    vals = [r[key] for r in recs if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def config_float(cfg, section, key, default=0.0):
    try:
        return float(cfg[section][key])
    except (KeyError, ValueError):
        return default


def ffn_width(cfg):
    """ModelConfig::ffn_width (trainer/config): gpt2 4C; llama ffn_hidden, or
    Meta's rule from 4C (two thirds, times ffn_dim_multiplier, rounded up to
    multiple_of), with the C++'s integer truncations."""
    C = config_int(cfg, "model", "n_embd")
    if cfg.get("model", {}).get("arch", "gpt2") != "llama":
        return 4 * C
    if config_int(cfg, "model", "ffn_hidden") > 0:
        return config_int(cfg, "model", "ffn_hidden")
    hidden = 2 * (4 * C) // 3
    mult = config_float(cfg, "model", "ffn_dim_multiplier")
    if mult > 0:
        hidden = int(mult * hidden)
    m = max(1, config_int(cfg, "model", "multiple_of", 256))
    return (hidden + m - 1) // m * m


def model_flops_per_token(cfg):
    """trainer/profile/model_flops.cpp: 6 N + 12 L T C, N = L x one block's
    matmul weights + V C: gpt2 12 C^2; llama C (Q + 2K) + Q C + 3 C F (Q =
    n_head hs = C query features, K = n_kv_head hs, F the MLP width)."""
    L = config_int(cfg, "model", "n_layer")
    C = config_int(cfg, "model", "n_embd")
    V = config_int(cfg, "model", "vocab_size")
    T = config_int(cfg, "train", "seq_len")
    if not (L and C and V and T):
        return None
    block = 12.0 * C * C
    if cfg.get("model", {}).get("arch", "gpt2") == "llama":
        NH = config_int(cfg, "model", "n_head")
        if not NH:
            return None
        hs = C // NH
        Q, K, F = NH * hs, (config_int(cfg, "model", "n_kv_head") or NH) * hs, ffn_width(cfg)
        block = float(C * (Q + 2 * K) + Q * C + 3 * C * F)
    return 6.0 * (L * block + V * C) + 12.0 * L * T * C


def run_summary(run_dir, warmup):
    """tokens/s, MFU, memory of one trainer run directory; None if no metrics."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    recs = read_metrics(path)
    cfg_path = os.path.join(run_dir, "config.yaml")
    cfg = read_resolved_config(cfg_path) if os.path.exists(cfg_path) else {}
    every = config_int(cfg, "profile", "every")
    psteps = config_int(cfg, "profile", "steps", 1)
    timed = timed_records(recs, warmup, every, psteps)
    peak_mem = max((r["peak_mem_bytes"] for r in recs
                    if isinstance(r.get("peak_mem_bytes"), (int, float))), default=None)
    return dict(
        steps=len(recs),
        timed_steps=[r["step"] for r in timed],
        tokens_per_s=median_of(timed, "tokens_per_s"),
        step_ms=median_of(timed, "step_ms"),
        mfu=median_of(timed, "mfu"),
        mfu_datasheet=median_of(timed, "mfu_datasheet"),
        # What they divide (metrics.jsonl names it; older runs do not).
        mfu_formula=next((r["mfu_formula"] for r in recs if r.get("mfu_formula")),
                         "PaLM 6N+12LTC"),
        mfu_datasheet_peak_tflops=median_of(timed, "mfu_datasheet_peak_tflops"),
        mfu_llmc_datasheet=median_of(timed, "mfu_llmc_datasheet"),
        peak_mem_bytes=peak_mem,
        flops_per_token=model_flops_per_token(cfg),
        config=cfg,
        final_loss=next((r["loss"] for r in reversed(recs)
                         if isinstance(r.get("loss"), (int, float))), None))


def time_split(roofline):
    """A profiled step's time by where it went, in ms (roofline.json's class
    subtotals; comm = exposed collective time; idle = no op and no wait)."""
    sub = {r["class"]: r["ms_per_step"] for r in roofline.get("ops", []) if r.get("subtotal")}
    split = [("GEMM", sub.get("gemm", 0.0)),
             ("attention", sub.get("attention", 0.0)),
             ("other kernels", sum(v for k, v in sub.items() if k not in ("gemm", "attention"))),
             ("communication (exposed)", roofline.get("comm_exposed_ms_per_step", 0.0)),
             ("idle (no op, no wait)", roofline.get("other_ms_per_step", 0.0))]
    return split, roofline.get("step_ms", 0.0)


def loss_diff(ref_recs, got_recs):
    """(max |loss difference|, the step of it, steps compared) over every step
    either run logged; a step missing from one side or a loss that is not a
    finite number counts as an infinite difference."""
    ref = {r["step"]: r.get("loss") for r in ref_recs}
    got = {r["step"]: r.get("loss") for r in got_recs}
    steps = sorted(set(ref) | set(got))
    worst, at = -1.0, None
    for step in steps:
        a, b = got.get(step), ref.get(step)
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float))
        d = abs(a - b) if ok and math.isfinite(a) and math.isfinite(b) else math.inf
        if d > worst:
            worst, at = d, step
    return max(worst, 0.0), at, len(steps)


def sanitizer_errors(path):
    """compute-sanitizer's 'ERROR SUMMARY: N errors' from a log, or None."""
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        for line in f:
            if "ERROR SUMMARY:" in line:
                try:
                    return int(line.split("ERROR SUMMARY:")[1].split()[0])
                except (IndexError, ValueError):
                    return None
    return None
