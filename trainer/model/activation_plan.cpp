#include "trainer/model/activation_plan.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

ActivationPlan plan_activations(const ModelConfig& m, const ActivationShape& s) {
  const int tp = s.tp;
  const int64_t R = static_cast<int64_t>(s.max_rows) * s.max_seq;
  GT_CHECK(R % tp == 0, "micro_batch x seq_len = ", R, " rows must divide into parallel.tp=", tp,
           " sequence-parallel shards");
  const int L = s.blocks < 0 ? m.n_layer : s.blocks;
  const int64_t head = s.head ? 1 : 0;  // the final norm's and the LM head's buffers
  const int64_t C = m.n_embd, V = m.padded_vocab_size();
  const int64_t Rl = R / tp, Cl = C / tp, Vl = V / tp;
  const bool bf16 = s.dtype == ComputeDType::bf16;
  const DType act = bf16 ? DType::bf16 : DType::f32, f32 = DType::f32;
  // Slots of the per-layer activations: what recomputation drops, all blocks
  // share (trainer/model/gpt.hpp, "Activation recomputation").
  const int one = std::min(L, 1);
  const int La = s.recompute == Recompute::block ? one : L;
  const int Lm = s.recompute == Recompute::none ? L : one;

  ActivationPlan p;
  p.tokens = {R, 1, DType::i32};
  p.targets = {R, 1, DType::i32};
  p.encoded = {Rl * C, 1, act};
  p.ln1 = {R * C, La, act};
  p.ln1_mean = p.ln1_rstd = {Rl, La, f32};
  p.qkv = {R * 3 * Cl, La, act};
  p.atty = {R * Cl, La, act};
  p.att = {s.attention_saved, La, f32};
  p.res2 = {Rl * C, La, act};
  p.ln2 = {R * C, Lm, act};
  p.ln2_mean = p.ln2_rstd = {Rl, Lm, f32};
  p.fch = p.fch_gelu = {R * 4 * Cl, Lm, act};
  p.res3 = {Rl * C, L, act};
  p.lnf = {head * R * C, 1, act};
  p.lnf_mean = p.lnf_rstd = {head * Rl, 1, f32};
  // bf16: the LM head writes bf16 logits and the cross-entropy turns them
  // into bf16 dlogits in place, so no fp32 (R, V) tensor exists.
  p.logits = {head * R * Vl, 1, act};
  p.losses = p.loss_sum = {R, 1, f32};
  p.proj_tmp = {Rl * C, 1, act};
  p.dresidual = {Rl * C, 1, f32};
  p.dresidual_bf16 = {bf16 && tp == 1 ? Rl * C : 0, 1, act};
  // dln is the LN's output gradient: bf16 when a GEMM writes it whole (tp =
  // 1), fp32 when it is the reduce-scatter of fp32 partials (tp > 1).
  p.dln = {Rl * C, 1, tp > 1 ? f32 : act};
  p.datty = {R * Cl, 1, act};
  p.dfch = {R * 4 * Cl, 1, act};
  p.dqkv = {R * 3 * Cl, 1, act};
  p.datt = {s.attention_scratch, 1, f32};
  // The largest GEMM operands: inputs (R,C) or (R,4C/p); output gradients
  // (R,3C/p), (R,4C/p), (R,C) or the LM head's (R,V/p); weights (V/p,C) or
  // (4C/p,C). Under bf16 storage the inputs and every output gradient but the
  // residual stream's (R,C) are bf16 already, and at tp = 1 that one comes
  // rounded from the LayerNorm backward (dresidual_bf16): only the gathered
  // rows under tp are copied. Weights are cast per call unless the store
  // keeps their bf16 copy. (fp32 GEMMs copy nothing: LinearPrecision
  // allocates no buffer then.)
  if (bf16) {
    p.precision.max_input = 0;
    p.precision.max_grad = tp > 1 ? R * C : 0;
    p.precision.max_weight = s.store_keeps_bf16_params ? 0 : std::max(Vl * C, 4 * Cl * C);
    // Biases likewise (c_fc's 4C/p is the largest); the row-parallel
    // layers' (C) are widened back to fp32 under tp, added after the sum.
    p.precision.max_bias = s.store_keeps_bf16_params ? 0 : std::max(4 * Cl, C);
    p.precision.max_bias_f32 = tp > 1 ? C : 0;
  }
  p.parallel_scratch = TpLayerContext::scratch(tp, s.overlap, s.dtype, R, C);
  // Context parallelism: GPT-2's learned positions looked up by each row's
  // position in the sequence (a cp rank's rows are not positions 0..T-1),
  // and the attention layer's buffers.
  const bool cp = s.cp > 1;
  p.positions = {cp ? R : 0, 1, DType::i32};
  p.position_rows = {cp ? Rl * C : 0, 1, f32};
  const int NHl = m.n_head / tp;
  p.attention_cp = ContextParallelAttention::scratch(s.chunks(), s.cp_mode, s.dtype, s.max_rows,
                                                     NHl, NHl, m.head_size(), s.cp_block_scratch);
  return p;
}

int64_t ActivationPlan::bytes() const {
  int64_t n = 0;
  for (const BufferSize* b : {&tokens,   &targets,  &encoded,  &ln1,       &ln1_mean,
                              &ln1_rstd, &qkv,      &atty,     &att,       &res2,
                              &ln2,      &ln2_mean, &ln2_rstd, &fch,       &fch_gelu,
                              &res3,     &lnf,      &lnf_mean, &lnf_rstd,  &logits,
                              &losses,   &loss_sum, &proj_tmp, &dresidual, &dresidual_bf16,
                              &dln,      &datty,    &dfch,     &dqkv,      &datt,
                              &positions, &position_rows})
    n += b->bytes();
  n += precision.bf16_bytes();
  return n + parallel_scratch.bytes() + attention_cp.bytes();
}

int64_t ActivationPlan::embed_bytes() const { return tokens.bytes() + encoded.bytes(); }

int64_t ActivationPlan::head_bytes() const {
  return targets.bytes() + lnf.bytes() + lnf_mean.bytes() + lnf_rstd.bytes() + logits.bytes() +
         losses.bytes() + loss_sum.bytes();
}

}  // namespace gt
