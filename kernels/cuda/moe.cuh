// The mixture-of-experts kernels (the Mixtral family): the router (softmax,
// top-k, renormalised weights, its backward and load statistics), the
// dispatch plan (a stable counting sort of the R k slots by expert, with
// optional per-expert capacity), permute / combine and their backwards, the
// grouped GEMM over expert groups and the load-balancing loss. CPU twins:
// the CPU backend's MoE kernels (semantics: kernels/ops.hpp);
// tests/cuda/test_cuda_moe.cpp compares them.
//
// Invariants:
//   * no launcher synchronises with the host or copies to it: counts,
//     offsets and group sizes are read by the kernels from device memory,
//     and grids are sized from host-known bounds (N, G), with the tiles past
//     the data exiting;
//   * every result is deterministic: reductions run in an order fixed by the
//     shapes, no float atomics (no atomics at all), permute_backward and
//     combine_forward gather;
//   * fp32 math on fp32 or bf16 row storage (T), outputs rounded once;
//     router tensors fp32, index tensors int32;
//   * scratch: router_stats needs moe_router_stats_scratch_floats(R, E)
//     floats, dispatch_plan moe_dispatch_plan_scratch_ints(N, E) ints (N = R
//     k), both the caller's device memory, both overwritten.
//
// Host-only header (launcher declarations); the kernels live in moe.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// The most experts the dispatch plan takes (its count kernel keeps a table of
// 8 warps x E ints in shared memory: 32 KiB at this limit).
constexpr int kMoeMaxExperts = 1024;

// probs (R,E), lse (R), topk_expert (R,k), topk_weight (R,k) ASSIGNED from
// logits (R,E); bias (E) or nullptr.
void moe_router_forward(float* probs, float* lse, int32_t* topk_expert, float* topk_weight,
                        const float* logits, const float* bias, int64_t R, int E, int k,
                        cudaStream_t stream);
// dlogits (R,E) ASSIGNED; dprob_shared (E) or nullptr.
void moe_router_backward(float* dlogits, const float* dtopk_weight, const float* probs,
                         const float* lse, const int32_t* topk_expert, const float* topk_weight,
                         const float* dprob_shared, float z_grad, int64_t R, int E, int k,
                         cudaStream_t stream);
// counts (E), prob_sums (E) ACCUMULATE; scratch as below.
int64_t moe_router_stats_scratch_floats(int64_t R, int E);
void moe_router_stats(float* counts, float* prob_sums, const float* probs,
                      const int32_t* topk_expert, int64_t R, int E, int k, float* scratch,
                      cudaStream_t stream);
// positions (R,k) and offsets (E+1) ASSIGNED; capacity 0 = dropless.
int64_t moe_dispatch_plan_scratch_ints(int64_t N, int E);
void moe_dispatch_plan(int32_t* positions, int32_t* offsets, const int32_t* topk_expert,
                       const float* topk_weight, int64_t R, int E, int k, int64_t capacity,
                       int32_t* scratch, cudaStream_t stream);

template <typename T>
void moe_permute(T* out, const T* inp, const int32_t* positions, int64_t R, int k, int64_t C,
                 cudaStream_t stream);
// The row tensors of the three below may each be fp32 or bf16 (each its own
// template parameter), as on the CPU.
template <typename TD, typename TG>
void moe_permute_backward(TD* dinp, const TG* dout, const int32_t* positions, int64_t R, int k,
                          int64_t C, cudaStream_t stream);
template <typename TO, typename TE>
void moe_combine_forward(TO* out, const TE* expert_out, const int32_t* positions,
                         const float* topk_weight, int64_t R, int k, int64_t C,
                         cudaStream_t stream);
template <typename TX, typename TG, typename TE>
void moe_combine_backward(TX* dexpert_out, float* dtopk_weight, const TG* dout,
                          const TE* expert_out, const int32_t* positions, const float* topk_weight,
                          int64_t R, int k, int64_t C, cudaStream_t stream);

// out (N,OC) rows [0, offsets[G]) = group rows of inp (N,C) @ weight[g]^T,
// weight (G,OC,C); fp32 accumulation.
template <typename T>
void grouped_matmul_forward(T* out, const T* inp, const T* weight, const int32_t* offsets,
                            int64_t N, int64_t C, int64_t OC, int G, cudaStream_t stream);
// dinp (N,C) ASSIGNED on rows [0, offsets[G]) (skipped when nullptr); dweight
// (G,OC,C) fp32 ACCUMULATES.
template <typename T>
void grouped_matmul_backward(T* dinp, float* dweight, const T* dout, const T* inp,
                             const T* weight, const int32_t* offsets, int64_t N, int64_t C,
                             int64_t OC, int G, cudaStream_t stream);

// aux (1), dprob (E) ASSIGNED.
void moe_load_balance(float* aux, float* dprob, const float* counts, const float* prob_sums, int E,
                      double rows, float grad_coef, cudaStream_t stream);

}  // namespace gt::cuda
