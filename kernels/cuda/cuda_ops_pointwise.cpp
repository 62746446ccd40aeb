// CudaOps (see cuda_ops.hpp): the elementwise ops, casts, cross-entropy and
// the optimizer's reductions and update. Host code only. The shapes (and
// the cross-entropy's vocabulary ranges, the optimizer's runs) were checked
// by the Ops entry points (kernels/ops_pointwise.cpp).
#include <cuda_bf16.h>

#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_ops_check.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/nvtx.hpp"
#include "kernels/cuda/sum_squares.cuh"

namespace gt {

using namespace cuda_ops_detail;

// ---- elementwise ----------------------------------------------------------------

void CudaOps::do_gelu_forward(TensorView out, TensorView inp, TensorView row_amax) {
  cuda::NvtxRange range("gelu_forward");
  const Check c{"gelu_forward"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(out, "out", {inp.dtype});
  if (float* amax = optional_row_amax(c, row_amax)) {  // out is (R, C): the entry checked
    const int64_t R = out.shape[0], C = out.shape[1];
    if (inp.dtype == DType::f32)
      cuda::gelu_forward_rows(out.f32(), inp.f32(), R, C, amax, stream());
    else
      cuda::gelu_forward_rows(ptr<bf16>(out), ptr<const bf16>(inp), R, C, amax, stream());
    return;
  }
  if (inp.dtype == DType::f32)
    cuda::gelu_forward(out.f32(), inp.f32(), inp.numel(), stream());
  else
    cuda::gelu_forward(ptr<bf16>(out), ptr<bf16>(inp), inp.numel(), stream());
}

void CudaOps::do_gelu_backward(TensorView dinp, TensorView inp, TensorView dout,
                               TensorView row_amax) {
  cuda::NvtxRange range("gelu_backward");
  const Check c{"gelu_backward"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(dinp, "dinp", {inp.dtype});
  c.tensor(dout, "dout", {inp.dtype});
  if (float* amax = optional_row_amax(c, row_amax)) {  // dinp is (R, C): the entry checked
    const int64_t R = dinp.shape[0], C = dinp.shape[1];
    if (inp.dtype == DType::f32)
      cuda::gelu_backward_rows(dinp.f32(), inp.f32(), dout.f32(), R, C, amax, stream());
    else
      cuda::gelu_backward_rows(ptr<bf16>(dinp), ptr<const bf16>(inp), ptr<const bf16>(dout), R,
                               C, amax, stream());
    return;
  }
  if (inp.dtype == DType::f32)
    cuda::gelu_backward(dinp.f32(), inp.f32(), dout.f32(), inp.numel(), stream());
  else
    cuda::gelu_backward(ptr<bf16>(dinp), ptr<bf16>(inp), ptr<bf16>(dout), inp.numel(), stream());
}

void CudaOps::do_add(TensorView out, TensorView a, TensorView b) {
  cuda::NvtxRange range("add");
  const Check c{"add"};
  c.tensor(a, "a", kF32Bf16);
  c.tensor(b, "b", {a.dtype});
  c.tensor(out, "out", {a.dtype});
  if (a.dtype == DType::f32)
    cuda::add(out.f32(), a.f32(), b.f32(), out.numel(), stream());
  else
    cuda::add(ptr<bf16>(out), ptr<bf16>(a), ptr<bf16>(b), out.numel(), stream());
}

void CudaOps::do_accumulate(TensorView acc, TensorView x) {
  cuda::NvtxRange range("accumulate");
  const Check c{"accumulate"};
  c.tensor(acc, "acc", kF32Bf16);
  c.tensor(x, "x", {acc.dtype});
  if (acc.dtype == DType::f32)
    cuda::accumulate(acc.f32(), x.f32(), acc.numel(), stream());
  else
    cuda::accumulate(ptr<bf16>(acc), ptr<bf16>(x), acc.numel(), stream());
}

void CudaOps::do_zero(TensorView t) {
  cuda::NvtxRange range("zero");
  const Check c{"zero"};
  c.tensor(t, "t", {DType::f32, DType::bf16, DType::i32});
  const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
  if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(t.data, 0, bytes, stream()));
}

void CudaOps::do_copy(TensorView dst, TensorView src) {
  cuda::NvtxRange range("copy");
  const Check c{"copy"};
  c.tensor(src, "src", {DType::f32, DType::bf16, DType::i32});
  c.tensor(dst, "dst", {src.dtype});
  const size_t bytes = static_cast<size_t>(src.numel()) * dtype_size(src.dtype);
  if (bytes > 0 && dst.data != src.data)
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDeviceToDevice, stream()));
}

void CudaOps::do_cast(TensorView dst, TensorView src) {
  cuda::NvtxRange range("cast");
  const Check c{"cast"};
  c.tensor(src, "src", kF32Bf16);
  c.tensor(dst, "dst", kF32Bf16);
  if (dst.dtype == src.dtype) {
    do_copy(dst, src);
  } else if (src.dtype == DType::f32) {
    cuda::cast(ptr<bf16>(dst), src.f32(), src.numel(), stream());
  } else {
    cuda::cast(dst.f32(), ptr<bf16>(src), src.numel(), stream());
  }
}

// ---- cross-entropy --------------------------------------------------------------

// The logits (and dlogits, which must match them) are fp32 or bf16: the
// launchers have one overload per storage type.
namespace {
template <typename F>
void with_logits(const TensorView& logits, const TensorView& dlogits, F&& f) {
  if (logits.dtype == DType::f32)
    f(logits.f32(), dlogits.empty() ? nullptr : dlogits.f32());
  else
    f(ptr<bf16>(logits), dlogits.empty() ? nullptr : ptr<bf16>(dlogits));
}
}  // namespace

void CudaOps::do_softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                                       TensorView targets, int64_t vocab_size, float grad_scale) {
  cuda::NvtxRange range("softmax_cross_entropy");
  const Check c{"softmax_cross_entropy"};
  const int64_t R = logits.shape[0], V = logits.shape[1];
  c.tensor(logits, "logits", kF32Bf16);
  c.tensor(losses, "losses", kF32);
  c.tensor(targets, "targets", kI32);
  if (!dlogits.empty()) c.tensor(dlogits, "dlogits", {logits.dtype});
  with_logits(logits, dlogits, [&](auto* x, auto* d) {
    cuda::softmax_cross_entropy(losses.f32(), d, x, targets.i32(), R, V, vocab_size, grad_scale,
                                stream());
  });
}

void CudaOps::do_cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                                         int64_t vocab_size) {
  cuda::NvtxRange range("cross_entropy_shard_max");
  const Check c{"cross_entropy_shard_max"};
  const int64_t R = logits.shape[0], V = logits.shape[1];
  c.tensor(logits, "logits", kF32Bf16);
  c.tensor(row_max, "row_max", kF32);
  with_logits(logits, TensorView{}, [&](auto* x, auto*) {
    cuda::cross_entropy_shard_max(row_max.f32(), x, R, V, vocab_start, vocab_size, stream());
  });
}

void CudaOps::do_cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit,
                                          TensorView logits, TensorView targets, TensorView row_max,
                                          int64_t vocab_start, int64_t vocab_size) {
  cuda::NvtxRange range("cross_entropy_shard_sums");
  const Check c{"cross_entropy_shard_sums"};
  const int64_t R = logits.shape[0], V = logits.shape[1];
  c.tensor(logits, "logits", kF32Bf16);
  c.tensor(sumexp, "sumexp", kF32);
  c.tensor(target_logit, "target_logit", kF32);
  c.tensor(targets, "targets", kI32);
  c.tensor(row_max, "row_max", kF32);
  with_logits(logits, TensorView{}, [&](auto* x, auto*) {
    cuda::cross_entropy_shard_sums(sumexp.f32(), target_logit.f32(), x, targets.i32(),
                                   row_max.f32(), R, V, vocab_start, vocab_size, stream());
  });
}

void CudaOps::do_cross_entropy_shard_finish(TensorView losses, TensorView dlogits,
                                            TensorView logits, TensorView targets,
                                            TensorView row_max, TensorView sumexp,
                                            TensorView target_logit, int64_t vocab_start,
                                            int64_t vocab_size, float grad_scale) {
  cuda::NvtxRange range("cross_entropy_shard_finish");
  const Check c{"cross_entropy_shard_finish"};
  const int64_t R = logits.shape[0], V = logits.shape[1];
  c.tensor(logits, "logits", kF32Bf16);
  c.tensor(losses, "losses", kF32);
  c.tensor(targets, "targets", kI32);
  c.tensor(row_max, "row_max", kF32);
  c.tensor(sumexp, "sumexp", kF32);
  c.tensor(target_logit, "target_logit", kF32);
  if (!dlogits.empty()) c.tensor(dlogits, "dlogits", {logits.dtype});
  with_logits(logits, dlogits, [&](auto* x, auto* d) {
    cuda::cross_entropy_shard_finish(losses.f32(), d, x, targets.i32(), row_max.f32(), sumexp.f32(),
                                     target_logit.f32(), R, V, vocab_start, vocab_size, grad_scale,
                                     stream());
  });
}

// ---- optimizer ------------------------------------------------------------------

double CudaOps::do_sum_squares(TensorView t) {
  cuda::NvtxRange range("sum_squares");
  const Check c{"sum_squares"};
  c.tensor(t, "t", kF32);
  const int64_t n = t.numel();
  // [result double | padding to 256 B | partials]
  const size_t partial_offset = 256;
  const size_t bytes =
      partial_offset + sizeof(double) * static_cast<size_t>(cuda::sum_squares_scratch_doubles(n));
  char* base = static_cast<char*>(scratch(bytes));
  double* result = reinterpret_cast<double*>(base);
  double* partials = reinterpret_cast<double*>(base + partial_offset);
  cuda::sum_squares(result, t.f32(), n, partials, stream());
  CUDA_CHECK(cudaMemcpyAsync(host_result_.data(), result, sizeof(double), cudaMemcpyDeviceToHost,
                             stream()));
  stream_.synchronize();
  return *host_result_.as<double>();
}

void CudaOps::do_sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs) {
  cuda::NvtxRange range("sum_squares_runs");
  const Check c{"sum_squares_runs"};  // shapes and runs: checked by the entry point
  c.tensor(out, "out", kF32);
  c.tensor(x, "x", kF32);
  void* s = scratch(cuda::sum_squares_runs_scratch_bytes(runs));
  cuda::sum_squares_runs(out.f32(), x.f32(), runs, s, uploads_, stream());
}

void CudaOps::do_clip_scale(TensorView scale, TensorView stats, float max_norm) {
  cuda::NvtxRange range("clip_scale");
  const Check c{"clip_scale"};
  c.tensor(scale, "scale", kF32);
  c.tensor(stats, "stats", kF32);
  cuda::clip_scale(scale.f32(), stats.f32(), max_norm, stream());
}

void CudaOps::do_adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                                   TensorView param_bf16, TensorView scale,
                                   const std::vector<AdamWRun>& runs, const AdamWParams& p) {
  cuda::NvtxRange range("adamw_update");
  const Check c{"adamw_update_runs"};  // shapes, t and runs: checked by the entry point
  c.tensor(param, "param", kF32);
  c.tensor(grad, "grad", kF32);
  c.tensor(m, "m", kF32);
  c.tensor(v, "v", kF32);
  if (!param_bf16.empty()) c.tensor(param_bf16, "param_bf16", {DType::bf16});
  if (!scale.empty()) c.tensor(scale, "scale", kF32);
  void* table = scratch(std::max<size_t>(1, cuda::adamw_runs_table_bytes(runs.size())));
  cuda::adamw_update_runs(param.f32(), param_bf16.empty() ? nullptr : ptr<bf16>(param_bf16),
                          grad.f32(), m.f32(), v.f32(), scale.empty() ? nullptr : scale.f32(), runs,
                          table, uploads_, p, stream());
}

}  // namespace gt
