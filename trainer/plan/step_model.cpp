#include "trainer/plan/step_model.hpp"

#include <algorithm>

#include "trainer/model/parameter_layout.hpp"
#include "trainer/profile/model_flops.hpp"

namespace gt {

MicroBatchFlops micro_batch_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp) {
  const double B = micro_batch, T = seq_len, R = B * T, C = m.n_embd, L = m.n_layer;
  const double V = m.padded_vocab_size();  // the LM head computes the padding's columns too
  MicroBatchFlops f;
  f.linear = L * 2.0 * R * block_matmuls(m).total() / tp;
  // C = n_head * hs: the query heads' features (GQA shares keys, not products).
  f.attention = L * 2.0 * 2.0 * B * (C / tp) * T * (T + 1) / 2.0;
  f.lm_head = 2.0 * R * C * V / tp;
  return f;
}

ModelShare whole_model(const ModelConfig& m) {
  ModelShare s;
  s.blocks = m.n_layer;
  return s;
}

MicroBatchFlops micro_batch_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                  const ModelShare& share) {
  MicroBatchFlops f = micro_batch_flops(m, micro_batch, seq_len, tp);
  if (share.blocks == m.n_layer && share.head) return f;
  const double part = static_cast<double>(share.blocks) / m.n_layer;
  f.linear *= part;
  f.attention *= part;
  if (!share.head) f.lm_head = 0;
  return f;
}

MicroBatchFlops recompute_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                Recompute recompute, const ModelShare& share) {
  MicroBatchFlops r = recompute_flops(m, micro_batch, seq_len, tp, recompute);
  if (share.blocks == m.n_layer) return r;
  const double part = static_cast<double>(share.blocks) / m.n_layer;
  r.linear *= part;
  r.attention *= part;
  return r;
}

MicroBatchFlops recompute_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                Recompute recompute) {
  const double R = static_cast<double>(micro_batch) * seq_len, L = m.n_layer;
  const BlockMatmuls b = block_matmuls(m);
  MicroBatchFlops r;
  // What each family's backward reruns: the block's MLP up to its
  // activation (mlp), or everything up to it (block); never the down
  // projection, whose output is the kept residual.
  if (recompute == Recompute::mlp) r.linear = L * 2.0 * R * b.up / tp;
  if (recompute == Recompute::block) {
    r.linear = L * 2.0 * R * (b.qkv + b.out + b.up) / tp;
    r.attention = micro_batch_flops(m, micro_batch, seq_len, tp).attention;
  }
  return r;
}

double model_flops_per_step(const ModelConfig& m, const TrainConfig& t) {
  // The trainer's own MFU numerator (metrics.jsonl "mfu"), so a predicted MFU
  // and a measured one are the same ratio: full T x T attention, not the
  // causal half the step-time model charges.
  return model_flops(m, t.seq_len).per_token() * t.global_batch * t.seq_len;
}

UnitSizes unit_sizes(const ModelConfig& m, int tp, int fsdp) {
  return unit_sizes(ParameterLayout(m, tp, 0, fsdp), fsdp);
}

// Every block unit is alike (the same parameters, padded alike), so a
// share's units are counts of the whole model's.
UnitSizes share_unit_sizes(const UnitSizes& whole, int fsdp, const ModelShare& share) {
  const int embeds = (share.embed ? 1 : 0) + (share.tied_copy ? 1 : 0);
  UnitSizes z;
  z.embed = embeds > 0 ? whole.embed : 0;
  z.head = share.head ? whole.head : 0;
  z.block = share.blocks > 0 ? whole.block : 0;
  z.total = embeds * whole.embed + z.head + share.blocks * whole.block;
  z.shard_total = z.total / fsdp;  // each unit is padded to a multiple of fsdp
  return z;
}

UnitSizes unit_sizes(const ModelConfig& m, int tp, int fsdp, const ModelShare& share) {
  const UnitSizes whole = unit_sizes(m, tp, fsdp);
  const ModelShare all = whole_model(m);
  if (share.blocks == all.blocks && share.embed && share.head && !share.tied_copy) return whole;
  return share_unit_sizes(whole, fsdp, share);
}

CommBytes comm_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                              PlanBackend backend) {
  return comm_bytes_per_step(m, t, l, backend, whole_model(m));
}

CommBytes comm_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                              PlanBackend backend, const ModelShare& share) {
  const int dp = l.dp, fsdp = l.fsdp, tp = l.tp, L = share.blocks;
  const double C = m.n_embd;
  const int A = t.global_batch / (l.micro_batch * dp * fsdp);
  const ParameterLayout layout(m, tp, 0, fsdp);
  const UnitSizes whole = unit_sizes(layout, fsdp);
  const bool all = share.blocks == m.n_layer && share.embed && share.head && !share.tied_copy;
  const UnitSizes u = all ? whole : share_unit_sizes(whole, fsdp, share);
  const double total = static_cast<double>(u.total), block = static_cast<double>(u.block);
  // Per micro-batch: the embedding's reduce-scatter and the LM head's
  // all-gather, each with its dual (the "+4" of 8L + 4), where they are.
  const double ends = (share.embed ? 2.0 : 0.0) + (share.head ? 2.0 : 0.0);
  // The GPU plan is the bf16 model (planner.cpp): there the forward's
  // all-gathers of activations (each block's two column-parallel inputs,
  // recomputed ones included, and the LM head's) move bf16 rows; the
  // reduce-scatters sum in fp32 and the backward's gathers move the fp32
  // residual-stream gradient (layout_matrix.expected_bytes, dtype bf16).
  const bool bf16 = backend == PlanBackend::cuda;
  CommBytes out;
  if (tp > 1) {
    const double R = static_cast<double>(l.micro_batch) * t.seq_len;
    const double chunk = static_cast<double>(static_cast<int64_t>(R) / tp) * C * 4.0;
    const double again = t.recompute == Recompute::mlp     ? 1.0
                         : t.recompute == Recompute::block ? 3.0
                                                           : 0.0;  // per block, recomputed
    double per_micro = (8.0 * L + ends + again * L) * (tp - 1) * chunk;  // sequence-parallel AG/RS
    if (bf16) {
      const double gathered_again = t.recompute == Recompute::mlp     ? 1.0
                                    : t.recompute == Recompute::block ? 2.0
                                                                      : 0.0;
      const double head_gather = share.head ? 1.0 : 0.0;
      per_micro -= (2.0 * L + head_gather + gathered_again * L) * (tp - 1) * chunk / 2.0;
    }
    if (share.head) per_micro += 2.0 * (tp - 1) / tp * 3.0 * R * 4.0;  // vocab-parallel CE
    // The tp-partial gradients, all-reduced whole: GPT-2's LayerNorms, wpe
    // and ln_f (4CL + PC + 2C), Llama's RMSNorm weights (2CL + C); of the
    // share's units (every block's are alike: block 0's stand for them).
    double partial = 0;
    for (const ParamSpec& s : layout.specs()) {
      if (!s.tp_partial_grad) continue;
      const double n = static_cast<double>(s.numel);
      if (s.unit == layout.embed_unit())
        partial += share.embed ? n : 0;
      else if (s.unit == layout.head_unit())
        partial += share.head ? n : 0;
      else if (all)
        partial += n;
      else if (s.layer == 0)
        partial += L * n;
    }
    const int reductions = (fsdp > 1 && l.stage >= 2) ? A : 1;
    out.tp = A * per_micro + reductions * 2.0 * (tp - 1) / tp * 4.0 * partial;
  }
  // Gradients are summed at parallel.reduce_dtype's size; parameters are
  // gathered in fp32.
  const double grad_bytes = l.reduce_dtype == ComputeDType::bf16 ? 2.0 : 4.0;
  if (fsdp > 1) {
    const double ring = (fsdp - 1.0) / fsdp * 4.0;
    const double rs = (fsdp - 1.0) / fsdp * grad_bytes;  // the gradients' reduce-scatter
    if (l.stage == 1) {
      out.fsdp = rs * total + ring * total;
      out.fsdp_overlapped = rs * total;  // the reduce-scatter
    } else if (l.stage == 2) {
      out.fsdp = A * rs * total + ring * total;
      out.fsdp_overlapped = A * rs * total;  // the reduce-scatters
    } else {
      // Backward gathers the blocks again, but for the last two (whole
      // model) or every one (a pipeline stage, see the header).
      const int again = l.pp > 1 ? L : std::max(0, L - 2);
      out.fsdp = A * rs * total + A * ring * (total + again * block);
      out.fsdp_overlapped = out.fsdp;                      // prefetched / under backward
    }
  }
  if (dp > 1)
    out.dp = 2.0 * (dp - 1.0) / dp * grad_bytes *
             static_cast<double>(fsdp == 1 ? u.total : u.total / fsdp);
  return out;
}

}  // namespace gt
