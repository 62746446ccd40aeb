// Fused softmax cross-entropy kernel and launcher (see cross_entropy.cuh).
// Row access is split into a scalar head up to the first 16-byte boundary, a
// 16-byte-pack body (4 floats or 8 bf16) and a scalar tail, so odd V (50257)
// still gets vector loads. Every kernel is templated on the logits' storage
// type T (float or __nv_bfloat16); the math is fp32 either way.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / dev::kWarpSize;

// Calls f(value, j) for this thread's elements of a row of V values of T,
// widened to fp32: a scalar head up to the first 16-byte boundary, a pack
// body, a scalar tail.
template <typename T, typename F>
__device__ __forceinline__ void visit_row(const T* x, int64_t V, F&& f) {
  constexpr int N = dev::Pack<T>::N;
  const dev::RowSplit sp = dev::split_row(x, V, sizeof(T));
  if (threadIdx.x < sp.head) f(dev::to_float(x[threadIdx.x]), static_cast<int64_t>(threadIdx.x));
  for (int64_t j = sp.head + N * static_cast<int64_t>(threadIdx.x); j < sp.body_end;
       j += N * kThreads) {
    const dev::Pack<T> v = dev::load_pack(x + j);
#pragma unroll
    for (int k = 0; k < N; ++k) f(dev::to_float(v.v[k]), j + k);
  }
  for (int64_t j = sp.body_end + threadIdx.x; j < V; j += kThreads) f(dev::to_float(x[j]), j);
}

// d[j] = g(x[j], j) (fp32, stored as T) for this thread's elements of a row
// of V values, with visit_row's split when d and x are misaligned alike
// (always true in place), else scalar. Each element is read, then written,
// by the same thread, so d may alias x.
template <typename T, typename G>
__device__ __forceinline__ void write_row(T* d, const T* x, int64_t V, G&& g) {
  if (reinterpret_cast<uintptr_t>(d) % 16 != reinterpret_cast<uintptr_t>(x) % 16) {
    for (int64_t j = threadIdx.x; j < V; j += kThreads)
      d[j] = dev::from_float<T>(g(dev::to_float(x[j]), j));
    return;
  }
  constexpr int N = dev::Pack<T>::N;
  const dev::RowSplit sp = dev::split_row(x, V, sizeof(T));
  if (threadIdx.x < sp.head)
    d[threadIdx.x] =
        dev::from_float<T>(g(dev::to_float(x[threadIdx.x]), static_cast<int64_t>(threadIdx.x)));
  for (int64_t j = sp.head + N * static_cast<int64_t>(threadIdx.x); j < sp.body_end;
       j += N * kThreads) {
    const dev::Pack<T> v = dev::load_pack(x + j);
    dev::Pack<T> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = dev::from_float<T>(g(dev::to_float(v.v[k]), j + k));
    dev::store_pack(d + j, out);
  }
  for (int64_t j = sp.body_end + threadIdx.x; j < V; j += kThreads)
    d[j] = dev::from_float<T>(g(dev::to_float(x[j]), j));
}

// exp of a logit minus the row max (<= 0). bf16 logits take the SFU's
// __expf (ex2.approx, ~2 ulp; their own rounding is 2^-9 relative), fp32
// logits keep expf. On an H200 this took the 124M step's cross-entropy from
// 1.94 to 1.86 ms (gpu_check): the exps were not what holds it at 2.4x its
// 0.77 ms floor; the second read of each 100 KB row (the gradient pass)
// largely misses L2 and is.
template <typename T>
__device__ __forceinline__ float logit_exp(float x) {
  if constexpr (std::is_same_v<T, float>)
    return expf(x);
  else
    return dev::fast_exp(x);
}

// Running (max, sum of exp(x - max)).
struct MaxSum {
  float m, s;
};

template <typename T>
__device__ __forceinline__ void visit(MaxSum& a, float x) {
  if (x > a.m) {
    a.s = a.s * logit_exp<T>(a.m - x) + 1.f;  // a.m == -inf on the first element: 0 * 0 + 1
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += logit_exp<T>(x - a.m);
  }
}

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ MaxSum block_max_sum(MaxSum v) {
  GT_SHARED(float, s_m, [kWarps]);
  GT_SHARED(float, s_s, [kWarps]);
  GT_SHARED(MaxSum, s_total, );
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

// Columns [valid, V) of each row are vocabulary padding (ops.hpp): skipped by
// the max and the sum, given a zero gradient.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_cross_entropy_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                 int64_t V, int64_t valid, float grad_scale) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  const int32_t tgt = targets[row];
  const bool tgt_ok = tgt >= 0 && tgt < valid;
  // Read before block_max_sum's barriers: an in-place dlogits overwrites it later.
  const float x_tgt = (threadIdx.x == 0 && tgt_ok) ? dev::to_float(x[tgt]) : NAN;

  MaxSum acc{-INFINITY, 0.f};
  visit_row(x, V, [&](float v, int64_t j) {
    if (j < valid) visit<T>(acc, v);
  });
  const MaxSum tot = block_max_sum(acc);

  if (threadIdx.x == 0) losses[row] = tgt_ok ? logf(tot.s) + tot.m - x_tgt : NAN;
  if (dlogits == nullptr) return;

  const float inv_s = 1.f / tot.s;
  T* d = dlogits + row * V;
  auto grad = [&](float v, int64_t j) {
    if (j >= valid) return 0.f;
    const float p = logit_exp<T>(v - tot.m) * inv_s;
    return (p - (j == tgt ? 1.f : 0.f)) * grad_scale;
  };
  write_row(d, x, V, grad);
}

template <typename T>
void launch_softmax_cross_entropy(float* losses, T* dlogits, const T* logits,
                                  const int32_t* targets, int64_t R, int64_t V, int64_t vocab_size,
                                  float grad_scale, cudaStream_t stream) {
  GT_CHECK(R >= 0 && V > 0, "softmax_cross_entropy: R = ", R, ", V = ", V);
  GT_CHECK(vocab_size > 0 && vocab_size <= V, "softmax_cross_entropy: vocab_size ", vocab_size,
           " must be in [1, ", V, "] (the logits' columns)");
  GT_CHECK(R <= 0x7fffffff, "softmax_cross_entropy: R = ", R, " exceeds the grid");
  if (R == 0) return;
  dev::NvtxRange range("softmax_cross_entropy");
  dev::launch(softmax_cross_entropy_kernel<T>, {static_cast<unsigned>(R), kThreads, 0, stream},
              losses, dlogits, logits, targets, V, vocab_size, grad_scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int64_t R, int64_t V, int64_t vocab_size,
                           float grad_scale, cudaStream_t stream) {
  launch_softmax_cross_entropy(losses, dlogits, logits, targets, R, V, vocab_size, grad_scale,
                               stream);
}
void softmax_cross_entropy(float* losses, __nv_bfloat16* dlogits, const __nv_bfloat16* logits,
                           const int32_t* targets, int64_t R, int64_t V, int64_t vocab_size,
                           float grad_scale, cudaStream_t stream) {
  launch_softmax_cross_entropy(losses, dlogits, logits, targets, R, V, vocab_size, grad_scale,
                               stream);
}

// ---- vocab-parallel shards ------------------------------------------------------
namespace {

__device__ float block_max(float v) {
  GT_SHARED(float, s_m, [kWarps]);
  GT_SHARED(float, s_total, );
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

template <typename T>
__global__ void __launch_bounds__(kThreads)
    shard_max_kernel(float* row_max, const T* logits, int64_t V, int64_t valid) {
  const T* x = logits + static_cast<int64_t>(blockIdx.x) * V;
  float m = -INFINITY;  // stays -inf for a shard of padding only
  visit_row(x, V, [&](float v, int64_t j) {
    if (j < valid) m = fmaxf(m, v);
  });
  m = block_max(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    shard_sums_kernel(float* sumexp, float* target_logit, const T* logits, const int32_t* targets,
                      const float* row_max, int64_t V, int64_t valid, int64_t vocab_start) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  const float mx = row_max[row];
  float s = 0.f;
  visit_row(x, V, [&](float v, int64_t j) {
    if (j < valid) s += logit_exp<T>(v - mx);
  });
  s = dev::block_sum(s);
  if (threadIdx.x == 0) {
    sumexp[row] = s;
    const int64_t t = static_cast<int64_t>(targets[row]) - vocab_start;
    target_logit[row] = (t >= 0 && t < valid) ? dev::to_float(x[t]) : 0.f;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    shard_finish_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                        const float* row_max, const float* sumexp, const float* target_logit,
                        int64_t V, int64_t valid, int64_t vocab_start, float grad_scale) {
  const int64_t row = blockIdx.x;
  const float mx = row_max[row], se = sumexp[row];
  if (threadIdx.x == 0) losses[row] = logf(se) + mx - target_logit[row];
  if (dlogits == nullptr) return;
  const T* x = logits + row * V;
  T* d = dlogits + row * V;
  const int64_t t = static_cast<int64_t>(targets[row]) - vocab_start;  // may be outside [0, V)
  const float k = grad_scale / se;
  auto grad = [&](float v, int64_t j) {
    if (j >= valid) return 0.f;
    return logit_exp<T>(v - mx) * k - (j == t ? grad_scale : 0.f);
  };
  write_row(d, x, V, grad);
}

// The shard's vocabulary columns [0, valid): the rest is padding.
int64_t check_shard(const char* what, int64_t R, int64_t V, int64_t vocab_start,
                    int64_t vocab_size) {
  GT_CHECK(R >= 0 && V > 0, what, ": R = ", R, ", V_shard = ", V);
  GT_CHECK(R <= 0x7fffffff, what, ": R = ", R, " exceeds the grid");
  GT_CHECK(vocab_start >= 0 && vocab_size > 0, what, ": vocab_start ", vocab_start, ", vocab_size ",
           vocab_size);
  return std::min(std::max<int64_t>(vocab_size - vocab_start, 0), V);
}

template <typename T>
void launch_shard_max(float* row_max, const T* logits, int64_t R, int64_t V_shard,
                      int64_t vocab_start, int64_t vocab_size, cudaStream_t stream) {
  const int64_t valid = check_shard("cross_entropy_shard_max", R, V_shard, vocab_start, vocab_size);
  if (R == 0) return;
  dev::NvtxRange range("cross_entropy_shard_max");
  dev::launch(shard_max_kernel<T>, {static_cast<unsigned>(R), kThreads, 0, stream}, row_max, logits,
              V_shard, valid);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_shard_sums(float* sumexp, float* target_logit, const T* logits, const int32_t* targets,
                       const float* row_max, int64_t R, int64_t V_shard, int64_t vocab_start,
                       int64_t vocab_size, cudaStream_t stream) {
  const int64_t valid =
      check_shard("cross_entropy_shard_sums", R, V_shard, vocab_start, vocab_size);
  if (R == 0) return;
  dev::NvtxRange range("cross_entropy_shard_sums");
  dev::launch(shard_sums_kernel<T>, {static_cast<unsigned>(R), kThreads, 0, stream}, sumexp,
              target_logit, logits, targets, row_max, V_shard, valid, vocab_start);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_shard_finish(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                         const float* row_max, const float* sumexp, const float* target_logit,
                         int64_t R, int64_t V_shard, int64_t vocab_start, int64_t vocab_size,
                         float grad_scale, cudaStream_t stream) {
  const int64_t valid =
      check_shard("cross_entropy_shard_finish", R, V_shard, vocab_start, vocab_size);
  if (R == 0) return;
  dev::NvtxRange range("cross_entropy_shard_finish");
  dev::launch(shard_finish_kernel<T>, {static_cast<unsigned>(R), kThreads, 0, stream}, losses,
              dlogits, logits, targets, row_max, sumexp, target_logit, V_shard, valid, vocab_start,
              grad_scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// One public overload per storage type of the logits.
#define GT_CE_SHARD_OVERLOADS(T)                                                                \
  void cross_entropy_shard_max(float* row_max, const T* logits, int64_t R, int64_t V_shard,     \
                               int64_t vocab_start, int64_t vocab_size, cudaStream_t stream) {  \
    launch_shard_max(row_max, logits, R, V_shard, vocab_start, vocab_size, stream);             \
  }                                                                                             \
  void cross_entropy_shard_sums(float* sumexp, float* target_logit, const T* logits,            \
                                const int32_t* targets, const float* row_max, int64_t R,        \
                                int64_t V_shard, int64_t vocab_start, int64_t vocab_size,       \
                                cudaStream_t stream) {                                          \
    launch_shard_sums(sumexp, target_logit, logits, targets, row_max, R, V_shard, vocab_start,  \
                      vocab_size, stream);                                                      \
  }                                                                                             \
  void cross_entropy_shard_finish(                                                              \
      float* losses, T* dlogits, const T* logits, const int32_t* targets, const float* row_max, \
      const float* sumexp, const float* target_logit, int64_t R, int64_t V_shard,               \
      int64_t vocab_start, int64_t vocab_size, float grad_scale, cudaStream_t stream) {         \
    launch_shard_finish(losses, dlogits, logits, targets, row_max, sumexp, target_logit, R,     \
                        V_shard, vocab_start, vocab_size, grad_scale, stream);                  \
  }
GT_CE_SHARD_OVERLOADS(float)
GT_CE_SHARD_OVERLOADS(__nv_bfloat16)
#undef GT_CE_SHARD_OVERLOADS

}  // namespace gt::cuda
