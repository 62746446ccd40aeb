#!/usr/bin/env python3
"""An independent PyTorch Llama, the reference of scripts/check_against_pytorch.py --arch llama.

Llama: HF LlamaForCausalLM semantics written out in plain torch (no
transformers code): token embedding and no positions; per block RMSNorm
(weight, no bias, eps model.norm_eps), q/k/v projections, rotary embeddings
on q and k in the rotate_half convention (channel i turns with channel
i + hs/2, frequencies rope_theta^(-2i/hs), optionally rescaled by Llama 3.1's
rule), grouped-query causal attention (each of n_kv_head key/value heads
serves n_head / n_kv_head consecutive query heads) scaled by 1/sqrt(hs),
o_proj, residual, RMSNorm, SwiGLU MLP down(silu(gate(x)) * up(x)),
residual; final RMSNorm, LM head (untied unless tie_embeddings), mean
cross-entropy. No biases anywhere. Linear weights are torch's and HF's
(out, in). The state_dict carries HF's names ("model.layers.0.self_attn.
q_proj.weight", "lm_head.weight"), exactly what build/trainer reads with
model.init_from and writes to <run>/model.safetensors.

The data order, schedule, optimizer step, safetensors and trainer I/O are
scripts/torch_reference.py's (AdamW decays the 2-D weights: the embedding,
every projection and lm_head, as trainer/parallelize/llama_placement.cpp).

    python3 scripts/llama_torch.py      # self-test: init loss ~ ln(V), causality, RoPE, GQA
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

class LlamaConfig:
    """The trainer's model.* keys for arch llama. rope_scaling: None, or a dict
    {factor, low_freq_factor, high_freq_factor, original_max_position}."""

    def __init__(self, n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=176, vocab_size=256,
                 block_size=64, rope_theta=10000.0, norm_eps=1e-5, rope_scaling=None,
                 tie_embeddings=False):
        if n_embd % n_head:
            raise ValueError(f"n_embd {n_embd} is not divisible by n_head {n_head}")
        if n_head % n_kv_head:
            raise ValueError(f"n_head {n_head} is not divisible by n_kv_head {n_kv_head}")
        if (n_embd // n_head) % 2:
            raise ValueError(f"head size {n_embd // n_head} is odd: RoPE turns pairs of channels")
        self.n_layer, self.n_head, self.n_kv_head, self.n_embd = n_layer, n_head, n_kv_head, n_embd
        self.ffn_hidden, self.vocab_size, self.block_size = ffn_hidden, vocab_size, block_size
        self.rope_theta, self.norm_eps = rope_theta, norm_eps
        self.rope_scaling = dict(rope_scaling) if rope_scaling else None
        self.tie_embeddings = tie_embeddings

    @property
    def head_size(self):
        return self.n_embd // self.n_head

    def as_dict(self):
        return dict(arch="llama", n_layer=self.n_layer, n_head=self.n_head, n_kv_head=self.n_kv_head,
                    n_embd=self.n_embd, ffn_hidden=self.ffn_hidden, vocab_size=self.vocab_size,
                    block_size=self.block_size, rope_theta=float(self.rope_theta),
                    norm_eps=float(self.norm_eps), rope_scaling=self.rope_scaling,
                    tie_embeddings=self.tie_embeddings)


def rope_inv_freq(cfg):
    """(hs/2,) float64 frequencies theta^(-2i/hs), with Llama 3.1's scaling when configured:
    wavelengths 2 pi / f shorter than original_max_position / high_freq_factor stay,
    longer than original_max_position / low_freq_factor are divided by factor, and
    those between are interpolated: s = (original_max_position / wavelength - low) / (high - low),
    f' = (1 - s) f / factor + s f."""
    hs = cfg.head_size
    inv = 1.0 / (float(cfg.rope_theta) ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    rs = cfg.rope_scaling
    if not rs:
        return inv
    factor = float(rs["factor"])
    low, high = float(rs.get("low_freq_factor", 1.0)), float(rs.get("high_freq_factor", 4.0))
    old_len = float(rs["original_max_position"])
    out = inv.clone()
    for i, f in enumerate(inv.tolist()):
        wavelen = 2 * math.pi / f
        if wavelen < old_len / high:
            continue
        if wavelen > old_len / low:
            out[i] = f / factor
        else:
            s = (old_len / wavelen - low) / (high - low)
            out[i] = (1 - s) * f / factor + s * f
    return out


def rope_cos_sin(cfg, T):
    """cos, sin (T, hs) fp32 of positions 0..T-1, each frequency repeated over both halves."""
    angles = torch.arange(T, dtype=torch.float64)[:, None] * rope_inv_freq(cfg)[None, :]  # (T, hs/2)
    angles = torch.cat([angles, angles], dim=-1)                                          # (T, hs)
    return angles.cos().float(), angles.sin().float()


def rotate_half(x):
    """(..., hs) -> (-x2, x1) of its halves x1 = x[..., :hs/2], x2 = x[..., hs/2:]."""
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):  # (..., C)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_kv_head, hs = cfg.n_head, cfg.n_kv_head, cfg.head_size
        self.q_proj = nn.Linear(cfg.n_embd, cfg.n_head * hs, bias=False)
        self.k_proj = nn.Linear(cfg.n_embd, cfg.n_kv_head * hs, bias=False)
        self.v_proj = nn.Linear(cfg.n_embd, cfg.n_kv_head * hs, bias=False)
        self.o_proj = nn.Linear(cfg.n_head * hs, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin):  # x (B, T, C); cos, sin (T, hs)
        B, T, _ = x.shape
        hs = cos.shape[-1]
        q = self.q_proj(x).view(B, T, self.n_head, hs).transpose(1, 2)     # (B, nh, T, hs)
        k = self.k_proj(x).view(B, T, self.n_kv_head, hs).transpose(1, 2)  # (B, nkv, T, hs)
        v = self.v_proj(x).view(B, T, self.n_kv_head, hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.n_head // self.n_kv_head  # query head h reads kv head h // group
        k = k.repeat_interleave(group, dim=1)                              # (B, nh, T, hs)
        v = v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))            # (B, nh, T, T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.n_head * hs)      # (B, T, nh hs)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)
        self.up_proj = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    """HF's LlamaModel: the module under the "model." names."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.n_embd, cfg.norm_eps)


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        # Tied: the head reads embed_tokens and has no parameter of its own.
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx, targets=None):  # idx (B, T) int64
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        cos, sin = rope_cos_sin(self.cfg, T)
        x = self.model.embed_tokens(idx)                # (B, T, C)
        for block in self.model.layers:
            x = block(x, cos, sin)
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, head)                      # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def init_llama(model, seed, perturb=False):
    """N(0, 0.02) weights from `seed`, RMSNorm weights one (1 + N(0, 0.1) with
    perturb, so that a cross-check sees every norm weight imported)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.copy_(1.0 + (0.1 * torch.randn(p.shape, generator=g) if perturb else 0.0))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return model


def hf_state_dict(model):
    """name -> fp32 tensor with HF's names; a tied head has no lm_head.weight."""
    return {k: v.detach().float().contiguous() for k, v in model.state_dict().items()}


def expected_shapes(cfg):
    C, V, F_ = cfg.n_embd, cfg.vocab_size, cfg.ffn_hidden
    Q, KV = cfg.n_head * cfg.head_size, cfg.n_kv_head * cfg.head_size
    shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = [V, C]
    for i in range(cfg.n_layer):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [C],
            p + "self_attn.q_proj.weight": [Q, C], p + "self_attn.k_proj.weight": [KV, C],
            p + "self_attn.v_proj.weight": [KV, C], p + "self_attn.o_proj.weight": [C, Q],
            p + "post_attention_layernorm.weight": [C],
            p + "mlp.gate_proj.weight": [F_, C], p + "mlp.up_proj.weight": [F_, C],
            p + "mlp.down_proj.weight": [C, F_],
        })
    return shapes


def load_into(model, tensors):
    """Copies HF-named tensors into the model; names and shapes must match exactly."""
    return tr.load_state(model, tensors, expected_shapes(model.cfg))


# ================================================================ self-test

def _self_test():
    import tempfile
    torch.manual_seed(0)
    scaling = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=256)
    cfg = LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=176, vocab_size=256,
                      block_size=64, rope_scaling=scaling)
    model = init_llama(Llama(cfg), seed=1234)
    assert {k: list(v.shape) for k, v in model.state_dict().items()} == expected_shapes(cfg)
    x = tr.check_init_and_causality(model, 256)  # loss near ln 256, causal

    # RoPE: a rotation per channel pair (norms kept), and q.k depends only on
    # the distance between the two positions.
    cos, sin = rope_cos_sin(cfg, 40)
    v = torch.randn(cfg.head_size, dtype=torch.float32)
    w = torch.randn(cfg.head_size, dtype=torch.float32)
    rot = lambda t, p: t * cos[p] + rotate_half(t) * sin[p]  # noqa: E731
    assert abs(rot(v, 17).norm() - v.norm()) < 1e-5
    assert abs(rot(v, 3) @ rot(w, 10) - rot(v, 23) @ rot(w, 30)) < 1e-4
    # Llama 3.1 scaling: with these settings (wavelengths 6 .. 2e4 against
    # 64 and 256) the three bands are all present.
    plain = rope_inv_freq(LlamaConfig(n_embd=64, n_head=4))
    scaled = rope_inv_freq(cfg)
    wl = 2 * math.pi / plain
    assert torch.equal(scaled[wl < 64], plain[wl < 64]) and (wl < 64).any()
    assert torch.allclose(scaled[wl > 256], plain[wl > 256] / 8) and (wl > 256).any()
    mid = (wl >= 64) & (wl <= 256)
    assert mid.any() and ((scaled[mid] < plain[mid]) & (scaled[mid] > plain[mid] / 8)).all()

    # GQA: with the kv heads' weights repeated, n_kv_head = n_head gives the same function.
    full = Llama(LlamaConfig(n_layer=2, n_head=4, n_kv_head=4, n_embd=64, ffn_hidden=176,
                             vocab_size=256, block_size=64, rope_scaling=scaling))
    sd = hf_state_dict(model)
    hs = cfg.head_size
    for k in list(sd):
        if k.endswith(("k_proj.weight", "v_proj.weight")):
            sd[k] = sd[k].view(cfg.n_kv_head, hs, -1).repeat_interleave(2, dim=0).reshape(4 * hs, -1)
    load_into(full, sd)
    assert torch.allclose(full(x)[0], model(x)[0], atol=1e-5)

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.safetensors")
        tr.write_safetensors(p, hf_state_dict(model), {"format": "pt"})
        back = tr.read_safetensors(p)
        assert all(torch.equal(back[k], v) for k, v in hf_state_dict(model).items())
        load_into(init_llama(Llama(cfg), seed=99), back)

    tied = LlamaConfig(n_layer=1, n_head=4, n_kv_head=1, n_embd=32, ffn_hidden=64, tie_embeddings=True)
    tm = init_llama(Llama(tied), seed=3)
    assert "lm_head.weight" not in hf_state_dict(tm) and set(hf_state_dict(tm)) == set(expected_shapes(tied))
    print("llama_torch self-test: PASS")


if __name__ == "__main__":
    _self_test()
