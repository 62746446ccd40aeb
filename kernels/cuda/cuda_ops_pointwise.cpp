// CudaOps (see cuda_ops.hpp): the elementwise ops, casts, cross-entropy and
// the optimizer's reductions and update. Host code only.
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

void CudaOps::gelu_forward(TensorView out, TensorView inp) {
  cuda::NvtxRange range("gelu_forward");
  const Check c{"gelu_forward"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(out, "out", {inp.dtype});
  c.same_shape(out, inp, "out", "inp");
  if (inp.dtype == DType::f32)
    cuda::gelu_forward(out.f32(), inp.f32(), inp.numel(), stream());
  else
    cuda::gelu_forward(ptr<bf16>(out), ptr<bf16>(inp), inp.numel(), stream());
}

void CudaOps::gelu_backward(TensorView dinp, TensorView inp, TensorView dout) {
  cuda::NvtxRange range("gelu_backward");
  const Check c{"gelu_backward"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(dinp, "dinp", {inp.dtype});
  c.tensor(dout, "dout", {inp.dtype});
  c.same_shape(dinp, inp, "dinp", "inp");
  c.same_shape(dout, inp, "dout", "inp");
  if (inp.dtype == DType::f32)
    cuda::gelu_backward(dinp.f32(), inp.f32(), dout.f32(), inp.numel(), stream());
  else
    cuda::gelu_backward(ptr<bf16>(dinp), ptr<bf16>(inp), ptr<bf16>(dout), inp.numel(), stream());
}

void CudaOps::add(TensorView out, TensorView a, TensorView b) {
  cuda::NvtxRange range("add");
  const Check c{"add"};
  c.tensor(a, "a", kF32Bf16);
  c.tensor(b, "b", {a.dtype});
  c.tensor(out, "out", {a.dtype});
  c.same_shape(out, a, "out", "a");
  c.same_shape(out, b, "out", "b");
  if (a.dtype == DType::f32)
    cuda::add(out.f32(), a.f32(), b.f32(), out.numel(), stream());
  else
    cuda::add(ptr<bf16>(out), ptr<bf16>(a), ptr<bf16>(b), out.numel(), stream());
}

void CudaOps::accumulate(TensorView acc, TensorView x) {
  cuda::NvtxRange range("accumulate");
  const Check c{"accumulate"};
  c.tensor(acc, "acc", kF32Bf16);
  c.tensor(x, "x", {acc.dtype});
  c.same_shape(acc, x, "acc", "x");
  if (acc.dtype == DType::f32)
    cuda::accumulate(acc.f32(), x.f32(), acc.numel(), stream());
  else
    cuda::accumulate(ptr<bf16>(acc), ptr<bf16>(x), acc.numel(), stream());
}

void CudaOps::zero(TensorView t) {
  cuda::NvtxRange range("zero");
  const Check c{"zero"};
  c.tensor(t, "t", {DType::f32, DType::bf16, DType::i32});
  const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype);
  if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(t.data, 0, bytes, stream()));
}

void CudaOps::copy(TensorView dst, TensorView src) {
  cuda::NvtxRange range("copy");
  const Check c{"copy"};
  c.tensor(src, "src", {DType::f32, DType::bf16, DType::i32});
  c.tensor(dst, "dst", {src.dtype});
  c.same_shape(dst, src, "dst", "src");
  const size_t bytes = static_cast<size_t>(src.numel()) * dtype_size(src.dtype);
  if (bytes > 0 && dst.data != src.data)
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, bytes, cudaMemcpyDeviceToDevice, stream()));
}

void CudaOps::cast(TensorView dst, TensorView src) {
  cuda::NvtxRange range("cast");
  const Check c{"cast"};
  c.tensor(src, "src", kF32Bf16);
  c.tensor(dst, "dst", kF32Bf16);
  c.same_shape(dst, src, "dst", "src");
  if (dst.dtype == src.dtype) {
    copy(dst, src);
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

void CudaOps::softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                                    TensorView targets, int64_t vocab_size, float grad_scale) {
  cuda::NvtxRange range("softmax_cross_entropy");
  const Check c{"softmax_cross_entropy"};
  c.ndim(logits, "logits", 2, "(R, V)");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  if (V < 1) fail("CudaOps::softmax_cross_entropy: empty vocabulary");
  if (vocab_size < 1 || vocab_size > V)
    fail("CudaOps::softmax_cross_entropy: vocab_size ", vocab_size, " must be in [1, ", V,
         "] (the logits' columns)");
  c.tensor(logits, "logits", kF32Bf16, {R, V});
  c.tensor(losses, "losses", kF32, {R});
  c.tensor(targets, "targets", kI32, {R});
  if (!dlogits.empty()) c.tensor(dlogits, "dlogits", {logits.dtype}, {R, V});
  with_logits(logits, dlogits, [&](auto* x, auto* d) {
    cuda::softmax_cross_entropy(losses.f32(), d, x, targets.i32(), R, V, vocab_size, grad_scale,
                                stream());
  });
}

void CudaOps::cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                                      int64_t vocab_size) {
  cuda::NvtxRange range("cross_entropy_shard_max");
  const Check c{"cross_entropy_shard_max"};
  c.ndim(logits, "logits", 2, "(R, V_shard)");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  if (V < 1) fail("CudaOps::cross_entropy_shard_max: empty vocabulary shard");
  c.tensor(logits, "logits", kF32Bf16, {R, V});
  c.tensor(row_max, "row_max", kF32, {R});
  with_logits(logits, TensorView{}, [&](auto* x, auto*) {
    cuda::cross_entropy_shard_max(row_max.f32(), x, R, V, vocab_start, vocab_size, stream());
  });
}

void CudaOps::cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit,
                                       TensorView logits, TensorView targets, TensorView row_max,
                                       int64_t vocab_start, int64_t vocab_size) {
  cuda::NvtxRange range("cross_entropy_shard_sums");
  const Check c{"cross_entropy_shard_sums"};
  c.ndim(logits, "logits", 2, "(R, V_shard)");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  if (V < 1) fail("CudaOps::cross_entropy_shard_sums: empty vocabulary shard");
  c.tensor(logits, "logits", kF32Bf16, {R, V});
  c.tensor(sumexp, "sumexp", kF32, {R});
  c.tensor(target_logit, "target_logit", kF32, {R});
  c.tensor(targets, "targets", kI32, {R});
  c.tensor(row_max, "row_max", kF32, {R});
  with_logits(logits, TensorView{}, [&](auto* x, auto*) {
    cuda::cross_entropy_shard_sums(sumexp.f32(), target_logit.f32(), x, targets.i32(),
                                   row_max.f32(), R, V, vocab_start, vocab_size, stream());
  });
}

void CudaOps::cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                         TensorView targets, TensorView row_max, TensorView sumexp,
                                         TensorView target_logit, int64_t vocab_start,
                                         int64_t vocab_size, float grad_scale) {
  cuda::NvtxRange range("cross_entropy_shard_finish");
  const Check c{"cross_entropy_shard_finish"};
  c.ndim(logits, "logits", 2, "(R, V_shard)");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  if (V < 1) fail("CudaOps::cross_entropy_shard_finish: empty vocabulary shard");
  c.tensor(logits, "logits", kF32Bf16, {R, V});
  c.tensor(losses, "losses", kF32, {R});
  c.tensor(targets, "targets", kI32, {R});
  c.tensor(row_max, "row_max", kF32, {R});
  c.tensor(sumexp, "sumexp", kF32, {R});
  c.tensor(target_logit, "target_logit", kF32, {R});
  if (!dlogits.empty()) c.tensor(dlogits, "dlogits", {logits.dtype}, {R, V});
  with_logits(logits, dlogits, [&](auto* x, auto* d) {
    cuda::cross_entropy_shard_finish(losses.f32(), d, x, targets.i32(), row_max.f32(), sumexp.f32(),
                                     target_logit.f32(), R, V, vocab_start, vocab_size, grad_scale,
                                     stream());
  });
}

// ---- optimizer ------------------------------------------------------------------

double CudaOps::sum_squares(TensorView t) {
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

void CudaOps::sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs) {
  cuda::NvtxRange range("sum_squares_runs");
  const Check c{"sum_squares_runs"};
  c.tensor(out, "out", kF32, {1});
  c.ndim(x, "x", 1, "1-D");
  c.tensor(x, "x", kF32, {x.shape[0]});
  check_state_runs("CudaOps::sum_squares_runs", runs, x.shape[0]);
  void* s = scratch(cuda::sum_squares_runs_scratch_bytes(runs));
  cuda::sum_squares_runs(out.f32(), x.f32(), runs, s, uploads_, stream());
}

void CudaOps::clip_scale(TensorView scale, TensorView stats, float max_norm) {
  cuda::NvtxRange range("clip_scale");
  const Check c{"clip_scale"};
  c.tensor(scale, "scale", kF32, {1});
  c.tensor(stats, "stats", kF32, {2});
  cuda::clip_scale(scale.f32(), stats.f32(), max_norm, stream());
}

void CudaOps::adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                                TensorView param_bf16, TensorView scale,
                                const std::vector<AdamWRun>& runs, const AdamWParams& p) {
  cuda::NvtxRange range("adamw_update");
  const Check c{"adamw_update_runs"};
  c.ndim(param, "param", 1, "1-D");
  c.ndim(grad, "grad", 1, "1-D");
  const int64_t n = param.shape[0], n_state = grad.shape[0];
  c.tensor(param, "param", kF32, {n});
  c.tensor(grad, "grad", kF32, {n_state});
  c.tensor(m, "m", kF32, {n_state});
  c.tensor(v, "v", kF32, {n_state});
  if (!param_bf16.empty()) c.tensor(param_bf16, "param_bf16", {DType::bf16}, {n});
  if (!scale.empty()) c.tensor(scale, "scale", kF32, {1});
  if (p.t < 1) fail("CudaOps::adamw_update_runs: step t counts from 1, got ", p.t);
  check_adamw_runs("CudaOps::adamw_update_runs", runs, n, n_state);
  void* table = scratch(std::max<size_t>(1, cuda::adamw_runs_table_bytes(runs.size())));
  cuda::adamw_update_runs(param.f32(), param_bf16.empty() ? nullptr : ptr<bf16>(param_bf16),
                          grad.f32(), m.f32(), v.f32(), scale.empty() ? nullptr : scale.f32(), runs,
                          table, uploads_, p, stream());
}

}  // namespace gt
