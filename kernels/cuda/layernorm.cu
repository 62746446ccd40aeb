// LayerNorm kernels and launchers (see layernorm.cuh for invariants).
//
// Forward: one warp per row, three passes over the row (mean, centred
// variance, write); the row stays in L1/L2 between passes.
// Backward, one pass over dout and inp, then a small reduction:
//   1. backward: a block of up to 8 warps per chunk of rows (about 512
//      chunks: one wave of ~4 blocks per SM), a warp per row: the row's input
//      gradient (+=) and its dweight/dbias terms added into the warp's own
//      shared-memory accumulators (each lane owns its columns: no races);
//      the block then sums its warps in order -> scratch[chunk][c]
//   2. param_reduce: 32 columns per block, 32 lanes each summing every 32nd
//      chunk, then the lanes in order (deterministic), +=
// A row's dout is read before its dinp is written, by the same lane, so a
// caller may alias dinp with dout. When 2 x 4 x C floats of shared memory do
// not fit (C > ~7000) the three-kernel form runs instead: param_partials
// (32 columns x 8 row lanes per block over a chunk), param_reduce, then dinp
// (one warp per row); it reads dout and inp twice. CudaTraffic counts both.
#include <type_traits>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/layernorm.cuh"

namespace gt::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowThreads = 256;  // 8 warps -> 8 rows per block
constexpr int kRowsPerBlock = kRowThreads / dev::kWarpSize;

// Calls f(x, i) for this lane's elements of a row of C elements (vec: in
// 16-byte packs, C % N == 0 and row aligned; otherwise one at a time).
template <typename T, typename F>
__device__ __forceinline__ void for_lane(const T* row, int C, bool vec, int lane, F&& f) {
  constexpr int N = dev::Pack<T>::N;
  if (vec) {
    for (int i = lane * N; i < C; i += dev::kWarpSize * N) {
      const dev::Pack<T> p = dev::load_pack(row + i);
#pragma unroll
      for (int k = 0; k < N; ++k) f(dev::to_float(p.v[k]), i + k);
    }
  } else {
    for (int i = lane; i < C; i += dev::kWarpSize) f(dev::to_float(row[i]), i);
  }
}

// T: the activations' storage; W: the parameters' (T, or fp32 under bf16
// storage: the model's fp32 master weights read directly).
// With `res` (the fused residual add): inp is ignored, res = a + b (rounded
// to T) is written first and normalised; each lane re-reads only the
// elements it wrote itself (the same columns in every pass), from L1.
template <typename T, typename W>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const W* weight, const W* bias, int64_t R, int C, bool vec,
                                         T* res, const T* add_a, const T* add_b, float* row_amax) {
  constexpr int N = dev::Pack<T>::N;
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock +
                      threadIdx.x / dev::kWarpSize;
  if (row >= R) return;  // whole warp leaves together; no block sync below
  T* y = out + row * C;
  const T* x = res ? res + row * C : inp + row * C;
  if (res) {
    T* r = res + row * C;
    const T* pa = add_a + row * C;
    const T* pb = add_b + row * C;
    if (vec) {
      for (int i = lane * N; i < C; i += dev::kWarpSize * N) {
        const dev::Pack<T> av = dev::load_pack(pa + i), bv = dev::load_pack(pb + i);
        dev::Pack<T> o;
#pragma unroll
        for (int k = 0; k < N; ++k)
          o.v[k] = dev::from_float<T>(dev::to_float(av.v[k]) + dev::to_float(bv.v[k]));
        dev::store_pack(r + i, o);
      }
    } else {
      for (int i = lane; i < C; i += dev::kWarpSize)
        r[i] = dev::from_float<T>(dev::to_float(pa[i]) + dev::to_float(pb[i]));
    }
  }

  float sum = 0.f;
  for_lane(x, C, vec, lane, [&](float v, int) { sum += v; });
  const float m = dev::warp_sum(sum) / static_cast<float>(C);

  float sq = 0.f;
  for_lane(x, C, vec, lane, [&](float v, int) {
    const float d = v - m;
    sq += d * d;
  });
  const float var = dev::warp_sum(sq) / static_cast<float>(C);
  const float rs = 1.f / sqrtf(var + kEps);

  unsigned amax = 0;  // max |out| as stored (row_amax: the fp8 input's scale)
  if (vec) {
    for (int i = lane * N; i < C; i += dev::kWarpSize * N) {
      const dev::Pack<T> xv = dev::load_pack(x + i);
      float wf[N], bf[N];
      if constexpr (std::is_same_v<T, W>) {
        const dev::Pack<W> wv = dev::load_pack(weight + i);
        const dev::Pack<W> bv = dev::load_pack(bias + i);
#pragma unroll
        for (int k = 0; k < N; ++k) {
          wf[k] = dev::to_float(wv.v[k]);
          bf[k] = dev::to_float(bv.v[k]);
        }
      } else {  // fp32 parameters: N/4 16-byte packs each, aligned with the row's
#pragma unroll
        for (int k = 0; k < N; k += dev::Pack<W>::N) {
          const dev::Pack<W> wv = dev::load_pack(weight + i + k);
          const dev::Pack<W> bv = dev::load_pack(bias + i + k);
#pragma unroll
          for (int j = 0; j < dev::Pack<W>::N; ++j) {
            wf[k + j] = dev::to_float(wv.v[j]);
            bf[k + j] = dev::to_float(bv.v[j]);
          }
        }
      }
      dev::Pack<T> o;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float n = (dev::to_float(xv.v[k]) - m) * rs;
        o.v[k] = dev::from_float<T>(n * wf[k] + bf[k]);
        amax = max(amax, dev::abs_bits(dev::to_float(o.v[k])));
      }
      dev::store_pack(y + i, o);
    }
  } else {
    for (int i = lane; i < C; i += dev::kWarpSize) {
      const float n = (dev::to_float(x[i]) - m) * rs;
      const T o = dev::from_float<T>(n * dev::to_float(weight[i]) + dev::to_float(bias[i]));
      y[i] = o;
      amax = max(amax, dev::abs_bits(dev::to_float(o)));
    }
  }
  if (row_amax) amax = dev::warp_max_bits(amax);  // the whole warp takes this branch
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = rs;
    if (row_amax) row_amax[row] = __uint_as_float(amax);
  }
}

// ---- backward -----------------------------------------------------------------
constexpr int kColTile = 32;  // columns per partials block (one warp wide)
constexpr int kRowLanes = 8;  // row lanes per partials block
// About 4 blocks per SM on an H200's 132 SMs: the whole grid is one wave, and
// each warp has a few rows, so the per-chunk partials stay small.
constexpr int kTargetChunks = 512;
constexpr int kMinRowsPerChunk = 8;

struct Chunking {
  int64_t rows_per_chunk, n_chunks;
};
Chunking chunking(int64_t R) {
  const int64_t rpc = std::max<int64_t>(kMinRowsPerChunk, (R + kTargetChunks - 1) / kTargetChunks);
  return {rpc, std::max<int64_t>(1, (R + rpc - 1) / rpc)};
}

// scratch layout: [n_chunks][C] dweight partials, then [n_chunks][C] dbias partials.
template <typename X, typename G>
__global__ void layernorm_param_partials_kernel(float* scratch, const G* dout, const X* inp,
                                                const float* mean, const float* rstd, int64_t R,
                                                int C, int64_t rows_per_chunk, int64_t n_chunks) {
  GT_SHARED(float, s_dw, [kRowLanes][kColTile]);
  GT_SHARED(float, s_db, [kRowLanes][kColTile]);
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = std::min<int64_t>(R, r0 + rows_per_chunk);
  float dw = 0.f, db = 0.f;
  if (c < C) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const float g = dev::to_float(dout[r * C + c]);
      const float xhat = (dev::to_float(inp[r * C + c]) - mean[r]) * rstd[r];
      dw += g * xhat;
      db += g;
    }
  }
  s_dw[threadIdx.y][threadIdx.x] = dw;
  s_db[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sw = 0.f, sb = 0.f;
#pragma unroll
    for (int k = 0; k < kRowLanes; ++k) {  // fixed order: deterministic
      sw += s_dw[k][threadIdx.x];
      sb += s_db[k][threadIdx.x];
    }
    scratch[chunk * C + c] = sw;
    scratch[(n_chunks + chunk) * C + c] = sb;
  }
}

// dweight[c] += sum over chunks of scratch: 32 columns per block, kReduceLanes
// lanes each summing every kReduceLanes-th chunk, then the lanes in order
// (deterministic). One thread per column would leave the chunks' loads in a
// single dependent chain on three blocks.
constexpr int kReduceLanes = 32;
__global__ void __launch_bounds__(kColTile* kReduceLanes)
    layernorm_param_reduce_kernel(float* dweight, float* dbias, const float* scratch, int C,
                                  int64_t n_chunks) {
  GT_SHARED(float, s_w, [kReduceLanes][kColTile + 1]);
  GT_SHARED(float, s_b, [kReduceLanes][kColTile + 1]);
  const int c = blockIdx.x * kColTile + threadIdx.x;
  float sw = 0.f, sb = 0.f;
  if (c < C) {
#pragma unroll 4
    for (int64_t k = threadIdx.y; k < n_chunks; k += kReduceLanes) {
      sw += scratch[k * C + c];
      sb += scratch[(n_chunks + k) * C + c];
    }
  }
  s_w[threadIdx.y][threadIdx.x] = sw;
  s_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.f, tb = 0.f;
    for (int k = 0; k < kReduceLanes; ++k) {  // fixed order: deterministic
      tw += s_w[k][threadIdx.x];
      tb += s_b[k][threadIdx.x];
    }
    dweight[c] += tw;
    dbias[c] += tb;
  }
}

// Four consecutive elements of a row from column i as fp32, in one access:
// 16 bytes of fp32, 8 of bf16 (the launcher checked the alignment).
template <typename T>
__device__ __forceinline__ void load4(float (&v)[4], const T* row, int i) {
  const dev::Quad<T> q = dev::load_quad(row + i);
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = dev::to_float(q.v[k]);
}

// One warp's two passes over a row of C:
//   dx += (w*g - mean(w*g) - xhat * mean(w*g*xhat)) * rstd,  xhat = (x - m) * rstd.
// With dw_acc/db_acc (the fused backward's shared-memory accumulators), the
// first pass also adds g*xhat and g there; a lane owns the same columns in
// every row, so no two lanes touch one accumulator. The second pass reads
// g[i] before writing dx[i] in the same lane, so dx may alias g (fp32 g).
// dx16, unless null, gets the updated dx rounded to bf16. vec: every row
// access in fours (C % 4 == 0, rows aligned to 4 elements). row_amax,
// unless null, gets the row's max |dx| as the GEMMs read it (dx16's values
// when there is one), from lane 0.
template <typename X, typename G>
__device__ __forceinline__ void add_row_input_grad(float* dx, __nv_bfloat16* dx16, const G* g,
                                                   const X* x, const float* weight, float m,
                                                   float rs, int C, bool vec, int lane,
                                                   float* dw_acc, float* db_acc,
                                                   float* row_amax) {
  float s1 = 0.f, s2 = 0.f;
  if (vec) {
    for (int i = lane * 4; i < C; i += dev::kWarpSize * 4) {
      float gf[4], xf[4], wf[4];
      load4(gf, g, i);
      load4(xf, x, i);
      load4(wf, weight, i);
      dev::Quad<float> dw{}, db{};
      if (dw_acc) {
        dw = dev::load_quad(dw_acc + i);
        db = dev::load_quad(db_acc + i);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float xhat = (xf[k] - m) * rs;
        const float wg = wf[k] * gf[k];
        s1 += wg;
        s2 += wg * xhat;
        dw.v[k] += gf[k] * xhat;
        db.v[k] += gf[k];
      }
      if (dw_acc) {
        dev::store_quad(dw_acc + i, dw);
        dev::store_quad(db_acc + i, db);
      }
    }
  } else {
    for (int i = lane; i < C; i += dev::kWarpSize) {
      const float gv = dev::to_float(g[i]);
      const float xhat = (dev::to_float(x[i]) - m) * rs;
      const float wg = weight[i] * gv;
      s1 += wg;
      s2 += wg * xhat;
      if (dw_acc) {
        dw_acc[i] += gv * xhat;
        db_acc[i] += gv;
      }
    }
  }
  const float mean1 = dev::warp_sum(s1) / static_cast<float>(C);
  const float mean2 = dev::warp_sum(s2) / static_cast<float>(C);
  unsigned amax = 0;
  if (vec) {
    for (int i = lane * 4; i < C; i += dev::kWarpSize * 4) {
      float gf[4], xf[4], wf[4];
      load4(gf, g, i);
      load4(xf, x, i);
      load4(wf, weight, i);
      dev::Quad<float> d = dev::load_quad(dx + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float xhat = (xf[k] - m) * rs;
        d.v[k] += (wf[k] * gf[k] - mean1 - xhat * mean2) * rs;
      }
      dev::store_quad(dx + i, d);
      if (dx16) {
        dev::Quad<__nv_bfloat16> h;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          h.v[k] = __float2bfloat16_rn(d.v[k]);
          amax = max(amax, dev::abs_bits(__bfloat162float(h.v[k])));
        }
        dev::store_quad(dx16 + i, h);
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) amax = max(amax, dev::abs_bits(d.v[k]));
      }
    }
  } else {
    for (int i = lane; i < C; i += dev::kWarpSize) {
      const float xhat = (dev::to_float(x[i]) - m) * rs;
      const float v = dx[i] + (weight[i] * dev::to_float(g[i]) - mean1 - xhat * mean2) * rs;
      dx[i] = v;
      if (dx16) {
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        dx16[i] = h;
        amax = max(amax, dev::abs_bits(__bfloat162float(h)));
      } else {
        amax = max(amax, dev::abs_bits(v));
      }
    }
  }
  if (row_amax) {  // the whole warp takes this branch
    amax = dev::warp_max_bits(amax);
    if (lane == 0) *row_amax = __uint_as_float(amax);
  }
}

// The fused backward (1. above): one warp per row, `warps` rows in flight per
// block, each warp with its own dweight/dbias accumulators in shared memory.
constexpr int kMaxBwdWarps = 8;
size_t fused_backward_smem_bytes(int warps, int C) {
  return sizeof(float) * 2 * static_cast<size_t>(warps) * static_cast<size_t>(C);
}
constexpr size_t kMaxSmemOptin = 232448;  // 227 KiB per block on sm_90

// dinp += (w*dout - mean(w*dout) - xhat * mean(w*dout*xhat)) * rstd, and
// scratch[chunk] = this chunk's sums of dout*xhat and dout per column.
template <typename X, typename G>
__global__ void __launch_bounds__(kMaxBwdWarps* dev::kWarpSize)
    layernorm_backward_kernel(float* dinp, __nv_bfloat16* dinp_bf16, float* scratch, const G* dout,
                              const X* inp, const float* weight, const float* mean,
                              const float* rstd, int64_t R, int C, int64_t rows_per_chunk,
                              int64_t n_chunks, bool vec, float* row_amax) {
  float* acc = dev::dynamic_shared_memory<float>();  // [warps][dweight C | dbias C]
  const int warps = static_cast<int>(blockDim.x) / dev::kWarpSize;
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  float* dw_acc = acc + static_cast<size_t>(warp) * 2 * C;
  float* db_acc = dw_acc + C;
  for (int i = lane; i < C; i += dev::kWarpSize) {
    dw_acc[i] = 0.f;
    db_acc[i] = 0.f;
  }
  __syncwarp();  // the zeros are visible to the lanes that own the columns below
  const int64_t chunk = blockIdx.x;
  const int64_t r1 = std::min<int64_t>(R, (chunk + 1) * rows_per_chunk);
  for (int64_t row = chunk * rows_per_chunk + warp; row < r1; row += warps)
    add_row_input_grad(dinp + row * C, dinp_bf16 ? dinp_bf16 + row * C : nullptr, dout + row * C,
                       inp + row * C, weight, mean[row], rstd[row], C, vec, lane, dw_acc, db_acc,
                       row_amax ? row_amax + row : nullptr);
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sw = 0.f, sb = 0.f;
    for (int w = 0; w < warps; ++w) {  // fixed order: deterministic
      sw += acc[static_cast<size_t>(w) * 2 * C + c];
      sb += acc[static_cast<size_t>(w) * 2 * C + C + c];
    }
    scratch[chunk * C + c] = sw;
    scratch[(n_chunks + chunk) * C + c] = sb;
  }
}

// dinp += (w*dout - mean(w*dout) - xhat * mean(w*dout*xhat)) * rstd
template <typename X, typename G>
__global__ void layernorm_dinp_kernel(float* dinp, __nv_bfloat16* dinp_bf16, const G* dout,
                                      const X* inp, const float* weight, const float* mean,
                                      const float* rstd, int64_t R, int C, bool vec,
                                      float* row_amax) {
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock +
                      threadIdx.x / dev::kWarpSize;
  if (row >= R) return;
  add_row_input_grad(dinp + row * C, dinp_bf16 ? dinp_bf16 + row * C : nullptr, dout + row * C,
                     inp + row * C, weight, mean[row], rstd[row], C, vec, lane, nullptr, nullptr,
                     row_amax ? row_amax + row : nullptr);
}

// res == nullptr: out = LN(inp). Else the fused residual add: res = a + b,
// out = LN(res) (inp unused).
template <typename T, typename W>
void launch_forward(T* out, float* mean, float* rstd, const T* inp, const W* weight, const W* bias,
                    int64_t R, int C, cudaStream_t stream, float* row_amax, T* res = nullptr,
                    const T* add_a = nullptr, const T* add_b = nullptr) {
  GT_CHECK(R >= 0 && C > 0, "layernorm_forward: R = ", R, ", C = ", C);
  if (R == 0) return;
  dev::NvtxRange range(res ? "add_layernorm_forward" : "layernorm_forward");
  constexpr int N = dev::Pack<T>::N;
  const bool vec = C % N == 0 && dev::aligned16(out) && dev::aligned16(weight) &&
                   dev::aligned16(bias) &&
                   (res ? dev::aligned16(res) && dev::aligned16(add_a) && dev::aligned16(add_b)
                        : dev::aligned16(inp));
  const unsigned grid = static_cast<unsigned>((R + kRowsPerBlock - 1) / kRowsPerBlock);
  dev::launch(layernorm_forward_kernel<T, W>, {grid, kRowThreads, 0, stream}, out, mean, rstd, inp,
              weight, bias, R, C, vec, res, add_a, add_b, row_amax);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t R, int C,
                       cudaStream_t stream, float* row_amax) {
  launch_forward(out, mean, rstd, inp, weight, bias, R, C, stream, row_amax);
}

void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* inp,
                       const __nv_bfloat16* weight, const __nv_bfloat16* bias, int64_t R, int C,
                       cudaStream_t stream, float* row_amax) {
  launch_forward(out, mean, rstd, inp, weight, bias, R, C, stream, row_amax);
}

void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* inp,
                       const float* weight, const float* bias, int64_t R, int C,
                       cudaStream_t stream, float* row_amax) {
  launch_forward(out, mean, rstd, inp, weight, bias, R, C, stream, row_amax);
}

void add_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a,
                           const float* b, const float* weight, const float* bias, int64_t R, int C,
                           cudaStream_t stream, float* row_amax) {
  launch_forward(out, mean, rstd, static_cast<const float*>(nullptr), weight, bias, R, C, stream,
                 row_amax, res, a, b);
}

void add_layernorm_forward(__nv_bfloat16* res, __nv_bfloat16* out, float* mean, float* rstd,
                           const __nv_bfloat16* a, const __nv_bfloat16* b,
                           const __nv_bfloat16* weight, const __nv_bfloat16* bias, int64_t R, int C,
                           cudaStream_t stream, float* row_amax) {
  launch_forward(out, mean, rstd, static_cast<const __nv_bfloat16*>(nullptr), weight, bias, R, C,
                 stream, row_amax, res, a, b);
}

void add_layernorm_forward(__nv_bfloat16* res, __nv_bfloat16* out, float* mean, float* rstd,
                           const __nv_bfloat16* a, const __nv_bfloat16* b, const float* weight,
                           const float* bias, int64_t R, int C, cudaStream_t stream,
                           float* row_amax) {
  launch_forward(out, mean, rstd, static_cast<const __nv_bfloat16*>(nullptr), weight, bias, R, C,
                 stream, row_amax, res, a, b);
}

int64_t layernorm_backward_scratch_floats(int64_t R, int C) {
  return 2 * chunking(R).n_chunks * static_cast<int64_t>(C);
}

namespace {
template <typename X, typename G>
void launch_backward(float* dinp, float* dweight, float* dbias, const G* dout, const X* inp,
                     const float* weight, const float* mean, const float* rstd, int64_t R, int C,
                     float* scratch, __nv_bfloat16* dinp_bf16, cudaStream_t stream,
                     float* row_amax) {
  GT_CHECK(R >= 0 && C > 0, "layernorm_backward: R = ", R, ", C = ", C);
  if (R == 0) return;
  dev::NvtxRange range("layernorm_backward");
  const Chunking ch = chunking(R);
  GT_CHECK(ch.n_chunks <= 65535, "layernorm_backward: too many row chunks");

  // Rows read and written in fours: 16 bytes of fp32, 8 of bf16.
  auto quad_aligned = [](const auto* p) {
    return reinterpret_cast<uintptr_t>(p) % (4 * sizeof(*p)) == 0;
  };
  const bool vec = C % 4 == 0 && quad_aligned(dinp) && quad_aligned(dout) && quad_aligned(inp) &&
                   quad_aligned(weight) && (!dinp_bf16 || quad_aligned(dinp_bf16));
  const unsigned reduce_blocks = static_cast<unsigned>((C + kColTile - 1) / kColTile);
  // As many warps per block as the accumulators' shared memory allows.
  int warps = kMaxBwdWarps;
  while (warps > 1 && fused_backward_smem_bytes(warps, C) > kMaxSmemOptin) warps /= 2;
  const size_t smem = fused_backward_smem_bytes(warps, C);
  if (warps >= 4) {
    if (smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<X, G>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
    dev::launch(layernorm_backward_kernel<X, G>,
                {static_cast<unsigned>(ch.n_chunks), static_cast<unsigned>(warps * dev::kWarpSize),
                 smem, stream},
                dinp, dinp_bf16, scratch, dout, inp, weight, mean, rstd, R, C, ch.rows_per_chunk,
                ch.n_chunks, vec, row_amax);
    CUDA_CHECK_LAUNCH();
    dev::launch(layernorm_param_reduce_kernel,
                {reduce_blocks, dim3(kColTile, kReduceLanes), 0, stream}, dweight, dbias, scratch,
                C, ch.n_chunks);
    CUDA_CHECK_LAUNCH();
    return;
  }

  const dim3 pgrid(static_cast<unsigned>((C + kColTile - 1) / kColTile),
                   static_cast<unsigned>(ch.n_chunks));
  dev::launch(layernorm_param_partials_kernel<X, G>, {pgrid, dim3(kColTile, kRowLanes), 0, stream},
              scratch, dout, inp, mean, rstd, R, C, ch.rows_per_chunk, ch.n_chunks);
  CUDA_CHECK_LAUNCH();

  dev::launch(layernorm_param_reduce_kernel,
              {reduce_blocks, dim3(kColTile, kReduceLanes), 0, stream}, dweight, dbias, scratch, C,
              ch.n_chunks);
  CUDA_CHECK_LAUNCH();

  const unsigned grid = static_cast<unsigned>((R + kRowsPerBlock - 1) / kRowsPerBlock);
  dev::launch(layernorm_dinp_kernel<X, G>, {grid, kRowThreads, 0, stream}, dinp, dinp_bf16, dout,
              inp, weight, mean, rstd, R, C, vec, row_amax);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t R, int C, float* scratch, __nv_bfloat16* dinp_bf16,
                        cudaStream_t stream, float* row_amax) {
  launch_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, R, C, scratch, dinp_bf16,
                  stream, row_amax);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const __nv_bfloat16* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t R, int C, float* scratch,
                        __nv_bfloat16* dinp_bf16, cudaStream_t stream, float* row_amax) {
  launch_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, R, C, scratch, dinp_bf16,
                  stream, row_amax);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const __nv_bfloat16* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t R, int C, float* scratch, __nv_bfloat16* dinp_bf16,
                        cudaStream_t stream, float* row_amax) {
  launch_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, R, C, scratch, dinp_bf16,
                  stream, row_amax);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const __nv_bfloat16* dout,
                        const __nv_bfloat16* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t R, int C, float* scratch,
                        __nv_bfloat16* dinp_bf16, cudaStream_t stream, float* row_amax) {
  launch_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, R, C, scratch, dinp_bf16,
                  stream, row_amax);
}

}  // namespace gt::cuda
