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
#include "kernels/cuda/attention.cuh"

#include <cmath>
#include <initializer_list>

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
// D[(b*NH + h)*T + t] = sum_d dout[b,t,h*hs+d] * out[b,t,h*hs+d]; one warp per (b,t,h).
template <typename T>
__global__ void attention_rowdot_kernel(float* D, const T* dout, const T* out, int B, Dims dm) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / dev::kWarpSize;
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t n_rows = static_cast<int64_t>(B) * dm.T * dm.NH;
  if (warp >= n_rows) return;
  const int h = static_cast<int>(warp % dm.NH);
  const int64_t bt = warp / dm.NH;  // b*T + t
  const int64_t b = bt / dm.T, t = bt % dm.T;
  const T* g = dout + bt * dm.C + h * dm.hs;
  const T* y = out + bt * dm.C + h * dm.hs;
  float acc = 0.f;
  for (int d = lane; d < dm.hs; d += dev::kWarpSize) acc += dev::to_float(g[d]) * dev::to_float(y[d]);
  acc = dev::warp_sum(acc);
  if (lane == 0) D[(b * dm.NH + h) * dm.T + t] = acc;
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

template <typename T>
void rowdot(float* D, const T* dout, const T* out, int B, int T_, int NH, int hs,
            cudaStream_t stream) {
  GT_CHECK(B >= 0 && T_ >= 1 && NH >= 1 && hs >= 1, "attention_backward_rowdot: B = ", B,
           ", T = ", T_, ", NH = ", NH, ", hs = ", hs);
  if (B == 0) return;
  const Dims d{T_, NH, NH, hs, NH * hs, NH * hs, 3 * NH * hs, 1.f, false};  // out and dout only
  const int64_t rows = static_cast<int64_t>(B) * T_ * NH;
  constexpr int kDotThreads = 256;
  const int64_t blocks = (rows * dev::kWarpSize + kDotThreads - 1) / kDotThreads;
  GT_CHECK(blocks <= 0x7fffffff, "attention_backward_rowdot: too many rows");
  dev::launch(attention_rowdot_kernel<T>, {static_cast<unsigned>(blocks), kDotThreads, 0, stream},
              D, dout, out, B, d);
  CUDA_CHECK_LAUNCH();
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

}  // namespace gt::cuda
