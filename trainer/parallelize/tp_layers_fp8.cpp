// The column- and row-parallel linear layers with fp8 GEMMs (runtime.fp8):
// the same chunks, collectives and placements as their bf16 paths in
// tp_layers.cpp, each GEMM an Fp8Linear::gemm over operands scaled as
// fp8_linear.hpp states. Shapes, with R rows, p tp ranks, y = x W^T:
//   column  x (R, K) gathered by chunks, W (N/p, K), dy (R, N/p)
//   row     x (R, K/p), W (N, K/p), dy (R/p, N) gathered by chunks
// Each operand's amax spans the ranks holding the rest of the slice its
// scale covers (Fp8Linear::Span): over tp where a row or the tensor is split
// across tp ranks (a column-parallel dy's rows; a row-parallel x's rows; every
// sequence-sharded input), over cp where the slice runs along the sequence
// (a tensor, or a column of rows).
#include "kernels/core/error.hpp"
#include "trainer/parallelize/tp_layers.hpp"

namespace gt {

namespace {

using Span = Fp8Linear::Span;

// Elements [first, first + n) of a 1-D scale vector; a single (tensorwise)
// scale is the same for every chunk of rows.
TensorView scale_rows(const TensorView& s, int64_t first, int64_t n) {
  if (s.numel() == 1) return s;
  return make_view(static_cast<float*>(s.data) + first, DType::f32, s.device, {n});
}

// Elements [first, first + n) of a vector of row amaxes; empty stays empty.
TensorView amax_rows(const TensorView& a, int64_t first, int64_t n) {
  if (a.empty()) return a;
  return make_view(static_cast<float*>(a.data) + first, DType::f32, a.device, {n});
}

// The weight as fp8 quantises it: its bf16 rounding, whether the store keeps
// a bf16 copy (whole parameters: dp, one rank) or the layer has the fp32
// master (a gathered ZeRO-3 unit), so that every layout quantises the same
// values (torchao under FSDP2's bf16 parameters does the same). Or, under
// ZeRO-3's fp8 all-gather, the codes the store gathered, quantised from the
// same bf16 values with the same scale (`scale` set; no amax of it here).
struct WeightOperand {
  TensorView w, scale;
  bool gathered() const { return !scale.empty(); }
};
WeightOperand weight_operand(TpLayerContext& ctx, const Fp8Linear& f8, const TensorView& w32) {
  const Fp8Linear::Weight g = f8.gathered_weight(w32);
  if (!g.codes.empty()) return {g.codes, g.scale};
  return {ctx.precision().weight(w32), {}};
}

Fp8MatmulSpec spec(Fp8Format a, Fp8Format b, bool a_t, bool b_t, bool accumulate = false) {
  Fp8MatmulSpec s;
  s.a_format = a;
  s.b_format = b;
  s.a_transposed = a_t;
  s.b_transposed = b_t;
  s.accumulate = accumulate;
  return s;
}

// The scales of one layer's backward GEMMs: dgrad's a (dy by rows) and b
// (W by columns), wgrad's a (dy by columns) and b (x by columns). A
// tensorwise recipe uses one scale per tensor for both GEMMs.
struct BackwardScales {
  TensorView dy_rows, w_cols, dy_cols, x_cols;
};

// dx (rows, K') = Q(dy) Q(W^T)^T and dW += Q(dy^T) Q(x^T)^T on one chunk of
// rows, with db += dy's column sums and, given pre, dx *= gelu'(pre) (and
// dx's row amaxes into pre_amax, unless empty, for the layer before).
void backward_chunk(Fp8Linear& f8, Ops& ops, TensorView dx, TensorView dw, TensorView db,
                    TensorView dy, TensorView x, TensorView w, const BackwardScales& s,
                    TensorView pre, TensorView pre_amax = {}) {
  const Fp8Format g = f8.grad_format(), a = f8.forward_format();
  f8.gemm(dx, dy, s.dy_rows, w, s.w_cols, TensorView{}, spec(g, a, false, true), false);
  if (!pre.empty()) ops.gelu_backward(dx, pre, dx, pre_amax);
  f8.gemm(dw, dy, s.dy_cols, x, s.x_cols, TensorView{}, spec(g, a, true, true, true), false);
  if (!db.empty()) ops.bias_backward(db, dy);
}

}  // namespace

// ---- ColumnParallelLinear ---------------------------------------------------

bool ColumnParallelLinear::uses_fp8(const TensorView& w) const {
  const Fp8Linear* f8 = ctx_.fp8();
  // The LM head (vocabulary outputs) stays in bf16, as torchao leaves it.
  return f8 && out_dim_ != ActDim::vocabulary && f8->applies(w.shape[0] * ctx_.size(), w.shape[1]);
}

TensorView ColumnParallelLinear::input_row_amax(const TensorView& w32, int64_t rows) {
  if (!uses_fp8(w32)) return {};
  // Rowwise scales x's rows chunk by chunk as they arrive: only at tp = 1 is
  // every chunk this rank's own.
  if (ctx_.fp8()->rowwise() && ctx_.size() > 1) return {};
  return ctx_.fp8()->producer_row_amax(Fp8Linear::column_input, rows);
}

void ColumnParallelLinear::forward_fp8(TensorView out, Activation& x, TensorView w32, TensorView b,
                                       TensorView gelu_pre, TensorView x_row_amax,
                                       TensorView gelu_row_amax, const std::string& layer) {
  Fp8Linear& f8 = *ctx_.fp8();
  Ops& ops = ctx_.ops();
  // Rowwise scales the rows each gather brings: a rank's own row amaxes
  // cannot stand for another rank's (input_row_amax gives none there).
  GT_CHECK(x_row_amax.empty() || !f8.rowwise() || ctx_.size() == 1, layer,
           ": rowwise fp8 at tp > 1 takes no input row amaxes from a producer");
  const Fp8Format e4m3 = f8.forward_format();
  const WeightOperand wo = weight_operand(ctx_, f8, w32);
  const TensorView w = wo.w;
  const TensorView bias = ctx_.precision().bias(b);
  // Tensorwise: x's scale over every rank's rows (they arrive chunk by
  // chunk), W's over the tp shards (or the gathered codes'). Rowwise: W's
  // per output feature here, x's per row with each chunk.
  const Fp8Linear::Request x_all{ctx_.maps().own_rows(x.view), Fp8Reduce::tensor, e4m3,
                                 Span::over_tp_cp, x_row_amax};
  std::vector<TensorView> s =
      f8.rowwise()     ? f8.prepare({{w, Fp8Reduce::rows, e4m3, Span::local}})
      : wo.gathered() ? f8.prepare({x_all}, Fp8Linear::layer_slot, layer)
                      : f8.prepare({x_all, {w, Fp8Reduce::tensor, e4m3, Span::over_tp}},
                                   Fp8Linear::layer_slot, layer);
  const TensorView w_scale = wo.gathered() ? wo.scale : s.back();
  const TensorView xs = x.view;
  ctx_.maps().gather_from_sequence(
      x,
      [&](int64_t row0, int64_t rows) {
        const TensorView xc = rows_of(xs, row0, rows);
        // Rowwise with producer amaxes: tp = 1, one chunk, x's own rows.
        const TensorView x_scale =
            f8.rowwise() ? f8.prepare({{xc, Fp8Reduce::rows, e4m3, Span::local, x_row_amax}},
                                      Fp8Linear::chunk_slot, layer)[0]
                         : s[0];
        const TensorView oc = rows_of(out, row0, rows);
        const TensorView target = gelu_pre.empty() ? oc : rows_of(gelu_pre, row0, rows);
        f8.gemm(target, xc, x_scale, w, w_scale, bias, spec(e4m3, e4m3, false, false), true);
        if (!gelu_pre.empty())
          ops.gelu_forward(oc, target, amax_rows(gelu_row_amax, row0, rows));
      },
      layer);
}

TensorView ColumnParallelLinear::output_grad_row_amax(const TensorView& w, int64_t rows) {
  if (!uses_fp8(w)) return {};
  return ctx_.fp8()->producer_row_amax(Fp8Linear::column_grad, rows);
}

Activation ColumnParallelLinear::backward_fp8(TensorView dx, TensorView dw, TensorView db,
                                              const Activation& dout, const Activation& x,
                                              TensorView w32, TensorView dout_row_amax,
                                              const std::string& name, const std::string& layer) {
  Fp8Linear& f8 = *ctx_.fp8();
  const WeightOperand wo = weight_operand(ctx_, f8, w32);
  const TensorView w = wo.w;
  const Fp8Format g = f8.grad_format(), a = f8.forward_format();
  const TensorView dy = dout.view, xv = x.view;  // (R, N/p), (R, K) whole
  BackwardScales s;
  if (f8.rowwise()) {
    const std::vector<TensorView> v =
        f8.prepare({{dy, Fp8Reduce::rows, g, Span::over_tp, dout_row_amax},
                    {w, Fp8Reduce::cols, a, Span::over_tp},
                    {dy, Fp8Reduce::cols, g, Span::over_cp},
                    {xv, Fp8Reduce::cols, a, Span::over_cp}},
                   Fp8Linear::layer_slot, layer);
    s = {v[0], v[1], v[2], v[3]};
  } else if (wo.gathered()) {
    const std::vector<TensorView> v =
        f8.prepare({{dy, Fp8Reduce::tensor, g, Span::over_tp_cp, dout_row_amax},
                    {xv, Fp8Reduce::tensor, a, Span::over_cp}},
                   Fp8Linear::layer_slot, layer);
    s = {v[0], wo.scale, v[0], v[1]};
  } else {
    const std::vector<TensorView> v =
        f8.prepare({{dy, Fp8Reduce::tensor, g, Span::over_tp_cp, dout_row_amax},
                    {w, Fp8Reduce::tensor, a, Span::over_tp},
                    {xv, Fp8Reduce::tensor, a, Span::over_cp}},
                   Fp8Linear::layer_slot, layer);
    s = {v[0], v[1], v[0], v[2]};
  }
  auto chunk = [&](int64_t row0, int64_t rows, TensorView partial) {
    BackwardScales c = s;
    c.dy_rows = scale_rows(s.dy_rows, row0, rows);
    backward_chunk(f8, ctx_.ops(), partial, dw, db, rows_of(dy, row0, rows),
                   rows_of(xv, row0, rows), w, c, TensorView{});
  };
  if (ctx_.size() == 1) {
    chunk(0, dy.shape[0], dx);
    return given({dx, {AxisPlacement::shard(ActDim::sequence), dout.placement.cp}, name}, layer,
                 "input gradient", ctx_.placement_log());
  }
  return ctx_.maps().reduce_scatter_to_sequence(dx, chunk, ctx_.ring_workspace(),
                                                dout.placement.cp, name, layer);
}

// ---- RowParallelLinear ------------------------------------------------------

bool RowParallelLinear::uses_fp8(const TensorView& w) const {
  const Fp8Linear* f8 = ctx_.fp8();
  return f8 && f8->applies(w.shape[0], w.shape[1] * ctx_.size());
}

TensorView RowParallelLinear::input_row_amax(const TensorView& w32, int64_t rows) {
  if (!uses_fp8(w32)) return {};
  return ctx_.fp8()->producer_row_amax(Fp8Linear::row_input, rows);
}

Activation RowParallelLinear::forward_fp8(TensorView sum, const Activation& x, TensorView w32,
                                          TensorView b, TensorView x_row_amax,
                                          const std::string& name, const std::string& layer) {
  Fp8Linear& f8 = *ctx_.fp8();
  const WeightOperand wo = weight_operand(ctx_, f8, w32);
  const TensorView w = wo.w;
  const Fp8Format e4m3 = f8.forward_format();
  const TensorView xv = x.view;  // (R, K/p): each row's features split over tp
  const Fp8Reduce by = f8.reduce(Fp8Reduce::rows);
  const Fp8Linear::Request x_req{xv, by, e4m3, f8.rowwise() ? Span::over_tp : Span::over_tp_cp,
                                 x_row_amax};
  const std::vector<TensorView> s =
      wo.gathered()
          ? std::vector<TensorView>{f8.prepare({x_req}, Fp8Linear::layer_slot, layer)[0], wo.scale}
          : f8.prepare({x_req, {w, by, e4m3, Span::over_tp}}, Fp8Linear::layer_slot, layer);
  const Fp8MatmulSpec fwd = spec(e4m3, e4m3, false, false);
  if (ctx_.size() == 1) {
    f8.gemm(sum, xv, s[0], w, s[1], ctx_.precision().bias(b), fwd, true);
    return {};
  }
  return ctx_.maps().reduce_scatter_to_sequence(
      sum,
      [&](int64_t row0, int64_t rows, TensorView partial) {
        f8.gemm(partial, rows_of(xv, row0, rows), scale_rows(s[0], row0, rows), w, s[1],
                TensorView{}, fwd, true);
      },
      ctx_.ring_workspace(), x.placement.cp, name, layer);
}

TensorView RowParallelLinear::output_grad_row_amax(const TensorView& w, int64_t rows) {
  if (!uses_fp8(w)) return {};
  // Rowwise scales dy's rows chunk by chunk as the gather brings them: only
  // at tp = 1 is the one chunk this rank's own rows.
  if (ctx_.fp8()->rowwise() && ctx_.size() > 1) return {};
  return ctx_.fp8()->producer_row_amax(Fp8Linear::row_grad, rows);
}

void RowParallelLinear::backward_fp8(TensorView dx, TensorView dw, TensorView db,
                                     const Activation& dout, const Activation& x, TensorView w32,
                                     TensorView gelu_pre, TensorView dout_row_amax,
                                     TensorView dx_row_amax, const std::string& layer) {
  Fp8Linear& f8 = *ctx_.fp8();
  // As the column-parallel forward's input: rowwise dy rows come by gather.
  GT_CHECK(dout_row_amax.empty() || !f8.rowwise() || ctx_.size() == 1, layer,
           ": rowwise fp8 at tp > 1 takes no output-gradient row amaxes from a producer");
  const WeightOperand wo = weight_operand(ctx_, f8, w32);
  const TensorView w = wo.w;
  const Fp8Format g = f8.grad_format(), a = f8.forward_format();
  const TensorView xv = x.view;  // (R, K/p)
  // dy's own rows (R/p, N): its column (or tensor) amax before the gather;
  // its row amaxes, rowwise, per gathered chunk (each row is whole).
  BackwardScales s;
  if (f8.rowwise()) {
    const std::vector<TensorView> v = f8.prepare({{w, Fp8Reduce::cols, a, Span::local},
                                                  {dout.view, Fp8Reduce::cols, g, Span::over_tp_cp},
                                                  {xv, Fp8Reduce::cols, a, Span::over_cp}});
    s = {TensorView{}, v[0], v[1], v[2]};
  } else if (wo.gathered()) {
    const std::vector<TensorView> v =
        f8.prepare({{dout.view, Fp8Reduce::tensor, g, Span::over_tp_cp, dout_row_amax},
                    {xv, Fp8Reduce::tensor, a, Span::over_tp_cp}},
                   Fp8Linear::layer_slot, layer);
    s = {v[0], wo.scale, v[0], v[1]};
  } else {
    const std::vector<TensorView> v =
        f8.prepare({{dout.view, Fp8Reduce::tensor, g, Span::over_tp_cp, dout_row_amax},
                    {w, Fp8Reduce::tensor, a, Span::over_tp},
                    {xv, Fp8Reduce::tensor, a, Span::over_tp_cp}},
                   Fp8Linear::layer_slot, layer);
    s = {v[0], v[1], v[0], v[2]};
  }
  auto chunk = [&](const TensorView& full, int64_t row0, int64_t rows) {
    const TensorView dyc = rows_of(full, row0, rows);
    BackwardScales c = s;
    // Rowwise with producer amaxes: tp = 1, one chunk, dout's own rows.
    if (f8.rowwise())
      c.dy_rows = f8.prepare({{dyc, Fp8Reduce::rows, g, Span::local, dout_row_amax}},
                             Fp8Linear::chunk_slot, layer)[0];
    backward_chunk(f8, ctx_.ops(), rows_of(dx, row0, rows), dw, db, dyc, rows_of(xv, row0, rows),
                   w, c, gelu_pre.empty() ? gelu_pre : rows_of(gelu_pre, row0, rows),
                   amax_rows(dx_row_amax, row0, rows));
  };
  if (ctx_.size() == 1) return chunk(dout.view, 0, dout.view.shape[0]);
  Activation full = ctx_.stage_for_gather(dout);
  const TensorView fv = full.view;
  ctx_.maps().gather_from_sequence(
      full, [&](int64_t row0, int64_t rows) { chunk(fv, row0, rows); }, layer);
}

}  // namespace gt
