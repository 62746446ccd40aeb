// Fused multi-tensor AdamW: one launch steps every run of flat fp32 buffers
// (master params, gradients, moments), with an optional bf16 copy of the
// updated params written in the same pass.
// CPU twin: Ops::adamw_update_runs; hyper-parameters are Ops::AdamWParams.
//
// Invariants (as kernels/ops.hpp, torch.optim.AdamW), for each run r and
// element i of it, p = param[r.param + i], s = r.state + i:
//   g = grad[s] * grad_scale * scale[0]   (scale: device, optional; a non-finite
//                                          scale[0] returns before any write)
//   m[s] = beta1*m[s] + (1-beta1)*g ;  v[s] = beta2*v[s] + (1-beta2)*g^2
//   p -= lr * weight_decay * p          (decoupled, before the step; only where r.decay)
//   p -= lr * (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps)  (t counts from 1)
//   param_bf16[r.param + i] = bf16_rn(p) when param_bf16 is non-null (ASSIGNED).
// (Evaluated in torch's rearranged form, bias corrections in double on the host.)
// grad is read only; elements outside the runs are untouched. Elementwise, so
// deterministic. The runs are cut into chunks of kAdamWChunk elements; a
// block takes chunks in turn and finds a chunk's run by binary search in a
// small table uploaded with the launch (no host wait). A chunk uses 16-byte
// loads when its fp32 addresses are 16-byte aligned (and its bf16 ones
// 8-byte aligned), else scalar ones.
//
// Host-only header (launcher declaration); the kernel lives in adamw.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/upload_staging.hpp"
#include "kernels/ops.hpp"

namespace gt::cuda {

// Device bytes of the run table for `n_runs` runs (the caller's scratch).
size_t adamw_runs_table_bytes(size_t n_runs);

// `table`: device memory of adamw_runs_table_bytes(runs.size()), free until
// the launch has run (it is written by a copy queued on `stream`).
void adamw_update_runs(float* param, __nv_bfloat16* param_bf16, const float* grad, float* m,
                       float* v, const float* scale, const std::vector<AdamWRun>& runs, void* table,
                       UploadStaging& uploads, const Ops::AdamWParams& p, cudaStream_t stream);

}  // namespace gt::cuda
