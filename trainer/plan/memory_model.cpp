#include "trainer/plan/memory_model.hpp"

#include <algorithm>
#include <sstream>

#include "parallel/collective_matmul.hpp"
#include "trainer/model/parameter_layout.hpp"

namespace gt {

std::string PlanLayout::str() const {
  std::ostringstream os;
  os << "dp=" << dp << " fsdp=" << fsdp << " tp=" << tp;
  if (fsdp > 1) os << " stage=" << stage;
  os << " mb=" << micro_batch;
  return os.str();
}

StateBytes predict_state_bytes(const ModelConfig& m, int fsdp, int tp, int stage,
                               bool bf16_params) {
  // The same layout ShardedParameters gets (every tp rank's is the same size).
  const ParameterLayout layout(m, tp, 0, fsdp);
  const auto& units = layout.units();
  const int64_t T = layout.total();
  int64_t S = 0, block = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    S += units[u].size() / fsdp;
    if (u > 0 && u + 1 < units.size()) block = std::max(block, units[u].size());
  }
  const int64_t embed = units.front().size(), head = units.back().size();
  const bool full_params = fsdp == 1 || stage < 3;
  const bool full_grads = fsdp == 1 || stage == 1;
  int64_t params = full_params ? T : S;
  int64_t grads = (full_grads ? T : 0) + (fsdp > 1 ? S : 0);
  const int64_t moments = 2 * (fsdp > 1 ? S : T);
  if (!full_params) params += embed + head + 2 * block;  // the four gather buffers
  if (!full_grads)  // four reduce-scatter inputs and their one-shard outputs
    grads += embed + head + 2 * block + embed / fsdp + head / fsdp + 2 * (block / fsdp);
  const int64_t f = sizeof(float);
  const int64_t copy = keeps_bf16_params(fsdp, stage, bf16_params) ? 2 * T : 0;  // bf16
  return StateBytes{params * f + copy, grads * f, moments * f};
}

int64_t predict_comm_workspace_bytes(const ModelConfig& m, const PlanLayout& l, int seq_len,
                                     PlanBackend backend) {
  if (backend != PlanBackend::cpu) return 0;
  const ParameterLayout layout(m, l.tp, 0, l.fsdp);
  const auto& units = layout.units();
  int64_t S = 0, block = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    S += units[u].size() / l.fsdp;
    if (u > 0 && u + 1 < units.size()) block = std::max(block, units[u].size());
  }
  const int64_t T = layout.total(), embed = units.front().size(), head = units.back().size();
  int64_t floats = 0;
  if (l.fsdp == 1) {
    if (l.dp > 1) floats += T;
  } else {
    if (l.fsdp > 2)  // stage 1 is not bound by the slots: a third block measured in flight
      floats += std::min(2 * T, 2 * (embed + head + (l.stage == 1 ? 3 : 2) * block));
    if (l.dp > 1) floats += S;
  }
  if (l.tp > 1 && !l.tp_overlap)
    floats += 2 * static_cast<int64_t>(l.micro_batch) * seq_len * m.n_embd;
  return floats * static_cast<int64_t>(sizeof(float));
}

int64_t attention_saved_elems(PlanBackend backend, int B, int n_head, int T) {
  const int64_t rows = static_cast<int64_t>(B) * n_head * T;
  return backend == PlanBackend::cpu ? rows * T : rows;
}

int64_t attention_scratch_elems(PlanBackend backend, int B, int n_head, int T) {
  return attention_saved_elems(backend, B, n_head, T);
}

int64_t predict_activation_bytes(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                 bool tp_overlap, PlanBackend backend, Recompute recompute,
                                 ComputeDType dtype, bool store_keeps_bf16_params) {
  // Mirrors GPT::allocate buffer by buffer (trainer/model/gpt.hpp,
  // "Precision"): a = the activations' storage (2 in bf16), f = 4 for what
  // stays fp32 (the residual stream's gradient, statistics, ids, losses).
  const bool bf16 = dtype == ComputeDType::bf16;
  const int64_t a = bf16 ? 2 : 4, f = 4;
  const int64_t R = static_cast<int64_t>(micro_batch) * seq_len;
  const int64_t L = m.n_layer, C = m.n_embd, V = m.padded_vocab_size();
  const int64_t Rl = R / tp, Cl = C / tp, Vl = V / tp;
  const int NHl = m.n_head / tp;
  const int64_t att_saved = attention_saved_elems(backend, micro_batch, NHl, seq_len);
  const int64_t att_scratch = attention_scratch_elems(backend, micro_batch, NHl, seq_len);
  // Layers' worth kept of the attention half (ln1 and its statistics, qkv,
  // atty, attention's saved state, res2) and of the MLP's (ln2 and its
  // statistics, fch, fch_gelu): L, or one slot when recomputation drops them.
  const int64_t one = std::min<int64_t>(L, 1);
  const int64_t La = recompute == Recompute::block ? one : L;
  const int64_t Lm = recompute == Recompute::none ? L : one;
  int64_t bytes = 0;
  bytes += 2 * R * f;                       // tokens, targets
  bytes += Rl * C * a;                      // encoded
  bytes += (La + Lm) * R * C * a;           // ln1, ln2 (gathered rows)
  bytes += 2 * (La + Lm) * Rl * f;          // ln1/ln2 mean, rstd
  bytes += La * R * 3 * Cl * a;             // qkv
  bytes += La * R * Cl * a;                 // atty
  bytes += La * att_saved * f;              // attention probabilities or row statistics
  bytes += (La + L) * Rl * C * a;           // res2, res3 (every block's input: always L)
  bytes += 2 * Lm * R * 4 * Cl * a;         // fch, fch_gelu
  bytes += R * C * a;                       // lnf
  bytes += 2 * Rl * f;                      // lnf mean, rstd
  bytes += R * Vl * a;                      // logits (dlogits in place)
  bytes += 2 * R * f;                       // losses, loss_sum
  bytes += Rl * C * a;                      // proj_tmp
  // The tensor-parallel layers' scratch (trainer/parallelize/tp_layers.hpp).
  bytes += (bf16 ? Rl * C : 0) * f;         // fp32 sum rows: staging of the tp sums
  bytes += (tp > 1 ? 3 * R : 0) * f;        // cross-entropy statistics
  // Activation gradients, reused across layers.
  bytes += Rl * C * f;                      // dresidual (fp32: an accumulator)
  bytes += (bf16 && tp == 1 ? Rl * C : 0) * a;  // its bf16 copy, from the LayerNorm backward
  bytes += Rl * C * (tp > 1 ? f : a);       // dln (a GEMM's output at tp = 1, an fp32 sum else)
  bytes += (tp > 1 ? R * C : 0) * f;        // the tp layers' gather rows
  bytes += R * Cl * a;                      // datty
  bytes += R * 4 * Cl * a;                  // dfch (c_proj's backward applies GELU's)
  bytes += R * 3 * Cl * a;                  // dqkv
  bytes += att_scratch * f;                 // attention backward scratch
  bytes += (tp > 1 ? reduce_scatter_workspace_elems(tp, Rl * C, tp_overlap) : 0) * f;  // ring
  if (bf16) {
    // LinearPrecision's bf16 copies: the residual stream's gathered gradient
    // rows (R, C) under tp, and the largest weight unless the parameter store
    // keeps every weight's copy; the inputs are bf16 already.
    const int64_t weight = store_keeps_bf16_params ? 0 : std::max(Vl * C, 4 * Cl * C);
    bytes += 2 * ((tp > 1 ? R * C : 0) + weight);
  }
  return bytes;
}

}  // namespace gt
