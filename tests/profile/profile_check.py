#!/usr/bin/env python3
"""End-to-end checks of profiling (docs/PERFORMANCE.md "Profiling"), one per --check:

  report  one rank, profiling on: the roofline table is printed, its model
          FLOPs agree with 6*N*tokens + attention within 1%, roofline.json is
          valid, and every metrics.jsonl line has the profiling fields;
  trace   two ranks under mpirun (dp=2) with profile.trace=true: trace_rank0.json
          and trace_rank1.json are valid Chrome trace JSON, pid = rank, and
          each shows compute (ops) and communication (dp all-reduce waits and
          in-flight spans);
  bench1  `trainer bench --out` on one rank writes valid JSON with peaks;
  bench2  the same on two ranks, with all-reduce/all-gather bus bandwidths.

    python3 tests/profile/profile_check.py --build build --check trace

Standard library only. Exit status 1 on any failure.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import prepare_data  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def run(cmd, timeout=300):
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return p.stdout + p.stderr


def mpirun(n, args):
    return ["mpirun", "--oversubscribe", "-np", str(n)] + args


def write_config(work, extra):
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    rng = random.Random(5)
    toks = [rng.randrange(256) for _ in range(8000)]
    prepare_data.write_shard(os.path.join(data, "train_000000.bin"), toks)
    path = os.path.join(work, "config.yaml")
    with open(path, "w") as f:
        f.write(f"""model: {{n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 256, block_size: 32}}
data: {{train: ["{data}/train_*.bin"], shuffle: false}}
train: {{seq_len: 32, micro_batch: 4, global_batch: 8, steps: 4, eval_every: 0, warmup_steps: 1}}
runtime: {{threads: 1, collective_timeout_s: 60}}
log: {{dir: "{work}/run", every: 1}}
checkpoint: {{every: 0, keep: 1}}
{extra}
""")
    return path, os.path.join(work, "run")


def load_json(path):
    if not os.path.exists(path):
        fail(f"{path} was not written")
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            fail(f"{path} is not valid JSON: {e}")


def check_trace_file(path, rank):
    t = load_json(path)
    if not isinstance(t, dict) or not isinstance(t.get("traceEvents"), list):
        fail(f"{path}: no traceEvents array")
    ev = t["traceEvents"]
    for e in ev:
        for key in ("name", "ph", "pid", "tid"):
            if key not in e:
                fail(f"{path}: event without '{key}': {e}")
        if e["pid"] != rank:
            fail(f"{path}: pid {e['pid']} != rank {rank}")
        if e["ph"] != "M" and not isinstance(e.get("ts"), (int, float)):
            fail(f"{path}: event without a numeric ts: {e}")
        if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            fail(f"{path}: complete event without a duration: {e}")
        if e["ph"] in ("b", "e") and "id" not in e:
            fail(f"{path}: async event without id: {e}")
    threads = {e["tid"]: e["args"]["name"] for e in ev
               if e["ph"] == "M" and e["name"] == "thread_name"}
    compute = [e for e in ev if e["ph"] == "X" and threads.get(e["tid"]) == "compute"
               and e.get("cat") not in ("step",)]
    comm = [e for e in ev if e.get("cat", "").startswith("comm")
            and threads.get(e["tid"], "").startswith("comm ")]
    steps = [e for e in ev if e.get("cat") == "step"]
    names = {e["name"] for e in compute}
    for want in ("matmul_forward", "matmul_backward", "attention_forward", "adamw_update"):
        if want not in names:
            fail(f"{path}: no compute event '{want}' (have {sorted(names)[:20]})")
    if not any(threads.get(e["tid"]) == "comm dp" for e in comm):
        fail(f"{path}: no communication on the dp axis (threads {threads})")
    if not any(e["ph"] == "X" for e in comm) or not any(e["ph"] == "b" for e in comm):
        fail(f"{path}: expected exposed-wait spans and in-flight spans for communication")
    begins = sum(1 for e in comm if e["ph"] == "b")
    ends = sum(1 for e in comm if e["ph"] == "e")
    if begins != ends:
        fail(f"{path}: {begins} in-flight begins but {ends} ends")
    if not steps:
        fail(f"{path}: no step spans")
    print(f"ok: {path}: {len(compute)} compute, {len(comm)} comm events, "
          f"{len(steps)} steps, threads {sorted(threads.values())}")


def check_metrics(run_dir, world, roofline):
    """Every line has the profiling fields; mfu is the model FLOPs over the step
    time, the ranks and the measured peak (recomputed from roofline.json)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    flops = roofline["model_flops_per_step"]["expected"]
    peak = roofline["peaks"]["gemm_tflops"] * 1e12
    for r in recs:
        for key in ("tokens_per_s", "mfu", "mfu_datasheet", "peak_mem_bytes", "comm_exposed_ms",
                    "comm_bytes"):
            if key not in r:
                fail(f"metrics step {r['step']}: no '{key}'")
        want = flops / (r["step_ms"] / 1e3 * world * peak)
        if not (isinstance(r["mfu"], float) and abs(r["mfu"] / want - 1) < 1e-6):
            fail(f"metrics step {r['step']}: mfu {r['mfu']}, expected {want}")
        if r["mfu_datasheet"] is not None:
            fail("mfu_datasheet should be null without profile.hardware")
        # What the MFUs divide is named beside them; GPT-2 adds llm.c's.
        if r.get("mfu_formula") != "PaLM 6N+12LTC":
            fail(f"metrics step {r['step']}: mfu_formula {r.get('mfu_formula')!r}")
        if not abs((r.get("mfu_peak_tflops") or 0) * 1e12 / peak - 1) < 1e-9:
            fail(f"metrics step {r['step']}: mfu_peak_tflops {r.get('mfu_peak_tflops')}, "
                 f"the peak is {peak / 1e12}")
        for key in ("mfu_datasheet_peak_tflops", "mfu_llmc_datasheet"):
            if key not in r or r[key] is not None:
                fail(f"metrics step {r['step']}: {key} should be null without profile.hardware")
        # llm.c's 6P + 6 L C T against PaLM's 6N + 12 L T C, from the model
        # write_config gives (GPT-2, L 2, C 64, V 256, block 32, T 32):
        # P every parameter, N the matmul weights.
        L, C, V, B, T = 2, 64, 256, 32, 32
        P = V * C + B * C + L * (12 * C * C + 13 * C) + 2 * C
        palm = 6 * (L * 12 * C * C + V * C) + 12 * L * T * C
        llmc = 6 * P + 6 * L * C * T
        if not abs((r.get("mfu_llmc") or 0) / r["mfu"] - llmc / palm) < 1e-9:
            fail(f"metrics step {r['step']}: mfu_llmc {r.get('mfu_llmc')} is not mfu x "
                 f"{llmc}/{palm}")
        if not r["peak_mem_bytes"] > 0:
            fail(f"metrics step {r['step']}: peak_mem_bytes {r['peak_mem_bytes']}")
        if world > 1 and not r["comm_exposed_ms"] >= 0:
            fail(f"metrics step {r['step']}: comm_exposed_ms {r['comm_exposed_ms']}")
    print(f"ok: {len(recs)} metrics lines carry mfu, peak_mem_bytes, comm_exposed_ms")


def check_report(build, work):
    cfg, run_dir = write_config(work, "profile: {every: 2, steps: 2, report: true}")
    out = run([os.path.join(build, "trainer"), "--config", cfg])
    if "roofline:" not in out or "= gemm" not in out:
        fail(f"no roofline table printed:\n{out[-3000:]}")
    m = re.search(r"ratio (\d+\.\d+)", out)
    if not m or abs(float(m.group(1)) - 1.0) > 0.01:
        fail(f"model FLOPs ratio {m.group(1) if m else None} not within 1% of 1")
    j = load_json(os.path.join(run_dir, "roofline.json"))
    if j["profiled_steps"] != 4 or not j["ops"]:
        fail(f"roofline.json: {j['profiled_steps']} profiled steps, {len(j['ops'])} ops")
    mf = j["model_flops_per_step"]
    if abs(mf["recorded_all_ranks"] / mf["expected"] - 1) > 0.01:
        fail(f"roofline.json model FLOPs {mf}")
    check_metrics(run_dir, 1, j)
    # The step lines print the MFU with its formula and peak (no datasheet
    # here: the measured one).
    if not re.search(r"\| MFU \d+\.\d% \(PaLM 6N\+12LTC, measured [\d.e+-]+ TFLOP/s; "
                     r"llm\.c 6P\+6LCT \d+\.\d%\)", out):
        fail(f"no step line names its MFU's formula and peak:\n{out[-3000:]}")
    print(out[out.index("roofline:"):])


def check_trace(build, work):
    cfg, run_dir = write_config(
        work, "parallel: {dp: 2}\nprofile: {every: 2, steps: 1, trace: true}")
    out = run(mpirun(2, [os.path.join(build, "trainer"), "--config", cfg]))
    if "roofline:" not in out:
        fail(f"no roofline table printed:\n{out[-3000:]}")
    for r in (0, 1):
        check_trace_file(os.path.join(run_dir, f"trace_rank{r}.json"), r)
    j = load_json(os.path.join(run_dir, "roofline.json"))
    if not any(c["name"].startswith("dp all_reduce") for c in j["comms"]):
        fail(f"roofline.json lacks the dp all-reduce: {[c['name'] for c in j['comms']]}")
    check_metrics(run_dir, 2, j)


def check_trace_pipeline(build, work):
    """A pp=2 1F1B run's traces: each rank's "pipeline schedule" track holds,
    per profiled step, one forward and one backward block per micro-batch
    of its stage (F<j>@s<r>, B<j>@s<r>), in the schedule's order, and its
    metrics carry bubble_fraction."""
    micro_batches = 4
    cfg, run_dir = write_config(
        work, "parallel: {pp: 2}\nprofile: {every: 2, steps: 1, trace: true}\n")
    with open(cfg) as f:
        text = f.read().replace("micro_batch: 4", "micro_batch: 2")
    with open(cfg, "w") as f:
        f.write(text)
    run(mpirun(2, [os.path.join(build, "trainer"), "--config", cfg]))
    for r in (0, 1):
        t = load_json(os.path.join(run_dir, f"trace_rank{r}.json"))
        ev = t["traceEvents"]
        threads = {e["tid"]: e["args"]["name"] for e in ev
                   if e["ph"] == "M" and e["name"] == "thread_name"}
        blocks = [e for e in ev if e.get("cat") == "pipeline"]
        if not blocks or any(threads.get(e["tid"]) != "pipeline schedule" for e in blocks):
            fail(f"rank {r}: no pipeline schedule track (threads {threads})")
        profiled_steps = 2  # steps 1 and 3 of 4
        names = [e["name"] for e in blocks]
        want = {f"{k}{j}@s{r}" for k in "FB" for j in range(micro_batches)}
        if len(names) != profiled_steps * 2 * micro_batches or set(names) != want:
            fail(f"rank {r}: pipeline blocks {names}, want {sorted(want)} per profiled step")
        first = names[:2 * micro_batches]
        if r == 0 and first[:3] != ["F0@s0", "F1@s0", "B0@s0"]:
            fail(f"rank 0: 1F1B order expected (one warm-up forward), got {first}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    if any(not 0 <= rec.get("bubble_fraction", -1) <= 1 for rec in recs):
        fail(f"metrics without a bubble_fraction in [0, 1]: {recs}")
    print(f"ok: pipeline traces of 2 ranks, {len(names)} blocks each; bubble_fraction "
          f"{[round(rec['bubble_fraction'], 3) for rec in recs]}")


def check_bench(build, work, ranks):
    out_json = os.path.join(work, "peaks.json")
    cmd = [os.path.join(build, "trainer"), "bench", "--out", out_json]
    out = run(mpirun(ranks, cmd) if ranks > 1 else cmd, timeout=600)
    if "peaks per rank" not in out:
        fail(f"bench printed no peaks:\n{out}")
    j = load_json(out_json)
    p = j.get("peaks", {})
    if j.get("format") != "gpt-trainer-bench" or j.get("world_size") != ranks:
        fail(f"bench JSON header: {j.get('format')}, world_size {j.get('world_size')}")
    if not (p.get("gemm_tflops", 0) > 0 and p.get("mem_gbps", 0) > 0):
        fail(f"bench peaks: {p}")
    if ranks > 1:
        if not (p.get("all_reduce_busbw_gbps") or 0) > 0 or not (
                p.get("all_gather_busbw_gbps") or 0) > 0:
            fail(f"bench busbw missing on {ranks} ranks: {p}")
    elif p.get("all_reduce_busbw_gbps") is not None:
        fail("one rank should report no collective bandwidth")
    print(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--check", required=True,
                    choices=["report", "trace", "trace_pipeline", "bench1", "bench2"])
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    with tempfile.TemporaryDirectory(prefix=f"gt_profile_{a.check}_") as work:
        if a.check == "report":
            check_report(build, work)
        elif a.check == "trace":
            check_trace(build, work)
        elif a.check == "trace_pipeline":
            check_trace_pipeline(build, work)
        else:
            check_bench(build, work, 1 if a.check == "bench1" else 2)
    print(f"PASS: {a.check}")


if __name__ == "__main__":
    main()
