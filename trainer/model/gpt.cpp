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
    fail("model.arch=", to_string(m.arch),
         " given to the GPT-2 model (make_model picks the family)");
  return m;
}
}  // namespace

GPT::GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq, Recompute recompute,
         ComputeDType dtype)
    : CausalLM("GPT", require_gpt2(cfg), ops, max_rows, max_seq, recompute, dtype) {
  allocate(TensorParallelGroup{});
}

GPT::GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq, const ParameterLayout& layout,
         ParameterStore& store, const TensorParallelGroup& group, Recompute recompute,
         ComputeDType dtype, std::optional<StageSpan> chunk, const ContextParallelGroup& cp)
    : CausalLM("GPT", require_gpt2(cfg), ops, max_rows, max_seq, layout, store, group, recompute,
               dtype, chunk, cp) {
  allocate(group);
}

GPT::~GPT() = default;

void GPT::allocate(const TensorParallelGroup& group) {
  // Every buffer as the plan sizes it (the planner sums the same plan).
  const ActivationPlan plan = plan_activations(cfg_, activation_shape(group));
  allocate_shared(plan, group);
  auto& a = acts_;
  a.encoded = CausalLM::allocate(plan.encoded);
  a.ln1 = allocate_layer(plan.ln1);
  a.ln1_mean = allocate_layer(plan.ln1_mean);
  a.ln1_rstd = allocate_layer(plan.ln1_rstd);
  a.qkv = allocate_layer(plan.qkv);
  a.atty = allocate_layer(plan.atty);
  a.att = allocate_layer(plan.att);
  a.res2 = allocate_layer(plan.res2);
  a.ln2 = allocate_layer(plan.ln2);
  a.ln2_mean = allocate_layer(plan.ln2_mean);
  a.ln2_rstd = allocate_layer(plan.ln2_rstd);
  a.fch = allocate_layer(plan.fch);
  a.fch_gelu = allocate_layer(plan.fch_gelu);
  a.res3 = allocate_layer(plan.res3);
  a.lnf = CausalLM::allocate(plan.lnf);
  a.lnf_mean = CausalLM::allocate(plan.lnf_mean);
  a.lnf_rstd = CausalLM::allocate(plan.lnf_rstd);
  a.proj_tmp = CausalLM::allocate(plan.proj_tmp);
  a.positions = CausalLM::allocate(plan.positions);
  a.position_rows = CausalLM::allocate(plan.position_rows);
  if (plan.positions.elems > 0) {
    // Row n of a (max_rows, max_seq) batch is local index n % max_seq.
    const std::vector<int32_t> local = local_positions();
    std::vector<int32_t> rows(static_cast<size_t>(plan.positions.elems));
    for (size_t n = 0; n < rows.size(); ++n) rows[n] = local[n % local.size()];
    ops_.upload(iview(a.positions.i32(), {plan.positions.elems}), rows.data());
  }
  auto& d = dacts_;
  d.dresidual = CausalLM::allocate(plan.dresidual);
  d.dresidual_bf16 = CausalLM::allocate(plan.dresidual_bf16);
  d.dln = CausalLM::allocate(plan.dln);
  d.datty = CausalLM::allocate(plan.datty);
  d.dfch = CausalLM::allocate(plan.dfch);
  d.dqkv = CausalLM::allocate(plan.dqkv);
  d.datt = CausalLM::allocate(plan.datt);
  const int NHl = cfg_.n_head / group.size();
  make_attention(NHl, NHl);
  layers_ = std::make_unique<Layers>(*parallel_);
  blocks_.resize(static_cast<size_t>(cfg_.n_layer));
}

TensorView GPT::own_positions(int B, int T) {
  if (acts_.positions.bytes() == 0) return {};
  const int64_t Rl = int64_t(B) * T / shards_;
  return iview(acts_.positions.i32() + parallel_->rank() * Rl, {Rl});
}

// ---- One block's forward ----------------------------------------------------
// Activations land in layer l's slots (the shared slot for what recompute
// drops), so backward() can rerun a part into the same places. Each is kept
// with the placement the layer that wrote it gave (blocks_[l]); per-position
// ops (the LayerNorms, the residual adds) keep their input's.

void GPT::block_attention_forward(int l, const Activation& x, TensorView prev_res2) {
  const int B = B_, T = T_;
  const int64_t C = cfg_.n_embd, R = int64_t(B) * T, Rl = R / shards_, Cl = C / shards_;
  const int NHl = cfg_.n_head / shards_;
  const std::string h = "h." + std::to_string(l) + ".";
  auto& a = acts_;
  BlockActivations& b = blocks_[static_cast<size_t>(l)];
  b.input = x;
  auto ln1 = layer_act(a.ln1, l, {R, C});
  auto att = layer_act(a.att, l, {attention_saved(B, NHl, T)});
  auto res2 = layer_act(a.res2, l, {Rl, C});
  auto proj = aview(a.proj_tmp, {Rl, C});
  const TensorView w_attn = gemm_param(h + "attn.c_attn.weight");
  // An fp8 c_attn takes its input's scales from ln_1's own pass.
  const TensorView ln1_amax = layers_->c_attn.input_row_amax(w_attn, Rl);
  if (prev_res2.empty()) {
    ops_.layernorm_forward(own_rows(ln1), layer_act(a.ln1_mean, l, {Rl}),
                           layer_act(a.ln1_rstd, l, {Rl}), x.view, p(h + "ln_1.weight"),
                           p(h + "ln_1.bias"), ln1_amax);
  } else {
    // The block before's residual add and ln_1 in one pass: x = prev_res2 +
    // proj_tmp (its mlp.c_proj output, not yet overwritten), not read back.
    ops_.add_layernorm_forward(x.view, own_rows(ln1), layer_act(a.ln1_mean, l, {Rl}),
                               layer_act(a.ln1_rstd, l, {Rl}), prev_res2, proj,
                               p(h + "ln_1.weight"), p(h + "ln_1.bias"), ln1_amax);
  }
  b.ln1 = rowwise(ln1, x, h + "ln_1");  // this rank's rows, gathered by c_attn
  b.qkv = layers_->c_attn.forward({layer_act(a.qkv, l, {R, 3 * Cl}), h + "qkv"}, b.ln1, w_attn,
                                  gemm_param(h + "attn.c_attn.bias"), TensorView{}, ln1_amax);
  b.atty = attention()
               .forward({layer_act(a.atty, l, {B, T, Cl}), h + "attn"}, att,
                        b.qkv.as(layer_act(a.qkv, l, {B, T, 3 * Cl})), NHl, NHl)
               .as(layer_act(a.atty, l, {R, Cl}));
  const Activation out = layers_->attn_proj.forward({proj, h + "attn.c_proj"}, b.atty,
                                                    gemm_param(h + "attn.c_proj.weight"),
                                                    gemm_param(h + "attn.c_proj.bias"));
  b.res2 = added(res2, x, out, h + "res2", "residual add", placement_log_);
  // The residual add and ln_2 in one pass (res2 written, then re-read by
  // each lane from cache, not from memory).
  const TensorView ln2 = layer_act(a.ln2, l, {R, C});
  b.ln2_amax = layers_->c_fc.input_row_amax(param_shape(h + "mlp.c_fc.weight"), Rl);
  ops_.add_layernorm_forward(res2, own_rows(ln2), layer_act(a.ln2_mean, l, {Rl}),
                             layer_act(a.ln2_rstd, l, {Rl}), x.view, proj, p(h + "ln_2.weight"),
                             p(h + "ln_2.bias"), b.ln2_amax);
  b.ln2 = rowwise(ln2, b.res2, h + "ln_2");
}

void GPT::block_mlp_up_forward(int l, bool ln2_done) {
  const int64_t C = cfg_.n_embd, R = int64_t(B_) * T_, Rl = R / shards_, Cl = C / shards_;
  const std::string h = "h." + std::to_string(l) + ".";
  auto& a = acts_;
  BlockActivations& b = blocks_[static_cast<size_t>(l)];
  auto ln2 = layer_act(a.ln2, l, {R, C});
  auto fch = layer_act(a.fch, l, {R, 4 * Cl});
  const TensorView w_fc = gemm_param(h + "mlp.c_fc.weight");
  if (!ln2_done) {
    b.ln2_amax = layers_->c_fc.input_row_amax(w_fc, Rl);
    ops_.layernorm_forward(own_rows(ln2), layer_act(a.ln2_mean, l, {Rl}),
                           layer_act(a.ln2_rstd, l, {Rl}), b.res2.view, p(h + "ln_2.weight"),
                           p(h + "ln_2.bias"), b.ln2_amax);
    b.ln2 = rowwise(ln2, b.res2, h + "ln_2");
  }
  // c_fc and its GELU in one: fch_gelu = gelu(fch), fch kept for backward;
  // the GELU's pass takes an fp8 mlp.c_proj's input scales.
  b.gelu_amax = layers_->mlp_proj.input_row_amax(param_shape(h + "mlp.c_proj.weight"), R);
  b.fch_gelu = layers_->c_fc.forward({layer_act(a.fch_gelu, l, {R, 4 * Cl}), h + "mlp.gelu"},
                                     b.ln2, w_fc, gemm_param(h + "mlp.c_fc.bias"), fch,
                                     b.ln2_amax, b.gelu_amax);
  b.fch = rowwise(fch, b.fch_gelu, h + "mlp.c_fc");
}

TensorView GPT::mlp_proj_grad_amax(int l) {
  const int64_t Rl = int64_t(B_) * T_ / shards_;
  return layers_->mlp_proj.output_grad_row_amax(
      param_shape("h." + std::to_string(l) + ".mlp.c_proj.weight"), Rl);
}

void GPT::block_mlp_down_forward(int l) {
  const int64_t C = cfg_.n_embd, R = int64_t(B_) * T_, Rl = R / shards_;
  const std::string h = "h." + std::to_string(l) + ".";
  auto& a = acts_;
  BlockActivations& b = blocks_[static_cast<size_t>(l)];
  const Activation out = layers_->mlp_proj.forward(
      {aview(a.proj_tmp, {Rl, C}), h + "mlp.c_proj"}, b.fch_gelu,
      gemm_param(h + "mlp.c_proj.weight"), gemm_param(h + "mlp.c_proj.bias"), b.gelu_amax);
  b.res3 = added(layer_act(a.res3, l, {Rl, C}), b.res2, out, h + "res3", "residual add",
                 placement_log_);
}

// ---- Forward ----------------------------------------------------------------

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
  const bool want_grad = wants_backward(targets, grad_scale);
  const int embed = layout_.embed_unit(), head = layout_.head_unit();
  auto& a = acts_;
  auto tok = iview(ends_.tokens.i32(), {B, T});
  ops_.upload(tok, tokens);
  const TensorView none;
  store_->begin_forward(want_grad);

  // A stage after the first finds its input (the previous stage's output)
  // in `encoded` (stage_boundary().input).
  Activation x = stage_input(aview(a.encoded, {Rl, C}));
  if (embeds()) {
    store_->before_forward(embed);
    x = layers_->embedding.forward(
        {x.view, "embedding"}, token_rows(tok, "tokens"), p("wte.weight"), p("wpe.weight"),
        own_positions(B, T),
        a.position_rows.bytes() ? view(a.position_rows.f32(), {Rl, C}) : TensorView{});
    if (!heads()) store_->after_forward(embed);  // the tied head is another stage's
  }

  // (R/p, C) the residual stream entering block l: encoded, then res3 of the
  // block before, whose add (res2 + proj_tmp) the next LayerNorm does.
  TensorView prev_res2;
  for (int l = first_layer_; l < end_layer_; ++l) {
    store_->before_forward(layout_.block_unit(l));
    block_attention_forward(l, x, prev_res2);
    block_mlp_up_forward(l, /*ln2_done=*/true);
    block_mlp_down_forward(l);
    x = blocks_[static_cast<size_t>(l)].res3;
    prev_res2 = blocks_[static_cast<size_t>(l)].res2.view;
    store_->after_forward(layout_.block_unit(l));
  }
  if (!heads()) {
    // The stage's output, res3 of its last block: the add the next stage's
    // first LayerNorm would have fused is done here.
    ops_.add(x.view, prev_res2, aview(a.proj_tmp, {Rl, C}));
    backward_ready_ = want_grad;
    return false;
  }

  store_->before_forward(head);
  const TensorView lnf = own_rows(aview(a.lnf, {R, C}));
  const TensorView lnf_mean = view(a.lnf_mean.f32(), {Rl}), lnf_rstd = view(a.lnf_rstd.f32(), {Rl});
  if (prev_res2.empty())
    ops_.layernorm_forward(lnf, lnf_mean, lnf_rstd, x.view, p("ln_f.weight"), p("ln_f.bias"));
  else  // the last block's residual add, fused
    ops_.add_layernorm_forward(x.view, lnf, lnf_mean, lnf_rstd, prev_res2,
                               aview(a.proj_tmp, {Rl, C}), p("ln_f.weight"), p("ln_f.bias"));
  store_->after_forward(head);
  if (!embeds()) store_->before_forward(embed);  // the tied head reads wte
  lnf_ = rowwise(aview(a.lnf, {R, C}), x, "ln_f");
  logits_ = layers_->lm_head.forward({logits_view(R, Vl), "logits"}, lnf_,
                                     gemm_param("wte.weight"), none);
  store_->after_forward(embed);

  backward_ready_ = false;
  if (!targets) return false;
  auto tgt = iview(ends_.targets.i32(), {R});
  ops_.upload(tgt, targets);
  layers_->cross_entropy.forward({view(ends_.losses.f32(), {R}), "losses"},
                                 want_grad ? logits_.view : none, logits_,
                                 token_rows(tgt, "targets"), vocab, grad_scale);
  backward_ready_ = want_grad;
  return true;
}

// ---- Backward ---------------------------------------------------------------

void GPT::run_backward() {
  const int B = B_, T = T_, tp = shards_;
  const int64_t C = cfg_.n_embd, R = int64_t(B) * T;
  const int64_t Rl = R / tp, Cl = C / tp;
  const int NHl = cfg_.n_head / tp;
  const int embed = layout_.embed_unit(), head = layout_.head_unit();
  auto& a = acts_;
  auto& d = dacts_;
  const TensorView none;
  auto dresidual = view(d.dresidual.f32(), {Rl, C});
  auto dln = tp > 1 ? view(d.dln.f32(), {Rl, C}) : aview(d.dln, {Rl, C});
  // At tp = 1 in bf16 every LayerNorm backward also writes dresidual rounded
  // to bf16, the operand of the row-parallel backward that reads it next;
  // the last one (block 0's ln_1) feeds the embedding, which reads fp32. An
  // fp8 row-parallel layer gets no copy: it quantizes the fp32 gradient
  // itself, as under tp, so that the layouts' scales agree.
  auto c_proj_copy = [&](int l) {
    return residual_grad_copy(d.dresidual_bf16, layers_->mlp_proj,
                              param_shape("h." + std::to_string(l) + ".mlp.c_proj.weight"));
  };

  const int first = first_layer_, last = end_layer_ - 1;
  // The residual stream's gradient: d(loss) through the head on the last
  // stage, the next stage's on the others; cut as the stream is.
  Activation dres = stage_input(dresidual);
  if (heads()) {
    // LM head (tied) and final LayerNorm.
    store_->before_backward(embed);
    const Activation dlnf = layers_->lm_head.backward(
        {dln, "d(ln_f)"}, g("wte.weight"), none, rowwise(logits_.view, logits_, "d(logits)"),
        lnf_, gemm_param("wte.weight"));
    store_->before_backward(head);
    ops_.zero(dresidual);
    const TensorView x_last = layer_act(a.res3, last, {Rl, C});
    // The last block's fp8 mlp.c_proj takes d(residual)'s scales from this
    // pass (as each block's ln_1 backward does for the block before).
    ops_.layernorm_backward(dresidual, g("ln_f.weight"), g("ln_f.bias"), dln, x_last,
                            p("ln_f.weight"), view(a.lnf_mean.f32(), {Rl}),
                            view(a.lnf_rstd.f32(), {Rl}), c_proj_copy(last),
                            mlp_proj_grad_amax(last));
    dres = rowwise(dresidual, dlnf, "d(residual)");
    store_->after_backward(head);
    if (!embeds()) store_->after_backward(embed);  // this stage's share of wte's gradient
  } else if (const TensorView copy = c_proj_copy(last); !copy.empty()) {
    // dresidual holds d(output) from the next stage (stage_boundary().output_grad);
    // the first row-parallel backward reads its bf16 copy.
    ops_.cast(copy, dresidual);
  }

  for (int l = last; l >= first; --l) {
    store_->before_backward(layout_.block_unit(l));
    const std::string h = "h." + std::to_string(l) + ".";
    BlockActivations& b = blocks_[static_cast<size_t>(l)];
    // What recomputation dropped, rerun into the shared slots (the block's
    // parameters are valid since before_backward), from the kept input.
    // Block recomputation reruns res2's add fused with ln_2, as the forward.
    if (recompute_ == Recompute::block)
      block_attention_forward(l, Activation(b.input));
    if (recompute_ != Recompute::none)
      block_mlp_up_forward(l, /*ln2_done=*/recompute_ == Recompute::block);

    // MLP: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2)))); dresidual holds d res3.
    // c_proj's input gradient through GELU's derivative in one: d fch (and,
    // for an fp8 c_fc, its row amaxes). A stage's first backward block finds
    // d(residual) received: no producer took its amaxes.
    const TensorView w_fc = gemm_param(h + "mlp.c_fc.weight");
    const TensorView dfch_amax = layers_->c_fc.output_grad_row_amax(w_fc, R);
    const Activation dfch = layers_->mlp_proj.backward(
        {aview(d.dfch, {R, 4 * Cl}), "d(" + h + "mlp.c_fc)"}, g(h + "mlp.c_proj.weight"),
        g(h + "mlp.c_proj.bias"), read_as(dres, c_proj_copy(l)), b.fch_gelu,
        gemm_param(h + "mlp.c_proj.weight"),
        b.fch, l == last && !heads() ? TensorView{} : mlp_proj_grad_amax(l), dfch_amax);
    const Activation dln2 = layers_->c_fc.backward(
        {dln, "d(" + h + "ln_2)"}, g(h + "mlp.c_fc.weight"), g(h + "mlp.c_fc.bias"), dfch, b.ln2,
        w_fc, dfch_amax);
    expect_placement(dln2, dres.placement, "ln_2 backward", "output gradient", placement_log_);
    const TensorView w_proj = gemm_param(h + "attn.c_proj.weight");
    const TensorView dres2_amax = layers_->attn_proj.output_grad_row_amax(w_proj, Rl);
    const TensorView dres2_copy =
        residual_grad_copy(d.dresidual_bf16, layers_->attn_proj, w_proj);
    ops_.layernorm_backward(dresidual, g(h + "ln_2.weight"), g(h + "ln_2.bias"), dln,
                            b.res2.view, p(h + "ln_2.weight"), layer_act(a.ln2_mean, l, {Rl}),
                            layer_act(a.ln2_rstd, l, {Rl}), dres2_copy, dres2_amax);
    // Attention: res2 = x_in + c_proj(attn(c_attn(ln_1(x_in)))); dresidual holds d res2.
    const Activation datty = layers_->attn_proj.backward(
        {aview(d.datty, {R, Cl}), "d(" + h + "attn)"}, g(h + "attn.c_proj.weight"),
        g(h + "attn.c_proj.bias"), read_as(dres, dres2_copy), b.atty, w_proj, {}, dres2_amax);
    const Activation dqkv =
        attention()
            .backward({aview(d.dqkv, {B, T, 3 * Cl}), "d(" + h + "qkv)"},
                      view(d.datt.f32(), {attention_scratch(B, NHl, T)}),
                      datty.as(aview(d.datty, {B, T, Cl})),
                      b.qkv.as(layer_act(a.qkv, l, {B, T, 3 * Cl})),
                      b.atty.as(layer_act(a.atty, l, {B, T, Cl})),
                      layer_act(a.att, l, {attention_saved(B, NHl, T)}), NHl, NHl)
            .as(aview(d.dqkv, {R, 3 * Cl}));
    const Activation dln1 = layers_->c_attn.backward(
        {dln, "d(" + h + "ln_1)"}, g(h + "attn.c_attn.weight"), g(h + "attn.c_attn.bias"), dqkv,
        b.ln1, gemm_param(h + "attn.c_attn.weight"));
    expect_placement(dln1, dres.placement, "ln_1 backward", "output gradient", placement_log_);
    ops_.layernorm_backward(dresidual, g(h + "ln_1.weight"), g(h + "ln_1.bias"), dln,
                            b.input.view, p(h + "ln_1.weight"), layer_act(a.ln1_mean, l, {Rl}),
                            layer_act(a.ln1_rstd, l, {Rl}), l > first ? c_proj_copy(l - 1) : none,
                            l > first ? mlp_proj_grad_amax(l - 1) : none);
    store_->after_backward(layout_.block_unit(l));
  }

  // A stage after the first leaves d(input) in dresidual (stage_boundary().input_grad).
  if (!embeds()) return;
  if (!heads()) store_->before_backward(embed);
  layers_->embedding.backward(g("wte.weight"), g("wpe.weight"), dres,
                              token_rows(iview(ends_.tokens.i32(), {B, T}), "tokens"),
                              own_positions(B, T));
  store_->after_backward(embed);
}

CausalLM::StageBoundary GPT::boundary_views(int B, int T) {
  return residual_boundary(acts_.encoded, acts_.res3, dacts_.dresidual, B, T);
}

int64_t GPT::activation_bytes() const {
  const auto& a = acts_;
  const auto& d = dacts_;
  size_t n = 0;
  for (const LayerBuffer* b : {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.atty, &a.att, &a.res2,
                               &a.ln2, &a.ln2_mean, &a.ln2_rstd, &a.fch, &a.fch_gelu, &a.res3})
    n += b->buf.bytes();
  for (const Buffer* b :
       {&a.encoded, &a.lnf, &a.lnf_mean, &a.lnf_rstd, &a.proj_tmp, &a.positions, &a.position_rows,
        &d.dresidual, &d.dln, &d.dresidual_bf16, &d.datty, &d.dfch, &d.dqkv, &d.datt})
    n += b->bytes();
  return static_cast<int64_t>(n) + shared_bytes() + attention_bytes();
}

}  // namespace gt
