#include "trainer/model/llama.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"
#include "trainer/model/llama_activation_plan.hpp"
#include "trainer/model/rope_table.hpp"

namespace gt {

namespace {
const ModelConfig& require_llama(const ModelConfig& m) {
  if (!m.llama_family())
    fail("model.arch=", to_string(m.arch),
         " given to the Llama model (model.arch: llama or mixtral)");
  return m;
}
std::string block(int l) { return "layers." + std::to_string(l) + "."; }
}  // namespace

Llama::Llama(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq, Recompute recompute,
             ComputeDType dtype)
    : CausalLM("Llama", require_llama(cfg), ops, max_rows, max_seq, recompute, dtype) {
  allocate(TensorParallelGroup{});
}

Llama::Llama(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
             const ParameterLayout& layout, ParameterStore& store, const TensorParallelGroup& group,
             Recompute recompute, ComputeDType dtype, std::optional<StageSpan> chunk,
             const ContextParallelGroup& cp, const ExpertParallelGroup& ep)
    : CausalLM("Llama", require_llama(cfg), ops, max_rows, max_seq, layout, store, group, recompute,
               dtype, chunk, cp),
      ep_(ep) {
  allocate(group);
}

Llama::~Llama() = default;

void Llama::allocate(const TensorParallelGroup& group) {
  const int tp = group.size();
  NHl_ = cfg_.n_head / tp;
  KVl_ = cfg_.kv_heads() / tp;
  qkv_width_ = int64_t(NHl_ + 2 * KVl_) * cfg_.head_size();
  ffn_ = cfg_.moe() ? 0 : cfg_.ffn_width() / tp;  // a mixture's experts are not split
  head_weight_ = cfg_.tied_embeddings() ? "embed_tokens.weight" : "lm_head.weight";
  // Every buffer as the plan sizes it (the planner sums the same plan).
  ActivationShape shape = activation_shape(group);
  shape.ep = ep_.size();
  const LlamaActivationPlan plan = plan_llama_activations(cfg_, shape);
  allocate_shared(plan, group);
  auto& a = acts_;
  a.rope = CausalLM::allocate(plan.rope);
  // Row i holds local row i's angles: its position in the sequence (under
  // context parallelism a rank's rows are chunks of it, not 0..T-1).
  const int hs = cfg_.head_size();
  const std::vector<int32_t> positions = local_positions();
  const int last = *std::max_element(positions.begin(), positions.end());
  const std::vector<float> all = rope_cos_sin(cfg_, last + 1);
  std::vector<float> table(static_cast<size_t>(max_seq_) * hs);
  for (int i = 0; i < max_seq_; ++i)
    std::copy_n(all.begin() + int64_t(positions[static_cast<size_t>(i)]) * hs, hs,
                table.begin() + int64_t(i) * hs);
  ops_.upload(view(a.rope.f32(), {max_seq_, hs}), table.data());
  a.encoded = CausalLM::allocate(plan.encoded);
  a.ln1 = allocate_layer(plan.ln1);
  a.ln1_rstd = allocate_layer(plan.ln1_rstd);
  a.qkv = allocate_layer(plan.qkv);
  a.atty = allocate_layer(plan.atty);
  a.att = allocate_layer(plan.att);
  a.res2 = allocate_layer(plan.res2);
  a.ln2 = allocate_layer(plan.ln2);
  a.ln2_rstd = allocate_layer(plan.ln2_rstd);
  a.gu = allocate_layer(plan.gu);
  a.swiglu = allocate_layer(plan.swiglu);
  a.res3 = allocate_layer(plan.res3);
  a.lnf = CausalLM::allocate(plan.lnf);
  a.lnf_rstd = CausalLM::allocate(plan.lnf_rstd);
  a.proj_tmp = CausalLM::allocate(plan.proj_tmp);
  auto& d = dacts_;
  d.dresidual = CausalLM::allocate(plan.dresidual);
  d.dln = CausalLM::allocate(plan.dln);
  d.dresidual_bf16 = CausalLM::allocate(plan.dresidual_bf16);
  d.datty = CausalLM::allocate(plan.datty);
  d.dswiglu = CausalLM::allocate(plan.dswiglu);
  d.dgu = CausalLM::allocate(plan.dgu);
  d.dqkv = CausalLM::allocate(plan.dqkv);
  d.datt = CausalLM::allocate(plan.datt);
  make_attention(NHl_, KVl_);
  layers_ = std::make_unique<Layers>(*parallel_);
  if (cfg_.moe()) {
    // Every block of this instance keeps its routing (the plan's moe_bytes).
    const int blocks = sized_blocks_ < 0 ? cfg_.n_layer : sized_blocks_;
    const int64_t rows = int64_t(max_rows_) * max_seq_ / tp;
    const bool cast = act_dtype_ != DType::f32 && !store_->keeps_bf16_params();
    moe_ = std::make_unique<MixtureOfExperts>(ops_, cfg_, rows, blocks, act_dtype_, cast, group,
                                              cp_, ep_);
  }
  blocks_.resize(static_cast<size_t>(cfg_.n_layer));
}

// ---- One block's forward ----------------------------------------------------

void Llama::block_attention_forward(int l, const Activation& x, TensorView prev_res2) {
  const int B = B_, T = T_;
  const int64_t C = cfg_.n_embd, R = int64_t(B) * T, Rl = R / shards_, hs = cfg_.head_size();
  const int64_t Ql = int64_t(NHl_) * hs;
  const std::string h = block(l);
  auto& a = acts_;
  BlockActivations& b = blocks_[static_cast<size_t>(l)];
  b.input = x;
  const TensorView ln1 = layer_act(a.ln1, l, {R, C});
  const TensorView ln1_rstd = layer_act(a.ln1_rstd, l, {Rl});
  const TensorView proj = aview(a.proj_tmp, {Rl, C});
  const TensorView wqkv = gemm_rows(h + "self_attn.q_proj.weight", h + "self_attn.v_proj.weight");
  const TensorView w_ln1 = p(h + "input_layernorm.weight");
  const float eps = static_cast<float>(cfg_.norm_eps);
  // An fp8 q|k|v takes its input's scales from the norm's own pass.
  const TensorView ln1_amax = layers_->qkv.input_row_amax(wqkv, Rl);
  if (prev_res2.empty()) {
    ops_.rmsnorm_forward(own_rows(ln1), ln1_rstd, x.view, w_ln1, eps, ln1_amax);
  } else {
    // The block before's residual add and this norm in one pass: x =
    // prev_res2 + proj_tmp (that block's down_proj or mixture output, not
    // yet overwritten), written, then re-read by each lane from cache.
    ops_.add_rmsnorm_forward(x.view, own_rows(ln1), ln1_rstd, prev_res2, proj, w_ln1, eps,
                             ln1_amax);
  }
  b.ln1 = rowwise(ln1, x, h + "input_layernorm");  // this rank's rows, gathered by q|k|v
  const TensorView none;
  b.qkv = layers_->qkv.forward({layer_act(a.qkv, l, {R, qkv_width_}), h + "qkv"}, b.ln1, wqkv,
                               none, none, ln1_amax);
  // q and k heads turn in place (per position: the placement stays); the
  // attention (and its backward) reads the rotated values, which are what
  // the layer keeps.
  ops_.rope_forward(layer_act(a.qkv, l, {R, NHl_ + 2 * KVl_, hs}),
                    view(a.rope.f32(), {max_seq_, hs}), NHl_ + KVl_, 0, T);
  b.atty = attention()
               .forward({layer_act(a.atty, l, {B, T, Ql}), h + "attn"},
                        layer_act(a.att, l, {attention_saved(B, NHl_, T)}),
                        b.qkv.as(layer_act(a.qkv, l, {B, T, qkv_width_})), NHl_, KVl_)
               .as(layer_act(a.atty, l, {R, Ql}));
  const Activation out = layers_->o_proj.forward({proj, h + "o_proj"}, b.atty,
                                                 gemm_param(h + "self_attn.o_proj.weight"), none);
  b.res2 = added(layer_act(a.res2, l, {Rl, C}), x, out, h + "res2", "residual add",
                 placement_log_);
  // The residual add and post_attention_layernorm in one pass.
  post_attention_norm(l, proj);
}

void Llama::post_attention_norm(int l, TensorView proj) {
  const int64_t C = cfg_.n_embd, R = int64_t(B_) * T_, Rl = R / shards_;
  const std::string h = block(l);
  auto& a = acts_;
  BlockActivations& b = blocks_[static_cast<size_t>(l)];
  const TensorView own = own_rows(layer_act(a.ln2, l, {R, C}));
  const TensorView rstd = layer_act(a.ln2_rstd, l, {Rl});
  const TensorView w = p(h + "post_attention_layernorm.weight");
  const float eps = static_cast<float>(cfg_.norm_eps);
  // An fp8 gate|up takes its input's scales from this pass (a mixture's
  // experts stay bf16: none).
  b.ln2_amax = moe_ ? TensorView{}
                    : layers_->gate_up.input_row_amax(
                          gemm_rows(h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"), Rl);
  if (proj.empty())
    ops_.rmsnorm_forward(own, rstd, b.res2.view, w, eps, b.ln2_amax);
  else
    ops_.add_rmsnorm_forward(b.res2.view, own, rstd, b.input.view, proj, w, eps, b.ln2_amax);
}

void Llama::block_mlp_up_forward(int l, bool ln2_done) {
  const int64_t C = cfg_.n_embd, R = int64_t(B_) * T_;
  const std::string h = block(l);
  auto& a = acts_;
  BlockActivations& b = blocks_[static_cast<size_t>(l)];
  if (!ln2_done) post_attention_norm(l, TensorView{});
  const TensorView ln2 = layer_act(a.ln2, l, {R, C});
  if (moe_) {  // the mixture routes this rank's rows: no gather
    b.ln2 = rowwise(own_rows(ln2), b.res2, h + "post_attention_layernorm");
    return;
  }
  b.ln2 = rowwise(ln2, b.res2, h + "post_attention_layernorm");
  const TensorView gu = layer_act(a.gu, l, {R, 2 * ffn_});
  const TensorView wgu = gemm_rows(h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight");
  b.gu = layers_->gate_up.forward({gu, h + "gate_up"}, b.ln2, wgu, TensorView{}, TensorView{},
                                  b.ln2_amax);
  // An fp8 down_proj takes its input's scales from SwiGLU's own pass.
  const TensorView swiglu = layer_act(a.swiglu, l, {R, ffn_});
  b.swiglu_amax = layers_->down.input_row_amax(param_shape(h + "mlp.down_proj.weight"), R);
  ops_.swiglu_forward(swiglu, gu, b.swiglu_amax);
  b.swiglu = rowwise(swiglu, b.gu, h + "swiglu");  // per feature pair of this rank's columns
}

MixtureOfExperts::Weights Llama::moe_views(int l, bool grads) {
  // Each block's experts are consecutive in the store, w1|w3 of every expert
  // then every w2 (llama_placement.cpp): one (El, ...) view spans them. At
  // parallel.ep > 1 the store holds only this ep rank's El = E / ep experts,
  // [rank * El, (rank + 1) * El) (ParameterLayout's expert units).
  const std::string m = block(l) + "block_sparse_moe.";
  const ExpertShard& shard = layout().experts();
  const int64_t E = cfg_.n_experts, El = E / shard.ep, C = cfg_.n_embd, F = cfg_.ffn_width();
  const std::string first = "experts." + std::to_string(shard.rank * El) + ".";
  const std::string last = "experts." + std::to_string((shard.rank + 1) * El - 1) + ".";
  auto rows = [&](const std::string& from, const std::string& end) {
    return grads ? g_rows(from, end) : gemm_rows(from, end);
  };
  const TensorView w13 = rows(m + first + "w1.weight", m + last + "w3.weight");
  const TensorView w2 = rows(m + first + "w2.weight", m + last + "w2.weight");
  // The selection bias (no gradient): block l's row of the table, if any.
  TensorView bias;
  if (!grads && router_bias_.data)
    bias = make_view(static_cast<float*>(router_bias_.data) + int64_t(l) * E, DType::f32,
                     ops_.device(), {E});
  return {grads ? g(m + "gate.weight") : p(m + "gate.weight"),
          make_view(w13.data, w13.dtype, ops_.device(), {El, 2 * F, C}),
          make_view(w2.data, w2.dtype, ops_.device(), {El, C, F}), bias};
}

void Llama::set_router_bias(TensorView table) {
  if (!moe_) return CausalLM::set_router_bias(table);
  GT_CHECK(table.dtype == DType::f32 && table.ndim == 2 &&
               table.shape[0] == cfg_.n_layer && table.shape[1] == cfg_.n_experts,
           "Llama::set_router_bias: a (", cfg_.n_layer, ", ", cfg_.n_experts, ") fp32 table");
  router_bias_ = table;
}

MoeStepStats Llama::take_moe_stats() {
  if (!moe_) return {};
  MoeStepStats s = moe_->take_step_stats();
  for (int l = first_layer_; l < end_layer_; ++l) s.layers.push_back(l);
  return s;
}

// ---- Forward ----------------------------------------------------------------

bool Llama::run_forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                        float grad_scale) {
  GT_CHECK(B >= 1 && B <= max_rows_ && T >= 1 && T <= max_seq_, "B=", B, " T=", T);
  const int tp = shards_;
  const int64_t R = int64_t(B) * T;
  GT_CHECK(R % tp == 0, "B*T = ", R, " rows do not split into ", tp, " sequence shards");
  B_ = B;
  T_ = T;
  const int64_t C = cfg_.n_embd, Rl = R / tp, Vl = cfg_.padded_vocab_size() / tp;
  const bool want_grad = wants_backward(targets, grad_scale);
  const int embed = layout_.embed_unit(), head = layout_.head_unit();
  auto& a = acts_;
  const TensorView none;
  auto tok = iview(ends_.tokens.i32(), {B, T});
  ops_.upload(tok, tokens);
  store_->begin_forward(want_grad);

  // The tied head reads embed_tokens too: on one stage the unit stays
  // gathered until the head is done (the store's call order).
  const bool tied = cfg_.tied_embeddings();
  // A stage after the first finds its input in `encoded` (stage_boundary().input).
  Activation x = stage_input(aview(a.encoded, {Rl, C}));  // the stream entering block l
  if (embeds()) {
    store_->before_forward(embed);
    x = layers_->embedding.forward({x.view, "embedding"}, token_rows(tok, "tokens"),
                                   p("embed_tokens.weight"), none);
    if (!heads()) store_->after_forward(embed);
  }

  if (moe_) moe_->begin_micro_batch(B, T);  // T: this cp rank's rows of each sequence
  // The residual add that ends block l (res3 = res2 + proj_tmp) is done by
  // the norm that reads res3 next, in its pass: block l + 1's
  // input_layernorm or the final norm (prev_res2: block l's res2).
  const TensorView proj = aview(a.proj_tmp, {Rl, C});
  TensorView prev_res2;
  for (int l = first_layer_; l < end_layer_; ++l) {
    store_->before_forward(layout_.block_unit(l));
    block_attention_forward(l, x, prev_res2);
    block_mlp_up_forward(l, /*ln2_done=*/true);
    BlockActivations& b = blocks_[static_cast<size_t>(l)];
    const Activation out =
        moe_ ? moe_->forward(l - first_layer_, b.ln2, proj, moe_views(l, false))
             : layers_->down.forward({proj, block(l) + "down_proj"}, b.swiglu,
                                     gemm_param(block(l) + "mlp.down_proj.weight"), none,
                                     b.swiglu_amax);
    b.res3 = added(layer_act(a.res3, l, {Rl, C}), b.res2, out, block(l) + "res3", "residual add",
                   placement_log_);
    x = b.res3;
    prev_res2 = b.res2.view;
    store_->after_forward(layout_.block_unit(l));
  }
  // The load-balancing loss pools every block's router statistics of the
  // micro-batch (B T cp tokens) before any backward reads its gradient;
  // pipeline stages pass them along (stage_boundary's router views).
  if (moe_)
    moe_->finish_micro_batch(want_grad ? grad_scale : 0.f, int64_t(B) * T * cp_.size(),
                             {!embeds(), !heads()});
  if (!heads()) {
    // x, res3 of the last block, is the stage's output: the add the next
    // stage's first norm would have fused is done here.
    if (!prev_res2.empty()) ops_.add(x.view, prev_res2, proj);
    backward_ready_ = want_grad;
    return false;
  }

  // The final norm and, when untied, the LM head live in the head unit; a
  // tied head reads embed_tokens, valid until after_forward(embed).
  if (!embeds() && tied) store_->before_forward(embed);
  store_->before_forward(head);
  const TensorView lnf = aview(a.lnf, {R, C});
  const TensorView lnf_rstd = view(a.lnf_rstd.f32(), {Rl});
  const float eps = static_cast<float>(cfg_.norm_eps);
  if (prev_res2.empty())
    ops_.rmsnorm_forward(own_rows(lnf), lnf_rstd, x.view, p("norm.weight"), eps);
  else  // the last block's residual add, fused
    ops_.add_rmsnorm_forward(x.view, own_rows(lnf), lnf_rstd, prev_res2, proj, p("norm.weight"),
                             eps);
  lnf_ = rowwise(lnf, x, "norm");
  logits_ =
      layers_->lm_head.forward({logits_view(R, Vl), "logits"}, lnf_, gemm_param(head_weight_), none);
  store_->after_forward(head);
  if (embeds() || tied) store_->after_forward(embed);

  backward_ready_ = false;
  if (!targets) return false;
  auto tgt = iview(ends_.targets.i32(), {R});
  ops_.upload(tgt, targets);
  layers_->cross_entropy.forward({view(ends_.losses.f32(), {R}), "losses"},
                                 want_grad ? logits_.view : none, logits_,
                                 token_rows(tgt, "targets"), cfg_.vocab_size, grad_scale);
  backward_ready_ = want_grad;
  return true;
}

// ---- Backward ---------------------------------------------------------------

void Llama::run_backward() {
  const int B = B_, T = T_, tp = shards_;
  const int64_t C = cfg_.n_embd, R = int64_t(B) * T, Rl = R / tp, hs = cfg_.head_size();
  const int64_t Ql = int64_t(NHl_) * hs;
  const int embed = layout_.embed_unit(), head = layout_.head_unit();
  auto& a = acts_;
  auto& d = dacts_;
  const TensorView none;
  // dresidual: d(loss)/d(residual stream), fp32, every norm's backward adds
  // into it. dln: a norm's output gradient (a column-parallel layer's input
  // gradient).
  const TensorView dresidual = view(d.dresidual.f32(), {Rl, C});
  const TensorView dln = view(d.dln.f32(), {Rl, C});  // fp32 at every tp (the plan's note)
  // bf16 at tp = 1: the norms' backward also round dresidual into
  // dresidual_bf16 in their pass where a bf16 row-parallel GEMM (o_proj,
  // down_proj) reads it next; nobody casts dresidual (residual_grad_copy).
  const int first = first_layer_, last = end_layer_ - 1;
  const bool tied = cfg_.tied_embeddings();
  // A stage before the last finds d(output) in dresidual (stage_boundary().output_grad).
  Activation dres = stage_input(dresidual);
  if (heads()) {
    if (embeds() || tied) store_->before_backward(embed);
    store_->before_backward(head);
    const Activation dlnf = layers_->lm_head.backward(
        {dln, "d(norm)"}, g(head_weight_), none, rowwise(logits_.view, logits_, "d(logits)"),
        lnf_, gemm_param(head_weight_));
    ops_.zero(dresidual);
    // The last block's fp8 down_proj takes d(residual)'s scales from this
    // pass (as each block's input_layernorm backward does for the block
    // before).
    ops_.rmsnorm_backward(dresidual, g("norm.weight"), dln, layer_act(a.res3, last, {Rl, C}),
                          p("norm.weight"), view(a.lnf_rstd.f32(), {Rl}), down_grad_copy(last),
                          down_grad_amax(last));
    dres = rowwise(dresidual, dlnf, "d(residual)");
    store_->after_backward(head);
    if (!embeds() && tied) store_->after_backward(embed);
  } else if (const TensorView copy = down_grad_copy(last); !copy.empty()) {
    // dresidual holds d(output) from the next stage (stage_boundary().output_grad);
    // the first down_proj backward reads its bf16 copy.
    ops_.cast(copy, dresidual);
  }

  for (int l = last; l >= first; --l) {
    store_->before_backward(layout_.block_unit(l));
    const std::string h = block(l);
    BlockActivations& b = blocks_[static_cast<size_t>(l)];
    // What recomputation dropped, rerun into the shared slots.
    // b.input is whole by now (no add in front of input_layernorm); block
    // recomputation reruns res2's add fused with post_attention_layernorm,
    // as the forward.
    if (recompute_ == Recompute::block)
      block_attention_forward(l, Activation(b.input));
    if (recompute_ != Recompute::none)
      block_mlp_up_forward(l, /*ln2_done=*/recompute_ == Recompute::block);

    // A stage's first backward block finds d(residual) received: no
    // producer took its amaxes.
    const TensorView dres_amax = l == last && !heads() ? TensorView{} : down_grad_amax(l);
    const TensorView dres3_copy = down_grad_copy(l);
    const Activation dln2 =
        block_mlp_backward(l, read_as(dres, dres3_copy), dln, dres_amax);
    expect_placement(dln2, dres.placement, "post_attention_layernorm backward", "output gradient",
                     placement_log_);
    const TensorView wo = gemm_param(h + "self_attn.o_proj.weight");
    const TensorView dres2_amax = layers_->o_proj.output_grad_row_amax(wo, Rl);
    const TensorView dres2_copy = residual_grad_copy(dacts_.dresidual_bf16, layers_->o_proj, wo);
    ops_.rmsnorm_backward(dresidual, g(h + "post_attention_layernorm.weight"), dln, b.res2.view,
                          p(h + "post_attention_layernorm.weight"), layer_act(a.ln2_rstd, l, {Rl}),
                          dres2_copy, dres2_amax);
    // Attention: res2 = x_in + o_proj(attn(rope(qkv(norm(x_in))))); dresidual = d res2.
    const Activation datty = layers_->o_proj.backward(
        {aview(d.datty, {R, Ql}), "d(" + h + "attn)"}, g(h + "self_attn.o_proj.weight"), none,
        read_as(dres, dres2_copy), b.atty, wo, {}, dres2_amax);
    const Activation dqkv =
        attention()
            .backward({aview(d.dqkv, {B, T, qkv_width_}), "d(" + h + "qkv)"},
                      view(d.datt.f32(), {attention_scratch(B, NHl_, T)}),
                      datty.as(aview(d.datty, {B, T, Ql})),
                      b.qkv.as(layer_act(a.qkv, l, {B, T, qkv_width_})),
                      b.atty.as(layer_act(a.atty, l, {B, T, Ql})),
                      layer_act(a.att, l, {attention_saved(B, NHl_, T)}), NHl_, KVl_)
            .as(aview(d.dqkv, {R, qkv_width_}));
    // RoPE's backward turns the q and k gradients back (in place).
    ops_.rope_backward(aview(d.dqkv, {R, NHl_ + 2 * KVl_, hs}), view(a.rope.f32(), {max_seq_, hs}),
                       NHl_ + KVl_, 0, T);
    const Activation dln1 = layers_->qkv.backward(
        {dln, "d(" + h + "input_layernorm)"},
        g_rows(h + "self_attn.q_proj.weight", h + "self_attn.v_proj.weight"), none, dqkv, b.ln1,
        gemm_rows(h + "self_attn.q_proj.weight", h + "self_attn.v_proj.weight"));
    expect_placement(dln1, dres.placement, "input_layernorm backward", "output gradient",
                     placement_log_);
    ops_.rmsnorm_backward(dresidual, g(h + "input_layernorm.weight"), dln, b.input.view,
                          p(h + "input_layernorm.weight"), layer_act(a.ln1_rstd, l, {Rl}),
                          l > first ? down_grad_copy(l - 1) : none,
                          l > first ? down_grad_amax(l - 1) : none);
    store_->after_backward(layout_.block_unit(l));
  }

  // A stage after the first leaves d(input) in dresidual (stage_boundary().input_grad).
  if (!embeds()) return;
  if (!heads()) store_->before_backward(embed);
  layers_->embedding.backward(g("embed_tokens.weight"), none, dres,
                              token_rows(iview(ends_.tokens.i32(), {B, T}), "tokens"));
  store_->after_backward(embed);
}

TensorView Llama::down_grad_copy(int l) const {
  if (moe_) return {};  // the mixture reads the fp32 gradient
  return residual_grad_copy(dacts_.dresidual_bf16, layers_->down,
                            param_shape(block(l) + "mlp.down_proj.weight"));
}

TensorView Llama::down_grad_amax(int l) {
  if (moe_) return {};  // the mixture's experts stay bf16
  const int64_t Rl = int64_t(B_) * T_ / shards_;
  return layers_->down.output_grad_row_amax(param_shape(block(l) + "mlp.down_proj.weight"), Rl);
}

Activation Llama::block_mlp_backward(int l, const Activation& dres, TensorView dln,
                                     TensorView dres_amax) {
  const int64_t R = int64_t(B_) * T_;
  const std::string h = block(l);
  BlockActivations& b = blocks_[static_cast<size_t>(l)];
  // Mixtral: res3 = res2 + moe(norm(res2)).
  if (moe_)
    return moe_->backward(l - first_layer_, dres, dln, b.ln2, moe_views(l, false),
                          moe_views(l, true));
  // res3 = res2 + down(swiglu(gate_up(norm(res2)))).
  auto& d = dacts_;
  const TensorView none;
  const Activation dswiglu = layers_->down.backward(
      {aview(d.dswiglu, {R, ffn_}), "d(" + h + "swiglu)"}, g(h + "mlp.down_proj.weight"), none,
      dres, b.swiglu, gemm_param(h + "mlp.down_proj.weight"), {}, dres_amax);
  const TensorView dgu = aview(d.dgu, {R, 2 * ffn_});
  const TensorView wgu = gemm_rows(h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight");
  // An fp8 gate|up takes its output gradient's scales from SwiGLU's backward.
  const TensorView dgu_amax = layers_->gate_up.output_grad_row_amax(wgu, R);
  ops_.swiglu_backward(dgu, dswiglu.view, b.gu.view, dgu_amax);
  return layers_->gate_up.backward({dln, "d(" + h + "post_attention_layernorm)"},
                                   g_rows(h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"),
                                   none, rowwise(dgu, dswiglu, "d(" + h + "gate_up)"), b.ln2, wgu,
                                   dgu_amax);
}

CausalLM::StageBoundary Llama::boundary_views(int B, int T) {
  StageBoundary b = residual_boundary(acts_.encoded, acts_.res3, dacts_.dresidual, B, T);
  if (moe_) {
    b.router_in = moe_->router_partial_in();
    b.router_out = moe_->router_partial_out();
    b.router_totals = moe_->router_totals();
  }
  return b;
}

int64_t Llama::activation_bytes() const {
  const auto& a = acts_;
  const auto& d = dacts_;
  size_t n = 0;
  for (const LayerBuffer* b : {&a.ln1, &a.ln1_rstd, &a.qkv, &a.atty, &a.att, &a.res2, &a.ln2,
                               &a.ln2_rstd, &a.gu, &a.swiglu, &a.res3})
    n += b->buf.bytes();
  for (const Buffer* b : {&a.rope, &a.encoded, &a.lnf, &a.lnf_rstd, &a.proj_tmp, &d.dresidual,
                          &d.dln, &d.dresidual_bf16, &d.datty, &d.dswiglu, &d.dgu, &d.dqkv,
                          &d.datt})
    n += b->bytes();
  return static_cast<int64_t>(n) + shared_bytes() + attention_bytes() +
         (moe_ ? moe_->bytes() : 0);
}

}  // namespace gt
