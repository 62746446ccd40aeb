#include "trainer/parallelize/mixture_of_experts.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/core/error.hpp"
#include "kernels/cpu/moe_kernels.hpp"

namespace gt {

MixtureOfExperts::MixtureOfExperts(Ops& ops, const ModelConfig& cfg, int64_t max_rows, int slots,
                                   DType act, bool cast_weights, const TensorParallelGroup& tp,
                                   const ContextParallelGroup& cp, const ExpertParallelGroup& ep)
    : ops_(ops),
      cfg_(cfg),
      max_rows_(max_rows),
      slots_(slots),
      act_(act),
      tp_(tp),
      cp_(cp),
      C_(cfg.n_embd),
      F_(cfg.ffn_width()),
      E_(cfg.n_experts),
      k_(cfg.experts_per_token) {
  GT_CHECK(cfg.moe(), "MixtureOfExperts on model.arch=", to_string(cfg.arch));
  GT_CHECK(slots >= 0 && max_rows >= 1, "slots ", slots, " rows ", max_rows);
  const int64_t R = max_rows, N = R * k_, C = C_, F = F_, E = E_, k = k_;
  const int64_t L = expert_rows(cfg, R, ep.size(), tp.size() * cp.size());
  L_ = L;
  blocks_.resize(static_cast<size_t>(slots));
  for (Block& b : blocks_) {
    b.probs = alloc(R * E, DType::f32);
    b.lse = alloc(R, DType::f32);
    b.topk_expert = alloc(R * k, DType::i32);
    b.topk_weight = alloc(R * k, DType::f32);
    b.positions = alloc(R * k, DType::i32);
    b.offsets = alloc(E + 1, DType::i32);
    b.xs = alloc(N * C, act);
    b.gu = alloc(L * 2 * F, act);
    b.h = alloc(L * F, act);
    b.y = alloc(N * C, act);
    if (ep.size() > 1) b.xl = alloc(L * C, act);
  }
  if (act != DType::f32) x32_ = alloc(R * C, DType::f32);
  logits_ = alloc(R * E, DType::f32);
  stats_ = alloc(int64_t(std::max(slots, 1)) * 2 * E, DType::f32);
  pooled_ = alloc(2 * E, DType::f32);
  aux_ = alloc(1, DType::f32);
  dprob_ = alloc(E, DType::f32);
  aux_sum_ = alloc(1, DType::f32);
  step_counts_ = alloc(int64_t(std::max(slots, 1)) * E, DType::f32);
  upstream_ = alloc(2 * E, DType::f32);
  totals_ = alloc(2 * E, DType::f32);
  dlogits_ = alloc(R * E, DType::f32);
  dweight_ = alloc(R * k, DType::f32);
  dy_ = alloc(N * C, act);
  dh_ = alloc(L * F, act);
  dgu_ = alloc(L * 2 * F, act);
  dxs_ = alloc(N * C, act);
  dx_act_ = alloc(R * C, act);
  dx_router_ = alloc(R * C, DType::f32);
  if (cast_weights && act != DType::f32) {  // this rank's experts only
    const int64_t El = E / ep.size();
    w13_cast_ = alloc(El * 2 * F * C, act);
    w2_cast_ = alloc(El * C * F, act);
  }
  if (ep.size() > 1) {
    local_scratch_ = alloc(L * C, act);
    exchange_ = std::make_unique<ExpertExchange>(ops, ep, E_, L, C, act, std::max(slots, 1));
    bytes_ += exchange_->bytes();
  }
  const int split = tp.size() * cp.size();
  if (cfg.capacity_factor > 0 && split > 1) {
    gather_tp_ = alloc(split * R * 2 * k, DType::f32);
    gather_all_ = alloc(split * R * 2 * k, DType::f32);
  }
  host_offsets_.resize(static_cast<size_t>(E + 1));
  const int64_t planned = planned_bytes(cfg, max_rows, slots, act, cast_weights, ep.size(), split);
  GT_CHECK(bytes_ == planned, "MixtureOfExperts allocated ", bytes_, " bytes, its plan says ",
           planned);
}

int64_t MixtureOfExperts::planned_bytes(const ModelConfig& cfg, int64_t max_rows, int slots,
                                        DType act, bool cast_weights, int ep, int split) {
  const int64_t R = max_rows, k = cfg.experts_per_token, N = R * k, C = cfg.n_embd,
                F = cfg.ffn_width(), E = cfg.n_experts, S = std::max(slots, 1),
                L = expert_rows(cfg, max_rows, ep, split);
  const int64_t a = static_cast<int64_t>(dtype_size(act)), f = 4, i = 4;
  // Every buffer at least one element (alloc's rule).
  auto b = [](int64_t elems, int64_t size) { return std::max<int64_t>(elems, 1) * size; };
  const int64_t block = b(R * E, f) + b(R, f) + b(R * k, i) + b(R * k, f) + b(R * k, i) +
                        b(E + 1, i) + b(N * C, a) + b(L * 2 * F, a) + b(L * F, a) + b(N * C, a) +
                        (ep > 1 ? b(L * C, a) : 0);
  int64_t n = int64_t(slots) * block;
  if (act != DType::f32) n += b(R * C, f);
  n += b(R * E, f) + b(S * 2 * E, f) + b(2 * E, f) + b(1, f) + b(E, f) + b(1, f) + b(S * E, f) +
       2 * b(2 * E, f);
  n += b(R * E, f) + b(R * k, f) + b(N * C, a) + b(L * F, a) + b(L * 2 * F, a) + b(N * C, a) +
       b(R * C, a) + b(R * C, f);
  if (cast_weights && act != DType::f32) n += b(E / ep * 2 * F * C, a) + b(E / ep * C * F, a);
  if (ep > 1)
    n += b(L * C, a) + ExpertExchange::planned_bytes(ep, int(E), L, C, act, std::max(slots, 1));
  if (cfg.capacity_factor > 0 && split > 1) n += 2 * b(split * R * 2 * k, f);
  return n;
}

MixtureOfExperts::Weights MixtureOfExperts::gemm_weights(const Weights& w) {
  check_local_experts(w);
  if (w.w13.dtype == act_) return w;
  GT_CHECK(w13_cast_.bytes() > 0, "MoE expert weights in ", dtype_name(w.w13.dtype),
           " for ", dtype_name(act_), " activations without cast_weights");
  Weights c = w;
  const int64_t El = w.w13.shape[0];
  c.w13 = act(w13_cast_, {El, 2 * int64_t(F_), C_});
  c.w2 = act(w2_cast_, {El, int64_t(C_), F_});
  ops_.cast(c.w13, w.w13);
  ops_.cast(c.w2, w.w2);
  return c;
}

Buffer MixtureOfExperts::alloc(int64_t elems, DType dtype) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(elems, 1)) * dtype_size(dtype);
  bytes_ += static_cast<int64_t>(bytes);
  return ops_.allocate(bytes);
}

TensorView MixtureOfExperts::f32(const Buffer& b, std::initializer_list<int64_t> shape) const {
  return make_view(b.data(), DType::f32, ops_.device(), shape);
}
TensorView MixtureOfExperts::i32(const Buffer& b, std::initializer_list<int64_t> shape) const {
  return make_view(b.data(), DType::i32, ops_.device(), shape);
}
TensorView MixtureOfExperts::act(const Buffer& b, std::initializer_list<int64_t> shape) const {
  return make_view(b.data(), act_, ops_.device(), shape);
}

int64_t MixtureOfExperts::bytes() const { return bytes_; }

int64_t MixtureOfExperts::expert_rows(const ModelConfig& cfg, int64_t max_rows, int ep,
                                      int split) {
  const int64_t N = max_rows * cfg.experts_per_token;
  if (ep <= 1) return N;
  int64_t rows = N * ep;
  // A capacity caps what each rank sends each expert: at most the capacity
  // of the micro-batch, whose tokens are split over `split` ranks.
  if (cfg.capacity_factor > 0) {
    const auto cap = static_cast<int64_t>(std::ceil(
        cfg.capacity_factor * cfg.experts_per_token *
        static_cast<double>(max_rows * std::max(split, 1)) / cfg.n_experts));
    rows = std::min(rows, int64_t(ep) * (cfg.n_experts / ep) * cap);
  }
  return rows;
}

int64_t MixtureOfExperts::capacity(int64_t tokens) const {
  if (!(cfg_.capacity_factor > 0)) return 0;
  return static_cast<int64_t>(
      std::ceil(cfg_.capacity_factor * k_ * static_cast<double>(tokens) / E_));
}

void MixtureOfExperts::all_reduce(const TensorView& x) {
  if (tp_.size() > 1) tp_.comm->all_reduce_sum(x.f32(), x.numel()).wait();
  if (cp_.size() > 1) cp_.comm->all_reduce_sum(x.f32(), x.numel()).wait();
}

void MixtureOfExperts::begin_micro_batch(int B, int T_local) {
  B_ = B;
  T_local_ = T_local;
  micro_dropped_ = 0;
  ops_.zero(f32(stats_, {std::max(slots_, 1) * 2 * int64_t(E_)}));
  stats_pending_ = false;
  aux_grad_ = false;
  awaiting_totals_ = false;
  z_grad_ = 0;
}

Activation MixtureOfExperts::forward(int slot, const Activation& x, TensorView out,
                                     const Weights& w) {
  GT_CHECK(slot >= 0 && slot < slots_, "MoE block slot ", slot, " of ", slots_);
  const int64_t R = x.view.shape[0], N = R * k_, C = C_, F = F_, E = E_, k = k_;
  GT_CHECK(R <= max_rows_, "MoE rows ", R, " > ", max_rows_);
  Block& b = blocks_[static_cast<size_t>(slot)];
  b.rows = R;
  const Weights gw = gemm_weights(w);
  // The router in fp32 (HF computes its softmax in fp32; the issue asks for
  // the logits too): the bf16 rows widened exactly.
  TensorView x32 = x.view;
  if (act_ != DType::f32) {
    x32 = f32(x32_, {R, C});
    ops_.cast(x32, x.view);
  }
  const TensorView logits = f32(logits_, {R, E});
  ops_.matmul_forward(logits, x32, w.gate, TensorView{});
  const TensorView probs = f32(b.probs, {R, E}), lse = f32(b.lse, {R});
  const TensorView te = i32(b.topk_expert, {R, k}), tw = f32(b.topk_weight, {R, k});
  ops_.moe_router_forward(probs, lse, te, tw, logits, w.selection_bias);
  const int64_t s2 = int64_t(slot) * 2 * E;
  ops_.moe_router_stats(make_view(static_cast<float*>(stats_.data()) + s2, DType::f32,
                                  ops_.device(), {E}),
                        make_view(static_cast<float*>(stats_.data()) + s2 + E, DType::f32,
                                  ops_.device(), {E}),
                        probs, te);
  // Every rank's rows of the micro-batch: R on each of tp x cp ranks.
  const int64_t cap = capacity(R * tp_.size() * cp_.size());
  const TensorView pos = i32(b.positions, {R, k}), off = i32(b.offsets, {E + 1});
  const bool split = cap > 0 && tp_.size() * cp_.size() > 1;
  int64_t split_dropped = 0;
  if (split)
    split_dropped = split_capacity_plan(pos, off, te, tw, R, cap);
  else
    ops_.moe_dispatch_plan(pos, off, te, tw, cap);
  const TensorView xs = act(b.xs, {N, C}), gu = act(b.gu, {N, 2 * F});
  const TensorView h = act(b.h, {N, F}), y = act(b.y, {N, C});
  ops_.moe_permute(xs, x.view, pos);
  if (exchange_) {
    experts_forward_ep(slot, b, gw);
  } else {
    ops_.grouped_matmul_forward(gu, xs, gw.w13, off);
    // Rows past the kept ones hold stale (finite) values the down GEMM never
    // reads: SwiGLU over all N rows costs less than a host read of the count.
    ops_.swiglu_forward(h, gu);
    ops_.grouped_matmul_forward(y, h, gw.w2, off);
  }
  ops_.moe_combine_forward(out, y, pos, tw);
  if (split) {  // the micro-batch's, the same on each of its ranks
    micro_dropped_ += split_dropped;
  } else if (cap > 0) {  // how many slots the capacity dropped: the exchange read it already
    const int64_t kept = exchange_ ? exchange_->sent(slot) : [&] {
      ops_.download(host_offsets_.data(), off);  // the one host read without ep
      return int64_t(host_offsets_[static_cast<size_t>(E)]);
    }();
    micro_dropped_ += N - kept;
  }
  return rowwise(out, x, "block_sparse_moe");
}

void MixtureOfExperts::finish_micro_batch(float grad_scale, int64_t tokens,
                                          StageNeighbours stages) {
  const int64_t E = E_, S = std::max(slots_, 1);
  // Every rank holding rows of this micro-batch adds its counts and probs.
  const TensorView stats = f32(stats_, {S * 2 * E});
  all_reduce(stats);
  const TensorView sums = router_partial_out();
  ops_.zero(sums);
  float* st = static_cast<float*>(stats_.data());
  for (int s = 0; s < slots_; ++s)
    ops_.accumulate(sums, make_view(st + s * 2 * E, DType::f32, ops_.device(), {2 * E}));
  const bool training = grad_scale > 0;
  // (The pipeline sends the earlier stages' sums in training only.)
  if (stages.earlier && training) ops_.accumulate(sums, router_partial_in());
  grad_scale_ = grad_scale;
  tokens_ = tokens;
  // z-loss = coef_z x sum over layers of the mean over the N tokens of lse^2:
  // d/d(lse_t^2) = coef_z / N per micro-batch, times 1 / (micro-batches x
  // data ranks): coef_z x grad_scale. Each layer's own: no stage waits for it.
  z_grad_ = training ? static_cast<float>(cfg_.router_z_loss_coef) * grad_scale : 0.f;
  stats_pending_ = true;
  aux_grad_ = false;
  awaiting_totals_ = training && stages.later;
  if (training) {  // the step's metrics (an evaluation's forwards are not the step's)
    dropped_ += micro_dropped_;
    for (int s = 0; s < slots_; ++s)
      ops_.accumulate(make_view(static_cast<float*>(step_counts_.data()) + s * E, DType::f32,
                                ops_.device(), {E}),
                      make_view(st + s * 2 * E, DType::f32, ops_.device(), {E}));
  }
  if (stages.later) return;  // the sums go on to the next stage; the totals come back
  form_load_balance(sums);
  if (!training) return;
  if (stages.earlier) ops_.copy(router_totals(), sums);  // sent back with the gradient
  ops_.accumulate(f32(aux_sum_, {1}), f32(aux_, {1}));
  ++micro_batches_;
}

void MixtureOfExperts::form_load_balance(const TensorView& sums) {
  const int64_t E = E_;
  const double rows = static_cast<double>(cfg_.n_layer) * static_cast<double>(tokens_);
  const bool training = grad_scale_ > 0;
  const float coef = static_cast<float>(cfg_.router_aux_loss_coef);
  // d(loss)/d(aux) of this micro-batch: the loss is the mean over the
  // step's micro-batches (and data ranks) of CE + coef aux, and grad_scale
  // = 1 / (tokens x micro-batches x data ranks).
  const float grad_coef = training ? coef * grad_scale_ * static_cast<float>(tokens_) : 0.f;
  const auto* s = static_cast<const float*>(sums.data);
  ops_.moe_load_balance(f32(aux_, {1}), f32(dprob_, {E}),
                        make_view(const_cast<float*>(s), DType::f32, ops_.device(), {E}),
                        make_view(const_cast<float*>(s) + E, DType::f32, ops_.device(), {E}),
                        rows, grad_coef);
  aux_grad_ = training && coef > 0;
}

Activation MixtureOfExperts::backward(int slot, const Activation& dout, TensorView dx,
                                      const Activation& x, const Weights& w, const Weights& dw) {
  GT_CHECK(slot >= 0 && slot < slots_, "MoE block slot ", slot, " of ", slots_);
  GT_CHECK(stats_pending_, "MoE backward before finish_micro_batch");
  if (awaiting_totals_) {  // a stage before the last: the totals came with d(output)
    form_load_balance(router_totals());
    awaiting_totals_ = false;
  }
  Block& b = blocks_[static_cast<size_t>(slot)];
  const int64_t R = b.rows, N = R * k_, C = C_, F = F_, E = E_, k = k_;
  const Weights gw = gemm_weights(w);
  check_local_experts(dw);
  const TensorView pos = i32(b.positions, {R, k}), off = i32(b.offsets, {E + 1});
  const TensorView tw = f32(b.topk_weight, {R, k}), dtw = f32(dweight_, {R, k});
  const TensorView y = act(b.y, {N, C}), dy = act(dy_, {N, C});
  ops_.moe_combine_backward(dy, dtw, dout.view, y, pos, tw);
  const TensorView dxs = act(dxs_, {N, C});
  if (exchange_) {
    experts_backward_ep(slot, b, gw, dw, dy, dxs);
  } else {
    const TensorView h = act(b.h, {N, F}), dh = act(dh_, {N, F});
    ops_.grouped_matmul_backward(dh, dw.w2, dy, h, gw.w2, off);
    const TensorView gu = act(b.gu, {N, 2 * F}), dgu = act(dgu_, {N, 2 * F});
    ops_.swiglu_backward(dgu, dh, gu);
    const TensorView xs = act(b.xs, {N, C});
    ops_.grouped_matmul_backward(dxs, dw.w13, dgu, xs, gw.w13, off);
  }
  // d(x) through the dispatch (act dtype) and through the router (fp32).
  const TensorView dx_act = act_ == DType::f32 ? dx : act(dx_act_, {R, C});
  ops_.moe_permute_backward(dx_act, dxs, pos);
  if (act_ != DType::f32) ops_.cast(dx, dx_act);
  const TensorView dlogits = f32(dlogits_, {R, E});
  ops_.moe_router_backward(dlogits, dtw, f32(b.probs, {R, E}), f32(b.lse, {R}),
                           i32(b.topk_expert, {R, k}), tw,
                           aux_grad_ ? f32(dprob_, {E}) : TensorView{}, z_grad_);
  TensorView x32 = x.view;
  if (act_ != DType::f32) {
    x32 = f32(x32_, {R, C});
    ops_.cast(x32, x.view);
  }
  const TensorView dx_router = f32(dx_router_, {R, C});
  ops_.matmul_backward(dx_router, dw.gate, TensorView{}, dlogits, x32, w.gate);
  ops_.accumulate(dx, dx_router);
  return rowwise(dx, dout, "d(block_sparse_moe)");
}

int64_t MixtureOfExperts::split_capacity_plan(const TensorView& positions,
                                              const TensorView& offsets, const TensorView& te,
                                              const TensorView& tw, int64_t R, int64_t capacity) {
  const int64_t k = k_, E = E_, P = tp_.size(), Q = cp_.size();
  GT_CHECK(B_ > 0 && T_local_ > 0 && int64_t(B_) * T_local_ == R * P,
           "MoE capacity over split rows: ", R, " rows x tp ", P, " for B ", B_, " x T ",
           T_local_, " (begin_micro_batch(B, T_local) first)");
  // Every rank's choices: the experts' int32 bits and the weights, each
  // gathered over tp (rank order: the cp rank's rows in order), then over cp;
  // [experts | weights] halves of (P Q R, k) each, rank-major.
  const int64_t Rg = Q * P * R;  // the micro-batch's rows
  float* tp_out = static_cast<float*>(gather_tp_.data());
  float* all = static_cast<float*>(gather_all_.data());
  const float* te_src = static_cast<const float*>(te.data);
  const float* tw_src = tw.f32();
  if (P > 1) {
    CommHandle a = tp_.comm->all_gather(te_src, tp_out, R * k);
    CommHandle b = tp_.comm->all_gather(tw_src, tp_out + P * R * k, R * k);
    a.wait();
    b.wait();
    te_src = tp_out;
    tw_src = tp_out + P * R * k;
  }
  if (Q > 1) {
    CommHandle a = cp_.comm->all_gather(te_src, all, P * R * k);
    CommHandle b = cp_.comm->all_gather(tw_src, all + Rg * k, P * R * k);
    a.wait();
    b.wait();
    te_src = all;
    tw_src = all + Rg * k;
  }
  host_gathered_.resize(static_cast<size_t>(2 * Rg * k));
  ops_.download(host_gathered_.data(),
                make_view(const_cast<float*>(te_src), DType::f32, ops_.device(), {Rg * k}));
  ops_.download(host_gathered_.data() + Rg * k,
                make_view(const_cast<float*>(tw_src), DType::f32, ops_.device(), {Rg * k}));
  // The one-rank row order: cp rank c's local row rho = b T_local + tau is
  // row b T + position_c(tau) of the micro-batch.
  const int T = T_local_ * int(Q);
  const SequenceChunks chunks(T, int(Q), cp_.load_balance);
  auto global_row = [&](int64_t c, int64_t rho) {
    const int64_t b = rho / T_local_, tau = rho % T_local_;
    return b * T + (Q > 1 ? chunks.position(int(c), int(tau)) : tau);
  };
  host_te_.assign(static_cast<size_t>(Rg * k), 0);
  host_tw_.assign(static_cast<size_t>(Rg * k), 0.f);
  for (int64_t c = 0; c < Q; ++c)
    for (int64_t rho = 0; rho < P * R; ++rho) {
      const int64_t at = (c * P * R + rho) * k, g = global_row(c, rho);
      std::memcpy(host_te_.data() + g * k, host_gathered_.data() + at,
                  static_cast<size_t>(k) * sizeof(int32_t));
      std::memcpy(host_tw_.data() + g * k, host_gathered_.data() + Rg * k + at,
                  static_cast<size_t>(k) * sizeof(float));
    }
  // The one-rank plan of the whole micro-batch, by the CPU kernel's rule.
  host_pos_.resize(static_cast<size_t>(Rg * k));
  host_off_.resize(static_cast<size_t>(E + 1));
  auto host = [](void* p, DType d, std::initializer_list<int64_t> shape) {
    return make_view(p, d, Device::cpu, shape);
  };
  cpu::moe_dispatch_plan(host(host_pos_.data(), DType::i32, {Rg, k}),
                         host(host_off_.data(), DType::i32, {E + 1}),
                         host(host_te_.data(), DType::i32, {Rg, k}),
                         host(host_tw_.data(), DType::f32, {Rg, k}), capacity);
  // This rank's kept slots, grouped by expert in slot order (the kernel's
  // layout for its own rows).
  const int64_t me_c = cp_.rank(), me_t = tp_.rank();
  std::vector<int64_t> count(static_cast<size_t>(E + 1), 0);
  host_local_pos_.assign(static_cast<size_t>(R * k), -1);
  auto kept = [&](int64_t i, int64_t j) {
    return host_pos_[static_cast<size_t>(global_row(me_c, me_t * R + i) * k + j)] >= 0;
  };
  auto expert = [&](int64_t i, int64_t j) {
    return host_te_[static_cast<size_t>(global_row(me_c, me_t * R + i) * k + j)];
  };
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < k; ++j)
      if (kept(i, j)) ++count[static_cast<size_t>(expert(i, j)) + 1];
  for (int64_t e = 0; e < E; ++e) count[e + 1] += count[e];
  host_offsets_.assign(count.begin(), count.end());
  std::vector<int64_t> cursor(count.begin(), count.end() - 1);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < k; ++j)
      if (kept(i, j))
        host_local_pos_[static_cast<size_t>(i * k + j)] =
            static_cast<int32_t>(cursor[static_cast<size_t>(expert(i, j))]++);
  ops_.upload(positions, host_local_pos_.data());
  ops_.upload(offsets, host_offsets_.data());
  return Rg * k - host_off_[static_cast<size_t>(E)];
}

void MixtureOfExperts::check_local_experts(const Weights& w) const {
  const int64_t El = exchange_ ? exchange_->local_experts() : E_;
  GT_CHECK(w.w13.ndim == 3 && w.w13.shape[0] == El && w.w2.ndim == 3 && w.w2.shape[0] == El,
           "MixtureOfExperts: expert weights ", w.w13.shape_str(), " and ", w.w2.shape_str(),
           " for this rank's ", El, " experts");
}

void MixtureOfExperts::experts_forward_ep(int slot, Block& b, const Weights& gw) {
  const int64_t N = b.rows * k_, C = C_, F = F_;
  const TensorView off = i32(b.offsets, {int64_t(E_) + 1});
  // Collective over the ep group (every rank, even one that receives nothing).
  const int64_t M = exchange_->plan(slot, off);
  b.local_rows = M;
  const TensorView xl = act(b.xl, {L_, C});
  exchange_->dispatch(slot, act(b.xs, {N, C}), xl);
  const TensorView yl = act(local_scratch_, {L_, C});
  if (M > 0) {
    const TensorView lo = exchange_->local_offsets(slot);
    const TensorView xm = act(b.xl, {M, C}), gu = act(b.gu, {M, 2 * F}), h = act(b.h, {M, F});
    ops_.grouped_matmul_forward(gu, xm, gw.w13, lo);
    ops_.swiglu_forward(h, gu);
    ops_.grouped_matmul_forward(act(local_scratch_, {M, C}), h, gw.w2, lo);
  }
  exchange_->combine(slot, yl, act(b.y, {N, C}));
}

void MixtureOfExperts::experts_backward_ep(int slot, Block& b, const Weights& gw,
                                           const Weights& dw, const TensorView& dy,
                                           const TensorView& dxs) {
  const int64_t M = b.local_rows, C = C_, F = F_;
  // d(y) to the experts' ranks, as the forward sent x; d(x) back, as it got y.
  const TensorView scratch = act(local_scratch_, {L_, C});
  exchange_->dispatch(slot, dy, scratch);
  if (M > 0) {
    const TensorView lo = exchange_->local_offsets(slot);
    const TensorView dyl = act(local_scratch_, {M, C});
    const TensorView h = act(b.h, {M, F}), dh = act(dh_, {M, F});
    ops_.grouped_matmul_backward(dh, dw.w2, dyl, h, gw.w2, lo);
    const TensorView gu = act(b.gu, {M, 2 * F}), dgu = act(dgu_, {M, 2 * F});
    ops_.swiglu_backward(dgu, dh, gu);
    // d(xl) overwrites d(yl), read for the last time above.
    ops_.grouped_matmul_backward(dyl, dw.w13, dgu, act(b.xl, {M, C}),
                                 gw.w13, lo);
  }
  exchange_->combine(slot, scratch, dxs);
}

MoeStepStats MixtureOfExperts::take_step_stats() {
  MoeStepStats s;
  s.experts = E_;
  s.micro_batches = micro_batches_;
  s.dropped = dropped_;
  const int64_t S = std::max(slots_, 1), E = E_;
  float aux = 0;
  ops_.download(&aux, f32(aux_sum_, {1}));
  s.aux_sum = aux;
  s.counts.resize(static_cast<size_t>(S * E));
  ops_.download(s.counts.data(), f32(step_counts_, {S * E}));
  s.counts.resize(static_cast<size_t>(int64_t(slots_) * E));
  ops_.zero(f32(aux_sum_, {1}));
  ops_.zero(f32(step_counts_, {S * E}));
  micro_batches_ = 0;
  dropped_ = 0;
  return s;
}

}  // namespace gt
