#include "trainer/model/llama_activation_plan.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"
#include "trainer/parallelize/mixture_of_experts.hpp"

namespace gt {

LlamaActivationPlan plan_llama_activations(const ModelConfig& m, const ActivationShape& s) {
  const int tp = s.tp;
  const int64_t R = static_cast<int64_t>(s.max_rows) * s.max_seq;
  GT_CHECK(R % tp == 0, "micro_batch x seq_len = ", R, " rows must divide into parallel.tp=", tp,
           " sequence-parallel shards");
  const int L = s.blocks < 0 ? m.n_layer : s.blocks;
  const int64_t head = s.head ? 1 : 0;  // the final norm's and the LM head's buffers
  const int64_t C = m.n_embd, V = m.padded_vocab_size(), hs = m.head_size();
  const int64_t Ql = int64_t(m.n_head) * hs / tp, Kl = int64_t(m.kv_heads()) * hs / tp;
  const int64_t Fl = m.ffn_width() / tp, Rl = R / tp, Vl = V / tp;
  const bool bf16 = s.dtype == ComputeDType::bf16;
  const DType act = bf16 ? DType::bf16 : DType::f32, f32 = DType::f32;
  // Slots: what recomputation drops, all blocks share (llama.hpp).
  const int one = std::min(L, 1);
  const int La = s.recompute == Recompute::block ? one : L;
  const int Lm = s.recompute == Recompute::none ? L : one;
  // A mixture's MLP: no dense gate|up or SwiGLU buffers (Fd = 0).
  const int64_t Fd = m.moe() ? 0 : Fl;

  LlamaActivationPlan p;
  p.tokens = p.targets = {R, 1, DType::i32};
  p.rope = {int64_t(s.max_seq) * hs, 1, f32};
  p.encoded = {Rl * C, 1, act};
  p.ln1 = {R * C, La, act};
  p.ln1_rstd = {Rl, La, f32};
  p.qkv = {R * (Ql + 2 * Kl), La, act};
  p.atty = {R * Ql, La, act};
  p.att = {s.attention_saved, La, f32};
  p.res2 = {Rl * C, La, act};
  p.ln2 = {R * C, Lm, act};
  p.ln2_rstd = {Rl, Lm, f32};
  p.gu = {R * 2 * Fd, Lm, act};
  p.swiglu = {R * Fd, Lm, act};
  p.res3 = {Rl * C, L, act};
  p.lnf = {head * R * C, 1, act};
  p.lnf_rstd = {head * Rl, 1, f32};
  p.logits = {head * R * Vl, 1, act};
  p.losses = p.loss_sum = {R, 1, f32};
  p.proj_tmp = {Rl * C, 1, act};
  p.dresidual = {Rl * C, 1, f32};
  // bf16 at tp = 1: the norms' backward round dresidual into this copy in
  // their pass, for the row-parallel layers' backward (llama.cpp).
  p.dresidual_bf16 = {bf16 && tp == 1 ? Rl * C : 0, 1, act};
  // dln, a norm's output gradient, is fp32 at every tp: under tp it is the
  // reduce-scatter's fp32 sum, and at tp = 1 the GEMM writes it in fp32 too,
  // so that the layouts differ only in summation order (a bf16 dln at tp = 1
  // alone put every norm's gradient a rounding away from the tp runs').
  p.dln = {Rl * C, 1, f32};
  p.datty = {R * Ql, 1, act};
  p.dswiglu = {R * Fd, 1, act};
  p.dgu = {R * 2 * Fd, 1, act};
  p.dqkv = {R * (Ql + 2 * Kl), 1, act};
  p.datt = {s.attention_scratch, 1, f32};
  // bf16: the inputs and output gradients are bf16 already except the
  // residual stream's fp32 gradient, which the row-parallel layers' backward
  // reads: rounded by the norms' backward at tp = 1 (dresidual_bf16), its
  // gathered (R, C) rows cast under tp. The weights are cast per call unless
  // the store keeps their bf16 copy; Llama has no biases.
  if (bf16) {
    p.precision.max_grad = tp > 1 ? R * C : 0;
    p.precision.max_weight =
        s.store_keeps_bf16_params ? 0 : std::max({Vl * C, (Ql + 2 * Kl) * C, 2 * Fd * C, C * Fd});
  }
  p.parallel_scratch = TpLayerContext::scratch(tp, s.overlap, s.dtype, R, C);
  p.attention_cp = ContextParallelAttention::scratch(s.chunks(), s.cp_mode, s.dtype, s.max_rows,
                                                     m.n_head / tp, m.kv_heads() / tp, int(hs),
                                                     s.cp_block_scratch);
  // The experts' GEMMs read bf16 weights: the store's copy, or their own
  // rounding scratch.
  if (m.moe())
    p.moe_bytes = MixtureOfExperts::planned_bytes(m, Rl, L, act, bf16 && !s.store_keeps_bf16_params,
                                                  s.ep, tp * s.cp);
  return p;
}

int64_t LlamaActivationPlan::bytes() const {
  int64_t n = 0;
  for (const BufferSize* b :
       {&tokens,    &targets, &rope,     &encoded, &ln1,      &ln1_rstd, &qkv,
        &atty,      &att,     &res2,     &ln2,     &ln2_rstd, &gu,       &swiglu,
        &res3,      &lnf,     &lnf_rstd, &logits,  &losses,   &loss_sum, &proj_tmp,
        &dresidual, &dln,     &dresidual_bf16, &datty,    &dswiglu, &dgu,      &dqkv,
        &datt})
    n += b->bytes();
  n += precision.bf16_bytes();
  return n + parallel_scratch.bytes() + attention_cp.bytes() + moe_bytes;
}

int64_t LlamaActivationPlan::embed_bytes() const { return tokens.bytes() + encoded.bytes(); }

int64_t LlamaActivationPlan::head_bytes() const {
  return targets.bytes() + lnf.bytes() + lnf_rstd.bytes() + logits.bytes() + losses.bytes() +
         loss_sum.bytes();
}

}  // namespace gt
