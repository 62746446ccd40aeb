// Fused AdamW step over a flat fp32 segment (master params, moments), with
// an optional bf16 copy of the updated params written in the same pass.
// CPU twin: Ops::adamw_update; hyper-parameters are Ops::AdamWParams.
//
// Invariants (as kernels/ops.hpp, torch.optim.AdamW):
//   g = grad * grad_scale
//   m = beta1*m + (1-beta1)*g ;  v = beta2*v + (1-beta2)*g^2        (m, v updated in place)
//   param -= lr * weight_decay * param                               (decoupled, before the step)
//   param -= lr * (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps)  (t counts from 1)
//   param_bf16[i] = bf16_rn(param[i]) when param_bf16 is non-null (ASSIGNED).
// (Evaluated in torch's rearranged form, bias corrections in double on the host.)
// grad is read only. Elementwise, so deterministic; 16-byte loads when every
// fp32 pointer is 16-byte aligned (and param_bf16 8-byte aligned), else scalar.
//
// Host-only header (launcher declaration); the kernel lives in adamw.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/ops.hpp"

namespace gt::cuda {

void adamw_update(float* param, __nv_bfloat16* param_bf16, const float* grad, float* m, float* v,
                  int64_t n, const Ops::AdamWParams& p, cudaStream_t stream);

}  // namespace gt::cuda
