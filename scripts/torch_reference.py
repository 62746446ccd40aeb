#!/usr/bin/env python3
"""The model-independent Python side of the trainer's contracts, for the PyTorch references.

scripts/gpt2_torch.py and scripts/llama_torch.py (the models) and the scripts
that drive them (check_against_pytorch.py, bench_cpu.py) share:
  * ensure_torch: importing this module needs torch; if it is missing and
    /usr/bin/python3 is another interpreter, the process re-executes itself
    with that one (Debian's python3-torch), else it exits 2 (or
    $GT_NO_TORCH_EXIT) with a message.
  * read_safetensors / write_safetensors: struct + json, no safetensors package
    (write: F32 only; read: F32 and BF16); load_state: HF-named tensors into a
    module whose state_dict has exactly those names and shapes.
  * WindowLoader: the data-order contract (data.shuffle false).
  * lr_at: the LR schedule; make_adamw, train_step: one optimizer step as the
    trainer defines it (accumulation, clipping, AdamW param groups), for any
    module whose forward(idx, targets) returns (logits, mean loss).
  * Small helpers that write a trainer YAML config, run the trainer (one
    process, or under mpirun) and read metrics.jsonl.

    python3 scripts/torch_reference.py      # self-test: formats, loader, schedule
"""

import json
import math
import os
import re
import struct
import subprocess
import sys


def ensure_torch():
    """Makes `import torch` work or exits: re-exec under /usr/bin/python3, else exit 2."""
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    alt = "/usr/bin/python3"
    if (os.path.exists(alt) and os.path.realpath(alt) != os.path.realpath(sys.executable)
            and not os.environ.get("GT_TORCH_REEXEC")):
        os.environ["GT_TORCH_REEXEC"] = "1"  # never loop if alt lacks torch too
        script = os.path.abspath(sys.argv[0])
        os.execv(alt, [alt, script] + sys.argv[1:])
    print("this script needs PyTorch: apt-get install python3-torch "
          f"(tried {sys.executable}" + (f" and {alt}" if os.path.exists(alt) else "") + ")",
          file=sys.stderr)
    # ctest registers the cross-checks with GT_NO_TORCH_EXIT=77 and
    # SKIP_RETURN_CODE 77: skipped, not failed, where no torch is installed.
    sys.exit(int(os.environ.get("GT_NO_TORCH_EXIT", "2")))


ensure_torch()

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_data  # noqa: E402  (the shard format lives there)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ================================================================ safetensors

_DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2)}


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} as F32 safetensors (sorted names, 8-byte padded header), atomically."""
    if sys.byteorder != "little":
        raise RuntimeError("write_safetensors assumes a little-endian host")
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous().cpu()
        blob = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)  # the data section starts 8-aligned
    prepare_data.write_atomic(path, [struct.pack("<Q", len(hjson)), hjson, *blobs])


def read_safetensors(path):
    """Reads F32/BF16 safetensors into {name: fp32 tensor}; validates offsets and sizes."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, too short for a safetensors file")
    (hlen,) = struct.unpack_from("<Q", data, 0)
    if 8 + hlen > len(data):
        raise ValueError(f"{path}: header length {hlen} exceeds the file size {len(data)}")
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    body = memoryview(data)[8 + hlen:]
    out, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info.get("dtype")
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype}; only F32 and BF16 are read")
        tdtype, size = _DTYPES[dtype]
        begin, end = info["data_offsets"]
        shape = [int(d) for d in info["shape"]]
        if not 0 <= begin <= end <= len(body):
            raise ValueError(f"{path}: tensor {name} offsets [{begin}, {end}) outside the data ({len(body)} bytes)")
        if (end - begin) != math.prod(shape) * size:
            raise ValueError(f"{path}: tensor {name} shape {shape} x {size} bytes != span {end - begin}")
        spans.append((begin, end, name))
        raw = bytearray(body[begin:end])  # writable copy, so frombuffer is safe
        t = torch.frombuffer(raw, dtype=tdtype) if raw else torch.empty(0, dtype=tdtype)
        out[name] = t.to(torch.float32).reshape(shape).clone()
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ValueError(f"{path}: tensors {n0} and {n1} overlap")
    return out


def read_safetensors_metadata(path):
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(hlen).decode("utf-8")).get("__metadata__", {})


def load_state(model, tensors, want):
    """Copies HF-named tensors into the model; names and shapes must be `want`'s exactly."""
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing or extra:
        raise ValueError(f"tensor names differ: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, shape in want.items():
        if list(tensors[name].shape) != shape:
            raise ValueError(f"tensor {name}: expected shape {shape}, got {list(tensors[name].shape)}")
    model.load_state_dict(tensors, strict=True)
    return model


# ================================================================ data order

class WindowLoader:
    """The trainer's data order with data.shuffle false.

    Shard i of n_i tokens offers floor((n_i - 1) / seq_len) windows; windows are
    numbered across shards in order and sample g uses window g mod W. At step s,
    global row b is sample s * global_batch + b.
    """

    def __init__(self, paths, seq_len):
        self.seq_len = seq_len
        self.shards = [prepare_data.read_shard(p) for p in paths]
        self.windows = [(len(t) - 1) // seq_len if len(t) > 0 else 0 for t in self.shards]
        self.total = sum(self.windows)
        if self.total == 0:
            raise ValueError(f"shards {paths} offer no window of {seq_len + 1} tokens")
        self.first = [0]
        for w in self.windows:
            self.first.append(self.first[-1] + w)

    def window(self, g):
        """(inputs, targets) lists of sample g."""
        w = g % self.total
        i = next(k for k in range(len(self.windows)) if w < self.first[k + 1])
        start = (w - self.first[i]) * self.seq_len
        toks = self.shards[i][start:start + self.seq_len + 1]
        return list(toks[:-1]), list(toks[1:])

    def rows(self, first_sample, n):
        """(x, y) int64 tensors (n, seq_len) of samples [first_sample, first_sample + n)."""
        xs, ys = zip(*(self.window(first_sample + r) for r in range(n)))
        return torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long)

    def micro_batch(self, step, k, micro_batch, global_batch):
        """Micro-batch k of step s: global rows [k * micro_batch, (k + 1) * micro_batch)."""
        return self.rows(step * global_batch + k * micro_batch, micro_batch)


# ================================================================ schedule, step

def lr_at(step, lr, steps, warmup_steps, min_lr, schedule="cosine"):
    """LR used in the update of 0-based step `step`."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_adamw(model, lr, weight_decay, beta1, beta2, eps):
    """torch AdamW with decay on p.dim() >= 2, none otherwise (a tied weight counts once).

    The trainer's placement tables (trainer/parallelize/*_placement.cpp) decay
    exactly the 2-D weights of both families: GPT-2's biases and LayerNorms,
    Llama's RMSNorm weights are not decayed.
    """
    params = list(model.parameters())  # unique: a tied head adds no parameter
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps)


def train_step(model, opt, loader, step, t):
    """One optimizer step; `t` holds the train.* settings. Returns (loss, lr, grad_norm).

    loss is the mean over all global_batch * seq_len targets before the update;
    grad_norm is the total norm before clipping.
    """
    accum = t["global_batch"] // t["micro_batch"]
    opt.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for k in range(accum):
        x, y = loader.micro_batch(step, k, t["micro_batch"], t["global_batch"])
        _, loss = model(x, y)
        (loss / accum).backward()
        loss_sum += loss.item()
    lr, norm = finish_step(model, opt, step, t)
    return loss_sum / accum, lr, norm


def finish_step(model, opt, step, t):
    """The update once the step's gradients are accumulated: the total norm
    (before clipping), clipping, the step's LR, AdamW. Returns (lr, grad_norm).
    Shared by train_step and the references whose loss has more terms than
    the reported cross-entropy (scripts/mixtral_torch.py)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if t["grad_clip"] > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, t["grad_clip"]).item()
    else:
        norm = torch.norm(torch.stack([p.grad.detach().norm(2) for p in params]), 2).item()
    lr = lr_at(step, t["lr"], t["steps"], t["warmup_steps"], t["min_lr"], t.get("lr_schedule", "cosine"))
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    return lr, norm


# ================================================================ trainer I/O

_YAML_SPECIAL = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"}


def _yaml_scalar(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_yaml_scalar(x) for x in v) + "]"
    if isinstance(v, dict):  # a flow map: model.rope_scaling
        return "{" + ", ".join(f"{k}: {_yaml_scalar(x)}" for k, x in v.items()) + "}"
    s = str(v)
    # Enum values must be plain: the trainer's schema rejects quoted enums, and
    # quotes everything else (paths), which its string keys accept.
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", s) and s.lower() not in _YAML_SPECIAL:
        return s
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def write_trainer_config(path, sections):
    """Writes {section: {key: value}} as the trainer's YAML config."""
    lines = []
    for section, keys in sections.items():
        lines.append(f"{section}:")
        lines.extend(f"  {k}: {_yaml_scalar(v)}" for k, v in keys.items())
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def find_trainer(build):
    exe = os.path.join(build, "trainer")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        print(f"error: no trainer executable at {exe}; build it first:\n"
              f"  cmake -S {REPO_ROOT} -B {build} -DTRAINER_WITH_CUDA=OFF -DTRAINER_BUILD_TESTS=OFF"
              f" && cmake --build {build} -j2 --target trainer", file=sys.stderr)
        sys.exit(2)
    return exe


def mpirun_launcher(ranks):
    """The command prefix and environment that start `ranks` processes of the
    trainer on this host: none for one rank, else mpirun with more ranks than
    cores allowed (and, as root, allowed at all), one BLAS/OpenMP thread each."""
    if ranks == 1:
        return [], None
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return ["mpirun", "--oversubscribe", "-np", str(ranks)], env


def run_trainer(exe, cfg_path, log_path, timeout=1800, env=None, launcher=()):
    """Runs `[launcher...] exe --config cfg_path`, output to log_path; exits 2
    with the log tail on failure."""
    cmd = [*launcher, exe, "--config", cfg_path]
    with open(log_path, "w") as log:
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    if rc != 0:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        print(f"error: {' '.join(cmd)} failed (exit {rc}); last output:\n{tail}", file=sys.stderr)
        sys.exit(2)


def read_metrics(path):
    """metrics.jsonl -> {step: record} for records with a train loss (last one wins)."""
    if not os.path.exists(path):
        print(f"error: the trainer wrote no {path}", file=sys.stderr)
        sys.exit(2)
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            if "step" in rec and "loss" in rec:
                out[int(rec["step"])] = rec
    return out




# ================================================================ self-test

def check_init_and_causality(model, vocab, atol=0.0):
    """What any freshly initialised causal LM must do (the references'
    self-tests): a loss near ln(vocab) on random tokens, and logits at a
    position that a later token cannot change (bit for bit at atol 0; a
    dropless mixture passes atol > 0: a later token's routing changes how
    many rows each expert's GEMM takes, and the BLAS may block a GEMM of
    another height differently, so earlier rows move by rounding, never by
    more). Returns the tokens used."""
    x = torch.randint(0, vocab, (4, 32))
    _, loss = model(x, torch.randint(0, vocab, (4, 32)))
    print(f"init loss {loss.item():.4f}  ln({vocab}) = {math.log(vocab):.4f}")
    assert abs(loss.item() - math.log(vocab)) < 0.1
    x2 = x.clone()
    x2[:, 20] = (x2[:, 20] + 1) % vocab
    l1, _ = model(x)
    l2, _ = model(x2)
    before = (l1[:, :20] - l2[:, :20]).abs().max().item()
    assert before <= atol, f"a later token moved an earlier logit by {before:.3g} > {atol}"
    assert not torch.equal(l1[:, 20:], l2[:, 20:])
    return x


def _self_test():
    import random
    import tempfile
    g = torch.Generator().manual_seed(0)
    tensors = {"b.weight": torch.randn(3, 5, generator=g), "a.bias": torch.randn(7, generator=g)}
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.safetensors")
        write_safetensors(p, tensors, {"format": "pt"})
        back = read_safetensors(p)
        assert set(back) == set(tensors) and all(torch.equal(back[k], v) for k, v in tensors.items())
        assert read_safetensors_metadata(p) == {"format": "pt"}
        with open(p, "rb") as f:
            assert struct.unpack("<Q", f.read(8))[0] % 8 == 0

        # BF16 reading: a hand-made file with the bf16 bit patterns of known floats.
        vals = torch.tensor([1.0, -2.5, 0.15625, 3.0e5])
        bits = vals.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        h = json.dumps({"t": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, len(bits)]}}).encode()
        h += b" " * (-len(h) % 8)
        q = os.path.join(d, "b.safetensors")
        with open(q, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + bits)
        assert torch.equal(read_safetensors(q)["t"], vals.to(torch.bfloat16).float().view(2, 2))

        # Data order against a direct reading of the contract, across two shards.
        rng = random.Random(5)
        a = [rng.randrange(256) for _ in range(100)]
        b = [rng.randrange(256) for _ in range(70)]
        pa, pb = os.path.join(d, "train_000000.bin"), os.path.join(d, "train_000001.bin")
        prepare_data.write_shard(pa, a)
        prepare_data.write_shard(pb, b)
        T = 16
        ld = WindowLoader([pa, pb], T)
        assert ld.windows == [99 // T, 69 // T] and ld.total == 6 + 4
        flat = [(a, w * T) for w in range(6)] + [(b, w * T) for w in range(4)]
        for g in range(25):
            src, start = flat[g % 10]
            assert ld.window(g) == (src[start:start + T], src[start + 1:start + T + 1])
        x, y = ld.micro_batch(step=1, k=1, micro_batch=2, global_batch=4)
        assert x[0].tolist() == ld.window(6)[0] and y[1].tolist() == ld.window(7)[1]

        # The config writer's nested values.
        c = os.path.join(d, "c.yaml")
        write_trainer_config(c, {"model": {"arch": "llama", "rope_scaling": {"factor": 8.0},
                                           "init_from": "/x y/z", "none": None}})
        with open(c) as f:
            assert f.read() == ('model:\n  arch: llama\n  rope_scaling: {factor: 8.0}\n'
                                '  init_from: "/x y/z"\n  none: null\n')

    sched = [lr_at(s, 1e-3, 10, 3, 1e-4) for s in range(10)]
    assert abs(sched[0] - 1e-3 / 3) < 1e-15 and abs(sched[2] - 1e-3) < 1e-15
    assert abs(sched[3] - 1e-3) < 1e-15 and sched[9] > 1e-4
    assert lr_at(5, 1e-3, 10, 3, 1e-4, "constant") == 1e-3
    print("lr (cosine, 10 steps, warmup 3): " + " ".join(f"{v:.3e}" for v in sched))
    assert mpirun_launcher(1) == ([], None) and mpirun_launcher(4)[0][-1] == "4"
    print("torch_reference self-test: PASS")


if __name__ == "__main__":
    _self_test()
