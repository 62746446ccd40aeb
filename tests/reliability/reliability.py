#!/usr/bin/env python3
"""The trainer's reliability promises (docs/RELIABILITY.md), checked on CPU
under mpirun, one scenario per ctest (label `reliability`):

  bad_config, bad_launch, bad_data, bad_checkpoint, bad_safetensors, bad_output
      every bad input: non-zero exit on every rank within 10 s, exactly one
      "error:" line naming the problem, the output directory (which holds a
      previous run's logs and checkpoints) byte-for-byte unchanged
  kill_resume       kill -9 of rank 1 at step 12 of 20 (checkpoint every 5): the
                    job ends within 30 s; the resume is bitwise the uninterrupted run
  kill_in_save      a kill in either phase of a save: the resume takes the previous
                    committed step and says so; nothing committed is lost
  hang              a rank that stops: the job aborts within collective_timeout_s +
                    10 s naming the step, the op and the rank
  nan               non-finite gradients on one rank: every rank skips the same step,
                    the loss curve goes on; train.max_skipped in a row stops the run
                    with a committed checkpoint
  sigterm           SIGTERM to mpirun mid-run: every rank exits 0 after a committed
                    checkpoint; the resume is bitwise the uninterrupted run
  sigterm_one_rank  SIGTERM to one rank (by the pid it wrote): all ranks stop after
                    the same step, exit 0; SIGINT to a one-process run does the same

    python3 tests/reliability/reliability.py --build build --scenario kill_resume
    python3 tests/reliability/reliability.py --list

Faults are injected with TRAINER_FAULT (trainer/train/fault_injection.hpp);
processes are signalled by the pids the ranks write to <log.dir>/pids, never
by name. Standard library only. Exit status 1 on any broken promise.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "tests", "layouts"))
import prepare_data  # noqa: E402
from layout_matrix import read_metrics, write_config  # noqa: E402

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
        cache = os.path.join(build, "CMakeCache.txt")
        self.cuda_build = False
        if os.path.exists(cache):
            with open(cache) as f:
                self.cuda_build = any(line.startswith("CMAKE_CUDA_COMPILER:") and
                                      line.strip().split("=", 1)[1] not in ("", "CMAKE_CUDA_COMPILER-NOTFOUND")
                                      for line in f)
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


# ---------------------------------------------------------------- bad inputs

class BadInputs:
    """Each case: a previous good run's outputs in log.dir, then a start with
    one bad input. Checks every promise of docs/RELIABILITY.md section 1."""

    def __init__(self, runner):
        self.r = runner
        self.fails = []
        base_dir, base_cfg = runner.config("base", extra={"train.steps": 10})
        runner.train_ok(2, base_cfg)
        self.base_dir, self.base_cfg = base_dir, base_cfg

    def outputs(self, name, checkpoints=True):
        """A copy of the base run's outputs (mtimes kept) to be left untouched."""
        d = self.r.path(name + "_out")
        shutil.copytree(self.base_dir, d, symlinks=True,
                        ignore=None if checkpoints else shutil.ignore_patterns("checkpoints"))
        return d

    def case(self, name, args, expect, np=2, env=None, checkpoints=True, out_dir=None,
             watch=()):
        """args: trainer arguments (log.dir is appended unless out_dir is False).
        expect: substrings of the one error line. watch: more paths that must
        stay unchanged (inputs the start read)."""
        out = out_dir if out_dir is not None else self.outputs(name, checkpoints)
        if out_dir is not False:
            args = list(args) + [f"log.dir={out}"]
        watched = ([out] if out else []) + list(watch)
        before = {p: snapshot(p) for p in watched}
        exit_dir = self.r.path(name + "_exit")
        os.makedirs(exit_dir)
        rc, text, took = self.r.run(np, args, env=env, timeout=60,
                                    exit_dir=exit_dir if np > 0 else None)
        problems = []
        if rc == 0:
            problems.append("exit status 0")
        if np > 0:
            codes = exit_codes(exit_dir, np)
            if len(codes) != np or any(c == 0 for c in codes.values()):
                problems.append(f"per-rank exit statuses {codes} (want {np} non-zero)")
        if took > BAD_INPUT_SECONDS:
            problems.append(f"took {took:.1f} s > {BAD_INPUT_SECONDS} s")
        errs = error_lines(text)
        if len(errs) != 1:
            problems.append(f"{len(errs)} 'error:' lines, want exactly 1")
        elif any(e not in errs[0] for e in expect):
            problems.append(f"error line lacks {[e for e in expect if e not in errs[0]]}")
        for p in watched:
            d = diff_snapshots(before[p], snapshot(p))
            if d:
                problems.append(f"{p} changed:\n{d}")
        line = errs[0] if len(errs) == 1 else f"{len(errs)} error lines"
        print(f"{'FAIL' if problems else 'ok  '} {name}: exit {rc} in {took:.1f} s: {line}")
        if problems:
            self.fails.append(f"{name}: " + "; ".join(problems) + f"\noutput:\n{text[-2500:]}")

    def cfg(self, name, **kw):
        return self.r.config(name, **kw)[1]


def bad_config(runner):
    b = BadInputs(runner)
    good = b.base_cfg
    text = open(good).read()
    syntax = b.cfg("syntax", raw=text.replace("  seq_len: 16\n", "  seq_len: [16\n"))
    b.case("yaml_syntax_error", ["--config", syntax], ["YAML syntax error", syntax + ":"])
    unknown = b.cfg("unknown", raw=text.replace("  seq_len: 16\n", "  seq_len: 16\n  stepz: 3\n"))
    b.case("unknown_key", ["--config", unknown],
           ["unknown key 'train.stepz'", "did you mean 'train.steps'"])
    dup = b.cfg("dup", raw=text.replace("  seq_len: 16\n", "  seq_len: 16\n  lr: 0.1\n"))
    b.case("duplicate_key", ["--config", dup], ["duplicate key 'train.lr'"])
    b.case("wrong_type", ["--config", good, "train.steps=ten"],
           ["train.steps", "expected an integer", "got 'ten'"])
    b.case("out_of_range", ["--config", good, "train.lr=-1"],
           ["train.lr", "expected a value > 0", "got -1"])
    b.case("malformed_override", ["--config", good, "train.lr"],
           ["argument 'train.lr' (command line)", "expected an override section.key=value"])
    b.case("repeated_override", ["--config", good, "train.lr=0.1", "train.lr=0.2"],
           ["override 'train.lr=0.2'", "expected each key once, got train.lr again"])
    b.case("repeated_flag", ["--config", good, "--config", good], ["--config is given twice"])
    b.case("missing_config_file", ["--config", os.path.join(runner.work, "absent.yaml")],
           ["absent.yaml"])
    return b.fails


def bad_launch(runner):
    b = BadInputs(runner)
    good = b.base_cfg
    b.case("mesh_product_not_world", ["--config", good, "parallel.dp=4", "train.micro_batch=2"],
           ["parallel layout (2 ranks)", "got 4 x 1 x 1 = 4 for 2 ranks"])
    b.case("degree_below_one", ["--config", good, "parallel.tp=0"],
           ["parallel.tp", "expected an integer >= 1"])
    b.case("tp_not_dividing_heads", ["--config", good, "parallel.dp=1", "parallel.tp=2",
                                     "model.n_head=3", "model.n_embd=33"],
           ["parallel.tp", "model.n_head=3"])
    b.case("tp_not_dividing_vocab", ["--config", good, "parallel.dp=1", "parallel.tp=2",
                                     "model.vocab_size=255"],
           ["parallel.tp", "model.vocab_size=255"])
    b.case("global_batch_not_divisible", ["--config", good, "train.global_batch=12"],
           ["train.global_batch", "4 * 2 * 1 = 8"])
    b.case("seq_len_over_block_size", ["--config", good, "train.seq_len=32"],
           ["train.seq_len", "model.block_size=16"])
    if runner.cuda_build:
        b.case("more_local_ranks_than_gpus", ["--config", good, "runtime.device=cuda"],
               ["runtime.device=cuda", "2 ranks on this host for 0 visible GPUs"],
               env={"CUDA_VISIBLE_DEVICES": ""})
    else:
        b.case("cuda_without_cuda_build", ["--config", good, "runtime.device=cuda"],
               ["runtime.device=cuda", "CPU-only build"])
    b.case("world_above_one_without_mpirun", ["--config", good], ["mpirun -np 2"], np=0)
    b.case("launcher_without_mpi_world", ["--config", good], ["MPI world size", "expected 2 ranks"],
           np=0, env={"SLURM_NTASKS": "2", "SLURM_PROCID": "0"})
    return b.fails


def bad_data(runner):
    b = BadInputs(runner)
    good, d = b.base_cfg, runner.path("baddata")
    os.makedirs(d)

    def shard(name, tokens, magic=prepare_data.MAGIC, version=1, count=None, raw=False):
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            if not raw:
                header = [0] * 256
                header[0], header[1] = magic, version
                header[2] = len(tokens) if count is None else count
                f.write(struct.pack("<256i", *header))
            f.write(struct.pack(f"<{len(tokens)}H", *tokens))
        return p

    toks = runner.tokens[:4000]
    args = ["--config", good]
    kw = dict(checkpoints=False, watch=[d])
    b.case("missing_file", args + [f"data.train={d}/nope.bin"], ["nope.bin", "got no match"], **kw)
    b.case("empty_glob", args + [f"data.train={d}/train_*.bin"], ["train_*.bin", "got no match"], **kw)
    p = shard("magic.bin", toks, magic=123)
    b.case("bad_magic", args + [f"data.train={p}"], ["magic.bin", "bad magic 123"], **kw)
    p = shard("version.bin", toks, version=7)
    b.case("bad_version", args + [f"data.train={p}"], ["version.bin", "version 7"], **kw)
    p = shard("size.bin", toks, count=5000)
    b.case("size_disagrees_with_header", args + [f"data.train={p}"],
           ["size.bin", "header says 5000 tokens"], **kw)
    p = shard("vocab.bin", toks[:100] + [300] + toks[100:])
    b.case("token_over_vocab", args + [f"data.train={p}"],
           ["vocab.bin", "token 300 at position 100", "model.vocab_size=256"], **kw)
    p = shard("short.bin", toks[:100])
    b.case("shorter_than_one_batch", args + [f"data.train={p}"],
           ["data.train", "train.global_batch=8", "got 6"], **kw)
    ok, tiny = shard("ok.bin", toks), shard("tiny.bin", toks[:10])
    b.case("shard_shorter_than_a_window", args + [f"data.train=[{ok}, {tiny}]"],
           ["tiny.bin", "seq_len+1=17", "got 10"], **kw)
    p = shard("raw.bin", toks, raw=True)
    b.case("headerless_file", args + [f"data.train={p}"], ["raw.bin", "bad magic", "headerless"], **kw)
    return b.fails


def bad_checkpoint(runner):
    b = BadInputs(runner)
    good = b.base_cfg
    src = os.path.join(b.base_dir, "checkpoints", "step_00000005")

    def broken(name, edit):
        d = os.path.join(runner.path(name), "step_00000005")
        shutil.copytree(src, d)
        edit(d)
        return d

    def rm(f):
        return lambda d: os.remove(os.path.join(d, f))

    def truncate(d):
        p = os.path.join(d, "rank_00000.safetensors")
        os.truncate(p, os.path.getsize(p) // 2)

    def flip(d):
        p = os.path.join(d, "rank_00000.safetensors")
        with open(p, "r+b") as f:
            f.seek(os.path.getsize(p) - 10)
            c = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([c[0] ^ 0xFF]))

    def version(d):
        p = os.path.join(d, "manifest.json")
        m = json.load(open(p))
        m["format_version"] = 99
        json.dump(m, open(p, "w"))

    cases = [("no_commit_marker", rm("manifest.json"), ["was not committed", "manifest.json"]),
             ("missing_shard", rm("rank_00000.safetensors"), ["rank_00000.safetensors", "missing"]),
             ("truncated_shard", truncate, ["rank_00000.safetensors", "truncated"]),
             ("checksum_mismatch", flip, ["checksum mismatch", "rank_00000.safetensors"]),
             ("unknown_format_version", version, ["format_version 99"])]
    for name, edit, expect in cases:
        d = broken(name, edit)
        b.case(name, ["--config", good, f"checkpoint.resume={d}"], expect, watch=[d])
    b.case("different_model_shape",
           ["--config", good, f"checkpoint.resume={src}", "model.n_head=4", "model.n_embd=64",
            "model.n_layer=3"],
           ["different model", "n_layer: checkpoint 2, config 3", "n_head: checkpoint 2, config 4",
            "n_embd: checkpoint 32, config 64"], checkpoints=False, watch=[src])
    return b.fails


def bad_safetensors(runner):
    b = BadInputs(runner)
    good = b.base_cfg
    model = os.path.join(b.base_dir, "model.safetensors")
    with open(model, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()

    def write(name, hdr=None, raw_header=None, body=None, length=None):
        p = runner.path(name) + ".safetensors"
        text = raw_header if raw_header is not None else json.dumps(hdr).encode()
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(text) if length is None else length))
            f.write(text)
            f.write(data if body is None else body)
        return p

    def edited(fn):
        h = json.loads(json.dumps(header))
        fn(h)
        return h

    name = "h.0.mlp.c_fc.weight"  # HF Conv1D layout [in, out] = [32, 128]

    def offsets_out(h):
        h[name]["data_offsets"][1] = len(data) + 4

    def overlap(h):
        other = "h.0.mlp.c_proj.weight"
        h[other]["data_offsets"] = list(h[name]["data_offsets"])

    def missing(h):
        del h[name]

    def shape(h):
        h[name]["shape"] = [32, 64]
        b0 = h[name]["data_offsets"][0]
        h[name]["data_offsets"] = [b0, b0 + 32 * 64 * 4]

    def dtype(h):
        h[name]["dtype"] = "I32"

    def transposed(h):
        h[name]["shape"] = [128, 32]

    cases = [
        ("header_not_json", dict(raw_header=b"{not json"), ["header is not valid JSON"]),
        ("header_oversized", dict(raw_header=b"{}", length=1 << 40), ["header length", "limit"]),
        ("offsets_out_of_range", dict(hdr=edited(offsets_out)), [name, "past the end"]),
        ("offsets_overlap", dict(hdr=edited(overlap)), ["h.0.mlp.c_proj.weight", ") overlap"]),
        ("tensor_missing", dict(hdr=edited(missing)), [name, "not found"]),
        ("wrong_shape", dict(hdr=edited(shape)), [name, "expected shape [32, 128]", "[32, 64]"]),
        ("wrong_dtype", dict(hdr=edited(dtype)), [name, "dtype I32"]),
        ("wrong_orientation", dict(hdr=edited(transposed)), [name, "stored transposed"]),
    ]
    for case_name, kw, expect in cases:
        p = write(case_name, **kw)
        # No checkpoints in log.dir: they would be of another config (init_from).
        b.case(case_name, ["--config", good, f"model.init_from={p}"], expect, watch=[p],
               checkpoints=False)
    return b.fails


def bad_output(runner):
    b = BadInputs(runner)
    good = b.base_cfg
    # Not writable: a file where a directory must be (works as root too), and
    # a read-only directory when not root (root ignores permission bits).
    blocker = runner.path("a_file")
    open(blocker, "w").write("not a directory\n")
    b.case("log_dir_not_creatable", ["--config", good, f"log.dir={blocker}/run"],
           ["log.dir", "not a directory"], out_dir=False, watch=[blocker])
    if os.geteuid() != 0:
        ro = runner.path("read_only")
        os.makedirs(ro)
        os.chmod(ro, 0o555)
        b.case("log_dir_not_writable", ["--config", good, f"log.dir={ro}/run"],
               ["log.dir", "not writable"], out_dir=False, watch=[ro])
    # Full: a model whose checkpoint is larger than the free space.
    free = shutil.disk_usage(runner.work).free
    per_layer = 3 * 4 * (12 * 1024 * 1024 + 13 * 1024)  # params, AdamW m and v, fp32
    layers = int(2 * free / per_layer) + 1
    b.case("disk_too_full_for_a_checkpoint",
           ["--config", good, "model.n_embd=1024", "model.n_head=2", f"model.n_layer={layers}"],
           ["no room for a checkpoint", "free"], checkpoints=False)
    # Held by a live job (this test's own process stands in for it).
    out = b.outputs("locked")
    with open(os.path.join(out, ".lock"), "w") as f:
        f.write(f"pid={os.getpid()}\nhost={os.uname().nodename}\nstart=\n")
    b.case("run_dir_held_by_live_job", ["--config", good],
           ["log.dir in use", f"pid {os.getpid()}", os.uname().nodename], out_dir=out)
    out = b.outputs("locked_elsewhere")
    with open(os.path.join(out, ".lock"), "w") as f:
        f.write("pid=12345\nhost=some-other-node\nstart=1\n")
    b.case("run_dir_held_from_another_host", ["--config", good],
           ["log.dir in use", "pid 12345 on host some-other-node"], out_dir=out)
    # Checkpoints of a different run in log.dir.
    b.case("checkpoints_of_a_different_config",
           ["--config", good, "train.lr=0.001", "train.seed=4"],
           ["checkpoints of a different config", "train.lr: checkpoint 0.003, config 0.001",
            "train.seed: checkpoint 3, config 4"])
    return b.fails


# ---------------------------------------------------------------- faults

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


def kill_resume(runner):
    fails = []
    ref_dir, ref_cfg = runner.config("uninterrupted")
    runner.train_ok(2, ref_cfg)
    run_dir, cfg = runner.config("killed")
    rc, out, took = runner.run(2, ["--config", cfg], env={"TRAINER_FAULT": "kill:rank=1:step=12"})
    print(f"killed run: exit {rc} after {took:.1f} s")
    if rc == 0 or "kill -9" not in out:
        fails.append(f"kill: rank 1 did not die at step 12 (exit {rc}):\n{out[-2000:]}")
    if took > 30:
        fails.append(f"kill: the job took {took:.1f} s to end (> 30 s)")
    committed = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    if "step_00000010" not in committed or "step_00000015" in committed:
        fails.append(f"kill: checkpoints after the kill: {committed}")
    out, took = runner.train_ok(2, cfg, ["checkpoint.resume=auto"])
    if "resumed from " + os.path.join(run_dir, "checkpoints", "step_00000010") not in out:
        fails.append(f"kill: the resume did not start from step 10:\n{out[-2000:]}")
    if "taking over the stale lock" not in out:
        fails.append("kill: the killed run's lock was not reported and taken over")
    fails += same_steps("kill resume", ref_dir, run_dir, range(10, 20))
    steps = count_lines(os.path.join(run_dir, "metrics.jsonl"))
    if steps != list(range(20)):
        fails.append(f"kill: metrics.jsonl steps {steps}, want 0..19 once each")
    if not same_file(os.path.join(ref_dir, "model.safetensors"),
                     os.path.join(run_dir, "model.safetensors")):
        fails.append("kill: final weights differ from the uninterrupted run")
    print(f"{'FAIL' if fails else 'ok  '} kill -9 of rank 1 at step 12, resume at step 10: "
          f"steps 10..19 {'differ' if fails else 'bitwise equal'}")
    return fails


def kill_in_save(runner):
    fails = []
    ref_dir, ref_cfg = runner.config("uninterrupted", extra={"checkpoint.keep": 1})
    runner.train_ok(2, ref_cfg)
    for fault in ("kill_in_save:rank=1:step=15:phase=shard",
                  "kill_in_save:rank=0:step=15:phase=manifest"):
        phase = fault.rsplit("=", 1)[1]
        run_dir, cfg = runner.config("save_" + phase, extra={"checkpoint.keep": 1})
        rc, out, took = runner.run(2, ["--config", cfg], env={"TRAINER_FAULT": fault})
        ck = os.path.join(run_dir, "checkpoints")
        names = sorted(os.listdir(ck))
        staging = [n for n in names if n.startswith(".step_00000015.tmp.")]
        if rc == 0 or "step_00000010" not in names or "step_00000015" in names or not staging:
            fails.append(f"{phase}: after the kill (exit {rc}) the checkpoints are {names}; want "
                         f"step_00000010 kept (keep=1) and only a staging dir of step 15")
        m = os.path.join(ck, "step_00000010", "manifest.json")
        if not os.path.exists(m):
            fails.append(f"{phase}: the committed step 10 lost its manifest")
        out, _ = runner.train_ok(2, cfg, ["checkpoint.resume=auto", "checkpoint.keep=1"])
        if not staging or f"ignoring checkpoint {os.path.join(ck, staging[0])}: uncommitted" not in out:
            fails.append(f"{phase}: the resume did not report the uncommitted save:\n{out[-2000:]}")
        if "resumed from " + os.path.join(ck, "step_00000010") + " at step 10" not in out:
            fails.append(f"{phase}: the resume did not use step 10:\n{out[-2000:]}")
        fails += same_steps(f"kill in save ({phase})", ref_dir, run_dir, range(10, 20))
        if not same_file(os.path.join(ref_dir, "model.safetensors"),
                         os.path.join(run_dir, "model.safetensors")):
            fails.append(f"{phase}: final weights differ from the uninterrupted run")
        left = sorted(os.listdir(ck))
        if any(n.startswith(".step_") for n in left):
            fails.append(f"{phase}: the dead save's staging dir outlived the next save: {left}")
        print(f"{'FAIL' if fails else 'ok  '} kill in save (phase {phase}): resumed from the "
              f"committed step 10, bitwise equal")
    return fails


def hang(runner):
    fails = []
    timeout_s = 3
    run_dir, cfg = runner.config("hang", extra={"runtime.collective_timeout_s": timeout_s})
    rc, out, took = runner.run(2, ["--config", cfg], env={"TRAINER_FAULT": "hang:rank=1:step=7"},
                               timeout=timeout_s + 60)
    fatal = [line for line in out.splitlines() if "fatal:" in line]
    ok = (rc != 0 and took <= timeout_s + 10 and fatal and "step 7" in fatal[0] and
          "all_reduce" in fatal[0] and "rank 0 on" in fatal[0] and
          "collective_timeout_s" in fatal[0])
    print(f"{'ok  ' if ok else 'FAIL'} hang of rank 1 at step 7: exit {rc} after {took:.1f} s "
          f"(timeout {timeout_s} s): {fatal[0] if fatal else 'no fatal line'}")
    if not ok:
        fails.append(f"hang: exit {rc} after {took:.1f} s:\n{out[-3000:]}")
    return fails


def nan(runner):
    fails = []
    ref_dir, ref_cfg = runner.config("reference")
    runner.train_ok(2, ref_cfg)
    run_dir, cfg = runner.config("nan")
    out, _ = runner.train_ok(2, cfg, env={"TRAINER_FAULT": "nan:rank=1:step=7"})
    skip_lines = [line for line in out.splitlines() if "update skipped" in line]
    for r in (0, 1):
        if not any(f"[rank {r}]" in line and "step 7:" in line for line in skip_lines):
            fails.append(f"nan: rank {r} did not say it skipped step 7")
    if any("step 7:" not in line for line in skip_lines):
        fails.append(f"nan: other steps skipped too: {skip_lines}")
    m = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    skipped = [s for s, rec in m.items() if rec.get("skipped")]
    if skipped != [7]:
        fails.append(f"nan: metrics.jsonl marks steps {skipped} skipped, want [7]")
    fails += same_steps("nan: before the fault", ref_dir, run_dir, range(0, 7))
    after = [m[s]["loss"] for s in range(8, 20)]
    if any(x is None for x in after) or len(after) != 12:
        fails.append(f"nan: the loss curve did not continue after step 7: {after}")
    print(f"{'FAIL' if fails else 'ok  '} nan on rank 1 at step 7: both ranks skipped step 7 "
          f"only, loss continued to {after[-1] if after else None}")

    # max_skipped in a row: the run stops, with the last good state committed.
    run_dir, cfg = runner.config("nan_limit", extra={"train.max_skipped": 3})
    exit_dir = runner.path("nan_limit_exit")
    os.makedirs(exit_dir)
    rc, out, took = runner.run(2, ["--config", cfg], exit_dir=exit_dir,
                               env={"TRAINER_FAULT": "nan:rank=1:step=7:count=10"})
    codes = exit_codes(exit_dir, 2)
    errs = error_lines(out)
    ck = os.path.join(run_dir, "checkpoints", "step_00000007", "manifest.json")
    ok = (rc != 0 and len(codes) == 2 and all(c != 0 for c in codes.values()) and len(errs) == 1
          and "train.max_skipped=3" in errs[0] and os.path.exists(ck))
    if ok:  # the checkpoint is the state before the first bad step: resumable, equal to ref's
        out2, _ = runner.train_ok(2, cfg, ["checkpoint.resume=auto", "train.steps=10"])
        ok = "at step 7" in out2
        fails += same_steps("nan limit: resumed", ref_dir, run_dir, range(7, 10))
    print(f"{'ok  ' if ok else 'FAIL'} nan in 10 steps, train.max_skipped=3: exit {rc}, ranks "
          f"{codes}, committed step_00000007: {os.path.exists(ck)}")
    if not ok:
        fails.append(f"nan limit: exit {rc}, ranks {codes}, errors {errs}:\n{out[-2500:]}")
    return fails


def wait_for_steps(proc, metrics, n, limit=60):
    t0 = time.time()
    while time.time() - t0 < limit and proc.poll() is None:
        if os.path.exists(metrics) and len(count_lines(metrics)) >= n:
            return True
        time.sleep(0.05)
    return False


def stop_and_resume(runner, label, np, send, env=None, exit_codes_expected=True):
    """Starts a long run, calls send(proc, run_dir) after 30 steps, then checks:
    every rank exits 0, a committed checkpoint of the last logged step, and a
    resume to 5 more steps bitwise equal to an uninterrupted run."""
    fails = []
    extra = {"train.steps": 100000, "checkpoint.every": 0}
    run_dir, cfg = runner.config(label, extra=extra,
                                 parallel={"dp": 2} if np == 2 else {"dp": 1})
    exit_dir = runner.path(label + "_exit")
    os.makedirs(exit_dir)
    proc = runner.start(np, ["--config", cfg], env=env, exit_dir=exit_dir if np > 0 else None)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if not wait_for_steps(proc, metrics, 30):
        os.killpg(proc.pid, signal.SIGKILL)
        return [f"{label}: the run did not reach step 30:\n{proc.communicate()[0][-2000:]}"]
    t0 = time.time()
    send(proc, run_dir)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0]
        fails.append(f"{label}: did not stop within 60 s")
    took = time.time() - t0
    steps = count_lines(metrics)
    n = len(steps)
    ck = os.path.join(run_dir, "checkpoints", f"step_{n:08d}")
    codes = exit_codes(exit_dir, np) if np > 0 else {0: proc.returncode}
    if np == 0 and proc.returncode != 0:
        fails.append(f"{label}: exit {proc.returncode}")
    if len(codes) != max(np, 1) or any(c != 0 for c in codes.values()):
        fails.append(f"{label}: per-rank exit statuses {codes}, want all 0")
    if steps != list(range(n)) or not os.path.exists(os.path.join(ck, "manifest.json")):
        fails.append(f"{label}: stopped after {n} logged steps but {ck} is not committed")
    if f"stopped by a signal (SIGTERM or SIGINT) after step {n}" not in out:
        fails.append(f"{label}: no stop message for step {n}:\n{out[-2000:]}")
    if not fails:
        ref_dir, ref_cfg = runner.config(label + "_ref", extra={"train.steps": n + 5},
                                         parallel={"dp": 2} if np == 2 else {"dp": 1})
        runner.train_ok(np, ref_cfg)
        runner.train_ok(np, cfg, ["checkpoint.resume=auto", f"train.steps={n + 5}"])
        fails += same_steps(f"{label} resume", ref_dir, run_dir, range(n, n + 5))
        if not same_file(os.path.join(ref_dir, "model.safetensors"),
                         os.path.join(run_dir, "model.safetensors")):
            fails.append(f"{label}: final weights after the resume differ from the uninterrupted run")
    print(f"{'FAIL' if fails else 'ok  '} {label}: stopped {took:.1f} s after the signal at step "
          f"{n}, ranks exited {codes} (launcher exit {proc.returncode}), resume bitwise equal")
    return fails


def sigterm(runner):
    # Open MPI's mpirun forwards SIGTERM only after odls_base_sigkill_timeout
    # (it sends SIGCONT first), then SIGKILLs that long later: 3 s leaves the
    # ranks time to finish the step and commit on a loaded machine. mpirun
    # itself always exits 1 after a SIGTERM (Open MPI 4.1), whatever the ranks
    # return: each rank's own exit status is what is checked.
    def send(proc, _run_dir):
        os.kill(proc.pid, signal.SIGTERM)
    return stop_and_resume(runner, "sigterm_mpirun", 2, send,
                           env={"OMPI_MCA_odls_base_sigkill_timeout": "3"})


def sigterm_one_rank(runner):
    def send_rank1(_proc, run_dir):
        with open(os.path.join(run_dir, "pids", "rank_1.pid")) as f:
            os.kill(int(f.readline()), signal.SIGTERM)

    def send_sigint(_proc, run_dir):
        with open(os.path.join(run_dir, "pids", "rank_0.pid")) as f:
            os.kill(int(f.readline()), signal.SIGINT)
    fails = stop_and_resume(runner, "sigterm_rank1", 2, send_rank1)
    fails += stop_and_resume(runner, "sigint_one_process", 0, send_sigint)
    return fails


SCENARIOS = {
    "bad_config": bad_config, "bad_launch": bad_launch, "bad_data": bad_data,
    "bad_checkpoint": bad_checkpoint, "bad_safetensors": bad_safetensors,
    "bad_output": bad_output, "kill_resume": kill_resume, "kill_in_save": kill_in_save,
    "hang": hang, "nan": nan, "sigterm": sigterm, "sigterm_one_rank": sigterm_one_rank,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--scenario", action="append", default=[], choices=sorted(SCENARIOS))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    if args.list:
        print("\n".join(SCENARIOS))
        return 0
    work = tempfile.mkdtemp(prefix="gt_reliability_")
    runner = Runner(args.build, work)
    fails = []
    t0 = time.time()
    try:
        for name in args.scenario or list(SCENARIOS):
            try:
                fails += SCENARIOS[name](runner)
            except Fail as e:
                fails.append(f"{name}: {e}")
    finally:
        print(f"{time.time() - t0:.1f} s")
        if args.keep or fails:
            print(f"run directories kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for f in fails:
        print(f, file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
