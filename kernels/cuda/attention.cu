// Flash-style causal attention kernels and launchers (see attention.cuh).
//
// Forward, one block per (b*NH + h, query tile), h a query head reading
// key/value head h / (NH / KV):
//   Q tile (pre-scaled by 1/sqrt(hs)) stays in shared memory; for each key
//   tile up to the diagonal: S = Q K^T (4x4 per thread), causal mask, online
//   softmax (row max / sum over the 16 threads sharing a row, by shuffles),
//   P to shared memory, O += P V. Out = O / l, lse = m + log l.
// Backward, after D = rowsum(dO * O) (one warp per row):
//   dkdv kernel, one block per (b*KV + key/value head, key tile), over the
//   query heads of the head's group in order and, for each, over the query
//   tiles from the diagonal (with KV = NH: one head, multi-head attention):
//     S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - D),
//     dV += P^T dO, dK += dS^T Q (Q pre-scaled, so this is scale * dS^T Q).
//   dq kernel, one block per (b*NH + h, query tile), over key tiles up to the
//   diagonal of h's key/value head:
//     S, P, dP = dO V^T, dS as above, dQ += dS K; dQ *= scale at the end.
// Every processed tile holds at least one unmasked key per row (key tiles
// start at or before the row's own position), so the running max is finite
// after the first tile and exp never sees inf - inf. Rows and keys past T are
// zero-filled in shared memory and masked, so they add exact zeros.
// Attention over blocks (attention_blocks.cuh, context parallelism): the same
// three kernels on strided q, k, v at global positions, with fp32 outputs
// merged or accumulated, after the unsplit ones; and the row dot for both.
#include "kernels/cuda/attention.cuh"

#include <cmath>
#include <initializer_list>

#include "kernels/cuda/attention_block_dims.cuh"
#include "kernels/cuda/attention_blocks.cuh"
#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

constexpr int kTile = 64;                // queries and keys per tile
constexpr int kThreads = 256;            // 16 x 16 threads
constexpr int kLanes = 16;               // threads sharing a score row (a half-warp)
constexpr int kPerThread = kTile / kLanes;  // 4 rows (and 4 columns) of a tile per thread
constexpr int kLdS = kTile + 1;          // row stride of the (64 x 64) P / dS tiles

// Row stride of a (64 x HSP) tile: one float of padding makes (HSP + 1) % 32
// == 1, so 16 threads walking 16 different rows hit 16 different banks.
template <int HSP>
constexpr int ld_head() { return HSP + 1; }

// Loads rows [0, rows) x columns [0, hs) of a strided (rows, hs) slice of
// global memory into a (64 x HSP) shared tile, times `scale`; the rest of the
// tile is zero. Coalesced: consecutive threads take consecutive columns.
template <typename T, int HSP>
__device__ __forceinline__ void load_tile(float* dst, const T* src, int64_t row_stride, int rows,
                                          int hs, float scale, bool vec) {
  constexpr int LDH = ld_head<HSP>();
  if (vec) {
    constexpr int N = dev::Pack<T>::N;
    constexpr int kPacksPerRow = HSP / N;
    for (int e = threadIdx.x; e < kTile * kPacksPerRow; e += kThreads) {
      const int r = e / kPacksPerRow, d0 = (e % kPacksPerRow) * N;
      float* row = dst + r * LDH + d0;
      if (r < rows && d0 < hs) {  // hs % N == 0: the whole pack is inside the head
        const dev::Pack<T> p = dev::load_pack(src + r * row_stride + d0);
#pragma unroll
        for (int k = 0; k < N; ++k) row[k] = dev::to_float(p.v[k]) * scale;
      } else {
#pragma unroll
        for (int k = 0; k < N; ++k) row[k] = 0.f;
      }
    }
  } else {
    for (int e = threadIdx.x; e < kTile * HSP; e += kThreads) {
      const int r = e / HSP, d = e % HSP;
      dst[r * LDH + d] = (r < rows && d < hs) ? dev::to_float(src[r * row_stride + d]) * scale : 0.f;
    }
  }
}

// acc[i][j] += sum_{d<K} A[ra(i)][d] * B[rb(j)][d] with ra(i) = ty + 16 i,
// rb(j) = tx + 16 j: a (64 x K) times (64 x K)^T product, 4x4 per thread.
template <int K, int LDA, int LDB>
__device__ __forceinline__ void mma_abt(float (&acc)[kPerThread][kPerThread], const float* A,
                                        const float* B, int ty, int tx) {
#pragma unroll 4
  for (int d = 0; d < K; ++d) {
    float a[kPerThread], b[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) a[i] = A[(ty + kLanes * i) * LDA + d];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) b[j] = B[(tx + kLanes * j) * LDB + d];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// acc[i][j] += sum_{c<64} A[ty + 16 i][c] * B[c][tx + 16 j]: a (64 x 64) times
// (64 x HSP) product, 4 x NJ per thread.
template <int NJ, int LDA, int LDB>
__device__ __forceinline__ void mma_ab(float (&acc)[kPerThread][NJ], const float* A,
                                       const float* B, int ty, int tx) {
#pragma unroll 4
  for (int c = 0; c < kTile; ++c) {
    float a[kPerThread], b[NJ];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) a[i] = A[(ty + kLanes * i) * LDA + c];
#pragma unroll
    for (int j = 0; j < NJ; ++j) b[j] = B[c * LDB + tx + kLanes * j];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// Reductions over the 16 threads of a half-warp that share a score row.
__device__ __forceinline__ float row_max(float v) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(dev::kFullMask, v, o));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(dev::kFullMask, v, o);
  return v;
}

struct Dims {
  int T, NH, KV, hs;
  int C;    // NH hs: out's row, and the column of qkv where the keys start
  int Ckv;  // KV hs: the width of the keys (and of the values) in qkv's row
  int ld;   // qkv's row, C + 2 Ckv: 3C for multi-head attention
  float scale;
  bool vec;  // 16-byte loads are legal for qkv, out, dout, dqkv
  // The key/value head query head h reads (HF's repeat_kv).
  __device__ int kv_head(int h) const { return h / (NH / KV); }
};

template <int HSP>
constexpr int forward_smem_floats() { return 3 * kTile * ld_head<HSP>() + kTile * kLdS; }
template <int HSP>
constexpr int dkdv_smem_floats() { return 4 * kTile * ld_head<HSP>() + 2 * kTile * kLdS + 2 * kTile; }
template <int HSP>
constexpr int dq_smem_floats() { return 4 * kTile * ld_head<HSP>() + kTile * kLdS + 2 * kTile; }

// ---- forward ------------------------------------------------------------------
template <typename T, int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(T* out, float* lse, const T* qkv, Dims dm) {
  constexpr int LDH = ld_head<HSP>();
  constexpr int NJ = HSP / kLanes;
  float* smem = dev::dynamic_shared_memory<float>();
  float* q_s = smem;                 // (64, HSP) queries, pre-scaled
  float* k_s = q_s + kTile * LDH;    // (64, HSP) keys
  float* v_s = k_s + kTile * LDH;    // (64, HSP) values
  float* p_s = v_s + kTile * LDH;    // (64, 64) probabilities (unnormalised)

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int C3 = dm.ld;  // qkv's row (the name is multi-head attention's 3C)
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int q0 = qt * kTile;
  const T* row0 = qkv + static_cast<int64_t>(b) * dm.T * C3;
  const T* q_base = row0 + h * dm.hs;  // row 0 of query head h
  // Row 0 at h's key/value head's offset: its keys at + C, its values at + C + Ckv.
  const T* base = row0 + dm.kv_head(h) * dm.hs;

  load_tile<T, HSP>(q_s, q_base + static_cast<int64_t>(q0) * C3, C3, min(kTile, dm.T - q0), dm.hs,
                    dm.scale, dm.vec);

  float m[kPerThread], l[kPerThread], o[kPerThread][NJ];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) o[i][j] = 0.f;
  }

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of k_s, v_s, p_s are done
    const T* kv = base + static_cast<int64_t>(k0) * C3;
    load_tile<T, HSP>(k_s, kv + dm.C, C3, min(kTile, dm.T - k0), dm.hs, 1.f, dm.vec);
    load_tile<T, HSP>(v_s, kv + dm.C + dm.Ckv, C3, min(kTile, dm.T - k0), dm.hs, 1.f, dm.vec);
    __syncthreads();

    float s[kPerThread][kPerThread] = {};
    mma_abt<HSP, LDH, LDH>(s, q_s, k_s, ty, tx);

#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int r = ty + kLanes * i, qr = q0 + r;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int kc = k0 + tx + kLanes * j;
        if (kc > qr || kc >= dm.T) s[i][j] = -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      const float m_new = fmaxf(m[i], row_max(mx));
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // never taken (see top)
      const float corr = expf(m[i] - m_use);                   // 0 on the first tile
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const float p = expf(s[i][j] - m_use);  // masked: exp(-inf) = 0
        p_s[r * kLdS + tx + kLanes * j] = p;
        sum += p;
      }
      l[i] = l[i] * corr + row_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < NJ; ++j) o[i][j] *= corr;
    }
    __syncthreads();
    mma_ab<NJ, kLdS, LDH>(o, p_s, v_s, ty, tx);
  }

  T* out_base = out + static_cast<int64_t>(b) * dm.T * dm.C + h * dm.hs;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int qr = q0 + ty + kLanes * i;
    if (qr >= dm.T) continue;
    const float inv = 1.f / l[i];
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int col = tx + kLanes * j;
      if (col < dm.hs) out_base[static_cast<int64_t>(qr) * dm.C + col] = dev::from_float<T>(o[i][j] * inv);
    }
    if (tx == 0) lse[static_cast<int64_t>(bh) * dm.T + qr] = m[i] + logf(l[i]);
  }
}

// ---- backward -----------------------------------------------------------------
// D[b, h, t] = sum_d dout[b,t,h*hs+d] * out[b,t,h*hs+d]; one warp per (b,t,h),
// lane l summing columns l, l + 32, ... then the warp's sum. dout and out
// (B,T,NH hs) strided (contiguous rows), each fp32 or bf16; D (B,NH,T) with
// contiguous (b,h) rows. The unsplit backward's D is the contiguous case.
struct RowDotDims {
  int T, NH, hs;
  int64_t g_sb, g_st;  // dout
  int64_t y_sb, y_st;  // out
  int64_t d_sb, d_sh;  // D
};
template <typename G, typename Y>
__global__ void attention_rowdot_kernel(float* D, const G* dout, const Y* out, int B,
                                        RowDotDims dm) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / dev::kWarpSize;
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t n_rows = static_cast<int64_t>(B) * dm.T * dm.NH;
  if (warp >= n_rows) return;
  const int h = static_cast<int>(warp % dm.NH);
  const int64_t bt = warp / dm.NH;  // b*T + t
  const int64_t b = bt / dm.T, t = bt % dm.T;
  const G* g = dout + b * dm.g_sb + t * dm.g_st + h * dm.hs;
  const Y* y = out + b * dm.y_sb + t * dm.y_st + h * dm.hs;
  float acc = 0.f;
  for (int d = lane; d < dm.hs; d += dev::kWarpSize) acc += dev::to_float(g[d]) * dev::to_float(y[d]);
  acc = dev::warp_sum(acc);
  if (lane == 0) D[b * dm.d_sb + h * dm.d_sh + t] = acc;
}

template <typename T, int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                          Dims dm) {
  constexpr int LDH = ld_head<HSP>();
  constexpr int NJ = HSP / kLanes;
  float* smem = dev::dynamic_shared_memory<float>();
  float* k_s = smem;                 // (64, HSP) this block's keys
  float* v_s = k_s + kTile * LDH;    // (64, HSP) this block's values
  float* q_s = v_s + kTile * LDH;    // (64, HSP) queries of the current tile, pre-scaled
  float* do_s = q_s + kTile * LDH;   // (64, HSP) dout of the current tile
  float* pt_s = do_s + kTile * LDH;  // (64 keys, 64 queries) P^T
  float* dst_s = pt_s + kTile * kLdS;  // (64 keys, 64 queries) dS^T
  float* lse_s = dst_s + kTile * kLdS;  // (64) per query
  float* d_s = lse_s + kTile;           // (64) per query

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int kt = blockIdx.y;  // key tile 0 sees every query tile: the longest first
  const int bj = blockIdx.x, b = bj / dm.KV, kvh = bj % dm.KV;
  const int group = dm.NH / dm.KV;  // kvh serves query heads [kvh group, (kvh + 1) group)
  const int C3 = dm.ld;             // qkv's row (the name is multi-head attention's 3C)
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int k0 = kt * kTile;
  const int64_t row0 = static_cast<int64_t>(b) * dm.T * C3;
  // Row 0 at kvh's offset: its keys at + C, its values at + C + Ckv.
  const T* base = qkv + row0 + kvh * dm.hs;

  load_tile<T, HSP>(k_s, base + static_cast<int64_t>(k0) * C3 + dm.C, C3, min(kTile, dm.T - k0),
                    dm.hs, 1.f, dm.vec);
  load_tile<T, HSP>(v_s, base + static_cast<int64_t>(k0) * C3 + dm.C + dm.Ckv, C3,
                    min(kTile, dm.T - k0), dm.hs, 1.f, dm.vec);

  // dK, dV of head kvh summed over its group's query heads and their query
  // tiles, in this order, in registers.
  float dk[kPerThread][NJ] = {}, dv[kPerThread][NJ] = {};
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t bh = static_cast<int64_t>(b) * dm.NH + h;
    const T* q_base = qkv + row0 + h * dm.hs;
    const T* dout_base = dout + static_cast<int64_t>(b) * dm.T * dm.C + h * dm.hs;
    const float* lse_bh = lse + bh * dm.T;
    const float* d_bh = D + bh * dm.T;
    for (int qt = kt; qt < n_tiles; ++qt) {
      const int q0 = qt * kTile, rows = min(kTile, dm.T - q0);
      __syncthreads();  // the previous query tile's readers are done
      load_tile<T, HSP>(q_s, q_base + static_cast<int64_t>(q0) * C3, C3, rows, dm.hs, dm.scale,
                        dm.vec);
      load_tile<T, HSP>(do_s, dout_base + static_cast<int64_t>(q0) * dm.C, dm.C, rows, dm.hs, 1.f,
                        dm.vec);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        lse_s[r] = r < rows ? lse_bh[q0 + r] : 0.f;
        d_s[r] = r < rows ? d_bh[q0 + r] : 0.f;
      }
      __syncthreads();

      float st[kPerThread][kPerThread] = {}, dpt[kPerThread][kPerThread] = {};
      mma_abt<HSP, LDH, LDH>(st, k_s, q_s, ty, tx);    // S^T[key][query]
      mma_abt<HSP, LDH, LDH>(dpt, v_s, do_s, ty, tx);  // dP^T[key][query]
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int c = ty + kLanes * i, kc = k0 + c;
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
          const int r = tx + kLanes * j, qr = q0 + r;
          const bool valid = kc <= qr && qr < dm.T && kc < dm.T;
          const float p = valid ? expf(st[i][j] - lse_s[r]) : 0.f;
          pt_s[c * kLdS + r] = p;
          dst_s[c * kLdS + r] = p * (dpt[i][j] - d_s[r]);
        }
      }
      __syncthreads();
      mma_ab<NJ, kLdS, LDH>(dv, pt_s, do_s, ty, tx);  // dV += P^T dO
      mma_ab<NJ, kLdS, LDH>(dk, dst_s, q_s, ty, tx);  // dK += dS^T (scale Q)
    }
  }

  T* dk_base = dqkv + row0 + dm.C + kvh * dm.hs;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int kc = k0 + ty + kLanes * i;
    if (kc >= dm.T) continue;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int col = tx + kLanes * j;
      if (col >= dm.hs) continue;
      T* row = dk_base + static_cast<int64_t>(kc) * C3 + col;
      row[0] = dev::from_float<T>(dk[i][j]);
      row[dm.Ckv] = dev::from_float<T>(dv[i][j]);
    }
  }
}

template <typename T, int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                        Dims dm) {
  constexpr int LDH = ld_head<HSP>();
  constexpr int NJ = HSP / kLanes;
  float* smem = dev::dynamic_shared_memory<float>();
  float* q_s = smem;                  // (64, HSP) this block's queries, pre-scaled
  float* do_s = q_s + kTile * LDH;    // (64, HSP) their dout
  float* k_s = do_s + kTile * LDH;    // (64, HSP) keys of the current tile
  float* v_s = k_s + kTile * LDH;     // (64, HSP) values of the current tile
  float* ds_s = v_s + kTile * LDH;    // (64 queries, 64 keys) dS
  float* lse_s = ds_s + kTile * kLdS;  // (64)
  float* d_s = lse_s + kTile;          // (64)

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int C3 = dm.ld;  // qkv's row (the name is multi-head attention's 3C)
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int q0 = qt * kTile, rows = min(kTile, dm.T - q0);
  const T* row0 = qkv + static_cast<int64_t>(b) * dm.T * C3;
  const T* q_base = row0 + h * dm.hs;  // row 0 of query head h
  // Row 0 at h's key/value head's offset: its keys at + C, its values at + C + Ckv.
  const T* base = row0 + dm.kv_head(h) * dm.hs;
  const float* lse_bh = lse + static_cast<int64_t>(bh) * dm.T;
  const float* d_bh = D + static_cast<int64_t>(bh) * dm.T;

  load_tile<T, HSP>(q_s, q_base + static_cast<int64_t>(q0) * C3, C3, rows, dm.hs, dm.scale, dm.vec);
  load_tile<T, HSP>(do_s, dout + (static_cast<int64_t>(b) * dm.T + q0) * dm.C + h * dm.hs, dm.C,
                    rows, dm.hs, 1.f, dm.vec);
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
    lse_s[r] = r < rows ? lse_bh[q0 + r] : 0.f;
    d_s[r] = r < rows ? d_bh[q0 + r] : 0.f;
  }

  float dq[kPerThread][NJ] = {};
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous key tile's readers are done (and q_s etc. loaded)
    const T* kv = base + static_cast<int64_t>(k0) * C3;
    load_tile<T, HSP>(k_s, kv + dm.C, C3, min(kTile, dm.T - k0), dm.hs, 1.f, dm.vec);
    load_tile<T, HSP>(v_s, kv + dm.C + dm.Ckv, C3, min(kTile, dm.T - k0), dm.hs, 1.f, dm.vec);
    __syncthreads();

    float s[kPerThread][kPerThread] = {}, dp[kPerThread][kPerThread] = {};
    mma_abt<HSP, LDH, LDH>(s, q_s, k_s, ty, tx);    // S[query][key]
    mma_abt<HSP, LDH, LDH>(dp, do_s, v_s, ty, tx);  // dP[query][key]
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int r = ty + kLanes * i, qr = q0 + r;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int c = tx + kLanes * j, kc = k0 + c;
        const bool valid = kc <= qr && qr < dm.T && kc < dm.T;
        const float p = valid ? expf(s[i][j] - lse_s[r]) : 0.f;
        ds_s[r * kLdS + c] = p * (dp[i][j] - d_s[r]);
      }
    }
    __syncthreads();
    mma_ab<NJ, kLdS, LDH>(dq, ds_s, k_s, ty, tx);  // dQ += dS K
  }

  T* dq_base = dqkv + static_cast<int64_t>(b) * dm.T * C3 + h * dm.hs;  // query head h
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int qr = q0 + ty + kLanes * i;
    if (qr >= dm.T) continue;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int col = tx + kLanes * j;
      if (col < dm.hs)
        dq_base[static_cast<int64_t>(qr) * C3 + col] = dev::from_float<T>(dq[i][j] * dm.scale);
    }
  }
}

// ---- attention over blocks (attention_blocks.cuh) -------------------------------
// The three kernels above with separate, strided q, k, v (and dout), Tq
// queries against Tk keys at global positions (blocks::BlockDims), fp32
// outputs that are merged (forward) or accumulated (backward). Tiling,
// threads, shared memory and the order of every sum are the unsplit
// kernels'; what changes is where a tile's rows come from, which tiles run
// and which (query, key) pairs are masked.
using blocks::BlockDims;
static_assert(blocks::kTile == kTile, "blocks::BlockDims counts tiles of this file's size");

// Forward, one block per (b*NH + h, query tile) over the key tiles its rows
// see. A row that sees no key of the block keeps m = -inf and l = 0; the
// exponents then use 0 for m, so they are exp(-inf) = 0, never -inf - -inf.
template <typename T, int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_block_forward_kernel(float* out, float* lse, const T* q, const T* k, const T* v,
                                   BlockDims dm, bool accumulate) {
  constexpr int LDH = ld_head<HSP>();
  constexpr int NJ = HSP / kLanes;
  float* smem = dev::dynamic_shared_memory<float>();
  float* q_s = smem;               // (64, HSP) queries, pre-scaled
  float* k_s = q_s + kTile * LDH;  // (64, HSP) keys
  float* v_s = k_s + kTile * LDH;  // (64, HSP) values
  float* p_s = v_s + kTile * LDH;  // (64, 64) probabilities (unnormalised)

  const int qt = dm.q_tiles() - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int q0 = qt * kTile, rows = min(kTile, dm.Tq - q0);
  const T* k_base = k + b * dm.k_sb + dm.kv_head(h) * dm.hs;  // key row 0 of h's key/value head
  const T* v_base = v + b * dm.v_sb + dm.kv_head(h) * dm.hs;

  load_tile<T, HSP>(q_s, q + b * dm.q_sb + q0 * dm.q_st + h * dm.hs, dm.q_st, rows, dm.hs,
                    dm.scale, dm.vec);

  // The last key each of the thread's rows sees (< 0: none; rows past Tq see none).
  int last[kPerThread];
  float m[kPerThread], l[kPerThread], o[kPerThread][NJ];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int qr = q0 + ty + kLanes * i;
    last[i] = qr < dm.Tq ? dm.last_key(qr) : -1;
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) o[i][j] = 0.f;
  }

  const int n_kt = dm.key_tiles(q0, rows);
  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kTile, keys = min(kTile, dm.Tk - k0);
    __syncthreads();  // the readers of the previous tile's k_s, v_s, p_s are done
    load_tile<T, HSP>(k_s, k_base + k0 * dm.k_st, dm.k_st, keys, dm.hs, 1.f, dm.vec);
    load_tile<T, HSP>(v_s, v_base + k0 * dm.v_st, dm.v_st, keys, dm.hs, 1.f, dm.vec);
    __syncthreads();

    float s[kPerThread][kPerThread] = {};
    mma_abt<HSP, LDH, LDH>(s, q_s, k_s, ty, tx);

#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int r = ty + kLanes * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        if (k0 + tx + kLanes * j > last[i]) s[i][j] = -INFINITY;  // also every key past Tk
        mx = fmaxf(mx, s[i][j]);
      }
      const float m_new = fmaxf(m[i], row_max(mx));
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no key seen yet
      const float corr = expf(m[i] - m_use);                   // 0 while m = -inf
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const float p = expf(s[i][j] - m_use);  // masked: exp(-inf) = 0
        p_s[r * kLdS + tx + kLanes * j] = p;
        sum += p;
      }
      l[i] = l[i] * corr + row_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < NJ; ++j) o[i][j] *= corr;
    }
    __syncthreads();
    mma_ab<NJ, kLdS, LDH>(o, p_s, v_s, ty, tx);
  }

  // Each row's old lse: read by the row's first lane alone, which also writes
  // it back, and handed to the other 15 by shuffle (no lane reads an element
  // another lane writes). Every lane takes part: rows past Tq read nothing.
  float* lse_bh = lse + b * dm.l_sb + h * dm.l_sh;
  float old[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int qr = q0 + ty + kLanes * i;
    const float mine = accumulate && tx == 0 && qr < dm.Tq ? lse_bh[qr] : -INFINITY;
    old[i] = __shfl_sync(dev::kFullMask, mine, 0, kLanes);
  }

  float* out_base = out + b * dm.o_sb + h * dm.hs;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int qr = q0 + ty + kLanes * i;
    if (qr >= dm.Tq) continue;
    float* row = out_base + qr * dm.o_st;
    // l >= 1 once the row saw a key (its max's term is exp(0)), 0 otherwise.
    if (l[i] == 0.f) {
      if (accumulate) continue;  // lse_b = -inf: the merge leaves out and lse as they are
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int col = tx + kLanes * j;
        if (col < dm.hs) row[col] = 0.f;
      }
      if (tx == 0) lse_bh[qr] = -INFINITY;
      continue;
    }
    const float inv = 1.f / l[i];
    // Without accumulate old is -inf: weights (0, 1), out_b and lse_b as they are.
    const blocks::Merged mg = blocks::merge_rows(old[i], m[i] + logf(l[i]));
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int col = tx + kLanes * j;
      if (col >= dm.hs) continue;
      const float ob = o[i][j] * inv;
      row[col] = mg.w_old == 0.f ? ob * mg.w_new : row[col] * mg.w_old + ob * mg.w_new;
    }
    if (tx == 0) lse_bh[qr] = mg.lse;
  }
}

// dK, dV of a block, one block per (b*KV + key/value head, key tile), over its
// group's query heads in order and, for each, the query tiles that see the
// key tile; added to dk, dv once at the end. lse and delta are the global
// ones; a row with lse -inf (it sees no key anywhere) gets +inf, so its P is
// exp(-inf) = 0.
template <typename T, int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_block_dkdv_kernel(float* dk, float* dv, const T* dout, const T* q, const T* k,
                                const T* v, const float* lse, const float* delta, BlockDims dm) {
  constexpr int LDH = ld_head<HSP>();
  constexpr int NJ = HSP / kLanes;
  float* smem = dev::dynamic_shared_memory<float>();
  float* k_s = smem;                    // (64, HSP) this block's keys
  float* v_s = k_s + kTile * LDH;       // (64, HSP) this block's values
  float* q_s = v_s + kTile * LDH;       // (64, HSP) queries of the current tile, pre-scaled
  float* do_s = q_s + kTile * LDH;      // (64, HSP) dout of the current tile
  float* pt_s = do_s + kTile * LDH;     // (64 keys, 64 queries) P^T
  float* dst_s = pt_s + kTile * kLdS;   // (64 keys, 64 queries) dS^T
  float* lse_s = dst_s + kTile * kLdS;  // (64) per query
  float* d_s = lse_s + kTile;           // (64) per query

  const int kt = blockIdx.y;  // the first key tiles are seen by the most queries
  const int bj = blockIdx.x, b = bj / dm.KV, kvh = bj % dm.KV;
  const int group = dm.NH / dm.KV;  // kvh serves query heads [kvh group, (kvh + 1) group)
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int k0 = kt * kTile, keys = min(kTile, dm.Tk - k0);
  const int qt0 = dm.first_query_tile(k0), n_qt = dm.q_tiles();
  if (qt0 >= n_qt) return;  // no query sees these keys (the whole block leaves: no barrier yet)

  load_tile<T, HSP>(k_s, k + b * dm.k_sb + k0 * dm.k_st + kvh * dm.hs, dm.k_st, keys, dm.hs, 1.f,
                    dm.vec);
  load_tile<T, HSP>(v_s, v + b * dm.v_sb + k0 * dm.v_st + kvh * dm.hs, dm.v_st, keys, dm.hs, 1.f,
                    dm.vec);

  float acc_k[kPerThread][NJ] = {}, acc_v[kPerThread][NJ] = {};
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const T* q_base = q + b * dm.q_sb + h * dm.hs;
    const T* g_base = dout + b * dm.g_sb + h * dm.hs;
    const float* lse_bh = lse + b * dm.l_sb + h * dm.l_sh;
    const float* d_bh = delta + b * dm.d_sb + h * dm.d_sh;
    for (int qt = qt0; qt < n_qt; ++qt) {
      const int q0 = qt * kTile, rows = min(kTile, dm.Tq - q0);
      __syncthreads();  // the previous query tile's readers are done
      load_tile<T, HSP>(q_s, q_base + q0 * dm.q_st, dm.q_st, rows, dm.hs, dm.scale, dm.vec);
      load_tile<T, HSP>(do_s, g_base + q0 * dm.g_st, dm.g_st, rows, dm.hs, 1.f, dm.vec);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        const float x = r < rows ? lse_bh[q0 + r] : 0.f;
        lse_s[r] = x == -INFINITY ? INFINITY : x;
        d_s[r] = r < rows ? d_bh[q0 + r] : 0.f;
      }
      __syncthreads();

      float st[kPerThread][kPerThread] = {}, dpt[kPerThread][kPerThread] = {};
      mma_abt<HSP, LDH, LDH>(st, k_s, q_s, ty, tx);    // S^T[key][query]
      mma_abt<HSP, LDH, LDH>(dpt, v_s, do_s, ty, tx);  // dP^T[key][query]
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int c = ty + kLanes * i, kc = k0 + c;
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
          const int r = tx + kLanes * j, qr = q0 + r;
          const bool valid = kc <= qr + dm.off && qr < dm.Tq && kc < dm.Tk;
          const float p = valid ? expf(st[i][j] - lse_s[r]) : 0.f;
          pt_s[c * kLdS + r] = p;
          dst_s[c * kLdS + r] = p * (dpt[i][j] - d_s[r]);
        }
      }
      __syncthreads();
      mma_ab<NJ, kLdS, LDH>(acc_v, pt_s, do_s, ty, tx);  // dV += P^T dO
      mma_ab<NJ, kLdS, LDH>(acc_k, dst_s, q_s, ty, tx);  // dK += dS^T (scale Q)
    }
  }

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int kc = k0 + ty + kLanes * i;
    if (kc >= dm.Tk || !dm.key_seen(kc)) continue;  // a key no query sees gets nothing
    float* dk_row = dk + b * dm.dk_sb + kc * dm.dk_st + kvh * dm.hs;
    float* dv_row = dv + b * dm.dv_sb + kc * dm.dv_st + kvh * dm.hs;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int col = tx + kLanes * j;
      if (col >= dm.hs) continue;
      dk_row[col] += acc_k[i][j];
      dv_row[col] += acc_v[i][j];
    }
  }
}

// dQ of a block, one block per (b*NH + h, query tile), over the key tiles its
// rows see; added to dq once at the end.
template <typename T, int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_block_dq_kernel(float* dq, const T* dout, const T* q, const T* k, const T* v,
                              const float* lse, const float* delta, BlockDims dm) {
  constexpr int LDH = ld_head<HSP>();
  constexpr int NJ = HSP / kLanes;
  float* smem = dev::dynamic_shared_memory<float>();
  float* q_s = smem;                   // (64, HSP) this block's queries, pre-scaled
  float* do_s = q_s + kTile * LDH;     // (64, HSP) their dout
  float* k_s = do_s + kTile * LDH;     // (64, HSP) keys of the current tile
  float* v_s = k_s + kTile * LDH;      // (64, HSP) values of the current tile
  float* ds_s = v_s + kTile * LDH;     // (64 queries, 64 keys) dS
  float* lse_s = ds_s + kTile * kLdS;  // (64)
  float* d_s = lse_s + kTile;          // (64)

  const int qt = dm.q_tiles() - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int ty = threadIdx.x / kLanes, tx = threadIdx.x % kLanes;
  const int q0 = qt * kTile, rows = min(kTile, dm.Tq - q0);
  const int n_kt = dm.key_tiles(q0, rows);
  if (n_kt == 0) return;  // no row of the tile sees a key (the whole block leaves: no barrier yet)
  const T* k_base = k + b * dm.k_sb + dm.kv_head(h) * dm.hs;
  const T* v_base = v + b * dm.v_sb + dm.kv_head(h) * dm.hs;
  const float* lse_bh = lse + b * dm.l_sb + h * dm.l_sh;
  const float* d_bh = delta + b * dm.d_sb + h * dm.d_sh;

  load_tile<T, HSP>(q_s, q + b * dm.q_sb + q0 * dm.q_st + h * dm.hs, dm.q_st, rows, dm.hs,
                    dm.scale, dm.vec);
  load_tile<T, HSP>(do_s, dout + b * dm.g_sb + q0 * dm.g_st + h * dm.hs, dm.g_st, rows, dm.hs,
                    1.f, dm.vec);
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
    const float x = r < rows ? lse_bh[q0 + r] : 0.f;
    lse_s[r] = x == -INFINITY ? INFINITY : x;  // sees no key anywhere: P = 0
    d_s[r] = r < rows ? d_bh[q0 + r] : 0.f;
  }
  int last[kPerThread];  // the last key each of the thread's rows sees (< 0: none)
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int qr = q0 + ty + kLanes * i;
    last[i] = qr < dm.Tq ? dm.last_key(qr) : -1;
  }

  float acc[kPerThread][NJ] = {};
  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kTile, keys = min(kTile, dm.Tk - k0);
    __syncthreads();  // the previous key tile's readers are done (and q_s etc. loaded)
    load_tile<T, HSP>(k_s, k_base + k0 * dm.k_st, dm.k_st, keys, dm.hs, 1.f, dm.vec);
    load_tile<T, HSP>(v_s, v_base + k0 * dm.v_st, dm.v_st, keys, dm.hs, 1.f, dm.vec);
    __syncthreads();

    float s[kPerThread][kPerThread] = {}, dp[kPerThread][kPerThread] = {};
    mma_abt<HSP, LDH, LDH>(s, q_s, k_s, ty, tx);    // S[query][key]
    mma_abt<HSP, LDH, LDH>(dp, do_s, v_s, ty, tx);  // dP[query][key]
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int r = ty + kLanes * i;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int c = tx + kLanes * j;
        const float p = k0 + c <= last[i] ? expf(s[i][j] - lse_s[r]) : 0.f;
        ds_s[r * kLdS + c] = p * (dp[i][j] - d_s[r]);
      }
    }
    __syncthreads();
    mma_ab<NJ, kLdS, LDH>(acc, ds_s, k_s, ty, tx);  // dQ += dS K
  }

  float* dq_base = dq + b * dm.o_sb + h * dm.hs;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int qr = q0 + ty + kLanes * i;
    if (last[i] < 0) continue;  // past Tq, or a row that sees no key of the block
    float* row = dq_base + qr * dm.o_st;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int col = tx + kLanes * j;
      if (col < dm.hs) row[col] += acc[i][j] * dm.scale;
    }
  }
}

// ---- launchers ------------------------------------------------------------------
void check_shape(const char* what, int B, int T, int NH, int KV, int hs) {
  GT_CHECK(B >= 0 && T >= 1 && NH >= 1 && hs >= 1, what, ": B = ", B, ", T = ", T, ", NH = ", NH,
           ", hs = ", hs);
  GT_CHECK(KV >= 1 && NH % KV == 0, what, ": KV = ", KV, " key/value heads must divide NH = ", NH);
  if (hs > 128) fail(what, ": head size ", hs, " is larger than the 128 the kernel supports");
  GT_CHECK(static_cast<int64_t>(B) * NH <= 0x7fffffff, what, ": B*NH too large");
  GT_CHECK((T + kTile - 1) / kTile <= 65535, what, ": T = ", T, " exceeds the grid");
}

template <typename T>
Dims make_dims(int T_, int NH, int KV, int hs, std::initializer_list<const void*> ptrs) {
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  Dims d{T_, NH, KV, hs, NH * hs, KV * hs, (NH + 2 * KV) * hs, scale, false};
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  d.vec = hs % N == 0;  // row strides (NH + 2 KV) hs and C, head offsets: all multiples of hs
  for (const void* p : ptrs) d.vec = d.vec && dev::aligned16(p);
  return d;
}

template <typename Kernel, typename... Args>
void launch_with_smem(Kernel kernel, size_t smem_bytes, dim3 grid, cudaStream_t stream,
                      Args... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem_bytes)));
  dev::launch(kernel, {grid, kThreads, smem_bytes, stream}, args...);
  CUDA_CHECK_LAUNCH();
}

// One block per (b * heads + head, 64-row tile): heads = NH for the forward
// and dq kernels (query heads), KV for dkdv (key/value heads).
dim3 tile_grid(int B, int heads, int T) {
  return dim3(static_cast<unsigned>(B * heads), static_cast<unsigned>((T + kTile - 1) / kTile));
}

template <typename T, int HSP>
void forward_hsp(T* out, float* lse, const T* qkv, int B, const Dims& d, cudaStream_t stream) {
  launch_with_smem(attention_forward_kernel<T, HSP>, sizeof(float) * forward_smem_floats<HSP>(),
                   tile_grid(B, d.NH, d.T), stream, out, lse, qkv, d);
}

template <typename T>
void forward(T* out, float* lse, const T* qkv, int B, int T_, int NH, int KV, int hs,
             cudaStream_t stream) {
  check_shape("attention_forward", B, T_, NH, KV, hs);
  if (B == 0) return;
  dev::NvtxRange range("attention_forward");
  const Dims d = make_dims<T>(T_, NH, KV, hs, {out, qkv});
  if (hs <= 32) forward_hsp<T, 32>(out, lse, qkv, B, d, stream);
  else if (hs <= 64) forward_hsp<T, 64>(out, lse, qkv, B, d, stream);
  else forward_hsp<T, 128>(out, lse, qkv, B, d, stream);
}

template <typename T, int HSP>
void backward_hsp(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int B,
                  const Dims& d, cudaStream_t stream) {
  launch_with_smem(attention_dkdv_kernel<T, HSP>, sizeof(float) * dkdv_smem_floats<HSP>(),
                   tile_grid(B, d.KV, d.T), stream, dqkv, dout, qkv, lse, D, d);
  launch_with_smem(attention_dq_kernel<T, HSP>, sizeof(float) * dq_smem_floats<HSP>(),
                   tile_grid(B, d.NH, d.T), stream, dqkv, dout, qkv, lse, D, d);
}

template <typename T>
void backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* out, const float* lse,
              int B, int T_, int NH, int KV, int hs, cudaStream_t stream) {
  check_shape("attention_backward", B, T_, NH, KV, hs);
  if (B == 0) return;
  dev::NvtxRange range("attention_backward");
  const Dims d = make_dims<T>(T_, NH, KV, hs, {dqkv, dout, qkv, out});
  attention_backward_rowdot(scratch, dout, out, B, T_, NH, hs, stream);
  if (hs <= 32) backward_hsp<T, 32>(dqkv, dout, qkv, lse, scratch, B, d, stream);
  else if (hs <= 64) backward_hsp<T, 64>(dqkv, dout, qkv, lse, scratch, B, d, stream);
  else backward_hsp<T, 128>(dqkv, dout, qkv, lse, scratch, B, d, stream);
}

template <typename G, typename Y>
void rowdot(const char* what, float* D, const G* dout, const Y* out, int B, const RowDotDims& d,
            cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(B) * d.T * d.NH;
  if (rows == 0) return;
  constexpr int kDotThreads = 256;
  const int64_t blocks = (rows * dev::kWarpSize + kDotThreads - 1) / kDotThreads;
  GT_CHECK(blocks <= 0x7fffffff, what, ": too many rows");
  dev::launch(attention_rowdot_kernel<G, Y>, {static_cast<unsigned>(blocks), kDotThreads, 0, stream},
              D, dout, out, B, d);
  CUDA_CHECK_LAUNCH();
}

// The unsplit backward's D: dout, out (B,T,C) and D (B,NH,T) contiguous.
template <typename T>
void rowdot(float* D, const T* dout, const T* out, int B, int T_, int NH, int hs,
            cudaStream_t stream) {
  GT_CHECK(B >= 0 && T_ >= 1 && NH >= 1 && hs >= 1, "attention_backward_rowdot: B = ", B,
           ", T = ", T_, ", NH = ", NH, ", hs = ", hs);
  const int64_t C = int64_t{NH} * hs;
  const RowDotDims d{T_, NH, hs, T_ * C, C, T_ * C, C, int64_t{NH} * T_, T_};
  rowdot("attention_backward_rowdot", D, dout, out, B, d, stream);
}

// ---- launchers: attention over blocks ---------------------------------------------
template <typename T, int HSP>
void block_forward_hsp(RowsView<float> out, StatsView<float> lse, RowsView<const T> q,
                       RowsView<const T> k, RowsView<const T> v, int B, const BlockDims& d,
                       bool accumulate, cudaStream_t stream) {
  launch_with_smem(attention_block_forward_kernel<T, HSP>,
                   sizeof(float) * forward_smem_floats<HSP>(),
                   dim3(static_cast<unsigned>(B * d.NH), static_cast<unsigned>(d.q_tiles())), stream,
                   out.p, lse.p, q.p, k.p, v.p, d, accumulate);
}

template <typename T>
void block_forward(RowsView<float> out, StatsView<float> lse, RowsView<const T> q,
                   RowsView<const T> k, RowsView<const T> v, const AttentionBlock& blk,
                   bool accumulate, cudaStream_t stream) {
  blocks::check_block("attention_block_forward", blk);
  if (blk.hs > 128)
    fail("attention_block_forward: head size ", blk.hs,
         " is larger than the 128 the kernel supports");
  if (blk.B == 0 || blk.Tq == 0) return;
  // Merging a block no query sees changes nothing; assigned, it still writes 0 and -inf.
  if (accumulate && blocks::block_fully_masked(blk)) return;
  dev::NvtxRange range("attention_block_forward");
  const BlockDims d = blocks::forward_dims(blk, out, lse, q, k, v);
  if (blk.hs <= 32) block_forward_hsp<T, 32>(out, lse, q, k, v, blk.B, d, accumulate, stream);
  else if (blk.hs <= 64) block_forward_hsp<T, 64>(out, lse, q, k, v, blk.B, d, accumulate, stream);
  else block_forward_hsp<T, 128>(out, lse, q, k, v, blk.B, d, accumulate, stream);
}

template <typename T, int HSP>
void block_backward_hsp(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                        RowsView<const T> dout, RowsView<const T> q, RowsView<const T> k,
                        RowsView<const T> v, StatsView<const float> lse,
                        StatsView<const float> delta, int B, const BlockDims& d,
                        cudaStream_t stream) {
  launch_with_smem(attention_block_dkdv_kernel<T, HSP>, sizeof(float) * dkdv_smem_floats<HSP>(),
                   dim3(static_cast<unsigned>(B * d.KV), static_cast<unsigned>(d.k_tiles())), stream,
                   dk.p, dv.p, dout.p, q.p, k.p, v.p, lse.p, delta.p, d);
  launch_with_smem(attention_block_dq_kernel<T, HSP>, sizeof(float) * dq_smem_floats<HSP>(),
                   dim3(static_cast<unsigned>(B * d.NH), static_cast<unsigned>(d.q_tiles())), stream,
                   dq.p, dout.p, q.p, k.p, v.p, lse.p, delta.p, d);
}

template <typename T>
void block_backward(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                    RowsView<const T> dout, RowsView<const T> q, RowsView<const T> k,
                    RowsView<const T> v, StatsView<const float> lse, StatsView<const float> delta,
                    const AttentionBlock& blk, cudaStream_t stream) {
  blocks::check_block("attention_block_backward", blk);
  if (blk.hs > 128)
    fail("attention_block_backward: head size ", blk.hs,
         " is larger than the 128 the kernel supports");
  if (blk.B == 0 || blk.Tq == 0 || blocks::block_fully_masked(blk)) return;  // adds nothing
  dev::NvtxRange range("attention_block_backward");
  const BlockDims d = blocks::backward_dims(blk, dq, dk, dv, dout, q, k, v, lse, delta);
  if (blk.hs <= 32)
    block_backward_hsp<T, 32>(dq, dk, dv, dout, q, k, v, lse, delta, blk.B, d, stream);
  else if (blk.hs <= 64)
    block_backward_hsp<T, 64>(dq, dk, dv, dout, q, k, v, lse, delta, blk.B, d, stream);
  else
    block_backward_hsp<T, 128>(dq, dk, dv, dout, q, k, v, lse, delta, blk.B, d, stream);
}

template <typename G, typename Y>
void row_dot(StatsView<float> delta, RowsView<const G> dout, RowsView<const Y> out, int B, int T_,
             int NH, int hs, cudaStream_t stream) {
  GT_CHECK(B >= 0 && T_ >= 0 && NH >= 1 && hs >= 1, "attention_row_dot: B = ", B, ", T = ", T_,
           ", NH = ", NH, ", hs = ", hs);
  dev::NvtxRange range("attention_row_dot");
  const RowDotDims d{T_, NH, hs, dout.sb, dout.st, out.sb, out.st, delta.sb, delta.sh};
  rowdot("attention_row_dot", delta.p, dout.p, out.p, B, d, stream);
}

}  // namespace

void attention_backward_rowdot(float* D, const float* dout, const float* out, int B, int T,
                               int NH, int hs, cudaStream_t stream) {
  rowdot(D, dout, out, B, T, NH, hs, stream);
}
void attention_backward_rowdot(float* D, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                               int B, int T, int NH, int hs, cudaStream_t stream) {
  rowdot(D, dout, out, B, T, NH, hs, stream);
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int KV,
                       int hs, cudaStream_t stream) {
  forward(out, lse, qkv, B, T, NH, KV, hs, stream);
}
void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                       int NH, int KV, int hs, cudaStream_t stream) {
  forward(out, lse, qkv, B, T, NH, KV, hs, stream);
}
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* lse, int B, int T, int NH, int KV, int hs,
                        cudaStream_t stream) {
  backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, KV, hs, stream);
}
void attention_backward(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout,
                        const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse, int B,
                        int T, int NH, int KV, int hs, cudaStream_t stream) {
  backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, KV, hs, stream);
}

// ---- attention over blocks ---------------------------------------------------------
void attention_block_forward(RowsView<float> out, StatsView<float> lse, RowsView<const float> q,
                             RowsView<const float> k, RowsView<const float> v,
                             const AttentionBlock& blk, bool accumulate, cudaStream_t stream) {
  block_forward(out, lse, q, k, v, blk, accumulate, stream);
}
void attention_block_forward(RowsView<float> out, StatsView<float> lse,
                             RowsView<const __nv_bfloat16> q, RowsView<const __nv_bfloat16> k,
                             RowsView<const __nv_bfloat16> v, const AttentionBlock& blk,
                             bool accumulate, cudaStream_t stream) {
  block_forward(out, lse, q, k, v, blk, accumulate, stream);
}
void attention_block_backward(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                              RowsView<const float> dout, RowsView<const float> q,
                              RowsView<const float> k, RowsView<const float> v,
                              StatsView<const float> lse, StatsView<const float> delta,
                              const AttentionBlock& blk, cudaStream_t stream) {
  block_backward(dq, dk, dv, dout, q, k, v, lse, delta, blk, stream);
}
void attention_block_backward(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                              RowsView<const __nv_bfloat16> dout, RowsView<const __nv_bfloat16> q,
                              RowsView<const __nv_bfloat16> k, RowsView<const __nv_bfloat16> v,
                              StatsView<const float> lse, StatsView<const float> delta,
                              const AttentionBlock& blk, cudaStream_t stream) {
  block_backward(dq, dk, dv, dout, q, k, v, lse, delta, blk, stream);
}

void attention_row_dot(StatsView<float> delta, RowsView<const float> dout,
                       RowsView<const float> out, int B, int T, int NH, int hs,
                       cudaStream_t stream) {
  row_dot(delta, dout, out, B, T, NH, hs, stream);
}
void attention_row_dot(StatsView<float> delta, RowsView<const float> dout,
                       RowsView<const __nv_bfloat16> out, int B, int T, int NH, int hs,
                       cudaStream_t stream) {
  row_dot(delta, dout, out, B, T, NH, hs, stream);
}
void attention_row_dot(StatsView<float> delta, RowsView<const __nv_bfloat16> dout,
                       RowsView<const float> out, int B, int T, int NH, int hs,
                       cudaStream_t stream) {
  row_dot(delta, dout, out, B, T, NH, hs, stream);
}
void attention_row_dot(StatsView<float> delta, RowsView<const __nv_bfloat16> dout,
                       RowsView<const __nv_bfloat16> out, int B, int T, int NH, int hs,
                       cudaStream_t stream) {
  row_dot(delta, dout, out, B, T, NH, hs, stream);
}

}  // namespace gt::cuda
