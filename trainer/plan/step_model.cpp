#include "trainer/plan/step_model.hpp"

#include <algorithm>

#include "parallel/mesh.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/parallelize/context_parallel.hpp"
#include "trainer/profile/model_flops.hpp"
#include "trainer/profile/op_costs.hpp"
#include "trainer/sharding/data_parallel_groups.hpp"
#include "trainer/sharding/fp8_gather_plan.hpp"

namespace gt {

double cp_rank_attention_pairs(int seq_len, const PlanCp& cp) {
  const SequenceChunks chunks(seq_len, cp.cp, cp.load_balance);
  double slowest = 0;
  for (int r = 0; r < cp.cp; ++r) {
    // Rank r's query chunks, each against every key up to its end.
    double pairs = 0;
    for (int c : chunks.chunks(r)) {
      const int64_t len = chunks.chunk_len(), first = int64_t(c) * len;
      pairs += op_cost::causal_pairs(len, first + len, first, 0);
    }
    slowest = std::max(slowest, pairs);
  }
  return slowest;
}

MicroBatchFlops micro_batch_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                  const PlanCp& cp) {
  // A cp rank's rows: seq_len / cp of each of the micro-batch's sequences.
  const double B = micro_batch, R = B * (seq_len / cp.cp), C = m.n_embd, L = m.n_layer;
  // The LM head computes the padding's columns too (padded for this tp).
  const double V = padded_for_tp(m, tp).padded_vocab_size();
  MicroBatchFlops f;
  f.linear = L * 2.0 * R * block_matmuls(m).total() / tp;
  // C = n_head * hs: the query heads' features (GQA shares keys, not
  // products); QK^T and AV, 2 FLOPs a multiply-add each, over the pairs.
  f.attention = L * 2.0 * 2.0 * B * (C / tp) * cp_rank_attention_pairs(seq_len, cp);
  f.lm_head = 2.0 * R * C * V / tp;
  return f;
}

Fp8Work fp8_work(const ModelConfig& m, int micro_batch, int seq_len, int tp, int64_t min_dim,
                 const PlanCp& cp, bool rowwise) {
  const BlockMatmuls b = block_matmuls(m);
  const double C = m.n_embd, R = static_cast<double>(micro_batch) * (seq_len / cp.cp);
  const double t = tp, L = m.n_layer;
  // (out, in) of each layer's whole weight: qkv (Q + 2K, C), out (C, Q), up
  // (its width, C), down (C, F); the weights per block give the widths.
  // fused_x / fused_dy: the forward input's / the output gradient's amax is
  // taken by its producer's own pass (a norm, the activation, their
  // backward); attention's output and the rotary embedding's backward are
  // not producers that take one; nor, rowwise at tp > 1, are the gathers
  // that bring a column-parallel layer's input rows or a row-parallel
  // layer's output-gradient rows.
  const bool gathered_rows_own_pass = rowwise && tp > 1;
  struct Layer {
    double out, in;
    bool column;  // column-parallel (out split by tp) or row-parallel (in split)
    bool fp8;
    bool fused_x, fused_dy;
  };
  const double Q = b.out / C, F = m.moe() ? 0 : b.down / C;
  const Layer layers[] = {
      {b.qkv / C, C, true, true, true, false},
      {C, Q, false, true, false, true},
      {m.moe() ? 0 : b.up / C, C, true, !m.moe(), true, true},
      {C, F, false, !m.moe(), true, true},
  };
  Fp8Work w;
  double fp8_flops = 0;
  for (const Layer& l : layers) {
    if (!l.fp8 || std::min(l.out, l.in) < static_cast<double>(min_dim)) continue;
    fp8_flops += l.out * l.in;
    // One rank's operands: x (R, in), W (out, in) / tp, dy (R, out); the
    // split side of x or dy is 1/tp (sequence parallelism gathers R whole).
    const double x = R * l.in / (l.column ? 1 : t), dy = R * l.out / (l.column ? t : 1);
    const double W = l.out * l.in / t;
    const bool fused_x = l.fused_x && !(l.column && gathered_rows_own_pass);
    const bool fused_dy = l.fused_dy && !(!l.column && gathered_rows_own_pass);
    w.cast_bytes +=
        L * (4.0 * 2.0 * (x + W + dy) - 2.0 * ((fused_x ? x : 0) + (fused_dy ? dy : 0)));
  }
  w.linear_share = b.total() > 0 ? fp8_flops / b.total() : 0;
  return w;
}

Fp8AmaxFloats fp8_amax_floats(const ModelConfig& m, const PlanLayout& l, int seq_len,
                              Recompute recompute) {
  Fp8AmaxFloats f;
  if (l.fp8 == Fp8Recipe::off) return f;
  const BlockMatmuls b = block_matmuls(m);
  const double C = m.n_embd, R = static_cast<double>(l.micro_batch) * (seq_len / l.cp);
  const double p = l.tp;
  const bool rowwise = l.fp8 == Fp8Recipe::rowwise;
  const double w_tensor = l.gathers_fp8() ? 0.0 : 1.0;  // W's amax: none when gathered in fp8
  struct Layer {
    double out, in;
    bool column, fp8;
    double forwards;  // 1, or 2 where recomputation reruns it
  };
  const double Q = b.out / C, F = m.moe() ? 0 : b.down / C;
  const double again = recompute == Recompute::none ? 1.0 : 2.0;
  const Layer layers[] = {
      {b.qkv / C, C, true, true, recompute == Recompute::block ? 2.0 : 1.0},
      {C, Q, false, true, recompute == Recompute::block ? 2.0 : 1.0},
      {m.moe() ? 0 : b.up / C, C, true, !m.moe(), again},
      {C, F, false, !m.moe(), 1.0},
  };
  for (const Layer& y : layers) {
    if (!y.fp8 || std::min(y.out, y.in) < static_cast<double>(l.fp8_min_dim)) continue;
    if (rowwise && y.column) {  // forward: every scale local
      f.tp += R + y.in;
      f.cp += y.out / p + y.in;
    } else if (rowwise) {
      f.tp += y.forwards * (R + y.out) + y.out;
      f.cp += y.out + y.in / p;
    } else if (y.column) {
      f.tp += y.forwards * (1 + w_tensor) + 1 + w_tensor;
      f.cp += y.forwards + 2;
    } else {
      f.tp += y.forwards * (1 + w_tensor) + 2 + w_tensor;
      f.cp += y.forwards + 2;
    }
  }
  return f;
}

ModelShare whole_model(const ModelConfig& m) {
  ModelShare s;
  s.blocks = m.n_layer;
  return s;
}

MicroBatchFlops micro_batch_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                  const ModelShare& share, const PlanCp& cp) {
  MicroBatchFlops f = micro_batch_flops(m, micro_batch, seq_len, tp, cp);
  if (share.blocks == m.n_layer && share.head) return f;
  const double part = static_cast<double>(share.blocks) / m.n_layer;
  f.linear *= part;
  f.attention *= part;
  if (!share.head) f.lm_head = 0;
  return f;
}

MicroBatchFlops recompute_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                Recompute recompute, const ModelShare& share, const PlanCp& cp) {
  MicroBatchFlops r = recompute_flops(m, micro_batch, seq_len, tp, recompute, cp);
  if (share.blocks == m.n_layer) return r;
  const double part = static_cast<double>(share.blocks) / m.n_layer;
  r.linear *= part;
  r.attention *= part;
  return r;
}

MicroBatchFlops recompute_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                Recompute recompute, const PlanCp& cp) {
  const double R = static_cast<double>(micro_batch) * (seq_len / cp.cp), L = m.n_layer;
  const BlockMatmuls b = block_matmuls(m);
  MicroBatchFlops r;
  // What each family's backward reruns: the block's MLP up to its
  // activation (mlp), or everything up to it (block); never the down
  // projection, whose output is the kept residual.
  // A mixture keeps its experts' activations: only the norm reruns.
  const double up = m.moe() ? 0.0 : b.up;
  if (recompute == Recompute::mlp) r.linear = L * 2.0 * R * up / tp;
  if (recompute == Recompute::block) {
    r.linear = L * 2.0 * R * (b.qkv + b.out + up) / tp;
    r.attention = micro_batch_flops(m, micro_batch, seq_len, tp, cp).attention;
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
  return unit_sizes(ParameterLayout(padded_for_tp(m, tp), tp, 0, fsdp), fsdp);
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

StateUnits state_units(const ModelConfig& m, const PlanLayout& l, const ModelShare& share) {
  const ParallelDims d = l.dims();
  const int f = shard_degree(d);
  const bool fp8 = l.gathers_fp8();
  StateUnits out;
  const bool all = share.blocks == m.n_layer && share.embed && share.head && !share.tied_copy;
  const ModelConfig padded = padded_for_tp(m, l.tp);
  const bool experts = l.ep > 1 && m.moe();
  const ExpertShard shard{experts ? l.ep : 1, 0};  // every ep rank holds as many experts
  // The dense part (at ep = 1 the whole model), padded as parallelize.cpp
  // pads it: to f, to 4 f with fp8 all-gather.
  const ParameterLayout dense(padded, {StageSpan{}}, l.tp, 0, f * (fp8 ? 4 : 1), shard,
                              experts ? LayoutPart::dense : LayoutPart::all);
  const UnitSizes whole = unit_sizes(dense, f);
  out.dense = all ? whole : share_unit_sizes(whole, f, share);
  if (fp8 && share.blocks > 0) {
    const Fp8GatherPlan g = plan_fp8_gather(dense, f, l.fp8_min_dim);
    const Fp8UnitGather& b = g.units[static_cast<size_t>(dense.first_block_unit())];
    out.fp8.on = true;
    out.fp8.weights = share.blocks * static_cast<int64_t>(b.weights.size());
    out.fp8.block_side = b.side_floats;
    out.fp8.widest = b.widest;
    out.fp8.block_slots = std::min(share.blocks, 2);  // unit_slot alternates two
  } else if (fp8) {
    out.fp8.on = true;  // nothing to gather in fp8, its buffers all the same
  }
  if (!experts) return out;
  out.expert_fsdp = expert_shard_degree(d);
  out.expert_dp = expert_replica_degree(d);
  const int fe = out.expert_fsdp;
  const UnitSizes e = unit_sizes(
      ParameterLayout(padded, {StageSpan{}}, l.tp, 0, fe, shard, LayoutPart::experts), fe);
  // A share's expert units: one per block it holds, all alike.
  out.experts.block = share.blocks > 0 ? e.block : 0;
  out.experts.total = share.blocks * e.block;
  out.experts.shard_total = out.experts.total / fe;
  return out;
}

int64_t fp8_gather_bytes(const StateUnits& units, int shard_degree) {
  const Fp8GatherSizes& g = units.fp8;
  if (!g.on) return 0;
  int64_t n = units.dense.shard_total + 4 * std::max<int64_t>(g.weights, 1) +
              2 * std::max<int64_t>(g.widest, 1);
  if (g.weights > 0)
    n += g.block_slots * (units.dense.block + 4 * g.block_side + 4 * g.block_side * shard_degree);
  return n;
}

StateBytes predict_state_bytes(const StateUnits& units, const PlanLayout& l, bool bf16_params) {
  const ParallelDims d = l.dims();
  const FsdpStage stage = fsdp_stage_of(l.stage);
  const int f = shard_degree(d);
  StateBytes b =
      plan_sharded_state(units.dense, f, stage, bf16_params, replica_degree(d), l.reduce_dtype)
          .bytes();
  b.params += fp8_gather_bytes(units, f);
  if (units.experts.total > 0) {
    const StateBytes e = plan_sharded_state(units.experts, units.expert_fsdp, stage,
                                            keeps_bf16_params(f, stage, bf16_params),
                                            units.expert_dp, l.reduce_dtype)
                             .bytes();
    b.params += e.params;
    b.grads += e.grads;
    b.optimizer += e.optimizer;
  }
  return b;
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

const char* replica_key(const PlanLayout& l) {
  return mesh_axis_name(mesh_axis_alias(l.dims(), replica_axis(l.dims())));
}

const char* shard_key(const PlanLayout& l) {
  return mesh_axis_name(mesh_axis_alias(l.dims(), shard_axis(l.dims())));
}

double ep_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                         PlanBackend backend, int blocks, int micro_batches) {
  const int ep = l.ep;
  if (ep <= 1 || !m.moe()) return 0;
  const double R = static_cast<double>(l.micro_batch) * (t.seq_len / l.cp) / l.tp;
  const double act = backend == PlanBackend::cuda ? 2.0 : 4.0;  // the GPU plan is bf16
  const double rows = R * m.experts_per_token * (ep - 1.0) / ep;
  const double counts = (ep - 1.0) * (m.n_experts / ep) * 4.0;
  const double per_block = counts + 4.0 * rows * m.n_embd * act;
  return static_cast<double>(micro_batches) * blocks * per_block;
}

double cp_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                         PlanBackend backend, int blocks, int micro_batches) {
  const int cp = l.cp;
  if (cp == 1) return 0;
  const double L = blocks, A = micro_batches;
  const double R = static_cast<double>(l.micro_batch) * (t.seq_len / cp);  // a rank's rows
  // The packed K|V of a rank: its tp rank's key/value heads of every row.
  const double n = R * 2.0 * m.kv_heads() * m.head_size() / l.tp;
  const double act = backend == PlanBackend::cuda ? 2.0 : 4.0;  // the GPU plan is bf16
  const bool block = t.recompute == Recompute::block;
  const double forwards = block ? 2.0 * L : L;  // recompute=block runs each forward twice
  double per_micro = 0;
  if (l.cp_comm == CpComm::allgather) {
    // Forward and backward gather each block's K|V, but for the gather the
    // backward finds still held: each chunk's last block (none held under
    // recompute=block, which gathers again just before: 2L).
    const double chunks = l.pp > 1 ? l.virtual_stages : 1;
    const double gathers = block ? 2.0 * L : 2.0 * L - chunks;
    per_micro = gathers * (cp - 1) * n * act + L * (cp - 1) * n * 4.0;  // + dK|dV reduce-scatter
  } else {
    // Forward hops (again when recomputed); backward hops of K|V beside the
    // fp32 dK|dV partial sums, which travel one hop further.
    per_micro = forwards * (cp - 1) * n * act + L * ((cp - 1) * n * act + cp * n * 4.0);
  }
  // The step's loss, averaged over the sequence's cp ranks: one 8-byte all-reduce.
  return A * per_micro + 2.0 * (cp - 1) / cp * 8.0;
}

namespace {

// Bytes one rank sends per step all-reducing n elements of `bytes` each over d ranks.
double all_reduce_bytes(int d, double n, double bytes) {
  return 2.0 * (d - 1.0) / d * bytes * n;
}

// Bytes one rank sends per step over a shard group of f > 1 ranks holding
// `total` floats of units whose largest block is `block` (L blocks, A
// micro-batches): the gradients' reduce-scatters at `grad_bytes` an element
// and the fp32 parameter gathers, by ZeRO stage; and the part of them that
// runs under compute.
struct ShardGroupBytes {
  double bytes = 0, overlapped = 0;
};
// With fp8 (stage 3 under fp8 all-gather) each block is gathered as its
// codes and fp32 side ((f - 1) x (block / f + 4 side) bytes, not (f - 1) x 4
// block / f), after one max all-reduce of the weights' amaxes a step.
ShardGroupBytes shard_group_bytes(int f, double total, double block, const PlanLayout& l, int L,
                                  int A, double grad_bytes, const Fp8GatherSizes& fp8 = {}) {
  const double ring = (f - 1.0) / f * 4.0;
  const double rs = (f - 1.0) / f * grad_bytes;  // the gradients' reduce-scatter
  ShardGroupBytes out;
  if (l.stage == 1) {
    out.bytes = rs * total + ring * total;
    out.overlapped = rs * total;  // the reduce-scatter; the gather follows AdamW
  } else if (l.stage == 2) {
    out.bytes = A * rs * total + ring * total;
    out.overlapped = A * rs * total;  // the reduce-scatters
  } else {
    // Backward gathers the blocks again, but for the last two (whole
    // model) or every one (a pipeline stage, see the header).
    const int again = l.pp > 1 ? L : std::max(0, L - 2);
    const bool codes = fp8.on && fp8.weights > 0;
    const double block_gather =
        codes ? (f - 1.0) * (block / f + 4.0 * static_cast<double>(fp8.block_side))
              : ring * block;
    out.bytes = A * rs * total + A * (ring * (total - L * block) + (L + again) * block_gather);
    out.overlapped = out.bytes;  // prefetched / under backward
    // The amaxes' all-reduce, waited before the first gather: exposed.
    if (codes) out.bytes += all_reduce_bytes(f, static_cast<double>(fp8.weights), 4.0);
  }
  return out;
}

}  // namespace

CommBytes comm_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                              PlanBackend backend, const ModelShare& share) {
  // The gradients' groups (cp folded in): fsdp shards over fsdp x cp, the
  // replicas over dp (x cp when nothing shards).
  const ParallelDims dims = l.dims();
  const int dp = replica_degree(dims), fsdp = shard_degree(dims), tp = l.tp, L = share.blocks;
  const double C = m.n_embd;
  const int A = t.global_batch / (l.micro_batch * l.dp * l.fsdp);
  // At ep > 1 the layout of this rank's experts only (the tp-partial sums
  // below), the dense part reduced over the data axes and the experts over
  // edp (state_units).
  const bool experts = l.ep > 1 && m.moe();
  const ParameterLayout layout(padded_for_tp(m, tp), {StageSpan{}}, tp, 0, fsdp,
                               ExpertShard{experts ? l.ep : 1, 0});
  const bool all = share.blocks == m.n_layer && share.embed && share.head && !share.tied_copy;
  const StateUnits su = state_units(m, l, share);
  const UnitSizes& u = su.dense;
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
    const double R = static_cast<double>(l.micro_batch) * (t.seq_len / l.cp);  // a cp rank's rows
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
    // At ep > 1 this rank's experts' (whole, summed over tp as each tp rank
    // routes its own rows), reduced as often as their own part is.
    double partial = 0, expert_partial = 0;
    for (const ParamSpec& s : layout.specs()) {
      if (!s.tp_partial_grad) continue;
      const double n = static_cast<double>(s.numel);
      double& into = layout.units()[static_cast<size_t>(s.unit)].experts ? expert_partial : partial;
      if (s.unit == layout.embed_unit())
        into += share.embed ? n : 0;
      else if (s.unit == layout.head_unit())
        into += share.head ? n : 0;
      else if (all)
        into += n;
      else if (s.layer == 0)
        into += L * n;
    }
    const int reductions = (fsdp > 1 && l.stage >= 2) ? A : 1;
    const int expert_reductions = (su.expert_fsdp > 1 && l.stage >= 2) ? A : 1;
    out.tp = A * per_micro + (reductions * partial + expert_reductions * expert_partial) * 2.0 *
                                 (tp - 1) / tp * 4.0;
    // fp8 all-gather: the fp8 weights' amaxes over their tp pieces, once a step.
    if (su.fp8.weights > 0) out.tp += all_reduce_bytes(tp, static_cast<double>(su.fp8.weights), 4.0);
  }
  // Gradients are summed at parallel.reduce_dtype's size; parameters are
  // gathered in fp32.
  const double grad_bytes = l.reduce_dtype == ComputeDType::bf16 ? 2.0 : 4.0;
  if (fsdp > 1) {
    const ShardGroupBytes s = shard_group_bytes(fsdp, total, block, l, L, A, grad_bytes, su.fp8);
    out.fsdp = s.bytes;
    out.fsdp_overlapped = s.overlapped;
  }
  if (dp > 1)
    out.dp = all_reduce_bytes(dp, static_cast<double>(fsdp == 1 ? u.total : u.total / fsdp),
                              grad_bytes);
  // The experts over edp: sharded like the dense part over fsdp (the same
  // stage's gathers and reduce-scatters), or all-reduced (fsdp = 1), each
  // block's as its backward ends.
  const double et = static_cast<double>(su.experts.total);
  if (const int fe = su.expert_fsdp, de = su.expert_dp; et > 0) {
    if (fe > 1) {
      const ShardGroupBytes s = shard_group_bytes(
          fe, et, static_cast<double>(su.experts.block), l, L, A, grad_bytes);
      out.edp = s.bytes;
      out.edp_overlapped = s.overlapped;
    } else if (de > 1) {
      out.edp = out.edp_overlapped = all_reduce_bytes(de, et, grad_bytes);
    }
  }
  out.cp = cp_bytes_per_step(m, t, l, backend, L, A);
  // runtime.fp8: the layers' amaxes over tp and cp, each block each micro-batch.
  const Fp8AmaxFloats amax = fp8_amax_floats(m, l, t.seq_len, t.recompute);
  if (tp > 1) out.tp += A * L * all_reduce_bytes(tp, amax.tp, 4.0);
  if (l.cp > 1) out.cp += A * L * all_reduce_bytes(l.cp, amax.cp, 4.0);
  out.ep = ep_bytes_per_step(m, t, l, backend, L, A);
  return out;
}

}  // namespace gt
