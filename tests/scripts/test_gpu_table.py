#!/usr/bin/env python3
"""scripts/gpu_table.py (gpu_check's table) and scripts/run_logs.py (its readers)
on fabricated log folders, scripts/gpu_check.sh's own plumbing, and the
argument and environment errors of scripts/bench_vs_pytorch.py, all without a
GPU or torch. The figures below are made up for the test (round numbers);
nothing here is a measurement.

    python3 tests/scripts/test_gpu_table.py [--build build]

With --build, configs/gpt2_124m.yaml is also checked to be a valid trainer
config (`trainer plan` reads and validates it). Standard library only.
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "scripts")
sys.path.insert(0, SCRIPTS)
import run_logs  # noqa: E402
import bench_vs_pytorch  # noqa: E402  (imports no torch until main() runs)

TABLE = os.path.join(SCRIPTS, "gpu_table.py")
BENCH = os.path.join(SCRIPTS, "bench_vs_pytorch.py")
TRAINER = None  # set from --build

# The trainer's resolved config.yaml for the 124M run (the keys the table reads).
CONFIG_124M = """# Resolved trainer config: every key, canonical order.
model:
  n_layer: 12
  n_head: 12
  n_embd: 768
  vocab_size: 50257
  block_size: 1024
train:
  seq_len: 1024
  micro_batch: 16
  global_batch: 16
  steps: 30
profile:
  every: 30
  steps: 2
"""
FLOPS_PER_TOKEN_124M = 6 * (12 * 12 * 768**2 + 50257 * 768) + 12 * 12 * 1024 * 768
GEMM_PEAK = 100.0  # TFLOP/s, made up


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def jsonl(path, recs):
    write(path, "".join(json.dumps(r) + "\n" for r in recs))


def train_records(scale=1.0):
    """30 steps: 5 slow warm-up steps, 23 timed steps whose median is 20000
    tokens/s (times scale), 2 profiled steps (28, 29) that are much slower."""
    recs = []
    for s in range(30):
        tps = scale * (1000.0 if s < 5 or s >= 28 else (19000.0, 20000.0, 21000.0)[s % 3])
        recs.append(dict(step=s, loss=10.8 - 0.01 * s, tokens_per_s=tps, step_ms=16384 / tps * 1e3,
                         mfu=0.25, mfu_datasheet=0.2, mfu_formula="PaLM 6N+12LTC",
                         mfu_datasheet_peak_tflops=989.4, mfu_llmc_datasheet=0.19,
                         peak_mem_bytes=(20 + s % 2) * 2**30,
                         comm_exposed_ms=0.0, comm_bytes={"world": 0}))
    return recs


def roofline():
    ops = [
        dict(**{"class": "gemm"}, name="matmul_forward M=16384 N=2304 K=768", subtotal=False,
             calls_per_step=12, ms_per_step=30.0, step_share=0.3, tflops=50.0, gbps=100.0,
             bound="compute", fraction_of_roofline=0.5),
        dict(**{"class": "gemm"}, name="= gemm", subtotal=True, calls_per_step=100,
             ms_per_step=50.0, step_share=0.5, tflops=50.0, gbps=100.0, bound="compute",
             fraction_of_roofline=0.5),
        dict(**{"class": "attention"}, name="= attention", subtotal=True, calls_per_step=24,
             ms_per_step=20.0, step_share=0.2, tflops=10.0, gbps=10.0, bound="compute",
             fraction_of_roofline=0.1),
        dict(**{"class": "layernorm"}, name="= layernorm", subtotal=True, calls_per_step=50,
             ms_per_step=6.0, step_share=0.06, tflops=0.0, gbps=1000.0, bound="memory",
             fraction_of_roofline=0.3),
        dict(**{"class": "optimizer"}, name="= optimizer", subtotal=True, calls_per_step=1,
             ms_per_step=4.0, step_share=0.04, tflops=0.0, gbps=1000.0, bound="memory",
             fraction_of_roofline=None),
    ]
    return dict(rank=0, world_size=1, device="cuda bf16", profiled_steps=2, step_ms=100.0,
                op_ms_per_step=80.0, comm_exposed_ms_per_step=5.0, other_ms_per_step=15.0,
                peaks=dict(source="bench.json"), ops=ops, comms=[])


def costs():
    """trainer costs --json: one row the profiled run also has, one it lacks."""
    return {"peaks": {"source": "sustained (h200.yaml)"}, "step_floor_ms": 20.0,
            "non_gemm_bytes": 30e9, "non_gemm_floor_ms": 7.0, "ops": [
                {"class": "gemm", "name": "matmul_forward M=16384 N=2304 K=768", "subtotal": False,
                 "calls": 12, "floor_ms": 1.5},
                {"class": "gelu", "name": "gelu_forward n=50331648", "subtotal": False,
                 "calls": 12, "floor_ms": 1.1},
                {"class": "gemm", "name": "= gemm", "subtotal": True, "calls": 12,
                 "floor_ms": 1.5}]}


GPU_BENCH_CSV = f"""section,name,dtype,M,N,K,gflop,ms,tflops,gbs
# check lm_head_fwd bf16 16384x50304x768: 256 samples, worst |got - want| / tolerance 0.01: ok
peak,gemm_4096,bf16,4096,4096,4096,137.4,1.3744,{GEMM_PEAK:.1f},0
gemm,qkv_fwd,bf16,16384,2304,768,58.0,1.16,50.0,0
attention,attn_fwd,bf16,192,1024,64,12.9,1.0,12.9,0
attention,attn_bwd,bf16,192,1024,64,32.2,3.0,10.7,0
attention,attn_fwd_tc,bf16,192,1024,64,12.9,0.5,25.8,0
attention,attn_bwd_tc,bf16,192,1024,64,32.2,1.5,21.5,0
memory,layernorm_fwd,bf16,16384,768,0,0,0.05,0,1000
"""

TEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="CudaMatmul" tests="2">
    <testcase name="Fp32" result="completed"/>
    <testcase name="Bf16" result="skipped"><skipped/></testcase>
  </testsuite>
  <testsuite name="CudaAttention" tests="1">
    <testcase name="Causal" result="completed"/>
  </testsuite>
</testsuites>
"""


TEST_XML_ADAMW = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="CudaAdamW" tests="1">
    <testcase name="StepMatchesCpu" result="completed"/>
  </testsuite>
</testsuites>
"""


def layout_losses(delta=0.0):
    return [dict(step=s, loss=5.5 - 0.1 * s + (delta if s == 7 else 0.0)) for s in range(10)]


def pytorch_check(dtype, passed=True):
    tol = 1e-4 if dtype == "fp32" else 2e-2
    return {"device": "cuda", "dtype": dtype, "steps": 10,
            "tolerances": {"loss": tol, "grad_norm": tol, "weights": tol},
            "max_rel_loss": tol / 10 if passed else tol * 10, "max_rel_grad_norm": tol / 5,
            "max_weight_diff": tol / 3, "pass": passed}


class GpuLogs:
    """A gpu_check log folder as a GPU run would leave it."""

    STAGES = ["binaries", "costs", "tests-core", "data", "train-tc", "train-simt", "pytorch-fp32",
              "pytorch-bf16", "tests-production", "tests-CudaAdamW", "memcheck", "racecheck",
              "gpu-bench", "peaks", "torch-compile", "layout-ref", "layout-dp2", "layout-fsdp2",
              "layout-tp2", "layout-pp2", "layout-cp2", "layout-cp2_ring"]

    def __init__(self, d, tp2_delta=0.0, failed=None):
        self.d = d
        lines = []
        for name in self.STAGES:
            log = os.path.join(d, name + ".log")
            if name == failed:
                lines.append(f"{name}\tFAILED\t3\t{log}\texit 1")
            else:
                lines.append(f"{name}\tok\t3\t{log}\t")
        write(os.path.join(d, "stages.tsv"), "\n".join(lines) + "\n")
        write(os.path.join(d, "gpu.txt"), "Fake GPU, 1.0, 1 MiB")
        write(os.path.join(d, "machine.txt"), "os: Test OS 1\nnvcc: release 0.0, V0.0.0\n")
        write(os.path.join(d, "tests-core.xml"), TEST_XML)
        write(os.path.join(d, "tests-CudaAdamW.xml"), TEST_XML_ADAMW)
        write(os.path.join(d, "gpu_bench.csv"), GPU_BENCH_CSV)
        write(os.path.join(d, "peaks.json"), json.dumps(
            {"device": "cuda", "dtype": "bf16", "peaks": {"gemm_tflops": 90.0, "mem_gbps": 2000.0}}))
        for run_name, scale in (("train_tc", 1.0), ("train_simt", 0.5)):
            run = os.path.join(d, run_name)
            write(os.path.join(run, "config.yaml"), CONFIG_124M)
            jsonl(os.path.join(run, "metrics.jsonl"), train_records(scale))
        write(os.path.join(d, "train_tc", "roofline.json"), json.dumps(roofline()))
        write(os.path.join(d, "costs.json"), json.dumps(costs()))
        tc = costs()  # the tensor-core table: another attention row, another floor
        tc["attention"], tc["step_floor_ms"] = "tensor_cores", 12.0
        write(os.path.join(d, "costs_tc.json"), json.dumps(tc))
        for dt in ("fp32", "bf16"):
            write(os.path.join(d, f"pytorch-{dt}.json"), json.dumps(pytorch_check(dt)))
        write(os.path.join(d, "memcheck.log"), "========= ERROR SUMMARY: 0 errors\n")
        write(os.path.join(d, "racecheck.log"), "========= RACECHECK SUMMARY\n")
        for name in ("ref", "dp2", "fsdp2", "pp2", "cp2", "cp2_ring"):
            jsonl(os.path.join(d, "layouts", name, "metrics.jsonl"), layout_losses(2e-6))
        jsonl(os.path.join(d, "layouts", "ref", "metrics.jsonl"), layout_losses())
        jsonl(os.path.join(d, "layouts", "tp2", "metrics.jsonl"), layout_losses(tp2_delta))
        write(os.path.join(d, "pytorch.json"), json.dumps(
            {"torch_version": "0.0-test", "compiled": True, "pytorch_tokens_per_s": 40000.0,
             "ours_tokens_per_s": 20000.0, "ratio": 0.5, "sdpa_fwd_bwd_ms": 2.0, "notes": []}))


def run(script, *args, env=None):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          env=env, timeout=120)


class Readers(unittest.TestCase):
    def test_flops_per_token_is_the_trainers_formula(self):
        cfg = run_logs.read_resolved_config(os.path.join(REPO, "configs", "gpt2_124m.yaml"))
        self.assertEqual(run_logs.model_flops_per_token(cfg), FLOPS_PER_TOKEN_124M)

    def test_llama_flops_count_every_matmul_weight_once(self):
        # Llama 3 8B: N is every parameter but the embedding and the norms,
        # HF's 8,030,261,248 less 128256 x 4096 and 65 x 4096.
        cfg = run_logs.read_resolved_config(os.path.join(REPO, "configs", "llama3_8b.yaml"))
        n = 8030261248 - 128256 * 4096 - 65 * 4096
        self.assertEqual(run_logs.ffn_width(cfg), 14336)
        self.assertEqual(run_logs.model_flops_per_token(cfg), 6.0 * n + 12.0 * 32 * 8192 * 4096)

    def test_hand_written_config_gives_the_124m_shape(self):
        cfg = run_logs.read_resolved_config(os.path.join(REPO, "configs", "gpt2_124m.yaml"))
        self.assertEqual(bench_vs_pytorch.shape_of(cfg), dict(
            n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024, seq_len=1024,
            micro_batch=16, global_batch=16))
        self.assertEqual(cfg["runtime"], {"device": "cuda", "dtype": "bf16"})

    def test_timed_records_leave_out_warmup_profiled_and_skipped(self):
        recs = train_records()
        recs[10]["skipped"] = True
        steps = [r["step"] for r in run_logs.timed_records(recs, 5, 30, 2)]
        self.assertEqual(steps, [s for s in range(5, 28) if s != 10])
        # every=10, steps=2: 8, 9, 18, 19 are profiled.
        steps = [r["step"] for r in run_logs.timed_records(train_records(), 0, 10, 2)]
        self.assertNotIn(8, steps)
        self.assertNotIn(19, steps)
        self.assertIn(20, steps)

    def test_loss_diff(self):
        worst, at, n = run_logs.loss_diff(layout_losses(), layout_losses(3e-5))
        self.assertAlmostEqual(worst, 3e-5, delta=1e-9)
        self.assertEqual((at, n), (7, 10))
        short = layout_losses()[:8]
        self.assertEqual(run_logs.loss_diff(layout_losses(), short)[:2], (math.inf, 8))
        nan = layout_losses()
        nan[3]["loss"] = None  # the trainer writes a non-finite loss as null
        self.assertEqual(run_logs.loss_diff(layout_losses(), nan)[:2], (math.inf, 3))
        self.assertEqual(run_logs.loss_diff([], []), (0.0, None, 0))

    def test_time_split_adds_up_to_the_step(self):
        split, step_ms = run_logs.time_split(roofline())
        self.assertEqual(dict(split), {"GEMM": 50.0, "attention": 20.0, "other kernels": 10.0,
                                       "communication (exposed)": 5.0,
                                       "idle (no op, no wait)": 15.0})
        self.assertAlmostEqual(sum(ms for _, ms in split), step_ms)

    def test_bad_metrics_line_is_named(self):
        d = tempfile.mkdtemp(prefix="gt_gpu_table_")
        self.addCleanup(shutil.rmtree, d)
        write(os.path.join(d, "m.jsonl"), '{"step": 0, "loss": 1}\n{"step": \n')
        with self.assertRaisesRegex(run_logs.InputError, r"m\.jsonl:2: not JSON"):
            run_logs.read_metrics(os.path.join(d, "m.jsonl"))


class Table(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gt_gpu_table_")
        self.addCleanup(shutil.rmtree, self.dir)

    def test_gpu_run_all_passing(self):
        GpuLogs(self.dir)
        p = run(TABLE, self.dir, "--elapsed", "123s")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        self.assertIn("==== gpu_check (Fake GPU, 1.0, 1 MiB) ====", out)
        self.assertIn("  os: Test OS 1", out)
        self.assertRegex(out, r"tests-core: CudaMatmul\s+1\s+0\s+1")
        self.assertRegex(out, r"\n  CudaAdamW\s+1\s+0\s+0")
        self.assertRegex(out, r"total\s+3\s+0\s+1")
        # Median of the 23 timed steps (5..27), not the warm-up or profiled ones.
        self.assertIn("tensor-core attention (train-tc)\n"
                      "    tokens/s            20,000  (median of steps 5-27, 23 unprofiled", out)
        self.assertIn("SIMT attention (train-simt)\n    tokens/s            10,000", out)
        self.assertIn("tensor-core / SIMT tokens/s: 2.00x", out)
        mfu = 100 * FLOPS_PER_TOKEN_124M * 20000 / (GEMM_PEAK * 1e12)
        # Every MFU with its formula and its peak; the datasheet's first.
        self.assertIn("MFU                 20.0% (PaLM 6N+12LTC over the datasheet's 989.4 TFLOP/s "
                      "bf16, profile.hardware); llm.c 6P+6LCT 19.0%", out)
        self.assertIn(f"MFU (measured peak) {mfu:.1f}% (PaLM 6N+12LTC over the measured bf16 GEMM "
                      f"peak, {GEMM_PEAK:.1f} TFLOP/s, gpu_bench)", out)
        self.assertIn("MFU (trainer)       25.0% (PaLM 6N+12LTC over the trainer's own measured "
                      "peaks)", out)
        self.assertIn("peak memory         21.00 GiB", out)
        self.assertRegex(out, r"GEMM\s+50\.00 ms\s+50\.0%")
        self.assertRegex(out, r"idle \(no op, no wait\)\s+15\.00 ms\s+15\.0%")
        self.assertRegex(out, r"gemm\s+matmul_forward M=16384 N=2304 K=768\s+12\s+30\.000")
        self.assertRegex(out, r"fp32\s+1\.00e-05\s+2\.00e-05\s+3\.33e-05\s+1e-04  pass")
        self.assertRegex(out, r"bf16\s+2\.00e-03\s+4\.00e-03\s+6\.67e-03\s+2e-02  pass")
        self.assertIn("memcheck   0 error(s) reported (ok (see memcheck.log))", out)
        # The floor beside the profiled run's time for the same op; none for
        # an op the run did not record, nor for a subtotal.
        self.assertRegex(out, r"gemm\s+matmul_forward M=16384 N=2304 K=768\s+12\s+1\.500\s+"
                              r"30\.000\s+20\.00")
        self.assertRegex(out, r"gelu\s+gelu_forward n=50331648\s+12\s+1\.100\s+-\s*\n")
        # train-tc is the profiled run, so the tensor-core table is beside it.
        self.assertIn("table: costs_tc.json (attention: tensor_cores)", out)
        self.assertIn("step floor 12.00 ms; non-GEMM traffic 30.00 GB (7.00 ms of the floor)", out)
        self.assertIn("check lm_head_fwd bf16 16384x50304x768: 256 samples", out)
        self.assertIn("cuda bf16: GEMM 90.0 TFLOP/s, memory 2000 GB/s", out)
        self.assertRegex(out, r"dp2\s+10\s+2\.000e-06\s+7\s+1e-04\s+pass")
        self.assertRegex(out, r"tp2\s+10\s+0\.000e\+00\s+\d+\s+1e-04\s+pass")
        self.assertRegex(out, r"cp2_ring\s+10\s+2\.000e-06\s+7\s+1e-04\s+pass")
        self.assertIn("ours/PyTorch 0.50x", out)
        self.assertIn("attention fwd+bwd bf16, SIMT kernels: ours 4.000 ms, PyTorch SDPA 2.000 ms", out)
        self.assertIn("attention fwd+bwd bf16, tensor-core kernels: ours 2.000 ms, PyTorch SDPA "
                      "2.000 ms (ours/SDPA time 1.00x)", out)
        self.assertNotIn("FAILED", out)

    def test_a_rehearsal_says_no_figure_is_a_gpu_measurement(self):
        GpuLogs(self.dir)
        p = run(TABLE, self.dir, "--rehearsal")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("REHEARSAL on the emulated device", p.stdout)
        self.assertIn("no time, rate or MFU below is a GPU measurement", p.stdout)
        self.assertNotIn("REHEARSAL", run(TABLE, self.dir).stdout)

    def test_layout_over_tolerance_fails(self):
        GpuLogs(self.dir, tp2_delta=5e-4)
        p = run(TABLE, self.dir)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"tp2\s+10\s+5\.000e-04\s+7\s+1e-04\s+FAILED")
        self.assertIn("layout tp2: losses differ from one rank's by 5.000e-04 > 0.0001 at step 7",
                      p.stdout)
        # A looser tolerance passes it.
        self.assertEqual(run(TABLE, self.dir, "--tol", "1e-3").returncode, 0)

    def test_failed_stage_is_a_row_naming_its_log(self):
        GpuLogs(self.dir, failed="train-tc")
        shutil.rmtree(os.path.join(self.dir, "train_tc"))
        p = run(TABLE, self.dir)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"train-tc\s+FAILED\s+3s\s+train-tc\.log exit 1")
        self.assertIn("tensor-core attention (train-tc)\n"
                      "    not measured: FAILED: exit 1 (see train-tc.log)", p.stdout)
        self.assertIn("  - train-tc: exit 1 (see train-tc.log)", p.stdout)
        self.assertNotIn("tensor-core / SIMT", p.stdout)

    def test_a_pytorch_mismatch_or_a_failed_sampled_check_fails_the_table(self):
        GpuLogs(self.dir)
        write(os.path.join(self.dir, "pytorch-bf16.json"), json.dumps(pytorch_check("bf16", False)))
        with open(os.path.join(self.dir, "gpu_bench.csv"), "a") as f:
            f.write("# check lm_head_dinp bf16 16384x768x50304: 256 samples, worst 7: FAILED\n")
        p = run(TABLE, self.dir)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"bf16\s+2\.00e-01\s+4\.00e-03\s+6\.67e-03\s+2e-02  FAILED")
        self.assertIn("  - pytorch-bf16: differs from PyTorch beyond the tolerance", p.stdout)
        self.assertIn("  - gpu_bench check lm_head_dinp bf16", p.stdout)

    def test_sanitizer_findings_warn_without_failing(self):
        GpuLogs(self.dir)
        with open(os.path.join(self.dir, "stages.tsv")) as f:
            stages = f.read().replace("racecheck\tok\t3", "racecheck\twarn\t3")
        write(os.path.join(self.dir, "stages.tsv"), stages)
        write(os.path.join(self.dir, "racecheck.log"), "========= ERROR SUMMARY: 2 errors\n")
        p = run(TABLE, self.dir)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("racecheck  2 error(s) reported (warn", p.stdout)
        self.assertIn("warnings (non-fatal): racecheck", p.stdout)

    def test_trial_without_gpu(self):
        stages = ["binaries\tok\t0\t/x/STAMP\tprepared on the CPU machine"]
        stages += [f"{s}\tskipped\t\t\tno GPU" for s in
                   ("tests-core", "data", "train-tc", "train-simt", "pytorch-fp32", "pytorch-bf16",
                    "tests-production", "tests-suites", "memcheck", "racecheck", "gpu-bench",
                    "peaks", "layout-ref", "layout-dp2", "layout-fsdp2", "layout-tp2",
                    "layout-pp2", "layout-cp2", "layout-cp2_ring")]
        stages.append("torch-compile\tskipped\t\t\ttorch sees no CUDA device")
        write(os.path.join(self.dir, "stages.tsv"), "\n".join(stages) + "\n")
        write(os.path.join(self.dir, "gpu.txt"), "no nvidia-smi")
        p = run(TABLE, self.dir, "--trial")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        self.assertIn("==== gpu_check (trial, no GPU) ====", out)
        self.assertIn("tensor-core attention (train-tc)\n    not measured: skipped: no GPU", out)
        self.assertIn("  fp32     not measured: skipped: no GPU", out)
        self.assertIn("  not computed: not run", out)
        self.assertIn("  tests-core                                    no XML report: skipped: no GPU",
                      out)
        self.assertRegex(out, r"tp2\s+skipped: no GPU")
        self.assertNotIn("FAILED", out)
        # No invented figure anywhere: no tokens/s, MFU or ratio line.
        self.assertNotRegex(out, r"tokens/s\s+\d|MFU\s+\d|ours/PyTorch \d")

    def test_argument_errors(self):
        p = run(TABLE, os.path.join(self.dir, "missing"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("is not a directory", p.stderr)
        self.assertEqual(run(TABLE, self.dir, "--tol", "0").returncode, 2)

    def test_unreadable_input_is_named(self):
        GpuLogs(self.dir)
        write(os.path.join(self.dir, "train_tc", "roofline.json"), "{oops")
        p = run(TABLE, self.dir)
        self.assertEqual(p.returncode, 1)
        self.assertIn("roofline.json: not JSON", p.stderr)


class GpuCheckScript(unittest.TestCase):
    """scripts/gpu_check.sh's plumbing on this machine (no GPU): every stage
    gets a verdict, the table and the tarball are written, and a failed stage
    comes with the command that reruns it."""

    SCRIPT = os.path.join(SCRIPTS, "gpu_check.sh")

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gt_gpu_check_")
        self.addCleanup(shutil.rmtree, self.dir)

    def check(self, *args):
        # As on a fresh clone, whatever this checkout has prepared: no
        # packages, no binaries (so never a build).
        env = {k: v for k, v in os.environ.items() if k != "OUT"}
        env.update(GPU_CHECK_DEPS=os.path.join(self.dir, "no_deps"),
                   GPU_CHECK_BIN=os.path.join(self.dir, "no_bin"))
        return subprocess.run(["bash", self.SCRIPT, *args], capture_output=True, text=True,
                              env=env, timeout=300)

    def test_every_stage_gets_a_verdict_and_everything_is_packed(self):
        logs, out = os.path.join(self.dir, "logs"), os.path.join(self.dir, "out")
        p = self.check("--logs", logs, "--out", out, "--budget", "120")
        text = p.stdout + p.stderr
        with open(os.path.join(logs, "stages.tsv")) as f:
            rows = [line.split("\t") for line in f.read().splitlines()]
        names = [r[0] for r in rows]
        for stage in ("binaries", "tests-core", "train-tc", "train-simt", "pytorch-fp32",
                      "pytorch-bf16", "tests-production", "memcheck", "gpu-bench",
                      "torch-compile", "layout-tp2"):
            self.assertIn(stage, names, text)
        self.assertTrue(all(r[1] in ("ok", "FAILED", "warn", "skipped") for r in rows), rows)
        self.assertTrue(os.path.exists(os.path.join(out, "gpu_check.tar.gz")), text)
        with open(os.path.join(out, "table.txt")) as f:
            self.assertIn("==== gpu_check (", f.read())
        # Without .gpu_deps everything of ours fails (torch.compile may be
        # skipped instead), and the rerun command names exactly those stages.
        self.assertIn(("binaries", "FAILED"), [(r[0], r[1]) for r in rows])
        failed = [r[0] for r in rows if r[1] == "FAILED" and r[0] != "binaries"]
        self.assertIn("costs", failed)
        self.assertEqual(p.returncode, 1, text)
        self.assertIn(f"bash scripts/gpu_check.sh --only {','.join(failed)} --logs {logs}", text)

    def test_only_reruns_into_the_same_folder_keep_the_other_rows(self):
        logs = os.path.join(self.dir, "logs")
        self.check("--logs", logs, "--budget", "60")
        with open(os.path.join(logs, "stages.tsv")) as f:
            before = [line.split("\t")[0] for line in f.read().splitlines()]
        self.check("--logs", logs, "--budget", "60", "--only", "gpu-bench,layout-")
        with open(os.path.join(logs, "stages.tsv")) as f:
            after = [line.split("\t")[0] for line in f.read().splitlines()]
        self.assertEqual(sorted(before), sorted(after))
        self.assertEqual(after.count("gpu-bench"), 1)

    def test_argument_errors(self):
        for args, message in ((["--from", "build"], "--from goes with --prepare"),
                              (["--budget", "soon"], "take a whole number"),
                              (["--frobnicate"], "unknown argument '--frobnicate'")):
            p = self.check(*args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(message, p.stderr)


class BenchVsPytorch(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gt_bench_vs_pytorch_")
        self.addCleanup(shutil.rmtree, self.dir)

    def fake_torch(self, body):
        """A `torch` package that shadows any real one (PYTHONPATH first)."""
        write(os.path.join(self.dir, "fake", "torch", "__init__.py"), body)
        return dict(os.environ, PYTHONPATH=os.path.join(self.dir, "fake"))

    def run_dir(self):
        d = os.path.join(self.dir, "run")
        write(os.path.join(d, "config.yaml"), CONFIG_124M)
        jsonl(os.path.join(d, "metrics.jsonl"), train_records())
        return d

    def test_needs_a_source_for_ours(self):
        p = run(BENCH)
        self.assertEqual(p.returncode, 2)
        self.assertIn("one of the arguments --trainer --metrics --pytorch-only is required", p.stderr)

    def test_argument_errors_name_the_problem(self):
        cases = [
            (["--trainer", os.path.join(self.dir, "nope")], "not an executable file"),
            (["--metrics", self.dir], "no metrics.jsonl there"),
            (["--metrics", self.run_dir(), "--steps", "5", "--warmup", "5"],
             "--steps (5) must exceed --warmup (5)"),
            (["--metrics", self.run_dir(), "--gpu-bench-csv", "/nonexistent.csv"],
             "no such file"),
            (["--metrics", self.run_dir(), "--pytorch-only"], "not allowed with argument"),
            (["--pytorch-only", "--config", "/nonexistent.yaml"], "no such file"),
        ]
        for args, message in cases:
            p = run(BENCH, *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(message, p.stderr)

    def test_without_torch(self):
        env = self.fake_torch("raise ImportError('No module named torch (test)')\n")
        p = run(BENCH, "--metrics", self.run_dir(), env=env)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("PyTorch is not installed", p.stderr)
        self.assertIn("nothing measured", p.stderr)

    def test_torch_without_sdpa(self):
        env = self.fake_torch("__version__ = '0.0-old'\n"
                              "class nn:\n    class functional:\n        pass\n")
        p = run(BENCH, "--metrics", self.run_dir(), env=env)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("PyTorch 0.0-old has no F.scaled_dot_product_attention", p.stderr)

    def test_without_cuda(self):
        env = self.fake_torch("__version__ = '0.0-test'\n"
                              "class cuda:\n    is_available = staticmethod(lambda: False)\n"
                              "class version:\n    cuda = None\n"
                              "class nn:\n    class functional:\n"
                              "        scaled_dot_product_attention = None\n")
        p = run(BENCH, "--metrics", self.run_dir(), "--json", os.path.join(self.dir, "o.json"),
                env=env)
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("PyTorch 0.0-test sees no CUDA device", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "o.json")))


class Config124M(unittest.TestCase):
    def test_trainer_accepts_the_config(self):
        if TRAINER is None:
            self.skipTest("no --build given")
        if not os.path.exists(TRAINER):
            self.skipTest(f"{TRAINER} not built")
        hw = os.path.join(REPO, "configs", "hardware", "h200.yaml")
        p = subprocess.run([TRAINER, "plan", "--config", os.path.join(REPO, "configs", "gpt2_124m.yaml"),
                            "--hardware", hw, "--gpus", "1"], capture_output=True, text=True,
                           cwd=REPO, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(re.search(r"12 layers|n_layer|124", p.stdout + p.stderr), p.stdout)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=None, help="a build folder with trainer")
    args, rest = ap.parse_known_args()
    if args.build:
        TRAINER = os.path.join(os.path.abspath(args.build), "trainer")
    unittest.main(argv=[sys.argv[0], *rest])
