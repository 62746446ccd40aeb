"""Shared pieces of the reliability scenarios: the trainer runner (mpirun or
one process, per-rank exit statuses through rank_exit.py), output-directory
snapshots, and metrics comparisons. Standard library only."""

import hashlib
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "tests", "layouts"))
import prepare_data  # noqa: E402,F401  (re-exported for the scenarios)
from layout_matrix import read_metrics, write_config  # noqa: E402,F401

MODEL = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=256, block_size=16)
TRAIN = dict(seq_len=16, micro_batch=4, global_batch=8, steps=20, lr=3e-3,
             lr_schedule="constant", warmup_steps=0, seed=3, eval_every=0, max_skipped=5)
WRAPPER = os.path.join(HERE, "rank_exit.py")
BAD_INPUT_SECONDS = 10


class Fail(Exception):
    pass


def snapshot(root):
    """Every entry under root (root included): kind, mode, size, mtime, content hash."""
    out = {}
    if not os.path.lexists(root):
        return out
    for d, dirs, files in os.walk(root):
        for name in [""] + sorted(dirs) + sorted(files):
            p = os.path.join(d, name) if name else d
            if name == "" and d != root:
                continue  # each directory is listed once, by its parent
            st = os.lstat(p)
            digest = ""
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


def diff_snapshots(a, b):
    lines = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            lines.append(f"  {k}: {a.get(k, 'absent')} -> {b.get(k, 'absent')}")
    return "\n".join(lines)


def error_lines(text):
    return [line for line in text.splitlines() if line.startswith("error:")]


class Runner:
    def __init__(self, build, work):
        self.exe = os.path.join(os.path.abspath(build), "trainer")
        if not os.path.exists(self.exe):
            sys.exit(f"error: {self.exe} not found (build first)")
        # The CUDA test executable exists exactly when the build has the CUDA backend.
        self.cuda_build = os.path.exists(os.path.join(build, "tests", "gt_cuda_tests"))
        self.work = work
        self.data = os.path.join(work, "data")
        os.makedirs(self.data, exist_ok=True)
        rng = random.Random(99)
        words = [[rng.randrange(256) for _ in range(rng.randrange(3, 9))] for _ in range(40)]
        toks = []
        while len(toks) < 16000:
            toks += rng.choice(words)
        self.tokens = toks[:16000]
        prepare_data.write_shard(os.path.join(self.data, "train_000000.bin"), self.tokens)
        self.count = 0

    def path(self, name):
        self.count += 1
        return os.path.join(self.work, f"{self.count:03d}_{name}")

    def config(self, name, run_dir=None, extra=None, raw=None, parallel=None):
        """Writes a config; returns (run_dir, config path). `raw` replaces the text."""
        run_dir = run_dir or self.path(name)
        sections = {
            "model": dict(MODEL),
            "data": dict(train=[os.path.join(self.data, "train_*.bin")], shuffle=True),
            "train": dict(TRAIN),
            "runtime": dict(device="cpu", threads=1, collective_timeout_s=30.0),
            "parallel": dict(parallel or {"dp": 2}),
            "log": dict(dir=run_dir, every=5),
            "checkpoint": dict(every=5, keep=3, resume="none"),
        }
        for key, value in (extra or {}).items():
            section, k = key.split(".")
            sections[section][k] = value
        cfg = self.path(name + ".yaml")
        if raw is not None:
            with open(cfg, "w") as f:
                f.write(raw)
        else:
            write_config(cfg, sections)
        return run_dir, cfg

    def env(self, extra=None):
        e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                 OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        # Not inside anyone's launch: a CI job under Slurm or mpirun must not
        # make a one-process run look like a rank of it.
        for k in list(e):
            if k == "TRAINER_FAULT" or k.startswith(("SLURM_", "PMI_", "OMPI_COMM_WORLD_")):
                del e[k]
        e.update(extra or {})
        return e

    def command(self, np, args, exit_dir=None):
        if np == 0:  # one process, no launcher
            return [self.exe, *args]
        cmd = ["mpirun", "--oversubscribe", "-np", str(np)]
        if exit_dir:
            cmd += [sys.executable, WRAPPER, exit_dir]
        return cmd + [self.exe, *args]

    def run(self, np, args, env=None, timeout=120, exit_dir=None):
        """Runs to the end; returns (returncode, output, seconds)."""
        t0 = time.time()
        p = subprocess.run(self.command(np, args, exit_dir), env=self.env(env),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout, time.time() - t0

    def start(self, np, args, env=None, exit_dir=None):
        return subprocess.Popen(self.command(np, args, exit_dir), env=self.env(env),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    def train_ok(self, np, cfg, overrides=(), env=None):
        rc, out, took = self.run(np, ["--config", cfg, *overrides], env=env)
        if rc != 0:
            raise Fail(f"a run that should succeed exited {rc}:\n{out[-3000:]}")
        return out, took


def exit_codes(exit_dir, np):
    codes = {}
    for r in range(np):
        p = os.path.join(exit_dir, f"rank_{r}")
        if os.path.exists(p):
            with open(p) as f:
                codes[r] = int(f.read().strip())
    return codes



def same_steps(label, ref_dir, got_dir, steps):
    ref = read_metrics(os.path.join(ref_dir, "metrics.jsonl"))
    got = read_metrics(os.path.join(got_dir, "metrics.jsonl"))
    fails = []
    for s in steps:
        for key in ("loss", "grad_norm"):
            if s not in got or got[s].get(key) != ref[s].get(key):
                fails.append(f"{label}: step {s} {key} {got.get(s, {}).get(key)} != uninterrupted "
                             f"{ref[s].get(key)}")
    return fails


def count_lines(path):
    steps = []
    with open(path) as f:
        for line in f:
            if line.strip():
                steps.append(json.loads(line)["step"])
    return steps


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()



def wait_for_steps(proc, metrics, n, limit=60):
    t0 = time.time()
    while time.time() - t0 < limit and proc.poll() is None:
        if os.path.exists(metrics) and len(count_lines(metrics)) >= n:
            return True
        time.sleep(0.05)
    return False
