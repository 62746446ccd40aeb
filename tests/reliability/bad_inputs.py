"""The bad-input scenarios: each case starts the trainer under mpirun with one
bad input in a run directory that holds a previous run's outputs, and checks
every rank exits non-zero within BAD_INPUT_SECONDS, exactly one "error:" line
names the problem, and the directory is byte-for-byte unchanged."""

import json
import os
import shutil
import struct

from harness import BAD_INPUT_SECONDS, diff_snapshots, error_lines, exit_codes, prepare_data, snapshot

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
    b.case("global_batch_not_divisible", ["--config", good, "train.global_batch=12"],
           ["train.global_batch", "4 * 2 * 1 = 8"])
    b.case("seq_len_over_block_size", ["--config", good, "train.seq_len=32"],
           ["train.seq_len", "model.block_size=16"])
    # An interleaved pipeline whose step has fewer micro-batches than stages
    # (it sends them through each chunk in groups of pp): refused by name.
    b.case("pipeline_micro_batches_not_in_groups",
           ["--config", good, "parallel.dp=1", "parallel.pp=2", "model.n_layer=4",
            "parallel.pp_schedule=interleaved_1f1b", "parallel.pp_virtual_stages=2",
            "train.micro_batch=8"],
           ["train.global_batch", "a multiple of parallel.pp=2"])
    # Context parallelism: a degree the world cannot hold, a sequence its
    # chunks do not cut, a mode the trainer does not have.
    b.case("cp_not_dividing_world", ["--config", good, "parallel.dp=1", "parallel.cp=4"],
           ["parallel layout (2 ranks)", "parallel.cp", "1 x 1 x 4 x 1 = 4 for 2 ranks"])
    b.case("cp_seq_len_not_divisible",
           ["--config", good, "parallel.dp=1", "parallel.cp=2", "train.seq_len=10"],
           ["train.seq_len", "a multiple of 2 * parallel.cp = 4", "got 10"])
    b.case("cp_comm_unknown", ["--config", good, "parallel.cp_comm=a2a"],
           ["parallel.cp_comm", "a2a", "not supported", "allgather|ring"])
    # fp8 (runtime.fp8): each refusal names its key on every rank.
    b.case("fp8_with_fp32", ["--config", good, "runtime.fp8=tensorwise"],
           ["runtime.fp8", "tensorwise", "runtime.dtype=bf16"])
    b.case("fp8_unknown_scaling", ["--config", good, "runtime.dtype=bf16", "runtime.fp8=delayed"],
           ["runtime.fp8", "delayed", "not supported", "off|tensorwise|rowwise"])
    b.case("fp8_allgather_off_stage3",
           ["--config", good, "parallel.dp=1", "parallel.fsdp=2", "parallel.fsdp_stage=2",
            "runtime.dtype=bf16", "runtime.fp8=tensorwise", "parallel.fp8_allgather=true"],
           ["parallel.fp8_allgather", "parallel.fsdp_stage=3", "it is 2"])
    b.case("fp8_allgather_rowwise",
           ["--config", good, "parallel.dp=1", "parallel.fsdp=2", "runtime.dtype=bf16",
            "runtime.fp8=rowwise", "parallel.fp8_allgather=true"],
           ["parallel.fp8_allgather", "runtime.fp8=tensorwise", "rowwise"])
    if runner.cuda_build:
        b.case("cuda_without_a_visible_gpu", ["--config", good, "runtime.device=cuda"],
               ["runtime.device=cuda", "expected a visible CUDA device, got none"],
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
