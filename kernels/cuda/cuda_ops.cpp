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
  if (o.attention_wgmma) {
    // The sm_90 attention is built for sm_90a alone: no other GPU can run it.
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, o.device));
    if (prop.major != 9 || prop.minor != 0)
      fail("CUDA backend: runtime.attention=wgmma needs an sm_90 GPU (H100, H200); device ",
           o.device, " (", prop.name, ") is sm_", prop.major, prop.minor,
           ". Use runtime.attention=auto");
  }
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
// Shapes, and T within the position table: checked by the Ops entry points.

void CudaOps::do_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                   TensorView wpe) {
  cuda::NvtxRange range("embedding_forward");
  const Check c{"embedding_forward"};
  const int64_t B = tokens.shape[0], T = tokens.shape[1], V = wte.shape[0], C = wte.shape[1];
  c.tensor(tokens, "tokens", kI32);
  c.tensor(wte, "wte", kF32);
  c.tensor(wpe, "wpe", kF32);
  c.tensor(out, "out", kF32);
  cuda::embedding_forward(out.f32(), tokens.i32(), wte.f32(), wpe.f32(), c.to_int(B, "B"),
                          c.to_int(T, "T"), c.to_int(C, "C"), c.to_int(V, "V"), stream());
}

void CudaOps::do_embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout,
                                    TensorView tokens) {
  cuda::NvtxRange range("embedding_backward");
  const Check c{"embedding_backward"};
  const int64_t B = tokens.shape[0], T = tokens.shape[1], V = dwte.shape[0], C = dwte.shape[1];
  c.tensor(tokens, "tokens", kI32);
  c.tensor(dwte, "dwte", kF32);
  c.tensor(dwpe, "dwpe", kF32);
  c.tensor(dout, "dout", kF32);
  cuda::embedding_backward(dwte.f32(), dwpe.f32(), dout.f32(), tokens.i32(), c.to_int(B, "B"),
                           c.to_int(T, "T"), c.to_int(C, "C"), c.to_int(V, "V"), stream());
}

void CudaOps::do_token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                         int64_t vocab_start) {
  cuda::NvtxRange range("token_embedding_forward");
  const Check c{"token_embedding_forward"};
  const int64_t N = tokens.shape[0], Vs = wte.shape[0], C = wte.shape[1];
  c.tensor(tokens, "tokens", kI32);
  c.tensor(wte, "wte", kF32);
  c.tensor(out, "out", kF32);
  cuda::token_embedding_forward(out.f32(), tokens.i32(), wte.f32(), N, c.to_int(C, "C"),
                                c.to_int(Vs, "V_shard"), vocab_start, stream());
}

void CudaOps::do_token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                          int64_t vocab_start) {
  cuda::NvtxRange range("token_embedding_backward");
  const Check c{"token_embedding_backward"};
  const int64_t N = tokens.shape[0], Vs = dwte.shape[0], C = dwte.shape[1];
  c.tensor(tokens, "tokens", kI32);
  c.tensor(dwte, "dwte", kF32);
  c.tensor(dout, "dout", kF32);
  cuda::token_embedding_backward(dwte.f32(), dout.f32(), tokens.i32(), N, c.to_int(C, "C"),
                                 c.to_int(Vs, "V_shard"), vocab_start, stream());
}

void CudaOps::do_position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row,
                                            int T) {
  cuda::NvtxRange range("position_embedding_forward");
  const Check c{"position_embedding_forward"};
  const int64_t N = out.shape[0], C = out.shape[1];
  c.tensor(out, "out", kF32);
  c.tensor(wpe, "wpe", kF32);
  cuda::position_embedding_forward(out.f32(), wpe.f32(), N, c.to_int(C, "C"), first_row, T,
                                   stream());
}

void CudaOps::do_position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row,
                                             int T) {
  cuda::NvtxRange range("position_embedding_backward");
  const Check c{"position_embedding_backward"};
  const int64_t N = dout.shape[0], C = dout.shape[1];
  c.tensor(dout, "dout", kF32);
  c.tensor(dwpe, "dwpe", kF32);
  cuda::position_embedding_backward(dwpe.f32(), dout.f32(), N, c.to_int(C, "C"), first_row, T,
                                    stream());
}

// ---- layernorm ------------------------------------------------------------------

namespace {

// The LayerNorm forward's parameters for activations of `act` dtype: bf16
// activations take bf16 or (bf16 storage) fp32 parameters.
void check_layernorm_params(const Check& c, DType act, const TensorView& weight,
                            const TensorView& bias) {
  c.tensor(weight, "weight", act == DType::f32 ? kF32 : kF32Bf16);
  c.tensor(bias, "bias", {weight.dtype});
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

void CudaOps::do_layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                                   TensorView weight, TensorView bias, TensorView row_amax) {
  cuda::NvtxRange range("layernorm_forward");
  const Check c{"layernorm_forward"};
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(out, "out", {inp.dtype});
  check_layernorm_params(c, inp.dtype, weight, bias);
  if (!mean.empty()) {  // the entry point saw both or neither
    c.tensor(mean, "mean", kF32);
    c.tensor(rstd, "rstd", kF32);
  }
  float* mu = mean.empty() ? nullptr : mean.f32();
  float* rs = rstd.empty() ? nullptr : rstd.f32();
  float* amax = optional_row_amax(c, row_amax);
  const int Ci = c.to_int(C, "C");
  with_layernorm_types(inp.dtype, weight.dtype, [&](auto t, auto w) {
    using T = decltype(t);
    using W = decltype(w);
    cuda::layernorm_forward(ptr<T>(out), mu, rs, ptr<const T>(inp), ptr<const W>(weight),
                            ptr<const W>(bias), R, Ci, stream(), amax);
  });
}

void CudaOps::do_add_layernorm_forward(TensorView res, TensorView out, TensorView mean,
                                       TensorView rstd, TensorView a, TensorView b,
                                       TensorView weight, TensorView bias, TensorView row_amax) {
  cuda::NvtxRange range("add_layernorm_forward");
  const Check c{"add_layernorm_forward"};
  const int64_t R = a.shape[0], C = a.shape[1];
  c.tensor(a, "a", kF32Bf16);
  c.tensor(b, "b", {a.dtype});
  c.tensor(res, "res", {a.dtype});
  c.tensor(out, "out", {a.dtype});
  check_layernorm_params(c, a.dtype, weight, bias);
  c.tensor(mean, "mean", kF32);
  c.tensor(rstd, "rstd", kF32);
  float* amax = optional_row_amax(c, row_amax);
  const int Ci = c.to_int(C, "C");
  with_layernorm_types(a.dtype, weight.dtype, [&](auto t, auto w) {
    using T = decltype(t);
    using W = decltype(w);
    cuda::add_layernorm_forward(ptr<T>(res), ptr<T>(out), mean.f32(), rstd.f32(), ptr<const T>(a),
                                ptr<const T>(b), ptr<const W>(weight), ptr<const W>(bias), R, Ci,
                                stream(), amax);
  });
}

void CudaOps::do_layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                                    TensorView dout, TensorView inp, TensorView weight,
                                    TensorView mean, TensorView rstd, TensorView dinp_bf16,
                                    TensorView row_amax) {
  cuda::NvtxRange range("layernorm_backward");
  const Check c{"layernorm_backward"};
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.tensor(inp, "inp", kF32Bf16);  // bf16 storage: the residual stream
  c.tensor(dinp, "dinp", kF32);
  c.tensor(dout, "dout", kF32Bf16);  // bf16 storage: a GEMM's dinp
  c.tensor(dweight, "dweight", kF32);
  c.tensor(dbias, "dbias", kF32);
  c.tensor(weight, "weight", kF32);
  c.tensor(mean, "mean", kF32);
  c.tensor(rstd, "rstd", kF32);
  if (!dinp_bf16.empty()) c.tensor(dinp_bf16, "dinp_bf16", {DType::bf16});
  bf16* d16 = dinp_bf16.empty() ? nullptr : ptr<bf16>(dinp_bf16);
  float* amax = optional_row_amax(c, row_amax);
  const int Ci = c.to_int(C, "C");
  float* tmp = static_cast<float*>(
      scratch(sizeof(float) * static_cast<size_t>(cuda::layernorm_backward_scratch_floats(R, Ci))));
  auto run = [&](const auto* g, const auto* x) {
    cuda::layernorm_backward(dinp.f32(), dweight.f32(), dbias.f32(), g, x, weight.f32(), mean.f32(),
                             rstd.f32(), R, Ci, tmp, d16, stream(), amax);
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
  int B, T, NH, KV, hs;
};
// qkv's dims: (B, T, (NH + 2 KV) hs), its shape checked by the entry point
// (KV divides NH; KV = NH is multi-head attention, qkv (B, T, 3C)).
AttentionDims attention_dims(const Check& c, const TensorView& qkv, int n_head, int n_kv_head) {
  c.tensor(qkv, "qkv", kF32Bf16);
  const int64_t hs = qkv.shape[2] / (int64_t{n_head} + 2 * int64_t{n_kv_head});
  AttentionDims d{c.to_int(qkv.shape[0], "B"), c.to_int(qkv.shape[1], "T"), n_head, n_kv_head,
                  static_cast<int>(hs)};
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

void CudaOps::do_attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head,
                                   int n_kv_head) {
  cuda::NvtxRange range("attention_forward");
  const Check c{"attention_forward"};
  const AttentionDims d = attention_dims(c, qkv, n_head, n_kv_head);
  c.tensor(out, "out", {qkv.dtype});
  check_flat(c, saved, "saved", attention_saved_elems(d.B, d.NH, d.T));
  if (qkv.dtype == DType::f32)
    cuda::attention_forward(out.f32(), saved.f32(), qkv.f32(), d.B, d.T, d.NH, d.KV, d.hs,
                            stream());
  else if (options_.attention_wgmma && cuda::attention_sm90_supported(d.hs))
    cuda::attention_forward_sm90(ptr<bf16>(out), saved.f32(), ptr<bf16>(qkv), d.B, d.T, d.NH, d.KV,
                                 d.hs, stream());
  else if (options_.attention_tensor_cores && cuda::attention_tc_supported(d.hs))
    cuda::attention_forward_tc(ptr<bf16>(out), saved.f32(), ptr<bf16>(qkv), d.B, d.T, d.NH, d.KV,
                               d.hs, stream());
  else
    cuda::attention_forward(ptr<bf16>(out), saved.f32(), ptr<bf16>(qkv), d.B, d.T, d.NH, d.KV, d.hs,
                            stream());
}

void CudaOps::do_attention_backward(TensorView dqkv, TensorView scratch_view, TensorView dout,
                                    TensorView qkv, TensorView out, TensorView saved, int n_head,
                                    int n_kv_head) {
  cuda::NvtxRange range("attention_backward");
  const Check c{"attention_backward"};
  const AttentionDims d = attention_dims(c, qkv, n_head, n_kv_head);
  c.tensor(dqkv, "dqkv", {qkv.dtype});
  c.tensor(dout, "dout", {qkv.dtype});
  c.tensor(out, "out", {qkv.dtype});
  check_flat(c, saved, "saved", attention_saved_elems(d.B, d.NH, d.T));
  check_flat(c, scratch_view, "scratch", attention_scratch_elems(d.B, d.NH, d.T));
  if (qkv.dtype == DType::f32)
    cuda::attention_backward(dqkv.f32(), scratch_view.f32(), dout.f32(), qkv.f32(), out.f32(),
                             saved.f32(), d.B, d.T, d.NH, d.KV, d.hs, stream());
  else if (options_.attention_tensor_cores && cuda::attention_tc_supported(d.hs))
    cuda::attention_backward_tc(ptr<bf16>(dqkv), scratch_view.f32(), ptr<bf16>(dout),
                                ptr<bf16>(qkv), ptr<bf16>(out), saved.f32(), d.B, d.T, d.NH, d.KV,
                                d.hs, stream());
  else
    cuda::attention_backward(ptr<bf16>(dqkv), scratch_view.f32(), ptr<bf16>(dout), ptr<bf16>(qkv),
                             ptr<bf16>(out), saved.f32(), d.B, d.T, d.NH, d.KV, d.hs, stream());
}

std::unique_ptr<Ops> make_cuda_ops(const CudaContextOptions& options) {
  return std::make_unique<CudaOps>(options);
}

}  // namespace gt
