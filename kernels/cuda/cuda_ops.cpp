// CudaOps (see cuda_ops.hpp): construction, the scratch arena, and the ops
// that own their scratch or call cuBLASLt: embeddings, LayerNorm, linear
// layers, attention (the rest is in cuda_ops_pointwise.cpp). Host code only
// (compiled by the C++ compiler); every kernel is enqueued on the context's
// stream.
#include "kernels/cuda/cuda_ops.hpp"

#include <algorithm>
#include <climits>
#include <initializer_list>

#include "kernels/core/attention_kernels.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops_check.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/nvtx.hpp"

namespace gt {

using namespace cuda_ops_detail;

namespace {

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

CudaContextOptions select_device(const CudaContextOptions& o) {
  const int n = cuda::cuda_device_count();
  if (n == 0)
    fail("CUDA backend: no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
         "hides them); use runtime.device=cpu");
  if (o.device < 0 || o.device >= n)
    fail("CUDA backend: device ", o.device, " was asked for but ", n, " device(s) are visible");
  CUDA_CHECK(cudaSetDevice(o.device));
  return o;
}

}  // namespace

CudaOps::CudaOps(const CudaContextOptions& options)
    : options_(select_device(options)),
      stream_(),
      gemm_(cuda::GemmOptions{options.workspace_bytes, options.allow_tf32}),
      scratch_(round_up(options.scratch_bytes)),
      host_result_(sizeof(double)) {}

CudaOps::~CudaOps() = default;

void CudaOps::reserve_scratch(size_t bytes) {
  if (bytes <= scratch_.bytes()) return;
  // Kernels already queued may still use the old arena.
  stream_.synchronize();
  scratch_ = cuda::DeviceBuffer();  // free first: the peak is the new size, not the sum
  scratch_ = cuda::DeviceBuffer(round_up(bytes));
  count_buffer_bytes(0);
}

void* CudaOps::scratch(size_t bytes) {
  reserve_scratch(bytes);
  return scratch_.data();
}

// ---- embeddings -----------------------------------------------------------------

void CudaOps::embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                TensorView wpe) {
  cuda::NvtxRange range("embedding_forward");
  const Check c{"embedding_forward"};
  c.ndim(tokens, "tokens", 2, "(B, T)");
  c.ndim(wte, "wte", 2, "(V, C)");
  c.ndim(wpe, "wpe", 2, "(maxT, C)");
  const int64_t B = tokens.shape[0], T = tokens.shape[1], V = wte.shape[0], C = wte.shape[1];
  c.tensor(tokens, "tokens", kI32, {B, T});
  c.tensor(wte, "wte", kF32, {V, C});
  c.tensor(wpe, "wpe", kF32, {wpe.shape[0], C});
  c.tensor(out, "out", kF32, {B, T, C});
  if (T > wpe.shape[0])
    fail("CudaOps::embedding_forward: sequence length ", T, " exceeds the ", wpe.shape[0],
         " positions of wpe");
  cuda::embedding_forward(out.f32(), tokens.i32(), wte.f32(), wpe.f32(), c.to_int(B, "B"),
                          c.to_int(T, "T"), c.to_int(C, "C"), c.to_int(V, "V"), stream());
}

void CudaOps::embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout,
                                 TensorView tokens) {
  cuda::NvtxRange range("embedding_backward");
  const Check c{"embedding_backward"};
  c.ndim(tokens, "tokens", 2, "(B, T)");
  c.ndim(dwte, "dwte", 2, "(V, C)");
  c.ndim(dwpe, "dwpe", 2, "(maxT, C)");
  const int64_t B = tokens.shape[0], T = tokens.shape[1], V = dwte.shape[0], C = dwte.shape[1];
  c.tensor(tokens, "tokens", kI32, {B, T});
  c.tensor(dwte, "dwte", kF32, {V, C});
  c.tensor(dwpe, "dwpe", kF32, {dwpe.shape[0], C});
  c.tensor(dout, "dout", kF32, {B, T, C});
  if (T > dwpe.shape[0])
    fail("CudaOps::embedding_backward: sequence length ", T, " exceeds the ", dwpe.shape[0],
         " positions of dwpe");
  cuda::embedding_backward(dwte.f32(), dwpe.f32(), dout.f32(), tokens.i32(), c.to_int(B, "B"),
                           c.to_int(T, "T"), c.to_int(C, "C"), c.to_int(V, "V"), stream());
}

void CudaOps::token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                      int64_t vocab_start) {
  cuda::NvtxRange range("token_embedding_forward");
  const Check c{"token_embedding_forward"};
  c.ndim(tokens, "tokens", 1, "(N)");
  c.ndim(wte, "wte", 2, "(V_shard, C)");
  const int64_t N = tokens.shape[0], Vs = wte.shape[0], C = wte.shape[1];
  c.tensor(tokens, "tokens", kI32, {N});
  c.tensor(wte, "wte", kF32, {Vs, C});
  c.tensor(out, "out", kF32, {N, C});
  cuda::token_embedding_forward(out.f32(), tokens.i32(), wte.f32(), N, c.to_int(C, "C"),
                                c.to_int(Vs, "V_shard"), vocab_start, stream());
}

void CudaOps::token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                       int64_t vocab_start) {
  cuda::NvtxRange range("token_embedding_backward");
  const Check c{"token_embedding_backward"};
  c.ndim(tokens, "tokens", 1, "(N)");
  c.ndim(dwte, "dwte", 2, "(V_shard, C)");
  const int64_t N = tokens.shape[0], Vs = dwte.shape[0], C = dwte.shape[1];
  c.tensor(tokens, "tokens", kI32, {N});
  c.tensor(dwte, "dwte", kF32, {Vs, C});
  c.tensor(dout, "dout", kF32, {N, C});
  cuda::token_embedding_backward(dwte.f32(), dout.f32(), tokens.i32(), N, c.to_int(C, "C"),
                                 c.to_int(Vs, "V_shard"), vocab_start, stream());
}

void CudaOps::position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row,
                                         int T) {
  cuda::NvtxRange range("position_embedding_forward");
  const Check c{"position_embedding_forward"};
  c.ndim(out, "out", 2, "(N, C)");
  c.ndim(wpe, "wpe", 2, "(maxT, C)");
  const int64_t N = out.shape[0], C = out.shape[1];
  c.tensor(out, "out", kF32, {N, C});
  c.tensor(wpe, "wpe", kF32, {wpe.shape[0], C});
  if (T < 1 || T > wpe.shape[0] || first_row < 0)
    fail("CudaOps::position_embedding_forward: T = ", T, " must be in [1, ", wpe.shape[0],
         "] and first_row = ", first_row, " >= 0");
  cuda::position_embedding_forward(out.f32(), wpe.f32(), N, c.to_int(C, "C"), first_row, T,
                                   stream());
}

void CudaOps::position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row,
                                          int T) {
  cuda::NvtxRange range("position_embedding_backward");
  const Check c{"position_embedding_backward"};
  c.ndim(dout, "dout", 2, "(N, C)");
  c.ndim(dwpe, "dwpe", 2, "(maxT, C)");
  const int64_t N = dout.shape[0], C = dout.shape[1];
  c.tensor(dout, "dout", kF32, {N, C});
  c.tensor(dwpe, "dwpe", kF32, {dwpe.shape[0], C});
  if (T < 1 || T > dwpe.shape[0] || first_row < 0)
    fail("CudaOps::position_embedding_backward: T = ", T, " must be in [1, ", dwpe.shape[0],
         "] and first_row = ", first_row, " >= 0");
  cuda::position_embedding_backward(dwpe.f32(), dout.f32(), N, c.to_int(C, "C"), first_row, T,
                                    stream());
}

// ---- layernorm ------------------------------------------------------------------

namespace {

// The LayerNorm forward's parameters for activations of `act` dtype (R rows
// of C): bf16 activations take bf16 or (bf16 storage) fp32 parameters.
void check_layernorm_params(const Check& c, DType act, const TensorView& weight,
                            const TensorView& bias, int64_t C) {
  c.tensor(weight, "weight", act == DType::f32 ? kF32 : kF32Bf16, {C});
  c.tensor(bias, "bias", {weight.dtype}, {C});
}

// Calls f(T{}, W{}) with the element types of the three (activation,
// parameter) pairs the LayerNorm kernels take: fp32/fp32, bf16/fp32, bf16/bf16.
template <typename F>
void with_layernorm_types(DType act, DType param, F&& f) {
  if (act == DType::f32)
    f(float{}, float{});
  else if (param == DType::f32)
    f(bf16{}, float{});
  else
    f(bf16{}, bf16{});
}

}  // namespace

void CudaOps::layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                                TensorView weight, TensorView bias) {
  cuda::NvtxRange range("layernorm_forward");
  const Check c{"layernorm_forward"};
  c.ndim(inp, "inp", 2, "(R, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.tensor(inp, "inp", kF32Bf16, {R, C});
  c.tensor(out, "out", {inp.dtype}, {R, C});
  check_layernorm_params(c, inp.dtype, weight, bias, C);
  if (mean.empty() != rstd.empty())
    fail("CudaOps::layernorm_forward: mean and rstd are saved together (both or neither)");
  if (!mean.empty()) {
    c.tensor(mean, "mean", kF32, {R});
    c.tensor(rstd, "rstd", kF32, {R});
  }
  float* mu = mean.empty() ? nullptr : mean.f32();
  float* rs = rstd.empty() ? nullptr : rstd.f32();
  const int Ci = c.to_int(C, "C");
  with_layernorm_types(inp.dtype, weight.dtype, [&](auto t, auto w) {
    using T = decltype(t);
    using W = decltype(w);
    cuda::layernorm_forward(ptr<T>(out), mu, rs, ptr<const T>(inp), ptr<const W>(weight),
                            ptr<const W>(bias), R, Ci, stream());
  });
}

void CudaOps::add_layernorm_forward(TensorView res, TensorView out, TensorView mean,
                                    TensorView rstd, TensorView a, TensorView b, TensorView weight,
                                    TensorView bias) {
  cuda::NvtxRange range("add_layernorm_forward");
  const Check c{"add_layernorm_forward"};
  c.ndim(a, "a", 2, "(R, C)");
  const int64_t R = a.shape[0], C = a.shape[1];
  c.tensor(a, "a", kF32Bf16, {R, C});
  c.tensor(b, "b", {a.dtype}, {R, C});
  c.tensor(res, "res", {a.dtype}, {R, C});
  c.tensor(out, "out", {a.dtype}, {R, C});
  check_layernorm_params(c, a.dtype, weight, bias, C);
  c.tensor(mean, "mean", kF32, {R});
  c.tensor(rstd, "rstd", kF32, {R});
  const int Ci = c.to_int(C, "C");
  with_layernorm_types(a.dtype, weight.dtype, [&](auto t, auto w) {
    using T = decltype(t);
    using W = decltype(w);
    cuda::add_layernorm_forward(ptr<T>(res), ptr<T>(out), mean.f32(), rstd.f32(), ptr<const T>(a),
                                ptr<const T>(b), ptr<const W>(weight), ptr<const W>(bias), R, Ci,
                                stream());
  });
}

void CudaOps::layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                                 TensorView dout, TensorView inp, TensorView weight,
                                 TensorView mean, TensorView rstd, TensorView dinp_bf16) {
  cuda::NvtxRange range("layernorm_backward");
  const Check c{"layernorm_backward"};
  c.ndim(inp, "inp", 2, "(R, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.tensor(inp, "inp", kF32Bf16, {R, C});  // bf16 storage: the residual stream
  c.tensor(dinp, "dinp", kF32, {R, C});
  c.tensor(dout, "dout", kF32Bf16, {R, C});  // bf16 storage: a GEMM's dinp
  c.tensor(dweight, "dweight", kF32, {C});
  c.tensor(dbias, "dbias", kF32, {C});
  c.tensor(weight, "weight", kF32, {C});
  c.tensor(mean, "mean", kF32, {R});
  c.tensor(rstd, "rstd", kF32, {R});
  if (!dinp_bf16.empty()) c.tensor(dinp_bf16, "dinp_bf16", {DType::bf16}, {R, C});
  bf16* d16 = dinp_bf16.empty() ? nullptr : ptr<bf16>(dinp_bf16);
  const int Ci = c.to_int(C, "C");
  float* tmp = static_cast<float*>(
      scratch(sizeof(float) * static_cast<size_t>(cuda::layernorm_backward_scratch_floats(R, Ci))));
  auto run = [&](const auto* g, const auto* x) {
    cuda::layernorm_backward(dinp.f32(), dweight.f32(), dbias.f32(), g, x, weight.f32(), mean.f32(),
                             rstd.f32(), R, Ci, tmp, d16, stream());
  };
  const bool g16 = dout.dtype == DType::bf16, x16 = inp.dtype == DType::bf16;
  if (g16 && x16)
    run(ptr<bf16>(dout), ptr<bf16>(inp));
  else if (g16)
    run(ptr<bf16>(dout), inp.f32());
  else if (x16)
    run(dout.f32(), ptr<bf16>(inp));
  else
    run(dout.f32(), inp.f32());
}

// ---- attention ------------------------------------------------------------------

int64_t CudaOps::attention_saved_elems(int B, int n_head, int T) const {
  return gt::attention_saved_elems(Device::cuda, B, n_head, T);
}
int64_t CudaOps::attention_scratch_elems(int B, int n_head, int T) const {
  return gt::attention_scratch_elems(Device::cuda, B, n_head, T);
}

namespace {
struct AttentionDims {
  int B, T, NH, hs;
  int64_t C;
};
AttentionDims attention_dims(const Check& c, const TensorView& qkv, int n_head) {
  c.ndim(qkv, "qkv", 3, "(B, T, 3C)");
  c.tensor(qkv, "qkv", kF32Bf16);
  const int64_t C3 = qkv.shape[2];
  if (n_head < 1 || C3 % 3 != 0 || (C3 / 3) % n_head != 0)
    fail("CudaOps::", c.op, ": qkv ", qkv.shape_str(), " is not (B, T, 3C) with C divisible by ",
         n_head, " heads");
  AttentionDims d{c.to_int(qkv.shape[0], "B"), c.to_int(qkv.shape[1], "T"), n_head,
                  static_cast<int>(C3 / 3 / n_head), C3 / 3};
  if (d.hs > 128)
    fail("CudaOps::", c.op, ": head size ", d.hs, " > 128 is not supported by the flash kernel");
  return d;
}
void check_flat(const Check& c, const TensorView& t, const char* what, int64_t n) {
  c.tensor(t, what, kF32);
  if (t.numel() != n)
    fail("CudaOps::", c.op, ": ", what, " holds ", t.numel(), " floats, expected B*NH*T = ", n);
}
}  // namespace

void CudaOps::attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head) {
  cuda::NvtxRange range("attention_forward");
  const Check c{"attention_forward"};
  const AttentionDims d = attention_dims(c, qkv, n_head);
  c.tensor(out, "out", {qkv.dtype}, {d.B, d.T, d.C});
  check_flat(c, saved, "saved", attention_saved_elems(d.B, d.NH, d.T));
  if (qkv.dtype == DType::f32)
    cuda::attention_forward(out.f32(), saved.f32(), qkv.f32(), d.B, d.T, d.NH, d.hs, stream());
  else if (options_.attention_tensor_cores && cuda::attention_tc_supported(d.hs))
    cuda::attention_forward_tc(ptr<bf16>(out), saved.f32(), ptr<bf16>(qkv), d.B, d.T, d.NH, d.hs,
                               stream());
  else
    cuda::attention_forward(ptr<bf16>(out), saved.f32(), ptr<bf16>(qkv), d.B, d.T, d.NH, d.hs,
                            stream());
}

void CudaOps::attention_backward(TensorView dqkv, TensorView scratch_view, TensorView dout,
                                 TensorView qkv, TensorView out, TensorView saved, int n_head) {
  cuda::NvtxRange range("attention_backward");
  const Check c{"attention_backward"};
  const AttentionDims d = attention_dims(c, qkv, n_head);
  c.tensor(dqkv, "dqkv", {qkv.dtype}, {d.B, d.T, 3 * d.C});
  c.tensor(dout, "dout", {qkv.dtype}, {d.B, d.T, d.C});
  c.tensor(out, "out", {qkv.dtype}, {d.B, d.T, d.C});
  check_flat(c, saved, "saved", attention_saved_elems(d.B, d.NH, d.T));
  check_flat(c, scratch_view, "scratch", attention_scratch_elems(d.B, d.NH, d.T));
  if (qkv.dtype == DType::f32)
    cuda::attention_backward(dqkv.f32(), scratch_view.f32(), dout.f32(), qkv.f32(), out.f32(),
                             saved.f32(), d.B, d.T, d.NH, d.hs, stream());
  else if (options_.attention_tensor_cores && cuda::attention_tc_supported(d.hs))
    cuda::attention_backward_tc(ptr<bf16>(dqkv), scratch_view.f32(), ptr<bf16>(dout),
                                ptr<bf16>(qkv), ptr<bf16>(out), saved.f32(), d.B, d.T, d.NH,
                                d.hs, stream());
  else
    cuda::attention_backward(ptr<bf16>(dqkv), scratch_view.f32(), ptr<bf16>(dout),
                             ptr<bf16>(qkv), ptr<bf16>(out), saved.f32(), d.B, d.T, d.NH, d.hs,
                             stream());
}

std::unique_ptr<Ops> make_cuda_ops(const CudaContextOptions& options) {
  return std::make_unique<CudaOps>(options);
}

}  // namespace gt
