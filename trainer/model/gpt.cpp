#include "trainer/model/gpt.hpp"

#include "kernels/core/error.hpp"

namespace gt {

namespace {
HostBuffer floats(int64_t n) { return HostBuffer(static_cast<size_t>(n) * sizeof(float)); }
}  // namespace

GPT::GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq)
    : cfg_(cfg), ops_(ops), layout_(cfg), max_rows_(max_rows), max_seq_(max_seq) {
  GT_CHECK(max_seq <= cfg.block_size, "seq ", max_seq, " > block_size ", cfg.block_size);
  params_ = floats(layout_.total());
  grads_ = floats(layout_.total());
  const int64_t L = cfg.n_layer, C = cfg.n_embd, NH = cfg.n_head, V = cfg.vocab_size;
  const int64_t BT = static_cast<int64_t>(max_rows) * max_seq;
  const int64_t att = static_cast<int64_t>(max_rows) * NH * max_seq * max_seq;
  auto& a = acts_;
  a.tokens = floats(BT);
  a.targets = floats(BT);
  a.encoded = floats(BT * C);
  a.ln1 = floats(L * BT * C);
  a.ln1_mean = floats(L * BT);
  a.ln1_rstd = floats(L * BT);
  a.qkv = floats(L * BT * 3 * C);
  a.atty = floats(L * BT * C);
  a.att = floats(L * att);
  a.res2 = floats(L * BT * C);
  a.ln2 = floats(L * BT * C);
  a.ln2_mean = floats(L * BT);
  a.ln2_rstd = floats(L * BT);
  a.fch = floats(L * BT * 4 * C);
  a.fch_gelu = floats(L * BT * 4 * C);
  a.res3 = floats(L * BT * C);
  a.lnf = floats(BT * C);
  a.lnf_mean = floats(BT);
  a.lnf_rstd = floats(BT);
  a.logits = floats(BT * V);
  a.losses = floats(BT);
  a.proj_tmp = floats(BT * C);
  auto& d = dacts_;
  d.dresidual = floats(BT * C);
  d.dln = floats(BT * C);
  d.datty = floats(BT * C);
  d.dfch_gelu = floats(BT * 4 * C);
  d.dfch = floats(BT * 4 * C);
  d.dqkv = floats(BT * 3 * C);
  d.datt = floats(att);
}

int64_t GPT::num_parameters() const {
  int64_t n = 0;
  for (const auto& s : layout_.specs()) n += s.numel;
  return n;
}

TensorView GPT::param(const std::string& name) {
  const ParamSpec& s = layout_.at(name);
  TensorView t = cpu_f32(params_.f32() + s.offset, {s.numel});
  t.ndim = static_cast<int>(s.shape.size());
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = s.shape[i];
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.strides[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}

// A (B,T,...)-shaped view of layer `layer`'s slice of a per-layer buffer
// whose slices are sized for the maximum (rows, seq).
TensorView GPT::layer_act(const HostBuffer& buf, int layer, std::initializer_list<int64_t> shape) {
  int64_t per_layer_max = static_cast<int64_t>(buf.bytes() / sizeof(float)) / cfg_.n_layer;
  return cpu_f32(buf.f32() + layer * per_layer_max, shape);
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                   float grad_scale) {
  GT_CHECK(B >= 1 && B <= max_rows_ && T >= 1 && T <= max_seq_, "B=", B, " T=", T);
  B_ = B;
  T_ = T;
  const int64_t C = cfg_.n_embd, NH = cfg_.n_head, V = cfg_.vocab_size, BT = int64_t(B) * T;
  auto& a = acts_;
  auto tok = cpu_i32(reinterpret_cast<int32_t*>(a.tokens.data()), {B, T});
  std::copy(tokens, tokens + BT, tok.i32());

  auto encoded = cpu_f32(a.encoded.f32(), {B, T, C});
  ops_.embedding_forward(encoded, tok, param("wte.weight"), param("wpe.weight"));
  TensorView x = encoded;  // (B,T,C) residual stream entering the block
  const TensorView none;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto ln1 = layer_act(a.ln1, l, {BT, C});
    auto ln1_mean = layer_act(a.ln1_mean, l, {BT});
    auto ln1_rstd = layer_act(a.ln1_rstd, l, {BT});
    auto qkv = layer_act(a.qkv, l, {B, T, 3 * C});
    auto atty = layer_act(a.atty, l, {B, T, C});
    auto att = layer_act(a.att, l, {B, NH, T, T});
    auto res2 = layer_act(a.res2, l, {B, T, C});
    auto ln2 = layer_act(a.ln2, l, {BT, C});
    auto ln2_mean = layer_act(a.ln2_mean, l, {BT});
    auto ln2_rstd = layer_act(a.ln2_rstd, l, {BT});
    auto fch = layer_act(a.fch, l, {BT, 4 * C});
    auto fch_gelu = layer_act(a.fch_gelu, l, {BT, 4 * C});
    auto res3 = layer_act(a.res3, l, {B, T, C});
    auto proj = cpu_f32(a.proj_tmp.f32(), {B, T, C});
    auto rows = [&](TensorView v, int64_t cols) { return cpu_f32(v.f32(), {BT, cols}); };

    ops_.layernorm_forward(ln1, ln1_mean, ln1_rstd, rows(x, C), param(h + "ln_1.weight"),
                           param(h + "ln_1.bias"));
    ops_.matmul_forward(rows(qkv, 3 * C), ln1, param(h + "attn.c_attn.weight"),
                        param(h + "attn.c_attn.bias"));
    ops_.attention_forward(atty, att, qkv, cfg_.n_head);
    ops_.matmul_forward(rows(proj, C), rows(atty, C), param(h + "attn.c_proj.weight"),
                        param(h + "attn.c_proj.bias"));
    ops_.add(res2, x, proj);
    ops_.layernorm_forward(ln2, ln2_mean, ln2_rstd, rows(res2, C), param(h + "ln_2.weight"),
                           param(h + "ln_2.bias"));
    ops_.matmul_forward(fch, ln2, param(h + "mlp.c_fc.weight"), param(h + "mlp.c_fc.bias"));
    ops_.gelu_forward(fch_gelu, fch);
    ops_.matmul_forward(rows(proj, C), fch_gelu, param(h + "mlp.c_proj.weight"),
                        param(h + "mlp.c_proj.bias"));
    ops_.add(res3, res2, proj);
    x = res3;
  }
  auto lnf = cpu_f32(a.lnf.f32(), {BT, C});
  ops_.layernorm_forward(lnf, cpu_f32(a.lnf_mean.f32(), {BT}), cpu_f32(a.lnf_rstd.f32(), {BT}),
                         cpu_f32(x.f32(), {BT, C}), param("ln_f.weight"), param("ln_f.bias"));
  auto logits = cpu_f32(a.logits.f32(), {BT, V});
  ops_.matmul_forward(logits, lnf, param("wte.weight"), none);  // tied LM head

  backward_ready_ = false;
  if (!targets) return 0.f;
  auto tgt = cpu_i32(reinterpret_cast<int32_t*>(a.targets.data()), {BT});
  std::copy(targets, targets + BT, tgt.i32());
  auto losses = cpu_f32(a.losses.f32(), {BT});
  const bool want_grad = grad_scale > 0.f;
  ops_.softmax_cross_entropy(losses, want_grad ? logits : none, logits, tgt, grad_scale);
  backward_ready_ = want_grad;
  double sum = 0.0;
  for (int64_t i = 0; i < BT; ++i) sum += losses.f32()[i];
  return static_cast<float>(sum / static_cast<double>(BT));
}

void GPT::zero_grads() { ops_.zero(flat_grads()); }

void GPT::backward() {
  GT_CHECK(backward_ready_, "backward() needs a forward() with targets and grad_scale > 0");
  backward_ready_ = false;
  const int B = B_, T = T_;
  const int64_t C = cfg_.n_embd, NH = cfg_.n_head, V = cfg_.vocab_size, BT = int64_t(B) * T;
  auto& a = acts_;
  auto& d = dacts_;
  auto grad = [&](const std::string& name) {
    TensorView t = param(name);
    t.data = grads_.f32() + layout_.at(name).offset;
    return t;
  };
  const TensorView none;
  auto dresidual = cpu_f32(d.dresidual.f32(), {BT, C});
  auto dln = cpu_f32(d.dln.f32(), {BT, C});

  // LM head (tied) and final LayerNorm.
  const int last = cfg_.n_layer - 1;
  ops_.matmul_backward(dln, grad("wte.weight"), none, cpu_f32(a.logits.f32(), {BT, V}),
                       cpu_f32(a.lnf.f32(), {BT, C}), param("wte.weight"));
  ops_.zero(dresidual);
  TensorView x_last = cfg_.n_layer > 0 ? layer_act(a.res3, last, {BT, C})
                                       : cpu_f32(a.encoded.f32(), {BT, C});
  ops_.layernorm_backward(dresidual, grad("ln_f.weight"), grad("ln_f.bias"), dln, x_last,
                          param("ln_f.weight"), cpu_f32(a.lnf_mean.f32(), {BT}),
                          cpu_f32(a.lnf_rstd.f32(), {BT}));

  for (int l = last; l >= 0; --l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto x_in = l == 0 ? cpu_f32(a.encoded.f32(), {BT, C}) : layer_act(a.res3, l - 1, {BT, C});
    auto dfch_gelu = cpu_f32(d.dfch_gelu.f32(), {BT, 4 * C});
    auto dfch = cpu_f32(d.dfch.f32(), {BT, 4 * C});
    auto datty = cpu_f32(d.datty.f32(), {BT, C});
    auto dqkv = cpu_f32(d.dqkv.f32(), {B, T, 3 * C});

    // MLP: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2)))); dresidual holds d res3.
    ops_.matmul_backward(dfch_gelu, grad(h + "mlp.c_proj.weight"), grad(h + "mlp.c_proj.bias"),
                         dresidual, layer_act(a.fch_gelu, l, {BT, 4 * C}),
                         param(h + "mlp.c_proj.weight"));
    ops_.gelu_backward(dfch, layer_act(a.fch, l, {BT, 4 * C}), dfch_gelu);
    ops_.matmul_backward(dln, grad(h + "mlp.c_fc.weight"), grad(h + "mlp.c_fc.bias"), dfch,
                         layer_act(a.ln2, l, {BT, C}), param(h + "mlp.c_fc.weight"));
    ops_.layernorm_backward(dresidual, grad(h + "ln_2.weight"), grad(h + "ln_2.bias"), dln,
                            layer_act(a.res2, l, {BT, C}), param(h + "ln_2.weight"),
                            layer_act(a.ln2_mean, l, {BT}), layer_act(a.ln2_rstd, l, {BT}));
    // Attention: res2 = x_in + c_proj(attn(c_attn(ln_1(x_in)))); dresidual holds d res2.
    ops_.matmul_backward(datty, grad(h + "attn.c_proj.weight"), grad(h + "attn.c_proj.bias"),
                         dresidual, layer_act(a.atty, l, {BT, C}), param(h + "attn.c_proj.weight"));
    ops_.attention_backward(dqkv, cpu_f32(d.datt.f32(), {B, NH, T, T}),
                            cpu_f32(datty.f32(), {B, T, C}), layer_act(a.qkv, l, {B, T, 3 * C}),
                            layer_act(a.att, l, {B, NH, T, T}), cfg_.n_head);
    ops_.matmul_backward(dln, grad(h + "attn.c_attn.weight"), grad(h + "attn.c_attn.bias"),
                         cpu_f32(dqkv.f32(), {BT, 3 * C}), layer_act(a.ln1, l, {BT, C}),
                         param(h + "attn.c_attn.weight"));
    ops_.layernorm_backward(dresidual, grad(h + "ln_1.weight"), grad(h + "ln_1.bias"), dln, x_in,
                            param(h + "ln_1.weight"), layer_act(a.ln1_mean, l, {BT}),
                            layer_act(a.ln1_rstd, l, {BT}));
  }
  ops_.embedding_backward(grad("wte.weight"), grad("wpe.weight"),
                          cpu_f32(dresidual.f32(), {B, T, C}),
                          cpu_i32(reinterpret_cast<int32_t*>(a.tokens.data()), {B, T}));
}

}  // namespace gt
