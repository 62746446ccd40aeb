#!/usr/bin/env python3
"""An independent PyTorch Mixtral, the reference of scripts/check_against_pytorch.py --arch mixtral.

Mixtral: HF MixtralForCausalLM semantics written out in plain torch from the
definitions (no transformers code). Everything but the MLP is Llama's and is
imported from scripts/llama_torch.py: embedding, RMSNorm, RoPE, grouped-query
causal attention, final norm, untied head. Each block's MLP is a sparse
mixture of n_experts SwiGLU experts w2(silu(w1 x) * w3 x) of width
ffn_hidden:

  * router: logits = gate(x) (a bias-free Linear C -> E, in fp32),
    probs = softmax(logits) in fp32, the experts_per_token = k largest probs
    of each row (descending; exact ties to the lower expert index), their
    probs renormalised to sum to 1 as the row's combine weights;
  * capacity_factor 0: dropless. Otherwise each expert keeps at most
    capacity = ceil(capacity_factor * k * N / E) slots of a micro-batch of N
    rows, dropping the slots of the lowest combine weight first, equal
    weights dropping the later row first; a dropped slot contributes nothing;
  * out[r] = sum over row r's kept slots of weight * expert(x[r]).

The objective of a micro-batch is
    cross-entropy + router_aux_loss_coef * aux + router_z_loss_coef * z
with aux transformers' load_balancing_loss_func over the router logits of
ALL layers of the micro-batch pooled (rows = layers x tokens):
    tokens_per_expert (k, E) = mean over rows of the one-hot of the top-k
    router_prob_per_expert (E) = mean over rows of probs
    aux = E * sum(tokens_per_expert * router_prob_per_expert)
(which is E * sum_e counts_e / rows * prob_sums_e / rows, counts over the k
slots, before any capacity drop; the one-hot carries no gradient), and z
Megatron's router z-loss summed over layers:
    z = sum over layers of mean over rows of logsumexp(logits)^2.
HF's MixtralForCausalLM reports loss = CE + router_aux_loss_coef * aux (it
has no z-loss); tests/scripts/test_mixtral_torch.py checks this module
against it.

Names are HF's ("model.layers.0.block_sparse_moe.gate.weight",
"model.layers.0.block_sparse_moe.experts.3.w1.weight"), the same convention
as llama_torch.py: the trainer reads and writes exactly these.

Per step (train_step) the reference reports the cross-entropy as `loss`,
the unscaled aux loss (mean over the step's micro-batches), the z-loss, the
dropped slots, and the smallest top-k margin seen: over every row and layer,
the gap between the k-th and the (k+1)-th largest prob. A cross-check whose
margin is tiny cannot tell a wrong router from rounding that flipped a
choice; the caller decides. With record_routing the chosen experts of each
micro-batch and layer are kept, for a caller to compare with another dump.

    python3 scripts/mixtral_torch.py      # self-test
"""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as tr  # noqa: E402  (re-executes under /usr/bin/python3 if torch is missing)
import llama_torch as lt  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ====================================================================== model

class MixtralConfig(lt.LlamaConfig):
    """The trainer's model.* keys for arch mixtral: llama's plus the mixture's."""

    def __init__(self, n_experts=4, experts_per_token=2, router_aux_loss_coef=0.02,
                 router_z_loss_coef=0.0, capacity_factor=0.0, ffn_hidden=96, **llama_keys):
        super().__init__(ffn_hidden=ffn_hidden, **llama_keys)
        if n_experts < 1:
            raise ValueError(f"n_experts {n_experts} must be >= 1")
        if not 1 <= experts_per_token <= n_experts:
            raise ValueError(f"experts_per_token {experts_per_token} is not in [1, n_experts = {n_experts}]")
        if capacity_factor < 0:
            raise ValueError(f"capacity_factor {capacity_factor} must be >= 0 (0: dropless)")
        self.n_experts, self.experts_per_token = n_experts, experts_per_token
        self.router_aux_loss_coef = router_aux_loss_coef
        self.router_z_loss_coef = router_z_loss_coef
        self.capacity_factor = capacity_factor

    def capacity(self, n_rows):
        """Slots an expert keeps of a micro-batch of n_rows rows; 0 = no limit."""
        if self.capacity_factor == 0:
            return 0
        # Left to right in double, as written in the contract: a factor such
        # as 1.1 is not exact, and the order decides the ceiling's input.
        return math.ceil(self.capacity_factor * self.experts_per_token * n_rows / self.n_experts)

    def as_dict(self):
        d = super().as_dict()
        d.update(arch="mixtral", n_experts=self.n_experts, experts_per_token=self.experts_per_token,
                 router_aux_loss_coef=float(self.router_aux_loss_coef),
                 router_z_loss_coef=float(self.router_z_loss_coef),
                 capacity_factor=float(self.capacity_factor))
        return d


def route(logits, k):
    """Router of rows (R, E) logits: (probs (R,E) fp32, top_e (R,k) int64,
    weights (R,k) renormalised, margin (R,) prob_k - prob_{k+1}, inf at k = E).

    A stable descending sort, not torch.topk: exact ties must go to the lower
    expert index (the trainer's contract, kernels/ops.hpp), which topk does
    not promise. The selected probs keep their gradient (gather), so the
    weights differentiate through the softmax as HF's do."""
    probs = F.softmax(logits.float(), dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    top_p, top_e = sorted_p[:, :k], order[:, :k]
    weights = top_p / top_p.sum(dim=-1, keepdim=True)
    if k < probs.shape[-1]:
        margin = (sorted_p[:, k - 1] - sorted_p[:, k]).detach()
    else:
        margin = torch.full((probs.shape[0],), float("inf"))
    return probs, top_e, weights, margin


def capacity_keep(top_e, weights, n_experts, capacity):
    """(keep (R,k) bool, smallest gap between an overflowing expert's last kept
    and first dropped weight, inf where none overflows). capacity 0: all kept.

    Per expert: its slots in row order (r, then j; one slot per row at most),
    then a stable descending sort of their weights, so that equal weights keep
    the earlier row and drop the later one; the first `capacity` are kept."""
    keep = torch.ones_like(top_e, dtype=torch.bool)
    gap = float("inf")
    if capacity <= 0:
        return keep, gap
    keep.zero_()
    w = weights.detach()
    for e in range(n_experts):
        r, j = (top_e == e).nonzero(as_tuple=True)  # row-major: rows ascending
        if len(r) <= capacity:
            keep[r, j] = True
            continue
        sw, order = torch.sort(w[r, j], descending=True, stable=True)
        kept = order[:capacity]
        keep[r[kept], j[kept]] = True
        gap = min(gap, (sw[capacity - 1] - sw[capacity]).item())
    return keep, gap


class Expert(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)  # gate
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.n_embd, bias=False)  # down
        self.w3 = nn.Linear(cfg.n_embd, cfg.ffn_hidden, bias=False)  # up

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    """HF's block_sparse_moe: gate + experts. forward returns (out, routing
    record); the record feeds the micro-batch's losses and the reports."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.gate = nn.Linear(cfg.n_embd, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(cfg) for _ in range(cfg.n_experts))

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        h = x.reshape(B * T, C)
        logits = F.linear(h.float(), self.gate.weight.float())  # the router is fp32 whatever x is
        probs, top_e, weights, margin = route(logits, self.cfg.experts_per_token)
        keep, cap_gap = capacity_keep(top_e, weights, self.cfg.n_experts, self.cfg.capacity(B * T))
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            r, j = ((top_e == e) & keep).nonzero(as_tuple=True)
            if len(r) == 0:
                continue  # no rows: no gradient either (the caller zero-fills it)
            y = expert(h[r]) * weights[r, j, None].to(h.dtype)
            out = out.index_add(0, r, y)
        rec = dict(logits=logits, probs=probs, top_e=top_e, margin=margin.min().item(),
                   capacity_gap=cap_gap, dropped=int((~keep).sum().item()), keep=keep)
        return out.view(B, T, C), rec


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = lt.RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.self_attn = lt.Attention(cfg)
        self.post_attention_layernorm = lt.RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.block_sparse_moe = SparseMoE(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        y, rec = self.block_sparse_moe(self.post_attention_layernorm(x))
        return x + y, rec


class Body(nn.Module):
    """HF's MixtralModel: the module under the "model." names."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = lt.RMSNorm(cfg.n_embd, cfg.norm_eps)


def load_balancing_loss(layer_logits, n_experts, k):
    """transformers' load_balancing_loss_func, from its definition: the
    logits (rows, E) of every layer pooled, softmax, top-k one-hot (k, E)
    and prob means over the pooled rows, E * sum of their product. The top-k
    here is route()'s (ties to the lower index), the experts the MoE used."""
    logits = torch.cat(layer_logits, dim=0)
    probs, top_e, _, _ = route(logits, k)
    tokens_per_expert = F.one_hot(top_e, n_experts).float().mean(dim=0)  # (k, E)
    prob_per_expert = probs.mean(dim=0)                                  # (E,)
    return n_experts * (tokens_per_expert * prob_per_expert[None, :]).sum()


def router_z_loss(layer_logits):
    """Megatron's router z-loss, summed over layers: mean over rows of lse^2."""
    return sum(torch.logsumexp(lg.float(), dim=-1).pow(2).mean() for lg in layer_logits)


class Mixtral(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.last = None  # the last forward's routing: see forward

    def forward(self, idx, targets=None):
        """(logits, mean cross-entropy) like the other references, so that
        generic checks (causality, init loss) apply; the mixture's terms of
        this micro-batch are in self.last: aux, z (tensors with their graph),
        margin, capacity_gap, dropped (slots, all layers), counts (L, E),
        top_e (one (B*T, k) tensor per layer), keep (the same shape, bool:
        the slot survived the capacity cut) and router_logits (one (B*T, E)
        per layer)."""
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        cos, sin = lt.rope_cos_sin(self.cfg, T)
        x = self.model.embed_tokens(idx)
        recs = []
        for block in self.model.layers:
            x, rec = block(x, cos, sin)
            recs.append(rec)
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(x, head)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        E, k = self.cfg.n_experts, self.cfg.experts_per_token
        layer_logits = [r["logits"] for r in recs]
        self.last = dict(
            aux=load_balancing_loss(layer_logits, E, k),
            z=router_z_loss(layer_logits),
            margin=min(r["margin"] for r in recs),
            capacity_gap=min(r["capacity_gap"] for r in recs),
            dropped=sum(r["dropped"] for r in recs),
            counts=torch.stack([torch.bincount(r["top_e"].reshape(-1), minlength=E) for r in recs]),
            top_e=[r["top_e"] for r in recs],
            keep=[r["keep"] for r in recs],
            router_logits=layer_logits)
        return logits, loss

    def objective(self, ce):
        """The micro-batch's training loss from its cross-entropy and self.last."""
        c = self.cfg
        obj = ce + c.router_aux_loss_coef * self.last["aux"]
        if c.router_z_loss_coef:
            obj = obj + c.router_z_loss_coef * self.last["z"]
        return obj


def init_mixtral(model, seed, perturb=False):
    """llama_torch.init_llama's rule: N(0, 0.02) weights (the router's too),
    RMSNorm weights one, or 1 + N(0, 0.1) with perturb."""
    return lt.init_llama(model, seed, perturb)


def make_routing_decisive(model, seed, levels=(2.0, 1.0, 0.0, -1.0), strength=1.0):
    """Rewrites the embedding and the routers so that every token's top-k is
    far from a tie, for cross-checks whose rounding must not flip a choice.

    With plain N(0, 0.02) routers the probs of a row are all near 1/E and the
    smallest top-k margin over a few thousand rows is ~1e-6: the trainer and
    torch could route a row differently and nothing would tell a bug from
    rounding. Here channels [0, E) of each token's embedding hold a seeded
    permutation of `levels` (scaled by `strength`), and every layer's gate
    reads mostly those channels (plus its N(0, 0.02) noise), so the router
    logits of a row are its token's levels, spaced ~1 apart, plus the much
    smaller contribution of its context. The rest of the model is untouched:
    the gradients still reach every router weight."""
    cfg = model.cfg
    E = cfg.n_experts
    if E > cfg.n_embd or len(levels) < E:
        raise ValueError(f"make_routing_decisive needs n_experts {E} <= n_embd and >= {E} levels")
    g = torch.Generator().manual_seed(seed)
    lv = torch.tensor(levels[:E], dtype=torch.float32) * strength
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        for t in range(cfg.vocab_size):
            emb[t, :E] = lv[torch.randperm(E, generator=g)]
        # RMSNorm divides by the row's rms, ~|levels| / sqrt(C): the gate's
        # scale brings the normalised levels back to logits spaced ~1 apart.
        rms = math.sqrt(float((lv ** 2).mean()) * E / cfg.n_embd)
        for block in model.model.layers:
            block.block_sparse_moe.gate.weight[:, :E] += torch.eye(E) * (rms / strength)
    return model


def hf_state_dict(model):
    return lt.hf_state_dict(model)


def expected_shapes(cfg):
    """HF Mixtral's names and shapes: llama's, with each mlp.* replaced by the mixture's."""
    shapes = {k: v for k, v in lt.expected_shapes(cfg).items() if ".mlp." not in k}
    C, F_, E = cfg.n_embd, cfg.ffn_hidden, cfg.n_experts
    for i in range(cfg.n_layer):
        p = f"model.layers.{i}.block_sparse_moe."
        shapes[p + "gate.weight"] = [E, C]
        for m in range(E):
            q = f"{p}experts.{m}."
            shapes.update({q + "w1.weight": [F_, C], q + "w2.weight": [C, F_], q + "w3.weight": [F_, C]})
    return shapes


def load_into(model, tensors):
    return tr.load_state(model, tensors, expected_shapes(model.cfg))


# ================================================================ training step

def train_step(model, opt, loader, step, t, record_routing=False):
    """One optimizer step of the objective (CE + coef aux + coef z per
    micro-batch, averaged over the accumulated micro-batches), as
    torch_reference.train_step otherwise. Returns a dict: loss (the CE, mean
    over micro-batches), aux_loss, z_loss (unscaled, mean over micro-batches),
    lr, grad_norm, margin (smallest top-k margin of the step), capacity_gap,
    dropped (slots dropped, summed over micro-batches and layers), counts
    (L, E) summed over micro-batches, and with record_routing, routing: per
    micro-batch, per layer, {"experts": the chosen experts (rows, k) as
    lists, "kept": (rows, k) bools, False where the capacity cut dropped the
    slot}."""
    accum = t["global_batch"] // t["micro_batch"]
    opt.zero_grad(set_to_none=True)
    out = dict(loss=0.0, aux_loss=0.0, z_loss=0.0, margin=float("inf"),
               capacity_gap=float("inf"), dropped=0, counts=0, routing=[] if record_routing else None)
    for k in range(accum):
        x, y = loader.micro_batch(step, k, t["micro_batch"], t["global_batch"])
        _, ce = model(x, y)
        (model.objective(ce) / accum).backward()
        m = model.last
        out["loss"] += ce.item() / accum
        out["aux_loss"] += m["aux"].item() / accum
        out["z_loss"] += m["z"].item() / accum
        out["margin"] = min(out["margin"], m["margin"])
        out["capacity_gap"] = min(out["capacity_gap"], m["capacity_gap"])
        out["dropped"] += m["dropped"]
        out["counts"] = out["counts"] + m["counts"]
        if record_routing:
            out["routing"].append([dict(experts=te.tolist(), kept=kp.tolist())
                                   for te, kp in zip(m["top_e"], m["keep"])])
    # An expert no row chose has no gradient; torch's AdamW would skip it
    # (no decay, no moment decay), a dense optimizer updates it with a zero
    # gradient. The trainer is the latter, so zeros here.
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    out["lr"], out["grad_norm"] = tr.finish_step(model, opt, step, t)
    return out


# ================================================================ self-test

def _self_test():
    import tempfile
    torch.manual_seed(0)
    cfg = MixtralConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=96, vocab_size=256,
                        block_size=64, n_experts=4, experts_per_token=2, router_z_loss_coef=1e-3)
    model = init_mixtral(Mixtral(cfg), seed=1234)
    assert {k: list(v.shape) for k, v in model.state_dict().items()} == expected_shapes(cfg)
    tr.check_init_and_causality(model, 256, atol=1e-5)  # dropless: causal

    # Identical experts: the mixture is that one SwiGLU MLP whatever the
    # routing (the weights sum to 1), i.e. llama_torch's Llama.
    dense = lt.LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=64, ffn_hidden=96,
                           vocab_size=256, block_size=64)
    llama = lt.init_llama(lt.Llama(dense), seed=7, perturb=True)
    sd = {k: v for k, v in hf_state_dict(llama).items() if ".mlp." not in k}
    g = torch.Generator().manual_seed(8)
    for i in range(cfg.n_layer):
        mlp = f"model.layers.{i}.mlp."
        sd[f"model.layers.{i}.block_sparse_moe.gate.weight"] = torch.randn(4, 64, generator=g)
        for m in range(4):
            q = f"model.layers.{i}.block_sparse_moe.experts.{m}."
            sd[q + "w1.weight"] = llama.state_dict()[mlp + "gate_proj.weight"]
            sd[q + "w3.weight"] = llama.state_dict()[mlp + "up_proj.weight"]
            sd[q + "w2.weight"] = llama.state_dict()[mlp + "down_proj.weight"]
    same = load_into(Mixtral(cfg), sd)
    x = torch.randint(0, 256, (2, 16))
    assert torch.allclose(same(x)[0], llama(x)[0], atol=1e-5)

    # A zero router: all probs 1/E, ties to the lower index, so every row
    # picks experts 0..k-1 and aux = E * sum_{e<k} 1 * (1/E) = k; each layer's
    # lse is ln E, so z = L (ln E)^2; the margin is 0.
    with torch.no_grad():
        for b in model.model.layers:
            b.block_sparse_moe.gate.weight.zero_()
    model(x, x)
    assert all(torch.equal(te, torch.tensor([[0, 1]] * 32)) for te in model.last["top_e"])
    assert abs(model.last["aux"].item() - 2.0) < 1e-6 and model.last["margin"] == 0.0
    assert abs(model.last["z"].item() - 2 * math.log(4) ** 2) < 1e-5

    # Capacity, by hand: 5 rows, k 1, E 2, factor 0.5 -> ceil(0.5*1*5/2) = 2.
    top_e = torch.tensor([[0], [0], [0], [1], [0]])
    w = torch.tensor([[0.9], [0.6], [0.9], [1.0], [0.7]])
    keep, gap = capacity_keep(top_e, w, 2, MixtralConfig(capacity_factor=0.5, experts_per_token=1,
                                                         n_experts=2).capacity(5))
    # Expert 0 holds rows 0, 1, 2, 4 (weights .9 .6 .9 .7): keeps the two
    # 0.9s (rows 0 and 2); row 3 alone on expert 1 stays.
    assert keep.view(-1).tolist() == [True, False, True, True, False], keep
    assert abs(gap - 0.2) < 1e-6
    # Equal weights: the later row drops first.
    keep, gap = capacity_keep(torch.zeros(3, 1, dtype=torch.long), torch.full((3, 1), 0.5), 1, 2)
    assert keep.view(-1).tolist() == [True, True, False] and gap == 0.0
    # A capacity run through the model: still the zero router, so the 2 x 16
    # rows' 64 slots all go to experts 0 and 1, which keep 1 slot each
    # (ceil(1/32 * 2 * 32 / 4)): 62 dropped a layer. A row with both slots
    # dropped gets no MLP output at all: the residual stream passes through.
    tight = MixtralConfig(**{**cfg.__dict__, "capacity_factor": 1 / 32})
    assert tight.capacity(32) == 1
    tm = load_into(Mixtral(tight), hf_state_dict(model))
    tm(x, x)
    assert tm.last["dropped"] == 2 * 62, tm.last["dropped"]
    moe = tm.model.layers[0].block_sparse_moe
    h = torch.randn(2, 16, 64)
    out, rec = moe(h)
    assert rec["dropped"] == 62 and torch.count_nonzero(out.view(32, 64).abs().sum(-1)) == 1

    # Decisive routing: margins of order 0.1, not 1e-6.
    dm = make_routing_decisive(init_mixtral(Mixtral(cfg), seed=5), seed=6)
    dm(torch.randint(0, 256, (4, 64)))
    plain = init_mixtral(Mixtral(cfg), seed=5)
    plain(torch.randint(0, 256, (4, 64)))
    print(f"smallest top-k margin over 4 x 64 rows, 2 layers: plain init {plain.last['margin']:.1e}, "
          f"decisive routing {dm.last['margin']:.1e}")
    assert dm.last["margin"] > 1e-2

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.safetensors")
        tr.write_safetensors(p, hf_state_dict(model), {"format": "pt"})
        load_into(init_mixtral(Mixtral(cfg), seed=99), tr.read_safetensors(p))
    print("mixtral_torch self-test: PASS")


if __name__ == "__main__":
    _self_test()
