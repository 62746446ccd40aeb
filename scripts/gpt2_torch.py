#!/usr/bin/env python3
"""An independent PyTorch GPT-2, the reference of scripts/check_against_pytorch.py.

GPT2: HF GPT-2 semantics (learned positions, pre-LN with eps 1e-5, causal
attention scaled by 1/sqrt(head size), tanh-GELU MLP of width 4C, final LN,
LM head tied to wte, mean cross-entropy). Its state_dict uses HF names
without the "transformer." prefix; linear weights are in HF's Conv1D layout
(in, out), y = x @ W + b, exactly what build/trainer reads and writes.
The data order, schedule, optimizer step, safetensors and trainer I/O every
reference shares are scripts/torch_reference.py's.

Importing this module needs torch (see torch_reference.ensure_torch).

    python3 scripts/gpt2_torch.py      # self-test: init loss ~ ln(V), causality, round trip
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as tr  # noqa: E402  (re-executes under /usr/bin/python3 if torch is missing)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ====================================================================== model

class GPT2Config:
    def __init__(self, n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=64):
        if n_embd % n_head:
            raise ValueError(f"n_embd {n_embd} is not divisible by n_head {n_head}")
        self.n_layer, self.n_head, self.n_embd = n_layer, n_head, n_embd
        self.vocab_size, self.block_size = vocab_size, block_size

    def as_dict(self):
        return dict(n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd,
                    vocab_size=self.vocab_size, block_size=self.block_size)


class Conv1D(nn.Module):
    """HF GPT-2's linear layer: weight (in, out), y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):  # (..., in) -> (..., out)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight) \
            .view(*x.shape[:-1], self.weight.shape[1])


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = Conv1D(cfg.n_embd, 3 * cfg.n_embd)  # q | k | v along the output
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)  # not an HF tensor

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)                  # 3 x (B, T, C)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)         # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))   # (B, nh, T, T)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = Conv1D(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=1e-5)

    def forward(self, idx, targets=None):  # idx (B, T) int64
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)               # (B, T, C)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight)           # (B, T, V), tied head
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def init_gpt2(model, seed, perturb=False):
    """GPT-2 init from `seed`: N(0, 0.02) weights, c_proj scaled by 1/sqrt(2L).

    With perturb, biases and LayerNorm parameters are random too, so that a
    cross-check sees every imported tensor matter (a zero bias read as zero by
    mistake would otherwise go unnoticed).
    """
    g = torch.Generator().manual_seed(seed)
    L = model.cfg.n_layer
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                p.copy_(1.0 + (0.1 * torch.randn(p.shape, generator=g) if perturb else 0.0))
            elif name.endswith(".bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=g) if perturb else torch.zeros(p.shape))
            else:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
                p.copy_(std * torch.randn(p.shape, generator=g))
    return model


def hf_state_dict(model):
    """name -> fp32 tensor with HF names (no prefix), tied head not repeated."""
    return {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}


def expected_shapes(cfg):
    C, V = cfg.n_embd, cfg.vocab_size
    shapes = {"wte.weight": [V, C], "wpe.weight": [cfg.block_size, C],
              "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        shapes.update({
            p + "ln_1.weight": [C], p + "ln_1.bias": [C],
            p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
            p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
            p + "ln_2.weight": [C], p + "ln_2.bias": [C],
            p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
            p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C],
        })
    return shapes


def load_into(model, tensors):
    """Copies HF-named tensors into the model; names and shapes must match exactly."""
    return tr.load_state(model, tensors, expected_shapes(model.cfg))


# ================================================================ self-test

def _self_test():
    import tempfile
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256, block_size=64)
    model = init_gpt2(GPT2(cfg), seed=1234)
    assert {k: list(v.shape) for k, v in model.state_dict().items()} == expected_shapes(cfg)
    x = tr.check_init_and_causality(model, 256)  # loss near ln 256, causal

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.safetensors")
        tr.write_safetensors(p, hf_state_dict(model), {"format": "pt"})
        back = tr.read_safetensors(p)
        assert all(torch.equal(back[k], v) for k, v in hf_state_dict(model).items())
        load_into(init_gpt2(GPT2(cfg), seed=99), back)
    print("gpt2_torch self-test: PASS")


if __name__ == "__main__":
    _self_test()
