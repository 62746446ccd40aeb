// CudaOps (see cuda_ops.hpp): argument checks that name the op, dtype
// dispatch, and the calls into the kernel launchers and the GemmContext.
// Host code only (compiled by the C++ compiler); every kernel is enqueued on
// the context's stream.
#include "kernels/cuda/cuda_ops.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <initializer_list>

#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/nvtx.hpp"
#include "kernels/cuda/sum_squares.cuh"

namespace gt {

namespace {

using bf16 = __nv_bfloat16;

template <typename T>
T* ptr(const TensorView& t) {
  return static_cast<T*>(t.data);
}

std::string dtype_list(std::initializer_list<DType> ok) {
  std::string s;
  for (DType d : ok) s += (s.empty() ? "" : " or ") + std::string(dtype_name(d));
  return s;
}

// Argument checks for one op; every message starts "CudaOps::<op>: ".
struct Check {
  const char* op;

  void tensor(const TensorView& t, const char* what, std::initializer_list<DType> ok) const {
    if (t.device != Device::cuda)
      fail("CudaOps::", op, ": ", what, " must be a cuda tensor, got a ", device_name(t.device),
           " one");
    if (std::find(ok.begin(), ok.end(), t.dtype) == ok.end())
      fail("CudaOps::", op, ": ", what, " must be ", dtype_list(ok), ", got ",
           dtype_name(t.dtype));
    if (!t.contiguous())
      fail("CudaOps::", op, ": ", what, " must be contiguous, got a strided ", t.shape_str());
    if (t.data == nullptr && t.numel() > 0) fail("CudaOps::", op, ": ", what, " has no data");
  }
  void tensor(const TensorView& t, const char* what, std::initializer_list<DType> ok,
              std::initializer_list<int64_t> shape) const {
    tensor(t, what, ok);
    bool same = t.ndim == static_cast<int>(shape.size());
    int i = 0;
    for (int64_t s : shape) same = same && t.shape[i++] == s;
    if (!same) {
      std::string want = "(";
      i = 0;
      for (int64_t s : shape) want += (i++ ? ", " : "") + std::to_string(s);
      fail("CudaOps::", op, ": ", what, " must be ", want, "), got ", t.shape_str());
    }
  }
  void ndim(const TensorView& t, const char* what, int n, const char* layout) const {
    if (t.ndim != n) fail("CudaOps::", op, ": ", what, " must be ", layout, ", got ", t.shape_str());
  }
  void same_dtype(const TensorView& a, const TensorView& b, const char* wa, const char* wb) const {
    if (a.dtype != b.dtype)
      fail("CudaOps::", op, ": ", wa, " (", dtype_name(a.dtype), ") and ", wb, " (",
           dtype_name(b.dtype), ") must have the same dtype");
  }
  void same_shape(const TensorView& a, const TensorView& b, const char* wa, const char* wb) const {
    bool same = a.ndim == b.ndim;
    for (int i = 0; same && i < a.ndim; ++i) same = a.shape[i] == b.shape[i];
    if (!same)
      fail("CudaOps::", op, ": ", wa, " ", a.shape_str(), " and ", wb, " ", b.shape_str(),
           " must have the same shape");
  }
  int to_int(int64_t v, const char* what) const {
    if (v < 0 || v > INT_MAX) fail("CudaOps::", op, ": ", what, " = ", v, " is out of range");
    return static_cast<int>(v);
  }
};

constexpr std::initializer_list<DType> kF32 = {DType::f32};
constexpr std::initializer_list<DType> kF32Bf16 = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kI32 = {DType::i32};

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

void CudaOps::layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                                TensorView weight, TensorView bias) {
  cuda::NvtxRange range("layernorm_forward");
  const Check c{"layernorm_forward"};
  c.ndim(inp, "inp", 2, "(R, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.tensor(inp, "inp", kF32Bf16, {R, C});
  c.tensor(out, "out", {inp.dtype}, {R, C});
  c.tensor(weight, "weight", {inp.dtype}, {C});
  c.tensor(bias, "bias", {inp.dtype}, {C});
  if (mean.empty() != rstd.empty())
    fail("CudaOps::layernorm_forward: mean and rstd are saved together (both or neither)");
  if (!mean.empty()) {
    c.tensor(mean, "mean", kF32, {R});
    c.tensor(rstd, "rstd", kF32, {R});
  }
  float* mu = mean.empty() ? nullptr : mean.f32();
  float* rs = rstd.empty() ? nullptr : rstd.f32();
  if (inp.dtype == DType::f32)
    cuda::layernorm_forward(out.f32(), mu, rs, inp.f32(), weight.f32(), bias.f32(), R,
                            c.to_int(C, "C"), stream());
  else
    cuda::layernorm_forward(ptr<bf16>(out), mu, rs, ptr<bf16>(inp), ptr<bf16>(weight),
                            ptr<bf16>(bias), R, c.to_int(C, "C"), stream());
}

void CudaOps::layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                                 TensorView dout, TensorView inp, TensorView weight,
                                 TensorView mean, TensorView rstd) {
  cuda::NvtxRange range("layernorm_backward");
  const Check c{"layernorm_backward"};
  c.ndim(inp, "inp", 2, "(R, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.tensor(inp, "inp", kF32, {R, C});
  c.tensor(dinp, "dinp", kF32, {R, C});
  c.tensor(dout, "dout", kF32, {R, C});
  c.tensor(dweight, "dweight", kF32, {C});
  c.tensor(dbias, "dbias", kF32, {C});
  c.tensor(weight, "weight", kF32, {C});
  c.tensor(mean, "mean", kF32, {R});
  c.tensor(rstd, "rstd", kF32, {R});
  const int Ci = c.to_int(C, "C");
  float* tmp = static_cast<float*>(
      scratch(sizeof(float) * static_cast<size_t>(cuda::layernorm_backward_scratch_floats(R, Ci))));
  cuda::layernorm_backward(dinp.f32(), dweight.f32(), dbias.f32(), dout.f32(), inp.f32(),
                           weight.f32(), mean.f32(), rstd.f32(), R, Ci, tmp, stream());
}

// ---- linear layers ----------------------------------------------------------------

void CudaOps::matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  cuda::NvtxRange range("matmul_forward");
  const Check c{"matmul_forward"};
  c.ndim(inp, "inp", 2, "(R, C)");
  c.ndim(weight, "weight", 2, "(OC, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  c.tensor(inp, "inp", kF32Bf16, {R, C});
  c.tensor(weight, "weight", {inp.dtype}, {OC, C});
  // bf16 products may be written in fp32; fp32 ones stay fp32.
  c.tensor(out, "out", inp.dtype == DType::bf16 ? kF32Bf16 : kF32, {R, OC});
  if (!bias.empty()) c.tensor(bias, "bias", {out.dtype}, {OC});

  // out (R,OC) = inp (R,C) @ weight (OC,C)^T [+ bias]
  cuda::GemmArgs g;
  g.M = R;
  g.N = OC;
  g.K = C;
  g.A = inp.data;
  g.B = weight.data;
  g.trans_b = true;
  g.D = out.data;
  g.ab_type = inp.dtype;
  g.d_type = out.dtype;
  if (!bias.empty()) {
    g.epilogue = cuda::GemmEpilogue::bias;
    g.bias = bias.data;
    if (gemm_.supported(g)) {
      gemm_.run(g, stream());
      return;
    }
    g.epilogue = cuda::GemmEpilogue::none;  // no fused kernel for this shape: add it after
    g.bias = nullptr;
  }
  gemm_.run(g, stream());
  if (bias.empty()) return;
  if (out.dtype == DType::f32)
    cuda::add_bias(out.f32(), bias.f32(), R, OC, stream());
  else
    cuda::add_bias(ptr<bf16>(out), ptr<bf16>(bias), R, OC, stream());
}

void CudaOps::matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                              TensorView dout, TensorView inp, TensorView weight) {
  cuda::NvtxRange range("matmul_backward");
  const Check c{"matmul_backward"};
  c.ndim(inp, "inp", 2, "(R, C)");
  c.ndim(weight, "weight", 2, "(OC, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  c.tensor(inp, "inp", kF32Bf16, {R, C});
  const std::initializer_list<DType> acc_types = inp.dtype == DType::bf16 ? kF32Bf16 : kF32;
  c.tensor(weight, "weight", {inp.dtype}, {OC, C});
  c.tensor(dout, "dout", {inp.dtype}, {R, OC});
  c.tensor(dweight, "dweight", acc_types, {OC, C});
  if (!dinp.empty()) c.tensor(dinp, "dinp", acc_types, {R, C});
  if (!dbias.empty()) c.tensor(dbias, "dbias", kF32, {OC});

  if (!dinp.empty()) {
    // dinp (R,C) = dout (R,OC) @ weight (OC,C), assigned
    cuda::GemmArgs g;
    g.M = R;
    g.N = C;
    g.K = OC;
    g.A = dout.data;
    g.B = weight.data;
    g.D = dinp.data;
    g.ab_type = inp.dtype;
    g.d_type = dinp.dtype;
    gemm_.run(g, stream());
  }

  // dweight (OC,C) += dout^T (OC,R) @ inp (R,C); dbias (OC) += column sums of dout
  cuda::GemmArgs g;
  g.M = OC;
  g.N = C;
  g.K = R;
  g.A = dout.data;
  g.trans_a = true;
  g.B = inp.data;
  g.D = dweight.data;
  g.ab_type = inp.dtype;
  g.d_type = dweight.dtype;
  g.beta = 1.f;
  if (dbias.empty()) {
    gemm_.run(g, stream());
    return;
  }
  // One scratch request for both paths, so the pointer stays valid.
  const int64_t fused_floats = OC;
  const int64_t sum_floats = cuda::column_sum_scratch_floats(R, OC);
  float* tmp = static_cast<float*>(
      scratch(sizeof(float) * static_cast<size_t>(std::max(fused_floats, sum_floats))));
  // The BGRADB epilogue writes the bias gradient in D's dtype and assigns it:
  // usable for an fp32 dweight, added to dbias afterwards.
  if (options_.fuse_bias_grad && dweight.dtype == DType::f32) {
    g.epilogue = cuda::GemmEpilogue::bgrad_a;
    g.bias = tmp;
    if (gemm_.supported(g)) {
      gemm_.run(g, stream());
      cuda::accumulate(dbias.f32(), tmp, OC, stream());
      return;
    }
    g.epilogue = cuda::GemmEpilogue::none;
    g.bias = nullptr;
  }
  gemm_.run(g, stream());
  if (dout.dtype == DType::f32)
    cuda::column_sum_accumulate(dbias.f32(), dout.f32(), R, OC, tmp, stream());
  else
    cuda::column_sum_accumulate(dbias.f32(), ptr<bf16>(dout), R, OC, tmp, stream());
}

void CudaOps::add_bias(TensorView out, TensorView bias) {
  cuda::NvtxRange range("add_bias");
  const Check c{"add_bias"};
  c.ndim(out, "out", 2, "(R, C)");
  const int64_t R = out.shape[0], C = out.shape[1];
  c.tensor(out, "out", kF32Bf16, {R, C});
  c.tensor(bias, "bias", {out.dtype}, {C});
  if (out.dtype == DType::f32)
    cuda::add_bias(out.f32(), bias.f32(), R, C, stream());
  else
    cuda::add_bias(ptr<bf16>(out), ptr<bf16>(bias), R, C, stream());
}

// ---- attention ------------------------------------------------------------------

int64_t CudaOps::attention_saved_elems(int B, int n_head, int T) const {
  return cuda::attention_saved_floats(B, n_head, T);
}
int64_t CudaOps::attention_scratch_elems(int B, int n_head, int T) const {
  return cuda::attention_scratch_floats(B, n_head, T);
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

void CudaOps::softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                                    TensorView targets, float grad_scale) {
  cuda::NvtxRange range("softmax_cross_entropy");
  const Check c{"softmax_cross_entropy"};
  c.ndim(logits, "logits", 2, "(R, V)");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  if (V < 1) fail("CudaOps::softmax_cross_entropy: empty vocabulary");
  c.tensor(logits, "logits", kF32, {R, V});
  c.tensor(losses, "losses", kF32, {R});
  c.tensor(targets, "targets", kI32, {R});
  if (!dlogits.empty()) c.tensor(dlogits, "dlogits", kF32, {R, V});
  cuda::softmax_cross_entropy(losses.f32(), dlogits.empty() ? nullptr : dlogits.f32(),
                              logits.f32(), targets.i32(), R, V, grad_scale, stream());
}

void CudaOps::cross_entropy_shard_max(TensorView row_max, TensorView logits) {
  cuda::NvtxRange range("cross_entropy_shard_max");
  const Check c{"cross_entropy_shard_max"};
  c.ndim(logits, "logits", 2, "(R, V_shard)");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  if (V < 1) fail("CudaOps::cross_entropy_shard_max: empty vocabulary shard");
  c.tensor(logits, "logits", kF32, {R, V});
  c.tensor(row_max, "row_max", kF32, {R});
  cuda::cross_entropy_shard_max(row_max.f32(), logits.f32(), R, V, stream());
}

void CudaOps::cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit,
                                       TensorView logits, TensorView targets, TensorView row_max,
                                       int64_t vocab_start) {
  cuda::NvtxRange range("cross_entropy_shard_sums");
  const Check c{"cross_entropy_shard_sums"};
  c.ndim(logits, "logits", 2, "(R, V_shard)");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  if (V < 1) fail("CudaOps::cross_entropy_shard_sums: empty vocabulary shard");
  c.tensor(logits, "logits", kF32, {R, V});
  c.tensor(sumexp, "sumexp", kF32, {R});
  c.tensor(target_logit, "target_logit", kF32, {R});
  c.tensor(targets, "targets", kI32, {R});
  c.tensor(row_max, "row_max", kF32, {R});
  cuda::cross_entropy_shard_sums(sumexp.f32(), target_logit.f32(), logits.f32(), targets.i32(),
                                 row_max.f32(), R, V, vocab_start, stream());
}

void CudaOps::cross_entropy_shard_finish(TensorView losses, TensorView dlogits,
                                         TensorView logits, TensorView targets,
                                         TensorView row_max, TensorView sumexp,
                                         TensorView target_logit, int64_t vocab_start,
                                         float grad_scale) {
  cuda::NvtxRange range("cross_entropy_shard_finish");
  const Check c{"cross_entropy_shard_finish"};
  c.ndim(logits, "logits", 2, "(R, V_shard)");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  if (V < 1) fail("CudaOps::cross_entropy_shard_finish: empty vocabulary shard");
  c.tensor(logits, "logits", kF32, {R, V});
  c.tensor(losses, "losses", kF32, {R});
  c.tensor(targets, "targets", kI32, {R});
  c.tensor(row_max, "row_max", kF32, {R});
  c.tensor(sumexp, "sumexp", kF32, {R});
  c.tensor(target_logit, "target_logit", kF32, {R});
  if (!dlogits.empty()) c.tensor(dlogits, "dlogits", kF32, {R, V});
  cuda::cross_entropy_shard_finish(losses.f32(), dlogits.empty() ? nullptr : dlogits.f32(),
                                   logits.f32(), targets.i32(), row_max.f32(), sumexp.f32(),
                                   target_logit.f32(), R, V, vocab_start, grad_scale, stream());
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

void CudaOps::adamw_update(TensorView param, TensorView grad, TensorView m, TensorView v,
                           const AdamWParams& p) {
  adamw_update(param, grad, m, v, p, TensorView{});
}

void CudaOps::adamw_update(TensorView param, TensorView grad, TensorView m, TensorView v,
                           const AdamWParams& p, TensorView param_bf16) {
  cuda::NvtxRange range("adamw_update");
  const Check c{"adamw_update"};
  c.ndim(param, "param", 1, "1-D");
  const int64_t n = param.shape[0];
  c.tensor(param, "param", kF32, {n});
  c.tensor(grad, "grad", kF32, {n});
  c.tensor(m, "m", kF32, {n});
  c.tensor(v, "v", kF32, {n});
  if (!param_bf16.empty()) c.tensor(param_bf16, "param_bf16", {DType::bf16}, {n});
  if (p.t < 1) fail("CudaOps::adamw_update: step t counts from 1, got ", p.t);
  cuda::adamw_update(param.f32(), param_bf16.empty() ? nullptr : ptr<bf16>(param_bf16),
                     grad.f32(), m.f32(), v.f32(), n, p, stream());
}

std::unique_ptr<Ops> make_cuda_ops(const CudaContextOptions& options) {
  return std::make_unique<CudaOps>(options);
}

}  // namespace gt
