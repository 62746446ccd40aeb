// MixtureOfExperts: one rank's sparse MLPs of a Mixtral model (HF
// MixtralSparseMoeBlock), every block's, with the router statistics the
// load-balancing loss pools over them.
//
// Per block, on this rank's rows x (R, C) (its sequence shard: under tp each
// rank routes its own R/p rows, under cp its chunks):
//   logits (R, E) = x @ gate^T in fp32        probs = softmax(logits)
//   the top k experts of each row, their probs renormalised: weights (R, k)
//   slots sorted by expert (the dispatch plan), x gathered into them (N = R k rows)
//   gu (N, 2F) = grouped GEMM of [w1 | w3] per expert, h = silu(gate) * up
//   y (N, C) = grouped GEMM of w2 per expert
//   out (R, C) = sum over each row's slots of weight * y
// Every index and count stays on the backend (no host round trip) unless
// capacity drops are on (model.capacity_factor > 0): then the rows kept are
// read back once per block to report dropped_tokens; under ep, the
// exchange reads each block's offsets and counts back (ExpertExchange).
//
// A capacity over a micro-batch split across ranks (tp's sequence shards,
// cp's chunks): which slots an expert drops depends on every rank's router
// weights, so each rank gathers the micro-batch's choices (topk expert and
// weight of every row, over tp then cp), puts them in the one-rank row
// order (cp's chunks back at their positions), applies the one-rank drop
// rule to the whole micro-batch on the host (ops.hpp's moe_dispatch_plan,
// the CPU kernel) and uploads the plan of its own rows' kept slots: one
// gather and one host round trip per block, the same drops as one rank.
//
// Load balancing (transformers' load_balancing_loss_func with the router
// logits of every layer concatenated): per micro-batch, the tokens choosing
// each expert (counted over the k slots) and the sum of each expert's probs,
// summed over all layers and over the ranks holding the micro-batch's other
// rows (tp, cp), give aux = E sum_e (count_e / LN)(prob_e / LN), N the
// micro-batch's tokens, L the layers. Its gradient reaches every router as
// d(aux)/d(prob) = E count_e / (LN)^2 for every row, so the backward needs
// the counts of the whole micro-batch: finish_micro_batch pools them before
// any backward.
//
// Pipeline stages (parallel.pp > 1) hold some of the layers each, so the
// sums run along the pipeline with the micro-batch: a stage adds the
// earlier stages' partial sums (router_partial_in, received with its input)
// to its own and passes them on (router_partial_out, sent with its output);
// the last stage, holding every layer's, forms the aux loss and sends the
// totals back with the gradient (router_totals), and a stage before it forms
// its routers' gradient from them at its first backward. Only the last
// stage adds the micro-batch's aux loss to the step's. The router z-loss (model.router_z_loss_coef, ST-MoE; Megatron's
// sum over layers of the mean over rows of logsumexp(logits)^2) enters the
// gradient only; it is not reported.
//
// Expert parallelism (an ep group of P > 1 ranks, parallel.ep): this rank
// runs only experts [q E/P, (q+1) E/P) of every block, q its ep rank. The
// sorted rows go to the ranks holding their experts and the outputs come
// back (ExpertExchange: all-to-all-v, counts first), so the combine, the
// router and everything outside the experts are as without ep. The store
// holds only this rank's experts (ParameterLayout's expert units), so the
// Weights are theirs alone; each expert's gradient is its tokens' from every
// rank of the group, computed once, on its owner, then summed over the ranks
// holding the same experts (the store's edp reduction).
//
// Buffers: each block's routing, dispatch plan and expert activations are
// kept for its backward (the `slots` of the model's chunk); the gradients'
// buffers are shared by the blocks. Under ep the experts' activations hold
// P R k rows (a dropless layer's worst case: every row of the group routed
// to this rank's experts), or P E/P capacity rows under a capacity factor:
// ep costs activation memory (expert_rows) and saves the other experts'
// weights, gradients and optimizer state.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/parallelize/moe_step_stats.hpp"
#include "trainer/parallelize/activation_placement.hpp"
#include "trainer/parallelize/context_parallel.hpp"
#include "trainer/parallelize/expert_exchange.hpp"
#include "trainer/parallelize/tp_mappings.hpp"

namespace gt {

class MixtureOfExperts {
 public:
  // The weights of one block as the GEMMs read them: gate (E, C) fp32 (the
  // router runs in fp32), w13 (El, 2F, C) and w2 (El, C, F) in the GEMMs'
  // dtype, El = E / ep: this ep rank's experts [rank * El, (rank + 1) * El),
  // the only ones it stores (every expert at ep = 1). Their gradients: fp32, same shapes, accumulated. selection_bias
  // (E) fp32, may be empty: added to the probs for the top-k choice only
  // (aux-loss-free balancing, RouterBias); no gradient.
  struct Weights {
    TensorView gate, w13, w2;
    TensorView selection_bias = {};
  };

  // max_rows: this rank's rows of a micro-batch at most (R); slots: blocks
  // kept at once (the chunk's); act: the activations' dtype; cast_weights:
  // the experts' weights come in fp32 while act is bf16 (a store without a
  // bf16 copy), so each GEMM's weights are rounded into a scratch first.
  MixtureOfExperts(Ops& ops, const ModelConfig& cfg, int64_t max_rows, int slots, DType act,
                   bool cast_weights, const TensorParallelGroup& tp,
                   const ContextParallelGroup& cp, const ExpertParallelGroup& ep = {});
  // What that constructor allocates, in bytes (the planner's memory model
  // sums this; the constructor checks it allocated exactly this); ep: the
  // ep group's size; split: the ranks a micro-batch's rows are split over
  // (tp x cp).
  static int64_t planned_bytes(const ModelConfig& cfg, int64_t max_rows, int slots, DType act,
                               bool cast_weights, int ep = 1, int split = 1);

  // Before a micro-batch's first block: forget the last one's statistics.
  // B sequences of T_local rows each on this cp rank (the rows the tp ranks
  // split: B T_local = R tp), for a capacity over a split micro-batch.
  void begin_micro_batch(int B = 0, int T_local = 0);
  // Block `slot`'s forward over this rank's rows x (R, C), into out (R, C)
  // (assigned, act dtype). Placement: rowwise (x's rows, out's rows).
  Activation forward(int slot, const Activation& x, TensorView out, const Weights& w);
  // Where this rank's blocks sit in a pipeline: whether stages before and
  // after it hold other blocks of the model (both false without pp).
  struct StageNeighbours {
    bool earlier;  // router_partial_in holds their sums of this micro-batch
    bool later;    // they add theirs; router_totals comes back before the backward
  };
  static constexpr StageNeighbours kOneStage{false, false};
  // After the micro-batch's last block: pools the router statistics over
  // the micro-batch's ranks, forms its aux loss (added to the step's sum)
  // and, with grad_scale > 0, the routers' share of its gradient:
  // grad_scale is d(loss)/d(one token's cross-entropy), tokens the
  // micro-batch's N (every rank's rows, B T cp). With later stages the
  // loss and gradient wait for router_totals (formed at the first backward).
  void finish_micro_batch(float grad_scale, int64_t tokens, StageNeighbours stages = kOneStage);
  // The pipeline's messages (fp32 (2, E) [counts | prob sums]): the earlier
  // stages' partial sums (received), the partial sums through this stage
  // (sent on), and every layer's totals (the last stage's, sent back).
  TensorView router_partial_in() const { return f32(upstream_, {2 * int64_t(E_)}); }
  TensorView router_partial_out() const { return f32(pooled_, {2 * int64_t(E_)}); }
  TensorView router_totals() const { return f32(totals_, {2 * int64_t(E_)}); }
  // Block `slot`'s backward: dout (R, C) = d(out); dx (R, C) fp32 ASSIGNED
  // d(x); gradients accumulate into dw (fp32 views shaped as Weights).
  Activation backward(int slot, const Activation& dout, TensorView dx, const Activation& x,
                      const Weights& w, const Weights& dw);

  // What the step's micro-batches routed, read back once (the metrics):
  // counts per block slot, pooled over tp and cp; dropped: this rank's.
  // first_layer is the caller's to set. Forgets them.
  MoeStepStats take_step_stats();

  int64_t bytes() const;  // every buffer allocated here
  // Rows the experts' GEMM buffers hold for max_rows rows of a rank: N = R k
  // at ep = 1; under ep the most this rank's experts can receive, P N
  // (every row of the group routed to them) or, with a capacity factor,
  // P x E/P x the capacity of the micro-batch (R x split tokens, split the
  // tp x cp ranks sharing it) if that is less.
  static int64_t expert_rows(const ModelConfig& cfg, int64_t max_rows, int ep, int split = 1);
  // The expert capacity for a micro-batch of `tokens` (0: dropless).
  int64_t capacity(int64_t tokens) const;

 private:
  struct Block {  // one block's forward state, kept for its backward
    Buffer probs, lse, topk_expert, topk_weight, positions, offsets;
    // (N, C), (L, 2F), (L, F), (N, C) in act dtype; L = N without ep, P N with
    Buffer xs, gu, h, y;
    Buffer xl;               // ep only: (L, C) the rows this rank's experts received
    int64_t rows = 0;        // R of the forward that filled it
    int64_t local_rows = 0;  // ep only: the rows received (M <= L)
  };
  // Throws unless `w` holds this rank's El experts (Weights' contract).
  void check_local_experts(const Weights& w) const;
  // A capacity over a micro-batch split across tp x cp ranks (header): the
  // plan of this rank's R rows into positions (R, k) and offsets (E + 1),
  // from every rank's te, tw (R, k); returns the micro-batch's dropped slots.
  int64_t split_capacity_plan(const TensorView& positions, const TensorView& offsets,
                              const TensorView& te, const TensorView& tw, int64_t R,
                              int64_t capacity);
  // The experts' part of forward/backward under ep (exchange_ set).
  void experts_forward_ep(int slot, Block& b, const Weights& gw);
  void experts_backward_ep(int slot, Block& b, const Weights& gw, const Weights& dw,
                           const TensorView& dy, const TensorView& dxs);
  TensorView f32(const Buffer& b, std::initializer_list<int64_t> shape) const;
  TensorView i32(const Buffer& b, std::initializer_list<int64_t> shape) const;
  TensorView act(const Buffer& b, std::initializer_list<int64_t> shape) const;
  Buffer alloc(int64_t elems, DType dtype);
  void all_reduce(const TensorView& x);  // sum over tp, then over cp
  // The aux loss into aux_ and, training, its gradient per prob into dprob_,
  // from every layer's (2, E) sums of the micro-batch.
  void form_load_balance(const TensorView& sums);
  // w as the grouped GEMMs take it: in act dtype (rounded into the scratch
  // when the store gave fp32).
  Weights gemm_weights(const Weights& w);

  Ops& ops_;
  ModelConfig cfg_;
  int64_t max_rows_;
  int slots_;
  DType act_;
  TensorParallelGroup tp_;
  ContextParallelGroup cp_;
  int C_, F_, E_, k_;
  std::vector<Block> blocks_;
  // Shared: the router's fp32 input and logits, the micro-batch's statistics
  // (slots, 2, E) [counts | prob sums] and their pooled (2, E), the aux loss
  // and its gradient per prob, the step's sums.
  Buffer x32_, logits_, stats_, pooled_, aux_, dprob_, aux_sum_, step_counts_;
  // Pipeline stages: the earlier stages' (2, E) sums, every layer's totals.
  Buffer upstream_, totals_;
  // The gradients' buffers, shared by the blocks.
  Buffer dlogits_, dweight_, dy_, dh_, dgu_, dxs_, dx_act_, dx_router_;
  Buffer w13_cast_, w2_cast_;  // cast_weights: (El, 2F, C), (El, C, F) in act
  // A capacity over a split micro-batch: every rank's [te bits | tw], each
  // half (split R, k) at most, gathered over tp, then over cp; the host's
  // copies and plan.
  Buffer gather_tp_, gather_all_;
  std::vector<float> host_gathered_, host_tw_;
  std::vector<int32_t> host_te_, host_pos_, host_off_, host_local_pos_;
  int B_ = 0, T_local_ = 0;
  std::unique_ptr<ExpertExchange> exchange_;  // ep > 1 only
  // ep only, (L, C) act: the local experts' outputs in the forward, their
  // output gradients then input gradients in the backward.
  Buffer local_scratch_;
  int64_t L_ = 0;  // rows the expert GEMMs' buffers hold: N, or P N under ep
  bool stats_pending_ = false;  // finish_micro_batch formed dprob_ for this micro-batch
  bool aux_grad_ = false;       // dprob_ holds a gradient to apply
  bool awaiting_totals_ = false;  // a stage before the last: dprob_ waits for router_totals
  float z_grad_ = 0;
  float grad_scale_ = 0;  // finish_micro_batch's, for a gradient formed later
  int64_t tokens_ = 0;
  int micro_batches_ = 0;
  int64_t dropped_ = 0;        // the step's training micro-batches'
  int64_t micro_dropped_ = 0;  // this micro-batch's so far
  int64_t bytes_ = 0;
  std::vector<int32_t> host_offsets_;
};

}  // namespace gt
