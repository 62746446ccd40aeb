// Private to kernels/cpu: the CPU kernels of the mixture-of-experts ops (the
// forwarders in cpu_ops.cpp call them; semantics in kernels/ops.hpp, section
// "Mixture of experts"). Shapes: R rows, E experts, k slots per row, N = R k
// dispatch rows, C channels, G groups, OC output channels.
//
// Every function checks its arguments, and the values of the index tensors
// it is handed (expert ids in [0, E), positions in [-1, N), offsets
// non-decreasing from 0 up to N), before it enters an OpenMP region: on the
// CPU they are host memory, so a bad plan is an error, not a stray write.
// Results are deterministic: every reduction runs in a fixed order.
#pragma once

#include "kernels/cpu/cpu_kernels.hpp"

namespace gt::cpu {

// Throws naming op unless every id of topk_expert (int32, host) is in [0, E).
void check_experts(const TensorView& topk_expert, int64_t E, const char* op);

// probs (R, E), lse (R), topk_weight (R, k) fp32 and topk_expert (R, k)
// int32 from logits (R, E) fp32; bias (E) fp32 or empty.
void moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                        TensorView topk_weight, TensorView logits, TensorView bias);
// dlogits (R, E) ASSIGNED; dprob_shared (E) may be empty.
void moe_router_backward(TensorView dlogits, TensorView dtopk_weight, TensorView probs,
                         TensorView lse, TensorView topk_expert, TensorView topk_weight,
                         TensorView dprob_shared, float z_grad);
// counts, prob_sums (E) ACCUMULATE (each expert's sum over rows in row order).
void moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                      TensorView topk_expert);
// The stable counting sort by expert; capacity > 0 drops as ops.hpp states.
void moe_dispatch_plan(TensorView positions, TensorView offsets, TensorView topk_expert,
                       TensorView topk_weight, int64_t capacity);
// A row copy (any row dtype, out's = inp's): bits moved, nothing rounded.
void moe_permute(TensorView out, TensorView inp, TensorView positions);
// fp32 sums over j in slot order, rounded once into dinp's dtype.
void moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions);
void moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                         TensorView topk_weight);
void moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight, TensorView dout,
                          TensorView expert_out, TensorView positions, TensorView topk_weight);
// One sgemm per non-empty group; bf16 operands widened first, as matmul.cpp.
void grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView offsets);
void grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                             TensorView weight, TensorView offsets);
void moe_load_balance(TensorView aux, TensorView dprob, TensorView counts, TensorView prob_sums,
                      double rows, float grad_coef);

}  // namespace gt::cpu
