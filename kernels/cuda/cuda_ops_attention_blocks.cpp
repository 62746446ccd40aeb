// CudaOps' attention over blocks (context parallelism, kernels/ops.hpp):
// attention_block_forward / _backward on the SIMT or the tensor-core kernels
// of attention_blocks.cuh, picked as the unsplit attention picks them
// (cuda_ops.cpp: tensor cores for bf16 when CudaContextOptions::
// attention_tensor_cores is set and the head size suits them), then
// attention_row_dot and cast_rows. The entry points checked the shapes and
// that every view's innermost dimension is contiguous; the views reach the
// kernels with their batch and row strides as they are, nothing copied.
// Host code only.
#include "kernels/core/attention_kernels.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_blocks.cuh"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_ops_check.hpp"
#include "kernels/cuda/nvtx.hpp"

namespace gt {

using namespace cuda_ops_detail;

int64_t CudaOps::attention_block_scratch_elems(int B, int n_head, int Tq, int Tk) const {
  return gt::attention_block_scratch_elems(Device::cuda, B, n_head, Tq, Tk);
}

namespace {

// A (B, rows, width) view with contiguous rows, as the kernels take it.
template <typename T>
cuda::RowsView<T> rows_of(const TensorView& t) {
  return {static_cast<T*>(t.data), t.strides[0], t.strides[1]};
}
// A (B, NH, rows) statistic with contiguous rows.
template <typename T>
cuda::StatsView<T> stats_of(const TensorView& t) {
  return {static_cast<T*>(t.data), t.strides[0], t.strides[1]};
}

enum class BlockKernels { simt_fp32, simt_bf16, tensor_cores };

// q (B, Tq, NH hs) and k (B, Tk, KV hs), their shapes checked by the entry
// point; which kernels run them. The head-size limits are the kernels'.
struct BlockCall {
  cuda::AttentionBlock blk;
  BlockKernels kernels;
};
BlockCall block_call(const Check& c, const TensorView& q, const TensorView& k, int n_head,
                     int n_kv_head, int64_t q_pos, int64_t k_pos, bool tensor_cores) {
  const int hs = c.to_int(q.shape[2] / n_head, "hs");
  BlockCall call{{c.to_int(q.shape[0], "B"), c.to_int(q.shape[1], "Tq"),
                  c.to_int(k.shape[1], "Tk"), n_head, n_kv_head, hs, q_pos, k_pos},
                 BlockKernels::simt_fp32};
  if (q.dtype == DType::bf16)
    call.kernels = tensor_cores && cuda::attention_tc_supported(hs) ? BlockKernels::tensor_cores
                                                                    : BlockKernels::simt_bf16;
  if (call.kernels != BlockKernels::tensor_cores && hs > 128)
    fail("CudaOps::", c.op, ": head size ", hs, " > 128 is not supported by the flash kernel");
  return call;
}

}  // namespace

void CudaOps::do_attention_block_forward(TensorView out, TensorView lse, TensorView scratch_view,
                                         TensorView q, TensorView k, TensorView v, int64_t q_pos,
                                         int64_t k_pos, int n_head, int n_kv_head,
                                         bool accumulate) {
  (void)scratch_view;  // attention_block_scratch_elems is 0: the tiles stay on chip
  cuda::NvtxRange range("attention_block_forward");
  const Check c{"attention_block_forward"};
  c.strided(q, "q", kF32Bf16);
  c.strided(k, "k", {q.dtype});
  c.strided(v, "v", {q.dtype});
  c.strided(out, "out", kF32);
  c.strided(lse, "lse", kF32);
  const BlockCall call =
      block_call(c, q, k, n_head, n_kv_head, q_pos, k_pos, options_.attention_tensor_cores);
  const auto o = rows_of<float>(out);
  const auto l = stats_of<float>(lse);
  switch (call.kernels) {
    case BlockKernels::simt_fp32:
      cuda::attention_block_forward(o, l, rows_of<const float>(q), rows_of<const float>(k),
                                    rows_of<const float>(v), call.blk, accumulate, stream());
      break;
    case BlockKernels::simt_bf16:
      cuda::attention_block_forward(o, l, rows_of<const bf16>(q), rows_of<const bf16>(k),
                                    rows_of<const bf16>(v), call.blk, accumulate, stream());
      break;
    case BlockKernels::tensor_cores:
      cuda::attention_block_forward_tc(o, l, rows_of<const bf16>(q), rows_of<const bf16>(k),
                                       rows_of<const bf16>(v), call.blk, accumulate, stream());
      break;
  }
}

void CudaOps::do_attention_block_backward(TensorView dq, TensorView dk, TensorView dv,
                                          TensorView scratch_view, TensorView dout, TensorView q,
                                          TensorView k, TensorView v, TensorView lse,
                                          TensorView delta, int64_t q_pos, int64_t k_pos,
                                          int n_head, int n_kv_head) {
  (void)scratch_view;  // attention_block_scratch_elems is 0: the tiles stay on chip
  cuda::NvtxRange range("attention_block_backward");
  const Check c{"attention_block_backward"};
  c.strided(q, "q", kF32Bf16);
  c.strided(k, "k", {q.dtype});
  c.strided(v, "v", {q.dtype});
  c.strided(dout, "dout", {q.dtype});
  c.strided(dq, "dq", kF32);
  c.strided(dk, "dk", kF32);
  c.strided(dv, "dv", kF32);
  c.strided(lse, "lse", kF32);
  c.strided(delta, "delta", kF32);
  const BlockCall call =
      block_call(c, q, k, n_head, n_kv_head, q_pos, k_pos, options_.attention_tensor_cores);
  const auto gq = rows_of<float>(dq), gk = rows_of<float>(dk), gv = rows_of<float>(dv);
  const auto l = stats_of<const float>(lse), d = stats_of<const float>(delta);
  switch (call.kernels) {
    case BlockKernels::simt_fp32:
      cuda::attention_block_backward(gq, gk, gv, rows_of<const float>(dout),
                                     rows_of<const float>(q), rows_of<const float>(k),
                                     rows_of<const float>(v), l, d, call.blk, stream());
      break;
    case BlockKernels::simt_bf16:
      cuda::attention_block_backward(gq, gk, gv, rows_of<const bf16>(dout), rows_of<const bf16>(q),
                                     rows_of<const bf16>(k), rows_of<const bf16>(v), l, d,
                                     call.blk, stream());
      break;
    case BlockKernels::tensor_cores:
      cuda::attention_block_backward_tc(gq, gk, gv, rows_of<const bf16>(dout),
                                        rows_of<const bf16>(q), rows_of<const bf16>(k),
                                        rows_of<const bf16>(v), l, d, call.blk, stream());
      break;
  }
}

void CudaOps::do_attention_row_dot(TensorView delta, TensorView dout, TensorView out,
                                   int n_head) {
  cuda::NvtxRange range("attention_row_dot");
  const Check c{"attention_row_dot"};
  c.strided(delta, "delta", kF32);
  c.strided(dout, "dout", kF32Bf16);
  c.strided(out, "out", kF32Bf16);
  const int B = c.to_int(dout.shape[0], "B"), T = c.to_int(dout.shape[1], "T");
  const int hs = c.to_int(dout.shape[2] / n_head, "hs");
  const auto D = stats_of<float>(delta);
  const bool g16 = dout.dtype == DType::bf16, y16 = out.dtype == DType::bf16;
  if (g16 && y16)
    cuda::attention_row_dot(D, rows_of<const bf16>(dout), rows_of<const bf16>(out), B, T, n_head,
                            hs, stream());
  else if (g16)
    cuda::attention_row_dot(D, rows_of<const bf16>(dout), rows_of<const float>(out), B, T, n_head,
                            hs, stream());
  else if (y16)
    cuda::attention_row_dot(D, rows_of<const float>(dout), rows_of<const bf16>(out), B, T, n_head,
                            hs, stream());
  else
    cuda::attention_row_dot(D, rows_of<const float>(dout), rows_of<const float>(out), B, T,
                            n_head, hs, stream());
}

void CudaOps::do_cast_rows(TensorView dst, TensorView src) {
  cuda::NvtxRange range("cast_rows");
  const Check c{"cast_rows"};
  c.strided(dst, "dst", kF32Bf16);
  c.strided(src, "src", kF32Bf16);
  const int64_t rows = src.shape[0], cols = src.shape[1];
  // One row's stride is never used; the contiguous one keeps the quads legal.
  const int64_t ld_dst = rows > 1 ? dst.strides[0] : cols;
  const int64_t ld_src = rows > 1 ? src.strides[0] : cols;
  const bool d16 = dst.dtype == DType::bf16, s16 = src.dtype == DType::bf16;
  if (d16 && s16)
    cuda::cast_rows(ptr<bf16>(dst), ld_dst, ptr<const bf16>(src), ld_src, rows, cols, stream());
  else if (d16)
    cuda::cast_rows(ptr<bf16>(dst), ld_dst, src.f32(), ld_src, rows, cols, stream());
  else if (s16)
    cuda::cast_rows(dst.f32(), ld_dst, ptr<const bf16>(src), ld_src, rows, cols, stream());
  else
    cuda::cast_rows(dst.f32(), ld_dst, src.f32(), ld_src, rows, cols, stream());
}

}  // namespace gt
