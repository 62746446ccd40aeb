// CudaOps (see cuda_ops.hpp): the mixture-of-experts ops on
// kernels/cuda/moe.cu. Host code only. Shapes were checked by the entry
// points (kernels/ops_moe.cpp); here: device, dtypes, contiguity and the
// kernels' int limits. Nothing here reads device memory: counts and offsets
// stay on the device, and no op waits for the stream (the dispatch plan's
// and router statistics' scratch comes from the arena, which grows, and then
// synchronises, only when a shape needs more than it holds: cuda_ops.hpp).
//
// Row tensors are fp32 or bf16: moe_permute's inp and out one dtype (a copy
// of bits), the grouped GEMM's inp, weight, out, dout and dinp one dtype (its
// dweight fp32), and each row tensor of permute_backward and the combine its
// own, as on the CPU.
#include <cuda_bf16.h>

#include <type_traits>

#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_ops_check.hpp"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/nvtx.hpp"

namespace gt {

using namespace cuda_ops_detail;

namespace {
// The optional fp32 vector of an op: nullptr when empty().
const float* optional_f32(const Check& c, const TensorView& t, const char* what) {
  if (t.empty()) return nullptr;
  c.tensor(t, what, kF32);
  return t.f32();
}
// f(p) with p the row tensor's data as float* or bf16* (checked fp32/bf16).
template <typename F>
void with_rows(const TensorView& t, F&& f) {
  if (t.dtype == DType::f32) f(t.f32());
  else f(ptr<bf16>(t));
}
}  // namespace

void CudaOps::do_moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                                    TensorView topk_weight, TensorView logits, TensorView bias) {
  cuda::NvtxRange range("moe_router_forward");
  const Check c{"moe_router_forward"};
  c.tensor(logits, "logits", kF32);
  c.tensor(probs, "probs", kF32);
  c.tensor(lse, "lse", kF32);
  c.tensor(topk_expert, "topk_expert", kI32);
  c.tensor(topk_weight, "topk_weight", kF32);
  const float* b = optional_f32(c, bias, "bias");
  const int E = c.to_int(logits.shape[1], "E"), k = c.to_int(topk_expert.shape[1], "k");
  cuda::moe_router_forward(probs.f32(), lse.f32(), topk_expert.i32(), topk_weight.f32(),
                           logits.f32(), b, logits.shape[0], E, k, stream());
}

void CudaOps::do_moe_router_backward(TensorView dlogits, TensorView dtopk_weight, TensorView probs,
                                     TensorView lse, TensorView topk_expert,
                                     TensorView topk_weight, TensorView dprob_shared,
                                     float z_grad) {
  cuda::NvtxRange range("moe_router_backward");
  const Check c{"moe_router_backward"};
  c.tensor(dlogits, "dlogits", kF32);
  c.tensor(dtopk_weight, "dtopk_weight", kF32);
  c.tensor(probs, "probs", kF32);
  c.tensor(lse, "lse", kF32);
  c.tensor(topk_expert, "topk_expert", kI32);
  c.tensor(topk_weight, "topk_weight", kF32);
  const float* shared = optional_f32(c, dprob_shared, "dprob_shared");
  const int E = c.to_int(probs.shape[1], "E"), k = c.to_int(topk_expert.shape[1], "k");
  cuda::moe_router_backward(dlogits.f32(), dtopk_weight.f32(), probs.f32(), lse.f32(),
                            topk_expert.i32(), topk_weight.f32(), shared, z_grad, probs.shape[0],
                            E, k, stream());
}

void CudaOps::do_moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                                  TensorView topk_expert) {
  cuda::NvtxRange range("moe_router_stats");
  const Check c{"moe_router_stats"};
  c.tensor(counts, "counts", kF32);
  c.tensor(prob_sums, "prob_sums", kF32);
  c.tensor(probs, "probs", kF32);
  c.tensor(topk_expert, "topk_expert", kI32);
  const int64_t R = probs.shape[0];
  const int E = c.to_int(probs.shape[1], "E"), k = c.to_int(topk_expert.shape[1], "k");
  float* tmp = static_cast<float*>(
      scratch(sizeof(float) * static_cast<size_t>(cuda::moe_router_stats_scratch_floats(R, E))));
  cuda::moe_router_stats(counts.f32(), prob_sums.f32(), probs.f32(), topk_expert.i32(), R, E, k,
                         tmp, stream());
}

void CudaOps::do_moe_dispatch_plan(TensorView positions, TensorView offsets,
                                   TensorView topk_expert, TensorView topk_weight,
                                   int64_t capacity) {
  cuda::NvtxRange range("moe_dispatch_plan");
  const Check c{"moe_dispatch_plan"};
  c.tensor(positions, "positions", kI32);
  c.tensor(offsets, "offsets", kI32);
  c.tensor(topk_expert, "topk_expert", kI32);
  c.tensor(topk_weight, "topk_weight", kF32);
  const int64_t R = topk_expert.shape[0];
  const int k = c.to_int(topk_expert.shape[1], "k");
  const int E = c.to_int(offsets.shape[0] - 1, "E");
  if (E > cuda::kMoeMaxExperts)
    fail("CudaOps::moe_dispatch_plan: E = ", E, " experts, at most ", cuda::kMoeMaxExperts);
  c.to_int(R * k, "R k");  // positions are int32
  const int64_t n_scratch = cuda::moe_dispatch_plan_scratch_ints(R * k, E);
  int32_t* tmp = static_cast<int32_t*>(scratch(sizeof(int32_t) * static_cast<size_t>(n_scratch)));
  cuda::moe_dispatch_plan(positions.i32(), offsets.i32(), topk_expert.i32(), topk_weight.f32(), R,
                          E, k, capacity, tmp, stream());
}

void CudaOps::do_moe_permute(TensorView out, TensorView inp, TensorView positions) {
  cuda::NvtxRange range("moe_permute");
  const Check c{"moe_permute"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(out, "out", {inp.dtype});
  c.tensor(positions, "positions", kI32);
  const int64_t R = inp.shape[0], C = inp.shape[1];
  const int k = c.to_int(positions.shape[1], "k");
  if (inp.dtype == DType::f32)
    cuda::moe_permute(out.f32(), static_cast<const float*>(inp.f32()), positions.i32(), R, k, C,
                      stream());
  else
    cuda::moe_permute(ptr<bf16>(out), ptr<const bf16>(inp), positions.i32(), R, k, C, stream());
}

void CudaOps::do_moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions) {
  cuda::NvtxRange range("moe_permute_backward");
  const Check c{"moe_permute_backward"};
  c.tensor(dout, "dout", kF32Bf16);
  c.tensor(dinp, "dinp", kF32Bf16);
  c.tensor(positions, "positions", kI32);
  const int64_t R = dinp.shape[0], C = dinp.shape[1];
  const int k = c.to_int(positions.shape[1], "k");
  with_rows(dinp, [&](auto* dx) {
    with_rows(dout, [&](auto* dy) {
      cuda::moe_permute_backward(dx, static_cast<const std::remove_pointer_t<decltype(dy)>*>(dy),
                                 positions.i32(), R, k, C, stream());
    });
  });
}

void CudaOps::do_moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                                     TensorView topk_weight) {
  cuda::NvtxRange range("moe_combine_forward");
  const Check c{"moe_combine_forward"};
  c.tensor(expert_out, "expert_out", kF32Bf16);
  c.tensor(out, "out", kF32Bf16);
  c.tensor(positions, "positions", kI32);
  c.tensor(topk_weight, "topk_weight", kF32);
  const int64_t R = out.shape[0], C = out.shape[1];
  const int k = c.to_int(positions.shape[1], "k");
  with_rows(out, [&](auto* y) {
    with_rows(expert_out, [&](auto* eo) {
      cuda::moe_combine_forward(y, static_cast<const std::remove_pointer_t<decltype(eo)>*>(eo),
                                positions.i32(), topk_weight.f32(), R, k, C, stream());
    });
  });
}

void CudaOps::do_moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight,
                                      TensorView dout, TensorView expert_out, TensorView positions,
                                      TensorView topk_weight) {
  cuda::NvtxRange range("moe_combine_backward");
  const Check c{"moe_combine_backward"};
  c.tensor(dout, "dout", kF32Bf16);
  c.tensor(expert_out, "expert_out", kF32Bf16);
  c.tensor(dexpert_out, "dexpert_out", kF32Bf16);
  c.tensor(dtopk_weight, "dtopk_weight", kF32);
  c.tensor(positions, "positions", kI32);
  c.tensor(topk_weight, "topk_weight", kF32);
  const int64_t R = dout.shape[0], C = dout.shape[1];
  const int k = c.to_int(positions.shape[1], "k");
  with_rows(dexpert_out, [&](auto* dx) {
    with_rows(dout, [&](auto* dy) {
      with_rows(expert_out, [&](auto* eo) {
        cuda::moe_combine_backward(dx, dtopk_weight.f32(),
                                   static_cast<const std::remove_pointer_t<decltype(dy)>*>(dy),
                                   static_cast<const std::remove_pointer_t<decltype(eo)>*>(eo),
                                   positions.i32(), topk_weight.f32(), R, k, C, stream());
      });
    });
  });
}

void CudaOps::do_grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                                        TensorView offsets) {
  cuda::NvtxRange range("grouped_matmul_forward");
  const Check c{"grouped_matmul_forward"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(weight, "weight", {inp.dtype});
  c.tensor(out, "out", {inp.dtype});
  c.tensor(offsets, "offsets", kI32);
  const int64_t N = inp.shape[0], C = inp.shape[1], OC = weight.shape[1];
  const int G = c.to_int(weight.shape[0], "G");
  c.to_int((N + 63) / 64 + G, "row tiles");  // the grid's x
  c.to_int((OC + 63) / 64, "column tiles");
  if (inp.dtype == DType::f32)
    cuda::grouped_matmul_forward(out.f32(), static_cast<const float*>(inp.f32()),
                                 static_cast<const float*>(weight.f32()), offsets.i32(), N, C, OC,
                                 G, stream());
  else
    cuda::grouped_matmul_forward(ptr<bf16>(out), ptr<const bf16>(inp), ptr<const bf16>(weight),
                                 offsets.i32(), N, C, OC, G, stream());
}

void CudaOps::do_grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                         TensorView inp, TensorView weight, TensorView offsets) {
  cuda::NvtxRange range("grouped_matmul_backward");
  const Check c{"grouped_matmul_backward"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(weight, "weight", {inp.dtype});
  c.tensor(dout, "dout", {inp.dtype});
  if (!dinp.empty()) c.tensor(dinp, "dinp", {inp.dtype});
  c.tensor(dweight, "dweight", kF32);
  c.tensor(offsets, "offsets", kI32);
  const int64_t N = inp.shape[0], C = inp.shape[1], OC = weight.shape[1];
  const int G = c.to_int(weight.shape[0], "G");
  c.to_int((N + 63) / 64 + G, "row tiles");
  c.to_int((C + 63) / 64, "column tiles");
  if (inp.dtype == DType::f32)
    cuda::grouped_matmul_backward(dinp.empty() ? nullptr : dinp.f32(), dweight.f32(),
                                  static_cast<const float*>(dout.f32()),
                                  static_cast<const float*>(inp.f32()),
                                  static_cast<const float*>(weight.f32()), offsets.i32(), N, C, OC,
                                  G, stream());
  else
    cuda::grouped_matmul_backward(dinp.empty() ? nullptr : ptr<bf16>(dinp), dweight.f32(),
                                  ptr<const bf16>(dout), ptr<const bf16>(inp),
                                  ptr<const bf16>(weight), offsets.i32(), N, C, OC, G, stream());
}

void CudaOps::do_moe_load_balance(TensorView aux, TensorView dprob, TensorView counts,
                                  TensorView prob_sums, double rows, float grad_coef) {
  cuda::NvtxRange range("moe_load_balance");
  const Check c{"moe_load_balance"};
  c.tensor(aux, "aux", kF32);
  c.tensor(dprob, "dprob", kF32);
  c.tensor(counts, "counts", kF32);
  c.tensor(prob_sums, "prob_sums", kF32);
  const int E = c.to_int(counts.shape[0], "E");
  cuda::moe_load_balance(aux.f32(), dprob.f32(), counts.f32(), prob_sums.f32(), E, rows,
                         grad_coef, stream());
}

}  // namespace gt
