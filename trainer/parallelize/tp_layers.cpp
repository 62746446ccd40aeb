#include "trainer/parallelize/tp_layers.hpp"

#include "kernels/core/error.hpp"
#include "parallel/collective_matmul.hpp"

namespace gt {

namespace {
// An optional view cut to the same rows as its companions (empty stays empty).
TensorView rows_or_none(const TensorView& t, int64_t row0, int64_t rows) {
  return t.empty() ? t : rows_of(t, row0, rows);
}
}  // namespace

// ---- TpLayerContext ---------------------------------------------------------

TpLayerContext::Scratch TpLayerContext::scratch(int tp, bool overlap, ComputeDType dtype,
                                                int64_t rows, int64_t width) {
  GT_CHECK(tp >= 1 && rows % tp == 0, rows, " rows do not split into parallel.tp=", tp,
           " sequence shards");
  const int64_t Rl = rows / tp;
  Scratch s;
  s.sum_rows = dtype == ComputeDType::bf16 ? Rl * width : 0;
  s.gather_rows = tp > 1 ? rows * width : 0;
  s.ring = tp > 1 ? reduce_scatter_workspace_elems(tp, Rl * width, overlap) : 0;
  s.stats = tp > 1 ? 3 * rows : 0;
  return s;
}

TpLayerContext::TpLayerContext(Ops& ops, TensorParallelGroup group, ComputeDType dtype,
                               const Scratch& scratch, const LinearPrecision::Sizes& precision)
    : ops_(ops),
      maps_(ops, group),
      precision_(ops, dtype, precision),
      sum_rows_(allocate_floats(ops, scratch.sum_rows)),
      gather_rows_(allocate_floats(ops, scratch.gather_rows)),
      ring_(allocate_floats(ops, scratch.ring)),
      stats_(allocate_floats(ops, scratch.stats)) {}

float* TpLayerContext::stats(int64_t rows) {
  GT_CHECK(3 * rows * int64_t(sizeof(float)) <= int64_t(stats_.bytes()), rows,
           " rows exceed the cross-entropy's statistics buffer");
  return stats_.f32();
}

TensorView TpLayerContext::sum_rows(int64_t rows, int64_t cols) {
  GT_CHECK(rows * cols * int64_t(sizeof(float)) <= int64_t(sum_rows_.bytes()), "(", rows, ", ",
           cols, ") fp32 rows do not fit the tensor-parallel sum scratch");
  return make_view(sum_rows_.data(), DType::f32, ops_.device(), {rows, cols});
}

TensorView TpLayerContext::gather_rows(int64_t rows, int64_t cols) {
  GT_CHECK(rows * cols * int64_t(sizeof(float)) <= int64_t(gather_rows_.bytes()), "(", rows, ", ",
           cols, ") fp32 rows do not fit the tensor-parallel gather scratch");
  return make_view(gather_rows_.data(), DType::f32, ops_.device(), {rows, cols});
}

Activation TpLayerContext::stage_for_gather(const Activation& local) {
  const int64_t cols = local.view.numel() / local.view.shape[0];
  const TensorView full = gather_rows(local.view.shape[0] * size(), cols);
  ops_.copy(maps_.own_rows(full), local.view);
  return {full, local.placement, local.name};
}

int64_t TpLayerContext::bytes() const {
  return static_cast<int64_t>(sum_rows_.bytes() + gather_rows_.bytes() + ring_.bytes() +
                              stats_.bytes()) +
         precision_.bytes() + (fp8_ ? fp8_->bytes() : 0);
}

void TpLayerContext::enable_fp8(const Fp8Settings& settings, const ContextParallelGroup& cp,
                                Fp8WeightSource* weights) {
  fp8_ = settings.on() ? std::make_unique<Fp8Linear>(ops_, maps_, settings, cp, weights) : nullptr;
}

void TpLayerContext::gemm_forward(TensorView out, TensorView x, TensorView w, TensorView b,
                                  TensorView gelu_pre) {
  if (gelu_pre.empty()) return ops_.matmul_forward(out, precision_.input(x), w, b);
  ops_.matmul_gelu_forward(out, gelu_pre, precision_.input(x), w, b);
}

void TpLayerContext::gemm_backward(TensorView dx, TensorView dw, TensorView db, TensorView dout,
                                   TensorView x, TensorView w, TensorView gelu_pre) {
  if (gelu_pre.empty())
    return ops_.matmul_backward(dx, dw, db, precision_.grad(dout), precision_.input(x), w);
  ops_.matmul_backward_dgelu(dx, dw, db, precision_.grad(dout), precision_.input(x), w, gelu_pre);
}

// ---- ColumnParallelLinear ---------------------------------------------------

Activation ColumnParallelLinear::forward(const Target& target, Activation& x, TensorView w32,
                                         TensorView b, TensorView gelu_pre, TensorView x_row_amax,
                                         TensorView gelu_row_amax) {
  const TensorView out = target.view;
  // The placement before anything else (gather_from_sequence, which records
  // it, checks it again).
  const std::string layer = name_ + " forward";
  GT_CHECK(gelu_row_amax.empty() || !gelu_pre.empty(), layer,
           ": GELU output row amaxes asked for without a GELU");
  expect_tp(x, AxisPlacement::shard(ActDim::sequence), layer, "input", nullptr);
  if (uses_fp8(w32)) {
    forward_fp8(out, x, w32, b, gelu_pre, x_row_amax, gelu_row_amax, layer);
    return given({out, {AxisPlacement::shard(out_dim_), x.placement.cp}, target.name}, layer,
                 "output", ctx_.placement_log());
  }
  const TensorView w = ctx_.precision().weight(w32);  // once, before the chunks
  const TensorView bias = ctx_.precision().bias(b);
  const TensorView xs = x.view;
  ctx_.maps().gather_from_sequence(
      x,
      [&](int64_t row0, int64_t rows) {
        ctx_.gemm_forward(rows_of(out, row0, rows), rows_of(xs, row0, rows), w, bias,
                          rows_or_none(gelu_pre, row0, rows));
      },
      layer);
  // The next layer asked for the GELU's row amaxes (it runs in fp8 where
  // this one does not): a pass of their own.
  if (!gelu_row_amax.empty()) ctx_.ops().fp8_amax(gelu_row_amax, out, Fp8Reduce::rows);
  return given({out, {AxisPlacement::shard(out_dim_), x.placement.cp}, target.name}, layer,
               "output", ctx_.placement_log());
}

Activation ColumnParallelLinear::backward(const Target& target, TensorView dw, TensorView db,
                                          const Activation& dout, const Activation& x,
                                          TensorView w32, TensorView dout_row_amax) {
  const TensorView dx = target.view;
  const std::string layer = name_ + " backward";
  PlacementLog* log = ctx_.placement_log();
  expect_tp(dout, AxisPlacement::shard(out_dim_), layer, "output gradient", log);
  expect_tp(x, AxisPlacement::replicated(), layer, "input (gathered in forward)", log);
  const std::string& name = target.name;
  if (uses_fp8(w32)) return backward_fp8(dx, dw, db, dout, x, w32, dout_row_amax, name, layer);
  const TensorView w = ctx_.precision().weight(w32);
  if (ctx_.size() == 1) {
    ctx_.gemm_backward(dx, dw, db, dout.view, x.view, w);
    return given({dx, {AxisPlacement::shard(ActDim::sequence), dout.placement.cp}, name}, layer,
                 "input gradient", log);
  }
  return ctx_.maps().reduce_scatter_to_sequence(
      dx,
      [&](int64_t row0, int64_t rows, TensorView partial) {
        ctx_.gemm_backward(partial, dw, db, rows_of(dout.view, row0, rows),
                           rows_of(x.view, row0, rows), w);
      },
      ctx_.ring_workspace(), dout.placement.cp, name, layer);
}

// ---- RowParallelLinear ------------------------------------------------------

Activation RowParallelLinear::forward(const Target& target, const Activation& x, TensorView w32,
                                      TensorView b, TensorView x_row_amax) {
  const std::string layer = name_ + " forward";
  PlacementLog* log = ctx_.placement_log();
  expect_tp(x, AxisPlacement::shard(in_dim_), layer, "input", log);
  const TensorView out = target.view;
  const std::string& name = target.name;
  const bool fp8 = uses_fp8(w32);
  if (ctx_.size() == 1) {
    if (fp8) {
      forward_fp8(out, x, w32, b, x_row_amax, name, layer);
    } else {
      ctx_.gemm_forward(out, x.view, ctx_.precision().weight(w32), ctx_.precision().bias(b));
    }
    return given({out, {AxisPlacement::shard(ActDim::sequence), x.placement.cp}, name}, layer,
                 "output", log);
  }
  const TensorView none;
  // The partial sums are added in fp32; bf16 storage rounds the total once.
  const bool staged = out.dtype != DType::f32;
  const TensorView sum = staged ? ctx_.sum_rows(out.shape[0], out.shape[1]) : out;
  Activation reduced;
  if (fp8) {
    reduced = forward_fp8(sum, x, w32, none, x_row_amax, name, layer);
  } else {
    const TensorView w = ctx_.precision().weight(w32);
    reduced = ctx_.maps().reduce_scatter_to_sequence(
        sum,
        [&](int64_t row0, int64_t rows, TensorView partial) {
          ctx_.gemm_forward(partial, rows_of(x.view, row0, rows), w, none);
        },
        ctx_.ring_workspace(), x.placement.cp, name, layer);
  }
  // The bias once, after the sum (it is replicated on every tp rank); Llama
  // has none.
  if (!b.empty()) ctx_.ops().add_bias(sum, ctx_.precision().bias_as_f32(b));
  if (staged) ctx_.ops().cast(out, sum);
  reduced.view = out;
  return reduced;
}

Activation RowParallelLinear::backward(const Target& target, TensorView dw, TensorView db,
                                       const Activation& dout, const Activation& x,
                                       TensorView w32, const Activation& gelu_pre,
                                       TensorView dout_row_amax, TensorView dx_row_amax) {
  const TensorView dx = target.view;
  const std::string layer = name_ + " backward";
  PlacementLog* log = ctx_.placement_log();
  expect_tp(dout, AxisPlacement::shard(ActDim::sequence), layer, "output gradient", log);
  expect_tp(x, AxisPlacement::shard(in_dim_), layer, "input", log);
  if (!gelu_pre.view.empty())
    expect_tp(gelu_pre, AxisPlacement::shard(in_dim_), layer, "GELU input", log);
  GT_CHECK(dx_row_amax.empty() || !gelu_pre.view.empty(), layer,
           ": input-gradient row amaxes asked for without a GELU (they are its backward's)");
  const Activation out{dx, {AxisPlacement::shard(in_dim_), dout.placement.cp}, target.name};
  if (uses_fp8(w32)) {
    backward_fp8(dx, dw, db, dout, x, w32, gelu_pre.view, dout_row_amax, dx_row_amax, layer);
    return given(out, layer, "input gradient", log);
  }
  const TensorView w = ctx_.precision().weight(w32);
  if (ctx_.size() == 1) {
    ctx_.gemm_backward(dx, dw, db, dout.view, x.view, w, gelu_pre.view);
    if (!dx_row_amax.empty()) ctx_.ops().fp8_amax(dx_row_amax, dx, Fp8Reduce::rows);
    return given(out, layer, "input gradient", log);
  }
  Activation full = ctx_.stage_for_gather(dout);
  // Each chunk adds its rows to dW and db: over all chunks db is the whole
  // bias gradient on every rank (no partial sum left to reduce).
  const TensorView fv = full.view;
  ctx_.maps().gather_from_sequence(
      full,
      [&](int64_t row0, int64_t rows) {
        ctx_.gemm_backward(rows_of(dx, row0, rows), dw, db, rows_of(fv, row0, rows),
                           rows_of(x.view, row0, rows), w, rows_or_none(gelu_pre.view, row0, rows));
      },
      layer);
  // The layer before asked for dx's row amaxes (it runs in fp8 where this
  // one does not): a pass of their own.
  if (!dx_row_amax.empty()) ctx_.ops().fp8_amax(dx_row_amax, dx, Fp8Reduce::rows);
  return given(out, layer, "input gradient", log);
}

// ---- VocabParallelEmbedding -------------------------------------------------

Activation VocabParallelEmbedding::forward(const Target& target, const Activation& token_ids,
                                           TensorView wte, TensorView wpe, TensorView positions,
                                           TensorView position_rows) {
  const TensorView out = target.view;
  const std::string layer = "embedding forward";
  expect_tp(token_ids, AxisPlacement::replicated(), layer, "tokens", ctx_.placement_log());
  const TensorView tokens = token_ids.view;
  Ops& ops = ctx_.ops();
  const int64_t B = tokens.shape[0], T = tokens.shape[1], C = out.shape[1];
  const int64_t Rl = out.shape[0];
  const bool chunked = !positions.empty();  // positions given per row (context parallelism)
  // Computed in fp32 (the tp sum too) and rounded once.
  const TensorView emb = out.dtype == DType::f32 ? out : ctx_.sum_rows(Rl, C);
  if (ctx_.size() == 1 && !wpe.empty() && !chunked) {
    ops.embedding_forward(make_view(emb.data, DType::f32, emb.device, {B, T, C}), tokens, wte, wpe);
  } else if (ctx_.size() == 1) {  // the positions apart (below), or none (Llama: RoPE)
    ops.token_embedding_forward(emb, make_view(tokens.data, DType::i32, tokens.device, {B * T}),
                                wte, 0);
  } else {
    const int64_t vocab0 = ctx_.rank() * wte.shape[0];
    auto* tok = static_cast<int32_t*>(tokens.data);
    ctx_.maps().reduce_scatter_to_sequence(
        emb,
        [&](int64_t row0, int64_t rows, TensorView partial) {
          ops.token_embedding_forward(
              partial, make_view(tok + row0, DType::i32, tokens.device, {rows}), wte, vocab0);
        },
        ctx_.ring_workspace(), token_ids.placement.cp, target.name, layer);
  }
  if (!wpe.empty() && chunked) {
    // wpe's rows looked up by position, as tokens look up wte's: the same
    // fp32 sum as the fused op's wte[token] + wpe[position].
    ops.token_embedding_forward(position_rows, positions, wpe, 0);
    ops.accumulate(emb, position_rows);
  } else if (!wpe.empty() && ctx_.size() > 1) {
    ops.position_embedding_forward(emb, wpe, ctx_.rank() * Rl, static_cast<int>(T));
  }
  if (out.dtype != DType::f32) ops.cast(out, emb);
  return given({out, {AxisPlacement::shard(ActDim::sequence), token_ids.placement.cp}, target.name},
               layer, "output", ctx_.placement_log());
}

void VocabParallelEmbedding::backward(TensorView dwte, TensorView dwpe, const Activation& dgrad,
                                      const Activation& token_ids, TensorView positions) {
  const std::string layer = "embedding backward";
  expect_tp(dgrad, AxisPlacement::shard(ActDim::sequence), layer, "output gradient",
            ctx_.placement_log());
  expect_tp(token_ids, AxisPlacement::replicated(), layer, "tokens", ctx_.placement_log());
  const TensorView dout = dgrad.view, tokens = token_ids.view;
  Ops& ops = ctx_.ops();
  const int64_t B = tokens.shape[0], T = tokens.shape[1], C = dout.shape[1];
  const bool chunked = !positions.empty();
  if (ctx_.size() == 1 && !dwpe.empty() && !chunked)
    return ops.embedding_backward(dwte, dwpe,
                                  make_view(dout.data, DType::f32, dout.device, {B, T, C}), tokens);
  const int64_t Rl = dout.shape[0], vocab0 = ctx_.rank() * dwte.shape[0];
  if (!dwpe.empty() && chunked)
    ops.token_embedding_backward(dwpe, dout, positions, 0);
  else if (!dwpe.empty())
    ops.position_embedding_backward(dwpe, dout, ctx_.rank() * Rl, static_cast<int>(T));
  if (ctx_.size() == 1)
    return ops.token_embedding_backward(
        dwte, dout, make_view(tokens.data, DType::i32, tokens.device, {B * T}), 0);
  Activation full = ctx_.stage_for_gather(dgrad);
  const TensorView fv = full.view;
  auto* tok = static_cast<int32_t*>(tokens.data);
  ctx_.maps().gather_from_sequence(
      full,
      [&](int64_t row0, int64_t rows) {
        ops.token_embedding_backward(dwte, rows_of(fv, row0, rows),
                                     make_view(tok + row0, DType::i32, tokens.device, {rows}),
                                     vocab0);
      },
      layer);
}

// ---- VocabParallelCrossEntropy ----------------------------------------------

Activation VocabParallelCrossEntropy::forward(const Target& target, TensorView dlogits,
                                              const Activation& logit_rows,
                                              const Activation& target_ids, int64_t vocab,
                                              float grad_scale) {
  const std::string layer = "cross_entropy forward";
  PlacementLog* log = ctx_.placement_log();
  expect_tp(logit_rows, AxisPlacement::shard(ActDim::vocabulary), layer, "logits", log);
  expect_placement(target_ids, {AxisPlacement::replicated(), logit_rows.placement.cp}, layer,
                   "targets", log);
  const TensorView losses = target.view;
  const Activation out{losses, {AxisPlacement::replicated(), logit_rows.placement.cp}, target.name};
  const TensorView logits = logit_rows.view, targets = target_ids.view;
  Ops& ops = ctx_.ops();
  if (ctx_.size() == 1) {
    ops.softmax_cross_entropy(losses, dlogits, logits, targets, vocab, grad_scale);
    return given(out, layer, "output", log);
  }
  const int64_t R = logits.shape[0], vocab0 = ctx_.rank() * logits.shape[1];
  float* stats = ctx_.stats(R);
  const Device dev = logits.device;
  const TensorView row_max = make_view(stats, DType::f32, dev, {R});
  const TensorView sumexp = make_view(stats + R, DType::f32, dev, {R});
  const TensorView target_logit = make_view(stats + 2 * R, DType::f32, dev, {R});
  ops.cross_entropy_shard_max(row_max, logits, vocab0, vocab);
  ctx_.maps().all_reduce_max(row_max);
  ops.cross_entropy_shard_sums(sumexp, target_logit, logits, targets, row_max, vocab0, vocab);
  // sumexp and target_logit are adjacent: one all-reduce for both.
  ctx_.maps().all_reduce_sum(make_view(stats + R, DType::f32, dev, {2 * R}));
  ops.cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max, sumexp, target_logit,
                                 vocab0, vocab, grad_scale);
  return given(out, layer, "output", log);
}

}  // namespace gt
