// Fused AdamW kernel and launcher (see adamw.cuh). The bias corrections are
// computed once on the host in double and passed in, as torch does.
#include "kernels/cuda/adamw.cuh"

#include <cmath>

#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;

// Evaluated in torch.optim.AdamW's (single-tensor) form, which is the
// formula in adamw.cuh rearranged: bias corrections in double on the host,
//   param = param * (1 - lr*wd) - (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps).
struct Coeffs {
  float beta1, beta2, eps, grad_scale;
  float decay;      // 1 - lr * weight_decay
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
};

__device__ __forceinline__ float step(float& param, float grad, float& m, float& v,
                                      const Coeffs& c) {
  const float g = grad * c.grad_scale;
  m = c.beta1 * m + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * g * g;
  const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;
  param = param * c.decay - c.step_size * (m / denom);
  return param;
}

struct alignas(8) Bf16x4 {
  __nv_bfloat16 v[4];
};

__global__ void adamw_kernel(float* param, __nv_bfloat16* param_bf16, const float* grad,
                             float* m, float* v, int64_t n, int64_t n_packs, Coeffs c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < n_packs; i += stride) {
    dev::Pack<float> p = dev::load_pack(param + 4 * i);
    const dev::Pack<float> g = dev::load_pack(grad + 4 * i);
    dev::Pack<float> mm = dev::load_pack(m + 4 * i);
    dev::Pack<float> vv = dev::load_pack(v + 4 * i);
    Bf16x4 b;
#pragma unroll
    for (int k = 0; k < 4; ++k) b.v[k] = __float2bfloat16_rn(step(p.v[k], g.v[k], mm.v[k], vv.v[k], c));
    dev::store_pack(param + 4 * i, p);
    dev::store_pack(m + 4 * i, mm);
    dev::store_pack(v + 4 * i, vv);
    if (param_bf16) *reinterpret_cast<Bf16x4*>(param_bf16 + 4 * i) = b;
  }
  for (int64_t i = 4 * n_packs + tid; i < n; i += stride) {
    float p = param[i], mm = m[i], vv = v[i];
    const float out = step(p, grad[i], mm, vv, c);
    param[i] = p;
    m[i] = mm;
    v[i] = vv;
    if (param_bf16) param_bf16[i] = __float2bfloat16_rn(out);
  }
}

}  // namespace

void adamw_update(float* param, __nv_bfloat16* param_bf16, const float* grad, float* m, float* v,
                  int64_t n, const Ops::AdamWParams& p, cudaStream_t stream) {
  GT_CHECK(n >= 0, "adamw_update: n = ", n);
  GT_CHECK(p.t >= 1, "adamw_update: step t = ", p.t, " (counts from 1)");
  if (n == 0) return;
  dev::NvtxRange range("adamw_update");
  const double t = static_cast<double>(p.t);
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
  Coeffs c{};
  c.beta1 = p.beta1;
  c.beta2 = p.beta2;
  c.eps = p.eps;
  c.grad_scale = p.grad_scale;
  c.decay = 1.f - p.lr * p.weight_decay;
  c.step_size = static_cast<float>(static_cast<double>(p.lr) / bc1);
  c.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const bool vec = dev::aligned16(param) && dev::aligned16(grad) && dev::aligned16(m) &&
                   dev::aligned16(v) && reinterpret_cast<uintptr_t>(param_bf16) % 8 == 0;
  const int64_t n_packs = vec ? n / 4 : 0;
  const int64_t work = n_packs + (n - 4 * n_packs);
  dev::launch(adamw_kernel, {dev::grid_for(work, kThreads), kThreads, 0, stream}, param, param_bf16,
              grad, m, v, n, n_packs, c);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gt::cuda
