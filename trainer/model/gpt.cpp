#include "trainer/model/gpt.hpp"

#include <algorithm>
#include <limits>

#include "kernels/core/bf16.hpp"
#include "kernels/core/error.hpp"

namespace gt {

namespace {
// GPT is GPT-2's forward and backward; another family's config reaching it
// would train the wrong model, so it stops here, naming the key.
const ModelConfig& require_gpt2(const ModelConfig& m) {
  if (m.arch != ModelArch::gpt2)
    fail("model.arch=", to_string(m.arch), ": this build trains GPT-2 only; the ",
         to_string(m.arch), " model's forward and backward are not implemented yet");
  return m;
}
}  // namespace

GPT::GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq, Recompute recompute,
         ComputeDType dtype)
    : cfg_(require_gpt2(cfg)),
      ops_(ops),
      layout_(cfg),
      recompute_(recompute),
      max_rows_(max_rows),
      max_seq_(max_seq),
      dtype_(dtype) {
  owned_ = std::make_unique<LocalParameters>(layout_, ops_);
  store_ = owned_.get();
  allocate(max_rows, max_seq, TensorParallelGroup{});
}

GPT::GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq, const ParameterLayout& layout,
         ParameterStore& store, const TensorParallelGroup& group, Recompute recompute,
         ComputeDType dtype)
    : cfg_(require_gpt2(cfg)),
      ops_(ops),
      layout_(layout),
      store_(&store),
      recompute_(recompute),
      max_rows_(max_rows),
      max_seq_(max_seq),
      dtype_(dtype) {
  layout.check_built_for(group.size(), group.rank());
  allocate(max_rows, max_seq, group);
}

GPT::~GPT() = default;

void GPT::allocate(int max_rows, int max_seq, const TensorParallelGroup& group) {
  GT_CHECK(max_seq <= cfg_.block_size, "seq ", max_seq, " > block_size ", cfg_.block_size);
  shards_ = group.size();
  act_dtype_ = dtype_ == ComputeDType::bf16 ? DType::bf16 : DType::f32;
  ActivationShape shape;
  shape.max_rows = max_rows;
  shape.max_seq = max_seq;
  shape.tp = shards_;
  shape.overlap = group.overlap;
  shape.recompute = recompute_;
  shape.dtype = dtype_;
  const int NHl = cfg_.n_head / shards_;
  shape.attention_saved = ops_.attention_saved_elems(max_rows, NHl, max_seq);
  shape.attention_scratch = ops_.attention_scratch_elems(max_rows, NHl, max_seq);
  shape.store_keeps_bf16_params = store_->keeps_bf16_params();
  // Every buffer as the plan sizes it (the planner sums the same plan).
  const ActivationPlan plan = plan_activations(cfg_, shape);
  auto buffer = [this](const BufferSize& b) {
    return ops_.allocate(static_cast<size_t>(std::max<int64_t>(b.bytes(), 0)));
  };
  auto per_layer = [&](const BufferSize& b) { return LayerBuffer{buffer(b), b.slots, b.dtype}; };
  host_losses_.assign(static_cast<size_t>(plan.losses.elems), 0.f);
  auto& a = acts_;
  a.tokens = buffer(plan.tokens);
  a.targets = buffer(plan.targets);
  a.encoded = buffer(plan.encoded);
  a.ln1 = per_layer(plan.ln1);
  a.ln1_mean = per_layer(plan.ln1_mean);
  a.ln1_rstd = per_layer(plan.ln1_rstd);
  a.qkv = per_layer(plan.qkv);
  a.atty = per_layer(plan.atty);
  a.att = per_layer(plan.att);
  a.res2 = per_layer(plan.res2);
  a.ln2 = per_layer(plan.ln2);
  a.ln2_mean = per_layer(plan.ln2_mean);
  a.ln2_rstd = per_layer(plan.ln2_rstd);
  a.fch = per_layer(plan.fch);
  a.fch_gelu = per_layer(plan.fch_gelu);
  a.res3 = per_layer(plan.res3);
  a.lnf = buffer(plan.lnf);
  a.lnf_mean = buffer(plan.lnf_mean);
  a.lnf_rstd = buffer(plan.lnf_rstd);
  a.logits = buffer(plan.logits);
  a.losses = buffer(plan.losses);
  a.loss_sum = buffer(plan.loss_sum);
  a.proj_tmp = buffer(plan.proj_tmp);
  auto& d = dacts_;
  d.dresidual = buffer(plan.dresidual);
  d.dresidual_bf16 = buffer(plan.dresidual_bf16);
  d.dln = buffer(plan.dln);
  d.datty = buffer(plan.datty);
  d.dfch = buffer(plan.dfch);
  d.dqkv = buffer(plan.dqkv);
  d.datt = buffer(plan.datt);
  parallel_ =
      std::make_unique<TpLayerContext>(ops_, group, dtype_, plan.parallel_scratch, plan.precision);
  layers_ = std::make_unique<Layers>(*parallel_);
}

float* GPT::params() {
  GT_CHECK(owned_, "GPT::params(): the parameters live in an external ParameterStore");
  GT_CHECK(ops_.device() == Device::cpu, "GPT::params(): host pointer asked of a ",
           device_name(ops_.device()), " model; use flat_params() and Ops::download");
  return owned_->params();
}
float* GPT::grads() {
  GT_CHECK(owned_, "GPT::grads(): the gradients live in an external ParameterStore");
  GT_CHECK(ops_.device() == Device::cpu, "GPT::grads(): host pointer asked of a ",
           device_name(ops_.device()), " model; use flat_grads() and Ops::download");
  return owned_->grads();
}
TensorView GPT::flat_params() {
  GT_CHECK(owned_, "GPT::flat_params(): the parameters live in an external ParameterStore");
  return view(owned_->params(), {layout_.total()});
}
TensorView GPT::flat_grads() {
  GT_CHECK(owned_, "GPT::flat_grads(): the gradients live in an external ParameterStore");
  return view(owned_->grads(), {layout_.total()});
}
void GPT::zero_grads() { ops_.zero(flat_grads()); }

DType GPT::logits_dtype() const { return dtype_ == ComputeDType::bf16 ? DType::bf16 : DType::f32; }
TensorView GPT::logits_view(int64_t rows, int64_t cols) const {
  return make_view(acts_.logits.data(), logits_dtype(), ops_.device(), {rows, cols});
}

TensorView GPT::view(float* p, std::initializer_list<int64_t> shape) const {
  return make_view(p, DType::f32, ops_.device(), shape);
}
TensorView GPT::aview(const Buffer& b, std::initializer_list<int64_t> shape) const {
  TensorView v = make_view(b.data(), act_dtype_, ops_.device(), shape);
  GT_CHECK(v.numel() * int64_t(dtype_size(act_dtype_)) <= int64_t(b.bytes()), "activation view ",
           v.shape_str(), " does not fit its ", b.bytes(), "-byte buffer");
  return v;
}
TensorView GPT::iview(int32_t* p, std::initializer_list<int64_t> shape) const {
  return make_view(p, DType::i32, ops_.device(), shape);
}
TensorView GPT::own_rows(TensorView full) const { return parallel_->maps().own_rows(full); }

const float* GPT::logits() {
  GT_CHECK(!backward_ready_, "GPT::logits(): the logits were overwritten by their gradient");
  GT_CHECK(shards_ == 1, "GPT::logits(): the logits are split over ", shards_, " tp ranks");
  const int64_t R = int64_t(B_) * T_, V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size();
  host_logits_.resize(static_cast<size_t>(R * Vp));
  if (logits_dtype() == DType::f32) {
    ops_.download(host_logits_.data(), logits_view(R * Vp, 1));
  } else {
    std::vector<uint16_t> bits(static_cast<size_t>(R * Vp));
    ops_.download(bits.data(), logits_view(R * Vp, 1));
    for (size_t i = 0; i < bits.size(); ++i) host_logits_[i] = bf16_to_float(bits[i]);
  }
  // Drop the padding columns in place: row r moves down to r * V.
  for (int64_t r = 1; r < R; ++r)
    std::copy(host_logits_.begin() + r * Vp, host_logits_.begin() + r * Vp + V,
              host_logits_.begin() + r * V);
  host_logits_.resize(static_cast<size_t>(R * V));
  return host_logits_.data();
}

namespace {
TensorView shaped(float* data, Device device, const ParamSpec& s) {
  TensorView t = make_view(data, DType::f32, device, {s.numel});
  t.ndim = static_cast<int>(s.shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = s.shape[static_cast<size_t>(i)];
    t.strides[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}
}  // namespace

TensorView GPT::param(const std::string& name) {
  GT_CHECK(owned_, "GPT::param(): the parameters live in an external ParameterStore");
  return shaped(owned_->params() + layout_.at(name).offset, ops_.device(), layout_.at(name));
}

TensorView GPT::p(const std::string& name) {
  const ParamSpec& s = layout_.at(name);
  const ParamUnit& u = layout_.units()[static_cast<size_t>(s.unit)];
  return shaped(store_->unit_params(s.unit) + (s.offset - u.begin), ops_.device(), s);
}

TensorView GPT::gemm_param(const std::string& name) {
  // bf16 runs read the store's bf16 copy when it keeps one (kept current by
  // the optimizer); otherwise LinearPrecision casts the fp32 weight or bias
  // per call.
  const uint16_t* copy = nullptr;
  const ParamSpec& s = layout_.at(name);
  if (dtype_ == ComputeDType::bf16) copy = store_->unit_params_bf16(s.unit);
  if (!copy) return p(name);
  const ParamUnit& u = layout_.units()[static_cast<size_t>(s.unit)];
  TensorView t = shaped(nullptr, ops_.device(), s);
  t.data = const_cast<uint16_t*>(copy) + (s.offset - u.begin);
  t.dtype = DType::bf16;
  return t;
}

TensorView GPT::g(const std::string& name) {
  const ParamSpec& s = layout_.at(name);
  const ParamUnit& u = layout_.units()[static_cast<size_t>(s.unit)];
  return shaped(store_->unit_grads(s.unit) + (s.offset - u.begin), ops_.device(), s);
}

// A (rows, ...)-shaped view of layer `layer`'s slot of a per-layer buffer
// whose slots are sized for the maximum (rows, seq); a single slot is every
// layer's.
TensorView GPT::layer_act(const LayerBuffer& buf, int layer,
                          std::initializer_list<int64_t> shape) {
  GT_CHECK(layer >= 0 && layer < cfg_.n_layer && buf.slots > 0, "layer ", layer, " of ",
           cfg_.n_layer, " in a buffer of ", buf.slots, " slots");
  const size_t elem = dtype_size(buf.dtype);
  const int64_t per_slot_max = static_cast<int64_t>(buf.buf.bytes() / elem) / buf.slots;
  const int slot = buf.slots == 1 ? 0 : layer;
  TensorView v = make_view(static_cast<char*>(buf.buf.data()) + slot * per_slot_max * elem,
                           buf.dtype, ops_.device(), shape);
  GT_CHECK(v.numel() <= per_slot_max, "layer activation ", v.shape_str(), " exceeds its slot of ",
           per_slot_max, " elements");
  return v;
}

// ---- One block's forward ----------------------------------------------------
// Activations land in layer l's slots (the shared slot for what recompute
// drops), so backward() can rerun a part into the same places.

void GPT::block_attention_forward(int l, TensorView x, bool with_ln2, TensorView prev_res2) {
  const int B = B_, T = T_;
  const int64_t C = cfg_.n_embd, R = int64_t(B) * T, Rl = R / shards_, Cl = C / shards_;
  const int NHl = cfg_.n_head / shards_;
  const std::string h = "h." + std::to_string(l) + ".";
  auto& a = acts_;
  auto ln1 = layer_act(a.ln1, l, {R, C});
  auto qkv = layer_act(a.qkv, l, {R, 3 * Cl});
  auto atty = layer_act(a.atty, l, {R, Cl});
  auto att = layer_act(a.att, l, {ops_.attention_saved_elems(B, NHl, T)});
  auto res2 = layer_act(a.res2, l, {Rl, C});
  auto proj = aview(a.proj_tmp, {Rl, C});
  if (prev_res2.empty()) {
    ops_.layernorm_forward(own_rows(ln1), layer_act(a.ln1_mean, l, {Rl}),
                           layer_act(a.ln1_rstd, l, {Rl}), x, p(h + "ln_1.weight"),
                           p(h + "ln_1.bias"));
  } else {
    // The block before's residual add and ln_1 in one pass: x = prev_res2 +
    // proj_tmp (its mlp.c_proj output, not yet overwritten), not read back.
    ops_.add_layernorm_forward(x, own_rows(ln1), layer_act(a.ln1_mean, l, {Rl}),
                               layer_act(a.ln1_rstd, l, {Rl}), prev_res2, proj,
                               p(h + "ln_1.weight"), p(h + "ln_1.bias"));
  }
  layers_->c_attn.forward(qkv, ln1, gemm_param(h + "attn.c_attn.weight"),
                          gemm_param(h + "attn.c_attn.bias"));
  ops_.attention_forward(layer_act(a.atty, l, {B, T, Cl}), att, layer_act(a.qkv, l, {B, T, 3 * Cl}),
                         NHl);
  layers_->attn_proj.forward(proj, atty, gemm_param(h + "attn.c_proj.weight"),
                             gemm_param(h + "attn.c_proj.bias"));
  if (!with_ln2) return ops_.add(res2, x, proj);
  // The residual add and ln_2 in one pass (res2 is not read back from memory).
  ops_.add_layernorm_forward(res2, own_rows(layer_act(a.ln2, l, {R, C})),
                             layer_act(a.ln2_mean, l, {Rl}), layer_act(a.ln2_rstd, l, {Rl}), x,
                             proj, p(h + "ln_2.weight"), p(h + "ln_2.bias"));
}

void GPT::block_mlp_up_forward(int l, bool ln2_done) {
  const int64_t C = cfg_.n_embd, R = int64_t(B_) * T_, Rl = R / shards_, Cl = C / shards_;
  const std::string h = "h." + std::to_string(l) + ".";
  auto& a = acts_;
  auto ln2 = layer_act(a.ln2, l, {R, C});
  auto fch = layer_act(a.fch, l, {R, 4 * Cl});
  if (!ln2_done)
    ops_.layernorm_forward(own_rows(ln2), layer_act(a.ln2_mean, l, {Rl}),
                           layer_act(a.ln2_rstd, l, {Rl}), layer_act(a.res2, l, {Rl, C}),
                           p(h + "ln_2.weight"), p(h + "ln_2.bias"));
  // c_fc and its GELU in one: fch_gelu = gelu(fch), fch kept for backward.
  layers_->c_fc.forward(layer_act(a.fch_gelu, l, {R, 4 * Cl}), ln2,
                        gemm_param(h + "mlp.c_fc.weight"), gemm_param(h + "mlp.c_fc.bias"), fch);
}

void GPT::block_mlp_down_forward(int l) {
  const int64_t C = cfg_.n_embd, R = int64_t(B_) * T_, Rl = R / shards_, Cl = C / shards_;
  const std::string h = "h." + std::to_string(l) + ".";
  auto& a = acts_;
  auto proj = aview(a.proj_tmp, {Rl, C});
  layers_->mlp_proj.forward(proj, layer_act(a.fch_gelu, l, {R, 4 * Cl}),
                            gemm_param(h + "mlp.c_proj.weight"), gemm_param(h + "mlp.c_proj.bias"));
}

// ---- Forward ----------------------------------------------------------------

float GPT::forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                   float grad_scale) {
  if (!run_forward(tokens, targets, B, T, grad_scale)) return 0.f;
  return read_forward_loss(B, T);
}

float GPT::read_forward_loss(int B, int T) {
  const int64_t R = int64_t(B) * T;
  ops_.download(host_losses_.data(), view(acts_.losses.f32(), {R}));
  double sum = 0.0;
  for (int64_t i = 0; i < R; ++i) sum += host_losses_[static_cast<size_t>(i)];
  return static_cast<float>(sum / static_cast<double>(R));
}

void GPT::forward_train(const int32_t* tokens, const int32_t* targets, int B, int T,
                        float grad_scale) {
  GT_CHECK(targets, "GPT::forward_train needs targets");
  const int64_t R = int64_t(B) * T;
  GT_CHECK(pending_losses_ == 0 || pending_rows_ == R, "GPT::forward_train: ", R,
           " rows after micro-batches of ", pending_rows_, " (take_loss() in between)");
  run_forward(tokens, targets, B, T, grad_scale);
  const TensorView losses = view(acts_.losses.f32(), {R});
  const TensorView sum = view(acts_.loss_sum.f32(), {R});
  if (pending_losses_ == 0)
    ops_.copy(sum, losses);
  else
    ops_.accumulate(sum, losses);
  pending_rows_ = R;
  ++pending_losses_;
}

TensorView GPT::pending_loss_sums() {
  GT_CHECK(pending_losses_ > 0, "pending_loss_sums(): no forward_train() since take_loss()");
  return view(acts_.loss_sum.f32(), {pending_rows_});
}

double GPT::take_loss() {
  if (pending_losses_ == 0) return std::numeric_limits<double>::quiet_NaN();
  const int64_t R = pending_rows_;
  std::vector<float> sums(static_cast<size_t>(R));
  ops_.download(sums.data(), view(acts_.loss_sum.f32(), {R}));
  double sum = 0.0;
  for (float v : sums) sum += v;
  const double mean = sum / (static_cast<double>(R) * pending_losses_);
  pending_losses_ = 0;
  return mean;
}

bool GPT::run_forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                      float grad_scale) {
  GT_CHECK(B >= 1 && B <= max_rows_ && T >= 1 && T <= max_seq_, "B=", B, " T=", T);
  const int tp = shards_;
  const int64_t R = int64_t(B) * T;
  GT_CHECK(R % tp == 0, "B*T = ", R, " rows do not split into ", tp, " sequence shards");
  B_ = B;
  T_ = T;
  const int64_t C = cfg_.n_embd, V = cfg_.padded_vocab_size(), Rl = R / tp, Vl = V / tp;
  const int64_t vocab = cfg_.vocab_size;  // logits columns past it are padding
  const bool want_grad = targets && grad_scale > 0.f;
  const int embed = layout_.embed_unit(), head = layout_.head_unit();
  auto& a = acts_;
  auto tok = iview(a.tokens.i32(), {B, T});
  ops_.upload(tok, tokens);
  const TensorView none;
  store_->begin_forward(want_grad);

  store_->before_forward(embed);
  auto encoded = aview(a.encoded, {Rl, C});
  layers_->embedding.forward(encoded, tok, p("wte.weight"), p("wpe.weight"));

  // (R/p, C) the residual stream entering block l: encoded, then res3 of the
  // block before, whose add (res2 + proj_tmp) the next LayerNorm does.
  TensorView x = encoded, prev_res2;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    store_->before_forward(layout_.block_unit(l));
    block_attention_forward(l, x, /*with_ln2=*/true, prev_res2);
    block_mlp_up_forward(l, /*ln2_done=*/true);
    block_mlp_down_forward(l);
    x = layer_act(a.res3, l, {Rl, C});
    prev_res2 = layer_act(a.res2, l, {Rl, C});
    store_->after_forward(layout_.block_unit(l));
  }

  store_->before_forward(head);
  const TensorView lnf = own_rows(aview(a.lnf, {R, C}));
  const TensorView lnf_mean = view(a.lnf_mean.f32(), {Rl}), lnf_rstd = view(a.lnf_rstd.f32(), {Rl});
  if (prev_res2.empty())
    ops_.layernorm_forward(lnf, lnf_mean, lnf_rstd, x, p("ln_f.weight"), p("ln_f.bias"));
  else  // the last block's residual add, fused
    ops_.add_layernorm_forward(x, lnf, lnf_mean, lnf_rstd, prev_res2, aview(a.proj_tmp, {Rl, C}),
                               p("ln_f.weight"), p("ln_f.bias"));
  store_->after_forward(head);
  auto logits = logits_view(R, Vl);
  layers_->lm_head.forward(logits, aview(a.lnf, {R, C}), gemm_param("wte.weight"), none);
  store_->after_forward(embed);

  backward_ready_ = false;
  if (!targets) return false;
  auto tgt = iview(a.targets.i32(), {R});
  ops_.upload(tgt, targets);
  auto losses = view(a.losses.f32(), {R});
  layers_->cross_entropy.forward(losses, want_grad ? logits : none, logits, tgt, vocab, grad_scale);
  backward_ready_ = want_grad;
  return true;
}

// ---- Backward ---------------------------------------------------------------

void GPT::backward() {
  GT_CHECK(backward_ready_, "backward() needs a forward() with targets and grad_scale > 0");
  backward_ready_ = false;
  const int B = B_, T = T_, tp = shards_;
  const int64_t C = cfg_.n_embd, V = cfg_.padded_vocab_size(), R = int64_t(B) * T;
  const int64_t Rl = R / tp, Cl = C / tp, Vl = V / tp;
  const int NHl = cfg_.n_head / tp;
  const int embed = layout_.embed_unit(), head = layout_.head_unit();
  auto& a = acts_;
  auto& d = dacts_;
  const TensorView none;
  auto dresidual = view(d.dresidual.f32(), {Rl, C});
  auto dln = tp > 1 ? view(d.dln.f32(), {Rl, C}) : aview(d.dln, {Rl, C});
  // At tp = 1 in bf16 every LayerNorm backward also writes dresidual rounded
  // to bf16, the operand of the row-parallel backward that reads it next;
  // the last one (block 0's ln_1) feeds the embedding, which reads fp32.
  const bool residual_copy = d.dresidual_bf16.bytes() > 0;
  const TensorView dresidual16 = residual_copy ? aview(d.dresidual_bf16, {Rl, C}) : none;
  const TensorView dresidual_gemm = residual_copy ? dresidual16 : dresidual;

  // LM head (tied) and final LayerNorm.
  store_->before_backward(embed);
  layers_->lm_head.backward(dln, g("wte.weight"), none, logits_view(R, Vl), aview(a.lnf, {R, C}),
                            gemm_param("wte.weight"));
  store_->before_backward(head);
  ops_.zero(dresidual);
  const int last = cfg_.n_layer - 1;
  TensorView x_last =
      cfg_.n_layer > 0 ? layer_act(a.res3, last, {Rl, C}) : aview(a.encoded, {Rl, C});
  ops_.layernorm_backward(dresidual, g("ln_f.weight"), g("ln_f.bias"), dln, x_last,
                          p("ln_f.weight"), view(a.lnf_mean.f32(), {Rl}),
                          view(a.lnf_rstd.f32(), {Rl}), cfg_.n_layer > 0 ? dresidual16 : none);
  store_->after_backward(head);

  for (int l = last; l >= 0; --l) {
    store_->before_backward(layout_.block_unit(l));
    const std::string h = "h." + std::to_string(l) + ".";
    auto x_in = l == 0 ? aview(a.encoded, {Rl, C}) : layer_act(a.res3, l - 1, {Rl, C});
    // What recomputation dropped, rerun into the shared slots (the block's
    // parameters are valid since before_backward).
    if (recompute_ == Recompute::block) block_attention_forward(l, x_in, /*with_ln2=*/false);
    if (recompute_ != Recompute::none) block_mlp_up_forward(l, /*ln2_done=*/false);
    auto dfch = aview(d.dfch, {R, 4 * Cl});
    auto datty = aview(d.datty, {R, Cl});
    auto dqkv = aview(d.dqkv, {R, 3 * Cl});

    // MLP: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2)))); dresidual holds d res3.
    // c_proj's input gradient through GELU's derivative in one: d fch.
    layers_->mlp_proj.backward(dfch, g(h + "mlp.c_proj.weight"), g(h + "mlp.c_proj.bias"),
                               dresidual_gemm, layer_act(a.fch_gelu, l, {R, 4 * Cl}),
                               gemm_param(h + "mlp.c_proj.weight"),
                               layer_act(a.fch, l, {R, 4 * Cl}));
    layers_->c_fc.backward(dln, g(h + "mlp.c_fc.weight"), g(h + "mlp.c_fc.bias"), dfch,
                           layer_act(a.ln2, l, {R, C}), gemm_param(h + "mlp.c_fc.weight"));
    ops_.layernorm_backward(dresidual, g(h + "ln_2.weight"), g(h + "ln_2.bias"), dln,
                            layer_act(a.res2, l, {Rl, C}), p(h + "ln_2.weight"),
                            layer_act(a.ln2_mean, l, {Rl}), layer_act(a.ln2_rstd, l, {Rl}),
                            dresidual16);
    // Attention: res2 = x_in + c_proj(attn(c_attn(ln_1(x_in)))); dresidual holds d res2.
    layers_->attn_proj.backward(datty, g(h + "attn.c_proj.weight"), g(h + "attn.c_proj.bias"),
                                dresidual_gemm, layer_act(a.atty, l, {R, Cl}),
                                gemm_param(h + "attn.c_proj.weight"));
    ops_.attention_backward(aview(d.dqkv, {B, T, 3 * Cl}),
                            view(d.datt.f32(), {ops_.attention_scratch_elems(B, NHl, T)}),
                            aview(d.datty, {B, T, Cl}), layer_act(a.qkv, l, {B, T, 3 * Cl}),
                            layer_act(a.atty, l, {B, T, Cl}),
                            layer_act(a.att, l, {ops_.attention_saved_elems(B, NHl, T)}), NHl);
    layers_->c_attn.backward(dln, g(h + "attn.c_attn.weight"), g(h + "attn.c_attn.bias"), dqkv,
                             layer_act(a.ln1, l, {R, C}), gemm_param(h + "attn.c_attn.weight"));
    ops_.layernorm_backward(dresidual, g(h + "ln_1.weight"), g(h + "ln_1.bias"), dln, x_in,
                            p(h + "ln_1.weight"), layer_act(a.ln1_mean, l, {Rl}),
                            layer_act(a.ln1_rstd, l, {Rl}), l > 0 ? dresidual16 : none);
    store_->after_backward(layout_.block_unit(l));
  }

  layers_->embedding.backward(g("wte.weight"), g("wpe.weight"), dresidual,
                              iview(a.tokens.i32(), {B, T}));
  store_->after_backward(embed);
}

int64_t GPT::activation_bytes() const {
  const auto& a = acts_;
  const auto& d = dacts_;
  size_t n = 0;
  for (const LayerBuffer* b : {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.atty, &a.att, &a.res2,
                               &a.ln2, &a.ln2_mean, &a.ln2_rstd, &a.fch, &a.fch_gelu, &a.res3})
    n += b->buf.bytes();
  for (const Buffer* b : {&a.tokens, &a.targets, &a.encoded, &a.lnf, &a.lnf_mean, &a.lnf_rstd,
                          &a.logits, &a.losses, &a.loss_sum, &a.proj_tmp, &d.dresidual, &d.dln,
                          &d.dresidual_bf16, &d.datty, &d.dfch, &d.dqkv, &d.datt})
    n += b->bytes();
  // The tensor-parallel layers' scratch, precision copies and statistics.
  return static_cast<int64_t>(n) + parallel_->bytes();
}

}  // namespace gt
