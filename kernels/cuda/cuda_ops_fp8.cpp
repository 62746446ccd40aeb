// CudaOps (see cuda_ops.hpp): the fp8 GEMM path (runtime.fp8) and the bias
// gradient it needs. The quantising casts are kernels/cuda/fp8.cu's, the GEMM
// is cuBLASLt's fp8 matmul (Fp8GemmContext, kernels/cuda/matmul_fp8.cuh); the
// CPU twin of every op here is kernels/cpu/fp8_kernels.hpp. Host code only.
//
// fp8_matmul, out (M, N) = / += (Qa Qb^T) x (1/sa) x (1/sb) + bias:
//   1. each operand quantised into scratch as the K-contiguous (rows, K)
//      codes cuBLASLt's "TN" fp8 layout takes (op(a) (M, K), op(b) (N, K);
//      an operand read transposed is transposed by the cast itself), its
//      rows padded with zero codes to a multiple of 16 (the library's fp8
//      stride rule), which adds nothing to any dot product;
//   2. the inverse scales (cuBLASLt's scale pointers are multipliers); a
//      rowwise GEMM with one tensorwise operand broadcasts that scale to a
//      vector, since the library scales both operands in one mode;
//   3. the GEMM: D = out directly (bf16 or fp32; accumulate: beta 1 into an
//      fp32 out), a bf16 bias of a bf16 out added by cuBLASLt's BIAS
//      epilogue before D's one rounding (as the twin rounds once, after the
//      bias); any other bias (fp32, or an fp32 out), or one the library has
//      no algorithm for, by a GEMM into fp32 scratch and then one pass that
//      adds the bias and rounds once to out's type.
// Scratch: one arena request per op, carved in 256-byte pieces (cuBLASLt's
// 16-byte alignment with room to spare).
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_ops_check.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/matmul_fp8.cuh"
#include "kernels/cuda/nvtx.hpp"

namespace gt {

using namespace cuda_ops_detail;

namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// Pieces of one scratch request, in order.
class Carve {
 public:
  explicit Carve(void* base) : p_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(size_t bytes) {
    T* out = reinterpret_cast<T*>(p_);
    p_ += aligned(bytes);
    return out;
  }

 private:
  char* p_;
};

}  // namespace

void CudaOps::do_bias_backward(TensorView dbias, TensorView dout) {
  cuda::NvtxRange range("bias_backward");
  const Check c{"bias_backward"};
  c.tensor(dbias, "dbias", kF32);
  c.tensor(dout, "dout", kF32Bf16);
  const int64_t R = dout.shape[0], OC = dout.shape[1];
  auto* tmp = static_cast<float*>(
      scratch(sizeof(float) * static_cast<size_t>(cuda::column_sum_scratch_floats(R, OC))));
  if (dout.dtype == DType::f32)
    cuda::column_sum_accumulate(dbias.f32(), dout.f32(), R, OC, tmp, stream());
  else
    cuda::column_sum_accumulate(dbias.f32(), ptr<bf16>(dout), R, OC, tmp, stream());
}

void CudaOps::do_fp8_amax(TensorView amax, TensorView x, Fp8Reduce over) {
  cuda::NvtxRange range("fp8_amax");
  const Check c{"fp8_amax"};
  c.tensor(amax, "amax", kF32);
  c.tensor(x, "x", kF32Bf16);
  const int64_t R = x.shape[0], C = x.shape[1];
  const bool bf = x.dtype == DType::bf16;
  switch (over) {
    case Fp8Reduce::tensor: {
      auto* tmp = static_cast<float*>(
          scratch(sizeof(float) * static_cast<size_t>(cuda::fp8_amax_scratch_floats(R * C))));
      if (bf) cuda::fp8_amax(amax.f32(), ptr<bf16>(x), R * C, tmp, stream());
      else cuda::fp8_amax(amax.f32(), x.f32(), R * C, tmp, stream());
      return;
    }
    case Fp8Reduce::rows:
      if (bf) cuda::fp8_amax_rows(amax.f32(), ptr<bf16>(x), R, C, stream());
      else cuda::fp8_amax_rows(amax.f32(), x.f32(), R, C, stream());
      return;
    case Fp8Reduce::cols: {
      auto* tmp = static_cast<float*>(scratch(
          sizeof(float) * static_cast<size_t>(cuda::fp8_amax_cols_scratch_floats(R, C))));
      if (bf) cuda::fp8_amax_cols(amax.f32(), ptr<bf16>(x), R, C, tmp, stream());
      else cuda::fp8_amax_cols(amax.f32(), x.f32(), R, C, tmp, stream());
      return;
    }
  }
}

void CudaOps::do_fp8_scale_from_amax(TensorView scale, TensorView amax, Fp8Format format,
                                     bool pow2) {
  cuda::NvtxRange range("fp8_scale_from_amax");
  const Check c{"fp8_scale_from_amax"};
  c.tensor(scale, "scale", kF32);
  c.tensor(amax, "amax", kF32);
  cuda::fp8_scales(scale.f32(), nullptr, amax.f32(), amax.numel(), format, pow2, stream());
}

void CudaOps::do_fp8_quantize(TensorView q, TensorView x, TensorView scale, Fp8Format format) {
  cuda::NvtxRange range("fp8_quantize");
  const Check c{"fp8_quantize"};
  c.tensor(q, "q", {DType::u8});
  c.tensor(x, "x", kF32Bf16);
  c.tensor(scale, "scale", kF32);
  auto* out = static_cast<uint8_t*>(q.data);
  if (x.dtype == DType::bf16)
    cuda::fp8_quantize(out, ptr<bf16>(x), x.numel(), scale.f32(), format, stream());
  else
    cuda::fp8_quantize(out, x.f32(), x.numel(), scale.f32(), format, stream());
}

void CudaOps::do_fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                            TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec) {
  cuda::NvtxRange range("fp8_matmul");
  const Check c{"fp8_matmul"};
  c.tensor(a, "a", kF32Bf16);
  c.tensor(b, "b", {DType::f32, DType::bf16, DType::u8});
  c.tensor(a_scale, "a_scale", kF32);
  c.tensor(b_scale, "b_scale", kF32);
  c.tensor(out, "out", spec.accumulate ? kF32 : kF32Bf16);
  if (!bias.empty()) c.tensor(bias, "bias", kF32Bf16);
  if (spec.a_format == Fp8Format::e5m2 && spec.b_format == Fp8Format::e5m2)
    fail("CudaOps::fp8_matmul: a and b cannot both be e5m2 (cuBLASLt's fp8 GEMMs take at most "
         "one e5m2 operand)");
  const int64_t M = out.shape[0], N = out.shape[1];
  const int64_t K = a.shape[spec.a_transposed ? 0 : 1];
  if (M == 0 || N == 0) return;
  // K = 0: an empty sum. cuBLASLt takes no K of 0; the twin's result is the
  // bias (or out unchanged when accumulating).
  const int64_t ld = round_up16(std::max<int64_t>(K, 1));
  // One scale vector per operand when either is rowwise (the library scales
  // both in one mode).
  const bool rowwise = a_scale.numel() > 1 || b_scale.numel() > 1;
  const int64_t na = rowwise ? M : 1, nb = rowwise ? N : 1;
  // Codes already in cuBLASLt's layout (a weight's, (N, K) with K a multiple
  // of 16, 16-byte aligned) are read in place.
  const bool b_in_place = b.dtype == DType::u8 && !spec.b_transposed && K % 16 == 0 && K > 0 &&
                          reinterpret_cast<uintptr_t>(b.data) % 16 == 0;
  if (!fp8_gemm_) {
    fp8_gemm_ = std::make_unique<cuda::Fp8GemmContext>(options_.workspace_bytes);
    count_buffer_bytes(0);  // its workspace joins the bytes in use (and the peak)
  }
  cuda::Fp8GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = ld;  // the zero-code padding contributes nothing
  g.a_format = spec.a_format;
  g.lda = ld;
  g.b_format = spec.b_format;
  g.ldb = ld;
  g.rowwise = rowwise;
  g.fast_accum = spec.fast_accum;
  g.D = out.data;
  g.d_type = out.dtype;
  g.accumulate = spec.accumulate;
  // With a bias the scratch keeps room for the fp32 product in case the
  // library has no BIAS epilogue for this GEMM (the peak is the same as
  // before the epilogue was used; the traffic is what it saves).
  const size_t bytes = aligned(static_cast<size_t>(M * ld)) +
                       (b_in_place ? 0 : aligned(static_cast<size_t>(N * ld))) +
                       aligned(sizeof(float) * static_cast<size_t>(na)) +
                       aligned(sizeof(float) * static_cast<size_t>(nb)) +
                       (bias.empty() ? 0 : aligned(sizeof(float) * static_cast<size_t>(M * N)));
  Carve carve(scratch(bytes));
  auto* qa = carve.take<uint8_t>(static_cast<size_t>(M * ld));
  auto* qb = b_in_place ? static_cast<uint8_t*>(b.data)
                        : carve.take<uint8_t>(static_cast<size_t>(N * ld));
  auto* inv_a = carve.take<float>(sizeof(float) * static_cast<size_t>(na));
  auto* inv_b = carve.take<float>(sizeof(float) * static_cast<size_t>(nb));
  float* tmp =
      bias.empty() ? nullptr : carve.take<float>(sizeof(float) * static_cast<size_t>(M * N));
  g.A = qa;
  g.B = qb;
  g.a_scale = inv_a;
  g.b_scale = inv_b;
  // The bias in the GEMM's epilogue where the library takes it.
  if (!bias.empty() && bias.dtype == DType::bf16 && out.dtype == DType::bf16 && !spec.accumulate) {
    g.bias = bias.data;
    if (!fp8_gemm_->supported(g)) g.bias = nullptr;
  }
  const bool via_tmp = !bias.empty() && !g.bias;

  auto quantize = [&](uint8_t* q, const TensorView& x, int64_t rows, bool transposed,
                      const TensorView& s, Fp8Format f) {
    const bool per_row = s.numel() > 1;  // (rows) scales; one scale serves every row
    if (x.dtype == DType::bf16)
      cuda::fp8_quantize_scaled(q, ld, ptr<bf16>(x), rows, K, transposed, s.f32(), per_row, f,
                                stream());
    else
      cuda::fp8_quantize_scaled(q, ld, x.f32(), rows, K, transposed, s.f32(), per_row, f,
                                stream());
  };
  quantize(qa, a, M, spec.a_transposed, a_scale, spec.a_format);
  if (b.dtype != DType::u8)
    quantize(qb, b, N, spec.b_transposed, b_scale, spec.b_format);
  else if (!b_in_place)
    cuda::fp8_copy_codes(qb, ld, static_cast<const uint8_t*>(b.data), N, K, spec.b_transposed,
                         stream());
  cuda::fp8_inverse_scales(inv_a, a_scale.f32(), a_scale.numel(), na, stream());
  cuda::fp8_inverse_scales(inv_b, b_scale.f32(), b_scale.numel(), nb, stream());

  if (via_tmp) {
    g.D = tmp;
    g.d_type = DType::f32;
    g.accumulate = false;
  }
  fp8_gemm_->run(g, stream());
  if (via_tmp)
    cuda::fp8_epilogue(out.data, out.dtype == DType::bf16, tmp, N, bias.data,
                       bias.dtype == DType::bf16, M, N, spec.accumulate, stream());
}

}  // namespace gt
