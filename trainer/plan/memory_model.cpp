#include "trainer/plan/memory_model.hpp"

#include <algorithm>
#include <sstream>

#include "kernels/core/error.hpp"
#include "trainer/model/activation_plan.hpp"
#include "trainer/model/llama_activation_plan.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/parallelize/context_parallel.hpp"
#include "trainer/plan/dry_run_ops.hpp"
#include "trainer/plan/step_model.hpp"
#include "trainer/sharding/data_parallel_groups.hpp"

namespace gt {

std::string PlanLayout::str() const {
  std::ostringstream os;
  if (pp > 1) {
    os << "pp=" << pp << " " << to_string(schedule) << " ";
    if (virtual_stages > 1) os << "v=" << virtual_stages << " ";
  }
  os << "dp=" << dp << " fsdp=" << fsdp;
  if (cp > 1) os << " cp=" << cp << " " << to_string(cp_comm) << (cp_load_balance ? "" : "+unbalanced");
  os << " tp=" << tp;
  if (ep > 1) os << " ep=" << ep;
  if (fsdp > 1) os << " stage=" << stage;
  os << " mb=" << micro_batch;
  return os.str();
}

StateBytes predict_state_bytes(const ModelConfig& m, int fsdp, int tp, int stage, bool bf16_params,
                               int dp, ComputeDType reduce_dtype) {
  // The plan ShardedParameters allocates from, for the layout it gets (every
  // tp rank's is the same size).
  return plan_sharded_state(ParameterLayout(padded_for_tp(m, tp), tp, 0, fsdp), fsdp,
                            fsdp_stage_of(stage),
                            bf16_params, dp, reduce_dtype)
      .bytes();
}

int64_t predict_comm_workspace_bytes(const ModelConfig& m, const PlanLayout& l, int seq_len,
                                     PlanBackend backend) {
  if (backend != PlanBackend::cpu) return 0;
  const int f = shard_degree(l.dims());
  return predict_comm_workspace_bytes(m, unit_sizes(m, l.tp, f), l, seq_len, backend);
}

namespace {

// Bytes of the temporaries the gradient reductions of units `z` leave in
// flight, sharded over f ranks and replicated over d (the header's rules),
// at the wire's element size.
int64_t gradient_workspace_bytes(const UnitSizes& z, int f, int d, const PlanLayout& l) {
  const int64_t T = z.total, S = z.shard_total;
  int64_t grad_elems = 0;
  if (f == 1) {
    if (d > 1) grad_elems += T;
  } else {
    // Stage 1 is not bound by the slots: a third block measured in flight,
    // but for the cp collectives' waits completing them sooner (header).
    const int blocks_in_flight = l.stage == 1 && l.cp == 1 ? 3 : 2;
    if (f > 2) grad_elems += std::min(2 * T, 2 * (z.embed + z.head + blocks_in_flight * z.block));
    if (d > 1) grad_elems += S;
  }
  return grad_elems * (l.reduce_dtype == ComputeDType::bf16 ? 2 : 4);
}

}  // namespace

int64_t predict_comm_workspace_bytes(const ModelConfig& m, const UnitSizes& z, const PlanLayout& l,
                                     int seq_len, PlanBackend backend) {
  if (backend != PlanBackend::cpu) return 0;
  // Over the gradients' groups: cp folds into the replicas (fsdp = 1) or
  // the shards (data_parallel_groups.hpp).
  const ParallelDims dims = l.dims();
  int64_t bytes = gradient_workspace_bytes(z, shard_degree(dims), replica_degree(dims), l);
  if (l.tp > 1 && !l.tp_overlap)  // of a cp rank's rows
    bytes += 2 * static_cast<int64_t>(l.micro_batch) * (seq_len / l.cp) * m.n_embd * 4;
  return bytes;
}

int64_t predict_expert_workspace_bytes(const UnitSizes& experts, int expert_fsdp, int expert_dp,
                                       const PlanLayout& l, PlanBackend backend) {
  if (backend != PlanBackend::cpu) return 0;
  return gradient_workspace_bytes(experts, expert_fsdp, expert_dp, l);
}

namespace {

struct PlanSums {
  int64_t total = 0, embed = 0, head = 0;
};

// The table the family's model allocates from (GPT::allocate:
// trainer/model/activation_plan.hpp; Llama::allocate:
// llama_activation_plan.hpp), with the attention sizes of the backend's
// kernels for the n_head / tp query heads of a rank and its seq_len / cp
// rows of each sequence, as CausalLM::activation_shape sizes them.
PlanSums activation_sums(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                         bool tp_overlap, PlanBackend backend, Recompute recompute,
                         ComputeDType dtype, bool store_keeps_bf16_params, const PlanCp& cp,
                         int ep) {
  const Device device = backend == PlanBackend::cpu ? Device::cpu : Device::cuda;
  // The backend's sizes, asked through the same functions the model asks
  // (ContextParallelAttention's rules on top of the kernels' at cp > 1):
  // an Ops that allocates nothing and reports that device's kernels.
  const std::unique_ptr<Ops> sizes = make_dry_run_ops(device);
  const SequenceChunks chunks(seq_len, cp.cp, cp.load_balance);
  const int NHl = m.n_head / tp, Tl = chunks.local_len();
  ActivationShape s;
  s.max_rows = micro_batch;
  s.max_seq = Tl;
  s.tp = tp;
  s.overlap = tp_overlap;
  s.recompute = recompute;
  s.dtype = dtype;
  s.cp = cp.cp;
  s.cp_mode = cp.comm;
  s.cp_load_balance = cp.load_balance;
  if (cp.cp > 1)
    s.cp_block_scratch = sizes->attention_block_scratch_elems(micro_batch, NHl, chunks.chunk_len(),
                                                              chunks.chunk_len());
  s.attention_saved =
      ContextParallelAttention::saved_elems(*sizes, cp.cp, micro_batch, NHl, Tl);
  s.attention_scratch =
      ContextParallelAttention::scratch_elems(*sizes, cp.cp, micro_batch, NHl, Tl);
  s.store_keeps_bf16_params = store_keeps_bf16_params;
  s.ep = ep;
  switch (m.arch) {
    case ModelArch::gpt2: {
      const ActivationPlan p = plan_activations(padded_for_tp(m, tp), s);
      return {p.bytes(), p.embed_bytes(), p.head_bytes()};
    }
    case ModelArch::llama:
    case ModelArch::mixtral: {
      const LlamaActivationPlan p = plan_llama_activations(padded_for_tp(m, tp), s);
      return {p.bytes(), p.embed_bytes(), p.head_bytes()};
    }
  }
  fail("predict_activation_bytes: model.arch=", to_string(m.arch), " has no activation plan");
}

}  // namespace

int64_t predict_activation_bytes(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                 bool tp_overlap, PlanBackend backend, Recompute recompute,
                                 ComputeDType dtype, bool store_keeps_bf16_params,
                                 const PlanCp& cp, int ep) {
  return activation_sums(m, micro_batch, seq_len, tp, tp_overlap, backend, recompute, dtype,
                         store_keeps_bf16_params, cp, ep)
      .total;
}

ActivationParts predict_activation_parts(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                         bool tp_overlap, PlanBackend backend, Recompute recompute,
                                         ComputeDType dtype, bool store_keeps_bf16_params,
                                         const PlanCp& cp, int ep) {
  // The plans are affine in n_layer: a block's slots are the difference
  // between a two-block and a one-block model (what recomputation drops
  // has one slot in both, so it lands in `shared`).
  auto sums = [&](int layers) {
    ModelConfig c = m;
    c.n_layer = layers;
    return activation_sums(c, micro_batch, seq_len, tp, tp_overlap, backend, recompute, dtype,
                           store_keeps_bf16_params, cp, ep);
  };
  const PlanSums one = sums(1), two = sums(2);
  ActivationParts parts;
  parts.per_block = two.total - one.total;
  parts.embed = one.embed;
  parts.head = one.head;
  parts.shared = one.total - parts.per_block - one.embed - one.head;
  return parts;
}

}  // namespace gt
