// Fused softmax cross-entropy kernel and launcher (see cross_entropy.cuh).
// Row access is split into a scalar head up to the first 16-byte boundary, a
// float4 body and a scalar tail, so odd V (50257) still gets vector loads.
#include "kernels/cuda/cross_entropy.cuh"

#include <cmath>

#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / dev::kWarpSize;

// Running (max, sum of exp(x - max)).
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ void visit(MaxSum& a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.f;  // a.m == -inf on the first element: 0 * 0 + 1
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += expf(x - a.m);
  }
}

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ MaxSum block_max_sum(MaxSum v) {
  __shared__ float s_m[kWarps], s_s[kWarps];
  __shared__ MaxSum s_total;
  const int lane = threadIdx.x % dev::kWarpSize, warp = threadIdx.x / dev::kWarpSize;
  for (int o = dev::kWarpSize / 2; o > 0; o >>= 1) {
    const MaxSum other{__shfl_xor_sync(dev::kFullMask, v.m, o),
                       __shfl_xor_sync(dev::kFullMask, v.s, o)};
    v = combine(v, other);
  }
  if (lane == 0) {
    s_m[warp] = v.m;
    s_s[warp] = v.s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum t = {s_m[0], s_s[0]};
    for (int w = 1; w < kWarps; ++w) t = combine(t, MaxSum{s_m[w], s_s[w]});  // fixed order
    s_total = t;
  }
  __syncthreads();
  return s_total;
}

__global__ void __launch_bounds__(kThreads)
    softmax_cross_entropy_kernel(float* losses, float* dlogits, const float* logits,
                                 const int32_t* targets, int64_t V, float grad_scale) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * V;
  const int32_t tgt = targets[row];
  const bool valid = tgt >= 0 && tgt < V;
  // Read before block_max_sum's barriers: an in-place dlogits overwrites it later.
  const float x_tgt = (threadIdx.x == 0 && valid) ? x[tgt] : NAN;

  const dev::RowSplit sp = dev::split_row(x, V, sizeof(float));
  MaxSum acc{-INFINITY, 0.f};
  if (threadIdx.x < sp.head) visit(acc, x[threadIdx.x]);
  for (int64_t j = sp.head + 4 * static_cast<int64_t>(threadIdx.x); j < sp.body_end;
       j += 4 * kThreads) {
    const float4 v = *reinterpret_cast<const float4*>(x + j);
    visit(acc, v.x);
    visit(acc, v.y);
    visit(acc, v.z);
    visit(acc, v.w);
  }
  for (int64_t j = sp.body_end + threadIdx.x; j < V; j += kThreads) visit(acc, x[j]);
  const MaxSum tot = block_max_sum(acc);

  if (threadIdx.x == 0) losses[row] = valid ? logf(tot.s) + tot.m - x_tgt : NAN;
  if (dlogits == nullptr) return;

  const float inv_s = 1.f / tot.s;
  float* d = dlogits + row * V;
  auto grad = [&](float v, int64_t j) {
    const float p = expf(v - tot.m) * inv_s;
    return (p - (j == tgt ? 1.f : 0.f)) * grad_scale;
  };
  // Same element split for both rows when their misalignment matches (always
  // true in place); otherwise all scalar.
  const bool same_phase = reinterpret_cast<uintptr_t>(d) % 16 == reinterpret_cast<uintptr_t>(x) % 16;
  if (same_phase) {
    if (threadIdx.x < sp.head) d[threadIdx.x] = grad(x[threadIdx.x], threadIdx.x);
    for (int64_t j = sp.head + 4 * static_cast<int64_t>(threadIdx.x); j < sp.body_end;
         j += 4 * kThreads) {
      const float4 v = *reinterpret_cast<const float4*>(x + j);
      const float4 g = {grad(v.x, j), grad(v.y, j + 1), grad(v.z, j + 2), grad(v.w, j + 3)};
      *reinterpret_cast<float4*>(d + j) = g;
    }
    for (int64_t j = sp.body_end + threadIdx.x; j < V; j += kThreads) d[j] = grad(x[j], j);
  } else {
    for (int64_t j = threadIdx.x; j < V; j += kThreads) d[j] = grad(x[j], j);
  }
}

}  // namespace

void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int64_t R, int64_t V, float grad_scale,
                           cudaStream_t stream) {
  GT_CHECK(R >= 0 && V > 0, "softmax_cross_entropy: R = ", R, ", V = ", V);
  GT_CHECK(R <= 0x7fffffff, "softmax_cross_entropy: R = ", R, " exceeds the grid");
  if (R == 0) return;
  dev::NvtxRange range("softmax_cross_entropy");
  dev::launch(softmax_cross_entropy_kernel, {static_cast<unsigned>(R), kThreads, 0, stream}, losses,
              dlogits, logits, targets, V, grad_scale);
  CUDA_CHECK_LAUNCH();
}

// ---- vocab-parallel shards ------------------------------------------------------
namespace {

// Calls f(value, j) for this thread's elements of a row of V floats: a scalar
// head up to the first 16-byte boundary, a float4 body, a scalar tail.
template <typename F>
__device__ __forceinline__ void visit_row(const float* x, int64_t V, F&& f) {
  const dev::RowSplit sp = dev::split_row(x, V, sizeof(float));
  if (threadIdx.x < sp.head) f(x[threadIdx.x], static_cast<int64_t>(threadIdx.x));
  for (int64_t j = sp.head + 4 * static_cast<int64_t>(threadIdx.x); j < sp.body_end;
       j += 4 * kThreads) {
    const float4 v = *reinterpret_cast<const float4*>(x + j);
    f(v.x, j);
    f(v.y, j + 1);
    f(v.z, j + 2);
    f(v.w, j + 3);
  }
  for (int64_t j = sp.body_end + threadIdx.x; j < V; j += kThreads) f(x[j], j);
}

__device__ float block_max(float v) {
  __shared__ float s_m[kWarps];
  __shared__ float s_total;
  const int lane = threadIdx.x % dev::kWarpSize, warp = threadIdx.x / dev::kWarpSize;
  v = dev::warp_max(v);
  if (lane == 0) s_m[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = s_m[0];
    for (int w = 1; w < kWarps; ++w) t = fmaxf(t, s_m[w]);
    s_total = t;
  }
  __syncthreads();
  return s_total;
}

__global__ void __launch_bounds__(kThreads)
    shard_max_kernel(float* row_max, const float* logits, int64_t V) {
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * V;
  float m = -INFINITY;
  visit_row(x, V, [&](float v, int64_t) { m = fmaxf(m, v); });
  m = block_max(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void __launch_bounds__(kThreads)
    shard_sums_kernel(float* sumexp, float* target_logit, const float* logits,
                      const int32_t* targets, const float* row_max, int64_t V,
                      int64_t vocab_start) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * V;
  const float mx = row_max[row];
  float s = 0.f;
  visit_row(x, V, [&](float v, int64_t) { s += expf(v - mx); });
  s = dev::block_sum(s);
  if (threadIdx.x == 0) {
    sumexp[row] = s;
    const int64_t t = static_cast<int64_t>(targets[row]) - vocab_start;
    target_logit[row] = (t >= 0 && t < V) ? x[t] : 0.f;
  }
}

__global__ void __launch_bounds__(kThreads)
    shard_finish_kernel(float* losses, float* dlogits, const float* logits,
                        const int32_t* targets, const float* row_max, const float* sumexp,
                        const float* target_logit, int64_t V, int64_t vocab_start,
                        float grad_scale) {
  const int64_t row = blockIdx.x;
  const float mx = row_max[row], se = sumexp[row];
  if (threadIdx.x == 0) losses[row] = logf(se) + mx - target_logit[row];
  if (dlogits == nullptr) return;
  const float* x = logits + row * V;
  float* d = dlogits + row * V;
  const int64_t t = static_cast<int64_t>(targets[row]) - vocab_start;  // may be outside [0, V)
  const float k = grad_scale / se;
  auto grad = [&](float v, int64_t j) { return expf(v - mx) * k - (j == t ? grad_scale : 0.f); };
  // Each element is read, then written, by the same thread: in place is safe.
  const bool same_phase = reinterpret_cast<uintptr_t>(d) % 16 == reinterpret_cast<uintptr_t>(x) % 16;
  if (same_phase) {
    const dev::RowSplit sp = dev::split_row(x, V, sizeof(float));
    if (threadIdx.x < sp.head) d[threadIdx.x] = grad(x[threadIdx.x], threadIdx.x);
    for (int64_t j = sp.head + 4 * static_cast<int64_t>(threadIdx.x); j < sp.body_end;
         j += 4 * kThreads) {
      const float4 v = *reinterpret_cast<const float4*>(x + j);
      *reinterpret_cast<float4*>(d + j) =
          float4{grad(v.x, j), grad(v.y, j + 1), grad(v.z, j + 2), grad(v.w, j + 3)};
    }
    for (int64_t j = sp.body_end + threadIdx.x; j < V; j += kThreads) d[j] = grad(x[j], j);
  } else {
    for (int64_t j = threadIdx.x; j < V; j += kThreads) d[j] = grad(x[j], j);
  }
}

void check_shard(const char* what, int64_t R, int64_t V) {
  GT_CHECK(R >= 0 && V > 0, what, ": R = ", R, ", V_shard = ", V);
  GT_CHECK(R <= 0x7fffffff, what, ": R = ", R, " exceeds the grid");
}

}  // namespace

void cross_entropy_shard_max(float* row_max, const float* logits, int64_t R, int64_t V_shard,
                             cudaStream_t stream) {
  check_shard("cross_entropy_shard_max", R, V_shard);
  if (R == 0) return;
  dev::NvtxRange range("cross_entropy_shard_max");
  dev::launch(shard_max_kernel, {static_cast<unsigned>(R), kThreads, 0, stream}, row_max, logits,
              V_shard);
  CUDA_CHECK_LAUNCH();
}

void cross_entropy_shard_sums(float* sumexp, float* target_logit, const float* logits,
                              const int32_t* targets, const float* row_max, int64_t R,
                              int64_t V_shard, int64_t vocab_start, cudaStream_t stream) {
  check_shard("cross_entropy_shard_sums", R, V_shard);
  if (R == 0) return;
  dev::NvtxRange range("cross_entropy_shard_sums");
  dev::launch(shard_sums_kernel, {static_cast<unsigned>(R), kThreads, 0, stream}, sumexp,
              target_logit, logits, targets, row_max, V_shard, vocab_start);
  CUDA_CHECK_LAUNCH();
}

void cross_entropy_shard_finish(float* losses, float* dlogits, const float* logits,
                                const int32_t* targets, const float* row_max,
                                const float* sumexp, const float* target_logit, int64_t R,
                                int64_t V_shard, int64_t vocab_start, float grad_scale,
                                cudaStream_t stream) {
  check_shard("cross_entropy_shard_finish", R, V_shard);
  if (R == 0) return;
  dev::NvtxRange range("cross_entropy_shard_finish");
  dev::launch(shard_finish_kernel, {static_cast<unsigned>(R), kThreads, 0, stream}, losses, dlogits,
              logits, targets, row_max, sumexp, target_logit, V_shard, vocab_start, grad_scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gt::cuda
