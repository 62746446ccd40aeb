// Fused multi-tensor AdamW kernel and launcher (see adamw.cuh). The bias
// corrections are computed once on the host in double and passed in, as
// torch does.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/chunk_table.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = kThreads * 16;  // elements per chunk: 4 packs of 4 per thread
constexpr int64_t kMaxBlocks = 132 * 16;   // enough to fill an H100/H200; the rest loop

// Evaluated in torch.optim.AdamW's (single-tensor) form, which is the
// formula in adamw.cuh rearranged: bias corrections in double on the host,
//   param = param * (1 - lr*wd) - (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps).
struct Coeffs {
  float beta1, beta2, eps, grad_scale;
  const float* scale;  // device: clip_scale's factor (non-finite: skip), or null
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
};

__device__ __forceinline__ float step(float& param, float grad, float& m, float& v, float decay,
                                      float scale, const Coeffs& c) {
  const float g = grad * c.grad_scale * scale;
  m = c.beta1 * m + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * g * g;
  const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;
  param = param * decay - c.step_size * (m / denom);
  return param;
}

struct alignas(8) Bf16x4 {
  __nv_bfloat16 v[4];
};

__global__ void adamw_runs_kernel(float* param, __nv_bfloat16* param_bf16, const float* grad,
                                  float* m, float* v, const dev::ChunkRun* runs, int n_runs,
                                  int64_t n_chunks, Coeffs c) {
  const float scale = c.scale ? *c.scale : 1.f;
  if (!isfinite(scale)) return;  // the skipped step: nothing changes
  for (int64_t chunk = blockIdx.x; chunk < n_chunks; chunk += gridDim.x) {
    const dev::Chunk ch = dev::chunk_at(runs, n_runs, chunk, kChunk);
    const dev::ChunkRun& r = ch.run;
    const int64_t off = ch.off, len = ch.len;
    float* w = param + r.param + off;
    __nv_bfloat16* w16 = param_bf16 ? param_bf16 + r.param + off : nullptr;
    const float* g = grad + r.state + off;
    float* mm = m + r.state + off;
    float* vv = v + r.state + off;
    const bool vec = dev::aligned16(w) && dev::aligned16(g) && dev::aligned16(mm) &&
                     dev::aligned16(vv) && reinterpret_cast<uintptr_t>(w16) % 8 == 0;
    const int64_t packs = vec ? len / 4 : 0;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      dev::Pack<float> p = dev::load_pack(w + 4 * i);
      const dev::Pack<float> gp = dev::load_pack(g + 4 * i);
      dev::Pack<float> mp = dev::load_pack(mm + 4 * i);
      dev::Pack<float> vp = dev::load_pack(vv + 4 * i);
      Bf16x4 b;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        b.v[k] = __float2bfloat16_rn(step(p.v[k], gp.v[k], mp.v[k], vp.v[k], r.decay, scale, c));
      dev::store_pack(w + 4 * i, p);
      dev::store_pack(mm + 4 * i, mp);
      dev::store_pack(vv + 4 * i, vp);
      if (w16) *reinterpret_cast<Bf16x4*>(w16 + 4 * i) = b;
    }
    for (int64_t i = 4 * packs + threadIdx.x; i < len; i += blockDim.x) {
      float p = w[i], mi = mm[i], vi = vv[i];
      const float out = step(p, g[i], mi, vi, r.decay, scale, c);
      w[i] = p;
      mm[i] = mi;
      vv[i] = vi;
      if (w16) w16[i] = __float2bfloat16_rn(out);
    }
  }
}

}  // namespace

size_t adamw_runs_table_bytes(size_t n_runs) { return n_runs * sizeof(dev::ChunkRun); }

void adamw_update_runs(float* param, __nv_bfloat16* param_bf16, const float* grad, float* m,
                       float* v, const float* scale, const std::vector<AdamWRun>& runs, void* table,
                       UploadStaging& uploads, const Ops::AdamWParams& p, cudaStream_t stream) {
  GT_CHECK(p.t >= 1, "adamw_update_runs: step t = ", p.t, " (counts from 1)");
  dev::NvtxRange range("adamw_update");
  // The table; the decay is the same float expression as the CPU twin's, so
  // both decay alike.
  std::vector<dev::ChunkRun> host;
  const int64_t n_chunks = dev::make_chunk_table(
      runs, kChunk,
      [&](const AdamWRun& r) { return 1.f - p.lr * (r.decay ? p.weight_decay : 0.f); }, host);
  if (n_chunks == 0) return;
  uploads.copy_or_wait(table, host.data(), adamw_runs_table_bytes(host.size()), stream);
  const double t = static_cast<double>(p.t);
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
  Coeffs c{};
  c.beta1 = p.beta1;
  c.beta2 = p.beta2;
  c.eps = p.eps;
  c.grad_scale = p.grad_scale;
  c.scale = scale;
  c.step_size = static_cast<float>(static_cast<double>(p.lr) / bc1);
  c.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const unsigned blocks = static_cast<unsigned>(std::min(n_chunks, kMaxBlocks));
  dev::launch(adamw_runs_kernel, {blocks, kThreads, 0, stream}, param, param_bf16, grad, m, v,
              static_cast<const dev::ChunkRun*>(table), static_cast<int>(host.size()), n_chunks, c);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gt::cuda
