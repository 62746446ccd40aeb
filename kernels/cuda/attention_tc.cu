// Tensor-core causal attention for bf16 tensors with hs % 16 == 0, in
// FlashAttention-2's shape: one pass over the keys with an online softmax, S
// and P never leave registers, and P's accumulator fragments are reused as
// the A operand of P V. Same layouts (qkv (B,T,(NH + 2 KV) hs): NH query
// heads, KV key heads, KV value heads; query head h reads key/value head
// h / (NH / KV); KV = NH is multi-head attention), saved log-sum-exp, D
// scratch and assigned outputs as the SIMT kernels in attention.cu; see
// attention.cuh for the contract (the *_tc launchers).
//
// Products are mma.sync.m16n8k16 (bf16 in, fp32 accumulate) on fragments
// loaded from shared memory with ldmatrix (kernels/cuda/mma_sm80.cuh, which
// lists the fragment layouts this file relies on). A block of 4 warps owns 64
// rows (queries in the forward and dq kernels, keys in the dkdv kernel); warp
// w owns rows [16w, 16w + 16), so every softmax statistic lives in one warp:
// lane (g = lane / 4, t = lane % 4) holds rows g and g + 8 of its warp's 16,
// columns 2t, 2t + 1 of every 8-column tile, and a row's reductions are two
// shuffles across the 4 lanes of a quad.
//   forward: for each key tile (causal: tiles 0..qt only, the mask applied on
//            the diagonal tile alone): S = Q K^T, running max m and sum l in
//            the log2 domain, O rescaled by exp2(m_old - m_new), P = exp2(S -
//            m) rounded to bf16 as A fragments, O += P V. At the end O /= l
//            and lse = (m + log2 l) ln 2.
//   dkdv:    per key tile of a key/value head, over the query heads of its
//            group in order and, for each, over query tiles kt..last: S^T =
//            K Q^T, P^T = exp(S^T - lse), dV += P^T dO, dP^T = V dO^T, dS^T =
//            P^T (dP^T - D) scale, dK += dS^T Q; dK, dV accumulated in
//            registers, so a key/value head's are its group's sums (with KV =
//            NH one head: multi-head attention's order, bit for bit).
//   dq:      per query tile of a query head, over key tiles 0..qt of its
//            key/value head: S, P, dP = dO V^T, dS, dQ += dS K.
// P and dS are rounded to bf16 for their products (FlashAttention-2's
// precision); statistics, accumulators and softmax math are fp32.
// Deterministic: no atomics, a fixed order of tiles and products.
//
// Shared memory: bf16 tiles of 64 rows with a row stride of HSP + 8 elements
// (HSP = hs rounded up to 64 or 128), so the 8 row addresses of an ldmatrix
// fall in distinct bank groups and the fragment stores are conflict-free.
//
// Attention over blocks (attention_blocks.cuh, context parallelism): the same
// three kernels on strided q, k, v at global positions, with fp32 outputs
// merged or accumulated from the fragments, after the unsplit ones.
#include <cmath>

#include "kernels/core/attention_kernels.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_block_dims.cuh"
#include "kernels/cuda/attention_blocks.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/mma_sm80.cuh"

namespace gt::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kTile = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * dev::kWarpSize;  // 128
constexpr int kKeyNTiles = kTile / 8;              // 8-column score tiles per 64 keys
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HSP>
constexpr int kLd = HSP + 8;  // bf16 elements per shared row (a 16-byte multiple)

struct Dims {
  int T, NH, KV, hs;
  int C;    // NH hs: out's row, and the column of qkv where the keys start
  int Ckv;  // KV hs: the width of the keys (and of the values) in qkv's row
  int ld;   // qkv's row, C + 2 Ckv: 3C for multi-head attention
  float scale;
  bool vec;  // 16-byte global accesses legal (base pointers aligned; hs a multiple of 8)
  // The key/value head query head h reads (HF's repeat_kv).
  __device__ int kv_head(int h) const { return h / (NH / KV); }
};

// Rows [0, rows) x columns [0, hs) of a strided bf16 slice into a (64 x HSP)
// shared tile; the rest of the tile (rows < 64, columns < HSP) is zero.
template <int HSP>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int64_t row_stride, int rows,
                                          int hs, bool vec) {
  constexpr int LD = kLd<HSP>;
  if (vec) {
    constexpr int kPerRow = HSP / 8;
    for (int e = threadIdx.x; e < kTile * kPerRow; e += kThreads) {
      const int r = e / kPerRow, d0 = (e % kPerRow) * 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < rows && d0 < hs) v = *reinterpret_cast<const uint4*>(src + r * row_stride + d0);
      *reinterpret_cast<uint4*>(dst + r * LD + d0) = v;
    }
  } else {
    for (int e = threadIdx.x; e < kTile * HSP; e += kThreads) {
      const int r = e / HSP, d = e % HSP;
      dst[r * LD + d] = (r < rows && d < hs) ? src[r * row_stride + d] : __float2bfloat16_rn(0.f);
    }
  }
}

// ---- fragment loads (ldmatrix address patterns) ----------------------------------
// A fragment of rows [r0, r0 + 16) x columns [c0, c0 + 16) of a row-major tile.
template <int HSP>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int r0, int c0) {
  const int lane = threadIdx.x % dev::kWarpSize;
  dev::ldmatrix_x4<false>(a, tile + (r0 + lane % 16) * kLd<HSP> + c0 + (lane / 16) * 8);
}
// B fragments of two 8-column tiles for X Y^T, Y row-major with its rows
// [n0, n0 + 16) as the product's columns and its columns [k0, k0 + 16) as k:
// b[0..1] for columns n0..n0+7, b[2..3] for n0+8..n0+15.
template <int HSP>
__device__ __forceinline__ void load_b_t(uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
  const int lane = threadIdx.x % dev::kWarpSize;
  dev::ldmatrix_x4<false>(
      b, tile + (n0 + lane % 8 + (lane / 16) * 8) * kLd<HSP> + k0 + ((lane / 8) % 2) * 8);
}
// B fragments of two 8-column tiles for X Y, Y row-major with its rows
// [k0, k0 + 16) as k and its columns [n0, n0 + 16) as the product's columns.
template <int HSP>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const bf16* tile, int k0, int n0) {
  const int lane = threadIdx.x % dev::kWarpSize;
  dev::ldmatrix_x4<true>(
      b, tile + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * kLd<HSP> + n0 + (lane / 16) * 8);
}

__device__ __forceinline__ void mma2(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                     const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
  dev::mma_bf16_16816(d0, a, b0);
  dev::mma_bf16_16816(d1, a, b1);
}

template <int NT>
__device__ __forceinline__ void zero(float (&acc)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
}

// acc (the warp's 16 x 64 scores) += A's columns [16 kd, 16 kd + 16) (one
// fragment) times the same columns of the 64 rows of `y`, transposed.
template <int HSP>
__device__ __forceinline__ void scores_step(float (&acc)[kKeyNTiles][4], const uint32_t (&a)[4],
                                            const bf16* y, int kd) {
#pragma unroll
  for (int np = 0; np < kKeyNTiles / 2; ++np) {
    uint32_t b[4];
    load_b_t<HSP>(b, y, np * 16, kd * 16);
    mma2(acc[2 * np], acc[2 * np + 1], a, b);
  }
}

// acc = A (16 x HSP, as fragments `a`, one per 16 columns) times the 64 rows
// of `y` transposed: S = Q K^T and kin.
template <int HSP>
__device__ __forceinline__ void scores(float (&acc)[kKeyNTiles][4],
                                       const uint32_t (&a)[HSP / 16][4], const bf16* y) {
  zero(acc);
#pragma unroll
  for (int kd = 0; kd < HSP / 16; ++kd) scores_step<HSP>(acc, a[kd], y, kd);
}

// The same with A as rows [r0, r0 + 16) of the shared tile `x`, one
// fragment at a time (the backward kernels have no registers to spare).
template <int HSP>
__device__ __forceinline__ void scores(float (&acc)[kKeyNTiles][4], const bf16* x, int r0,
                                       const bf16* y) {
  zero(acc);
#pragma unroll
  for (int kd = 0; kd < HSP / 16; ++kd) {
    uint32_t a[4];
    load_a<HSP>(a, x, r0, kd * 16);
    scores_step<HSP>(acc, a, y, kd);
  }
}

// acc (16 x HSP) += P (the warp's 16 x 64, as fp32 accumulators, rounded to
// bf16 here) times the (64 x HSP) row-major tile `y`: O += P V and kin.
template <int HSP>
__device__ __forceinline__ void accumulate_pv(float (&acc)[HSP / 8][4],
                                              const float (&p)[kKeyNTiles][4], const bf16* y) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    const uint32_t a[4] = {dev::pack_bf16(p[2 * kk][0], p[2 * kk][1]),
                           dev::pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                           dev::pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           dev::pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < HSP / 16; ++dp) {
      uint32_t b[4];
      load_b<HSP>(b, y, kk * 16, dp * 16);
      mma2(acc[2 * dp], acc[2 * dp + 1], a, b);
    }
  }
}

// Writes the warp's (16 x HSP) accumulators times a per-row factor (rows g,
// g + 8 of the lane: mult[0], mult[1]) as bf16 into its 16 rows of the shared
// tile `stage`, then copies rows < valid_rows, columns < hs, to `dst` (row
// stride `row_stride`). The warp must own those stage rows (no other warp
// reads or writes them from here on).
template <int HSP>
__device__ __forceinline__ void write_rows(bf16* dst, int64_t row_stride, int valid_rows,
                                           bf16* stage, const float (&acc)[HSP / 8][4],
                                           const float (&mult)[2], int hs, bool vec) {
  constexpr int LD = kLd<HSP>;
  const int lane = threadIdx.x % dev::kWarpSize, g = lane / 4, t = lane % 4;
  __syncwarp();  // other lanes' ldmatrix reads of these rows come before our writes
#pragma unroll
  for (int j = 0; j < HSP / 8; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      *reinterpret_cast<uint32_t*>(stage + (g + 8 * half) * LD + j * 8 + 2 * t) =
          dev::pack_bf16(acc[j][2 * half] * mult[half], acc[j][2 * half + 1] * mult[half]);
  __syncwarp();
  if (vec) {
    constexpr int kPerRow = HSP / 8;
    for (int e = lane; e < 16 * kPerRow; e += dev::kWarpSize) {
      const int r = e / kPerRow, d0 = (e % kPerRow) * 8;
      if (r < valid_rows && d0 < hs)
        *reinterpret_cast<uint4*>(dst + r * row_stride + d0) =
            *reinterpret_cast<const uint4*>(stage + r * LD + d0);
    }
  } else {
    for (int e = lane; e < 16 * hs; e += dev::kWarpSize) {
      const int r = e / hs, d = e % hs;
      if (r < valid_rows) dst[r * row_stride + d] = stage[r * LD + d];
    }
  }
  __syncwarp();
}

// ---- forward --------------------------------------------------------------------
template <int HSP>
constexpr size_t forward_smem_bytes() {
  return 3 * kTile * kLd<HSP> * sizeof(bf16);  // q, k, v
}

template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(bf16* out, float* lse, const bf16* qkv, Dims dm) {
  constexpr int LD = kLd<HSP>;
  bf16* q_s = dev::dynamic_shared_memory<bf16>();
  bf16* k_s = q_s + kTile * LD;
  bf16* v_s = k_s + kTile * LD;

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int C3 = dm.ld;  // qkv's row (the name is multi-head attention's 3C)
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int q0 = qt * kTile;
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const bf16* row0 = qkv + static_cast<int64_t>(b) * dm.T * C3;
  const bf16* q_base = row0 + h * dm.hs;  // row 0 of query head h
  // Row 0 at h's key/value head's offset: its keys at + C, its values at + C + Ckv.
  const bf16* base = row0 + dm.kv_head(h) * dm.hs;
  load_tile<HSP>(q_s, q_base + static_cast<int64_t>(q0) * C3, C3, min(kTile, dm.T - q0), dm.hs,
                 dm.vec);

  __syncthreads();
  // The warp's Q rows as A fragments, in registers for the whole key loop.
  uint32_t qf[HSP / 16][4];
#pragma unroll
  for (int kd = 0; kd < HSP / 16; ++kd) load_a<HSP>(qf[kd], q_s, warp * 16, kd * 16);

  const float sl2 = dm.scale * kLog2e;  // scores go straight to the log2 domain
  float o[HSP / 8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float s[kKeyNTiles][4];
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // everyone is done with the previous k_s / v_s
    load_tile<HSP>(k_s, base + static_cast<int64_t>(k0) * C3 + dm.C, C3, min(kTile, dm.T - k0),
                   dm.hs, dm.vec);
    load_tile<HSP>(v_s, base + static_cast<int64_t>(k0) * C3 + dm.C + dm.Ckv, C3,
                   min(kTile, dm.T - k0), dm.hs, dm.vec);
    __syncthreads();
    scores<HSP>(s, qf, k_s);

    // Scale into the log2 domain; mask keys after the row (the diagonal tile)
    // and past T (the last tile) only where they can occur.
    const bool masked = kt == qt || k0 + kTile > dm.T;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + j * 8 + 2 * t + (i & 1);
        float x = s[j][i] * sl2;
        if (masked && (key > row[i >> 1] || key >= dm.T)) x = -INFINITY;
        s[j][i] = x;
        mx[i >> 1] = fmaxf(mx[i >> 1], x);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFullMask, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFullMask, mx[r], 2));
      // Finite for every row: key k0 <= row is in every tile this row visits.
      const float m_new = fmaxf(m[r], mx[r]);
      alpha[r] = exp2f(m[r] - m_new);  // 0 on the first tile (m = -inf)
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < HSP / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[j][i] *= alpha[i >> 1];
#pragma unroll
    for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = exp2f(s[j][i] - m[i >> 1]);
        s[j][i] = p;
        l[i >> 1] += p;
      }
    accumulate_pv<HSP>(o, s, v_s);
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(dev::kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(dev::kFullMask, l[r], 2);
    inv[r] = 1.f / l[r];
    if (t == 0 && row[r] < dm.T)
      lse[static_cast<int64_t>(bh) * dm.T + row[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
  // q_s's rows of this warp were read by this warp only (its Q fragments).
  bf16* out_rows = out + (static_cast<int64_t>(b) * dm.T + q0 + warp * 16) * dm.C + h * dm.hs;
  write_rows<HSP>(out_rows, dm.C, dm.T - q0 - warp * 16, q_s + warp * 16 * LD, o, inv, dm.hs,
                  dm.vec);
}

// ---- backward: dK, dV -----------------------------------------------------------
template <int HSP>
constexpr size_t dkdv_smem_bytes() {
  return 4 * kTile * kLd<HSP> * sizeof(bf16)  // k, v, q, dout
         + 2 * kTile * sizeof(float);         // lse (log2 domain), D
}

// ptxas gives it 168 registers at HSP = 64 unasked (3 blocks per SM), with a
// few bytes spilled; asking for 3 blocks explicitly spills more.
template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_tc_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                             const float* D, Dims dm) {
  constexpr int LD = kLd<HSP>;
  bf16* k_s = dev::dynamic_shared_memory<bf16>();
  bf16* v_s = k_s + kTile * LD;
  bf16* q_s = v_s + kTile * LD;
  bf16* do_s = q_s + kTile * LD;
  float* lse_s = reinterpret_cast<float*>(do_s + kTile * LD);
  float* d_s = lse_s + kTile;

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int kt = blockIdx.y;  // the first key tiles see the most queries: they run first
  const int bj = blockIdx.x, b = bj / dm.KV, kvh = bj % dm.KV;
  const int group = dm.NH / dm.KV;  // kvh serves query heads [kvh group, (kvh + 1) group)
  const int C3 = dm.ld;             // qkv's row (the name is multi-head attention's 3C)
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int k0 = kt * kTile;
  const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  const int64_t row0 = static_cast<int64_t>(b) * dm.T * C3;
  // Row 0 at kvh's offset: its keys at + C, its values at + C + Ckv.
  const bf16* base = qkv + row0 + kvh * dm.hs;
  const int key_rows = min(kTile, dm.T - k0);
  load_tile<HSP>(k_s, base + static_cast<int64_t>(k0) * C3 + dm.C, C3, key_rows, dm.hs, dm.vec);
  load_tile<HSP>(v_s, base + static_cast<int64_t>(k0) * C3 + dm.C + dm.Ckv, C3, key_rows, dm.hs,
                 dm.vec);

  const float sl2 = dm.scale * kLog2e;
  // dK, dV of head kvh summed over its group's query heads and their query
  // tiles, in this order, in registers.
  float dk[HSP / 8][4], dv[HSP / 8][4];
  zero(dk);
  zero(dv);
  float p[kKeyNTiles][4], dp[kKeyNTiles][4];  // (16 keys x 64 queries): P^T, dP^T
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t bh = static_cast<int64_t>(b) * dm.NH + h;
    const bf16* q_base = qkv + row0 + h * dm.hs;
    const bf16* dout_base = dout + static_cast<int64_t>(b) * dm.T * dm.C + h * dm.hs;
    for (int qt = kt; qt < n_tiles; ++qt) {
      const int q0 = qt * kTile, q_rows = min(kTile, dm.T - q0);
      __syncthreads();  // everyone is done with the previous q_s / do_s / lse_s / d_s
      load_tile<HSP>(q_s, q_base + static_cast<int64_t>(q0) * C3, C3, q_rows, dm.hs, dm.vec);
      load_tile<HSP>(do_s, dout_base + static_cast<int64_t>(q0) * dm.C, dm.C, q_rows, dm.hs,
                     dm.vec);
      for (int i = threadIdx.x; i < kTile; i += kThreads) {
        const int64_t at = bh * dm.T + q0 + i;
        lse_s[i] = i < q_rows ? lse[at] * kLog2e : 0.f;
        d_s[i] = i < q_rows ? D[at] : 0.f;
      }
      __syncthreads();

      scores<HSP>(p, k_s, warp * 16, q_s);  // S^T = K Q^T
      const bool masked = qt == kt || q0 + kTile > dm.T;
#pragma unroll
      for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int qc = j * 8 + 2 * t + (i & 1), q = q0 + qc;
          const bool live = !masked || (key[i >> 1] <= q && q < dm.T);
          p[j][i] = live ? exp2f(p[j][i] * sl2 - lse_s[qc]) : 0.f;
        }
      accumulate_pv<HSP>(dv, p, do_s);  // dV += P^T dO

      scores<HSP>(dp, v_s, warp * 16, do_s);  // dP^T = V dO^T
#pragma unroll
      for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int qc = j * 8 + 2 * t + (i & 1);
          dp[j][i] = p[j][i] * (dp[j][i] - d_s[qc]) * dm.scale;  // dS^T, scaled
        }
      accumulate_pv<HSP>(dk, dp, q_s);  // dK += dS^T Q
    }
  }

  __syncthreads();  // every warp is done with q_s / do_s: they stage the results
  const float one[2] = {1.f, 1.f};
  const int valid = dm.T - k0 - warp * 16;
  bf16* rows = dqkv + row0 + static_cast<int64_t>(k0 + warp * 16) * C3 + dm.C + kvh * dm.hs;
  write_rows<HSP>(rows, C3, valid, q_s + warp * 16 * LD, dk, one, dm.hs, dm.vec);
  write_rows<HSP>(rows + dm.Ckv, C3, valid, do_s + warp * 16 * LD, dv, one, dm.hs, dm.vec);
  (void)key;
}

// ---- backward: dQ ---------------------------------------------------------------
template <int HSP>
constexpr size_t dq_smem_bytes() {
  return 4 * kTile * kLd<HSP> * sizeof(bf16);  // q, dout, k, v
}

template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_dq_tc_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                           const float* D, Dims dm) {
  constexpr int LD = kLd<HSP>;
  bf16* q_s = dev::dynamic_shared_memory<bf16>();
  bf16* do_s = q_s + kTile * LD;
  bf16* k_s = do_s + kTile * LD;
  bf16* v_s = k_s + kTile * LD;

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int C3 = dm.ld;  // qkv's row (the name is multi-head attention's 3C)
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int q0 = qt * kTile, q_rows = min(kTile, dm.T - q0);
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const bf16* row0 = qkv + static_cast<int64_t>(b) * dm.T * C3;
  const bf16* q_base = row0 + h * dm.hs;  // row 0 of query head h
  // Row 0 at h's key/value head's offset: its keys at + C, its values at + C + Ckv.
  const bf16* base = row0 + dm.kv_head(h) * dm.hs;
  load_tile<HSP>(q_s, q_base + static_cast<int64_t>(q0) * C3, C3, q_rows, dm.hs, dm.vec);
  load_tile<HSP>(do_s, dout + (static_cast<int64_t>(b) * dm.T + q0) * dm.C + h * dm.hs, dm.C,
                 q_rows, dm.hs, dm.vec);
  float row_lse[2], row_d[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool in = row[r] < dm.T;
    row_lse[r] = in ? lse[static_cast<int64_t>(bh) * dm.T + row[r]] * kLog2e : 0.f;
    row_d[r] = in ? D[static_cast<int64_t>(bh) * dm.T + row[r]] : 0.f;
  }

  const float sl2 = dm.scale * kLog2e;
  float dq[HSP / 8][4];
  zero(dq);
  float p[kKeyNTiles][4], dp[kKeyNTiles][4];  // (16 queries x 64 keys): P, dP
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile, key_rows = min(kTile, dm.T - k0);
    __syncthreads();  // everyone is done with the previous k_s / v_s
    load_tile<HSP>(k_s, base + static_cast<int64_t>(k0) * C3 + dm.C, C3, key_rows, dm.hs, dm.vec);
    load_tile<HSP>(v_s, base + static_cast<int64_t>(k0) * C3 + dm.C + dm.Ckv, C3, key_rows, dm.hs,
                   dm.vec);
    __syncthreads();

    scores<HSP>(p, q_s, warp * 16, k_s);  // S = Q K^T
    const bool masked = kt == qt || k0 + kTile > dm.T;
#pragma unroll
    for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + j * 8 + 2 * t + (i & 1);
        const bool live = !masked || (key <= row[i >> 1] && key < dm.T);
        p[j][i] = live ? exp2f(p[j][i] * sl2 - row_lse[i >> 1]) : 0.f;
      }
    scores<HSP>(dp, do_s, warp * 16, v_s);  // dP = dO V^T
#pragma unroll
    for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) dp[j][i] = p[j][i] * (dp[j][i] - row_d[i >> 1]) * dm.scale;
    accumulate_pv<HSP>(dq, dp, k_s);  // dQ += dS K
  }

  // q_s's rows of this warp were read by this warp only.
  const float one[2] = {1.f, 1.f};
  bf16* rows = dqkv + (static_cast<int64_t>(b) * dm.T + q0 + warp * 16) * C3 + h * dm.hs;  // dQ
  write_rows<HSP>(rows, C3, dm.T - q0 - warp * 16, q_s + warp * 16 * LD, dq, one, dm.hs, dm.vec);
}

// ---- attention over blocks (attention_blocks.cuh) -------------------------------
// The three kernels above with separate, strided q, k, v (and dout), Tq
// queries against Tk keys at global positions (blocks::BlockDims), and fp32
// outputs merged (forward) or accumulated (backward) straight from the
// accumulator fragments: lane (g, t) owns rows g, g + 8 and columns 2t, 2t + 1
// of every 8-column tile, reads them and writes them, so no staging in shared
// memory and no lane touches another's elements. Fragments, products, the
// order of every sum and the bf16 rounding of P and dS are the unsplit
// kernels'; what changes is where a tile's rows come from, which tiles run and
// which (query, key) pairs are masked (only in tiles that are not entirely
// visible: blocks::BlockDims::tile_unmasked).
using blocks::BlockDims;
static_assert(blocks::kTile == kTile, "blocks::BlockDims counts tiles of this file's size");

// Forward, one block per (b*NH + h, query tile), over the key tiles its rows
// see. A row that sees no key keeps m = -inf and l = 0; the exponents then
// use 0 for m, so they are exp2(-inf) = 0, never -inf - -inf.
template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_block_forward_tc_kernel(float* out, float* lse, const bf16* q, const bf16* k,
                                      const bf16* v, BlockDims dm, bool accumulate) {
  constexpr int LD = kLd<HSP>;
  bf16* q_s = dev::dynamic_shared_memory<bf16>();
  bf16* k_s = q_s + kTile * LD;
  bf16* v_s = k_s + kTile * LD;

  const int qt = dm.q_tiles() - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int q0 = qt * kTile, q_rows = min(kTile, dm.Tq - q0);
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  // The last key each row sees (< 0: none). Rows past Tq compute on zero
  // queries and are never written.
  const int last[2] = {dm.last_key(row[0]), dm.last_key(row[1])};
  const bf16* k_base = k + b * dm.k_sb + dm.kv_head(h) * dm.hs;  // key row 0 of h's head
  const bf16* v_base = v + b * dm.v_sb + dm.kv_head(h) * dm.hs;
  load_tile<HSP>(q_s, q + b * dm.q_sb + q0 * dm.q_st + h * dm.hs, dm.q_st, q_rows, dm.hs, dm.vec);

  __syncthreads();
  // The warp's Q rows as A fragments, in registers for the whole key loop.
  uint32_t qf[HSP / 16][4];
#pragma unroll
  for (int kd = 0; kd < HSP / 16; ++kd) load_a<HSP>(qf[kd], q_s, warp * 16, kd * 16);

  const float sl2 = dm.scale * kLog2e;  // scores go straight to the log2 domain
  float o[HSP / 8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float s[kKeyNTiles][4];
  const int n_kt = dm.key_tiles(q0, q_rows);
  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kTile, keys = min(kTile, dm.Tk - k0);
    __syncthreads();  // everyone is done with the previous k_s / v_s
    load_tile<HSP>(k_s, k_base + k0 * dm.k_st, dm.k_st, keys, dm.hs, dm.vec);
    load_tile<HSP>(v_s, v_base + k0 * dm.v_st, dm.v_st, keys, dm.hs, dm.vec);
    __syncthreads();
    scores<HSP>(s, qf, k_s);

    // Mask keys a row does not see (and keys past Tk) where the tile has any.
    const bool masked = !dm.tile_unmasked(q0, k0);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + j * 8 + 2 * t + (i & 1);
        float x = s[j][i] * sl2;
        if (masked && key > last[i >> 1]) x = -INFINITY;
        s[j][i] = x;
        mx[i >> 1] = fmaxf(mx[i >> 1], x);
      }
    float alpha[2], m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFullMask, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFullMask, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);
      m_use[r] = m_new == -INFINITY ? 0.f : m_new;  // no key seen yet
      alpha[r] = exp2f(m[r] - m_use[r]);            // 0 while m = -inf
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < HSP / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[j][i] *= alpha[i >> 1];
#pragma unroll
    for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = exp2f(s[j][i] - m_use[i >> 1]);  // masked: exp2(-inf) = 0
        s[j][i] = p;
        l[i >> 1] += p;
      }
    accumulate_pv<HSP>(o, s, v_s);
  }

  // Each row's old lse: read by the quad's first lane alone, which also
  // writes it back, and handed to the other three by shuffle (no lane reads
  // an element another lane writes). Every lane takes part.
  float* lse_bh = lse + b * dm.l_sb + h * dm.l_sh;
  float old[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(dev::kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(dev::kFullMask, l[r], 2);
    const float mine = accumulate && t == 0 && row[r] < dm.Tq ? lse_bh[row[r]] : -INFINITY;
    old[r] = __shfl_sync(dev::kFullMask, mine, lane & ~3);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= dm.Tq) continue;
    float* orow = out + b * dm.o_sb + row[r] * dm.o_st + h * dm.hs;
    // l >= 1 once the row saw a key (its max's term is exp2(0)), 0 otherwise.
    if (l[r] == 0.f) {
      if (accumulate) continue;  // lse_b = -inf: the merge leaves out and lse as they are
#pragma unroll
      for (int j = 0; j < HSP / 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          if (j * 8 + 2 * t + c < dm.hs) orow[j * 8 + 2 * t + c] = 0.f;
      if (t == 0) lse_bh[row[r]] = -INFINITY;
      continue;
    }
    const float inv = 1.f / l[r];
    // Without accumulate old is -inf: weights (0, 1), out_b and lse_b as they are.
    const blocks::Merged mg = blocks::merge_rows(old[r], (m[r] + log2f(l[r])) * kLn2);
#pragma unroll
    for (int j = 0; j < HSP / 8; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = j * 8 + 2 * t + c;
        if (col >= dm.hs) continue;
        const float ob = o[j][2 * r + c] * inv;
        orow[col] = mg.w_old == 0.f ? ob * mg.w_new : orow[col] * mg.w_old + ob * mg.w_new;
      }
    if (t == 0) lse_bh[row[r]] = mg.lse;
  }
}

// dK, dV of a block, one block per (b*KV + key/value head, key tile), over its
// group's query heads in order and, for each, the query tiles that see the
// key tile. lse and delta are the global ones; a row with lse -inf (it sees
// no key anywhere) gets +inf, so its P is exp2(-inf) = 0.
template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_block_dkdv_tc_kernel(float* dk, float* dv, const bf16* dout, const bf16* q,
                                   const bf16* k, const bf16* v, const float* lse,
                                   const float* delta, BlockDims dm) {
  constexpr int LD = kLd<HSP>;
  bf16* k_s = dev::dynamic_shared_memory<bf16>();
  bf16* v_s = k_s + kTile * LD;
  bf16* q_s = v_s + kTile * LD;
  bf16* do_s = q_s + kTile * LD;
  float* lse_s = reinterpret_cast<float*>(do_s + kTile * LD);
  float* d_s = lse_s + kTile;

  const int kt = blockIdx.y;  // the first key tiles are seen by the most queries
  const int bj = blockIdx.x, b = bj / dm.KV, kvh = bj % dm.KV;
  const int group = dm.NH / dm.KV;  // kvh serves query heads [kvh group, (kvh + 1) group)
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int k0 = kt * kTile, key_rows = min(kTile, dm.Tk - k0);
  const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  const int qt0 = dm.first_query_tile(k0), n_qt = dm.q_tiles();
  if (qt0 >= n_qt) return;  // no query sees these keys (the whole block leaves: no barrier yet)
  load_tile<HSP>(k_s, k + b * dm.k_sb + k0 * dm.k_st + kvh * dm.hs, dm.k_st, key_rows, dm.hs,
                 dm.vec);
  load_tile<HSP>(v_s, v + b * dm.v_sb + k0 * dm.v_st + kvh * dm.hs, dm.v_st, key_rows, dm.hs,
                 dm.vec);

  const float sl2 = dm.scale * kLog2e;
  float acc_k[HSP / 8][4], acc_v[HSP / 8][4];
  zero(acc_k);
  zero(acc_v);
  float p[kKeyNTiles][4], dp[kKeyNTiles][4];  // (16 keys x 64 queries): P^T, dP^T
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const bf16* q_base = q + b * dm.q_sb + h * dm.hs;
    const bf16* g_base = dout + b * dm.g_sb + h * dm.hs;
    const float* lse_bh = lse + b * dm.l_sb + h * dm.l_sh;
    const float* d_bh = delta + b * dm.d_sb + h * dm.d_sh;
    for (int qt = qt0; qt < n_qt; ++qt) {
      const int q0 = qt * kTile, q_rows = min(kTile, dm.Tq - q0);
      __syncthreads();  // everyone is done with the previous q_s / do_s / lse_s / d_s
      load_tile<HSP>(q_s, q_base + q0 * dm.q_st, dm.q_st, q_rows, dm.hs, dm.vec);
      load_tile<HSP>(do_s, g_base + q0 * dm.g_st, dm.g_st, q_rows, dm.hs, dm.vec);
      for (int i = threadIdx.x; i < kTile; i += kThreads) {
        const float x = i < q_rows ? lse_bh[q0 + i] : 0.f;
        lse_s[i] = x == -INFINITY ? INFINITY : x * kLog2e;
        d_s[i] = i < q_rows ? d_bh[q0 + i] : 0.f;
      }
      __syncthreads();

      scores<HSP>(p, k_s, warp * 16, q_s);  // S^T = K Q^T
      const bool masked = !dm.tile_unmasked(q0, k0);
#pragma unroll
      for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int qc = j * 8 + 2 * t + (i & 1), qr = q0 + qc;
          const bool live = !masked || (key[i >> 1] <= qr + dm.off && qr < dm.Tq);
          p[j][i] = live ? exp2f(p[j][i] * sl2 - lse_s[qc]) : 0.f;
        }
      accumulate_pv<HSP>(acc_v, p, do_s);  // dV += P^T dO

      scores<HSP>(dp, v_s, warp * 16, do_s);  // dP^T = V dO^T
#pragma unroll
      for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int qc = j * 8 + 2 * t + (i & 1);
          dp[j][i] = p[j][i] * (dp[j][i] - d_s[qc]) * dm.scale;  // dS^T, scaled
        }
      accumulate_pv<HSP>(acc_k, dp, q_s);  // dK += dS^T Q
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= dm.Tk || !dm.key_seen(key[r])) continue;  // a key no query sees gets nothing
    float* dk_row = dk + b * dm.dk_sb + key[r] * dm.dk_st + kvh * dm.hs;
    float* dv_row = dv + b * dm.dv_sb + key[r] * dm.dv_st + kvh * dm.hs;
#pragma unroll
    for (int j = 0; j < HSP / 8; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = j * 8 + 2 * t + c;
        if (col >= dm.hs) continue;
        dk_row[col] += acc_k[j][2 * r + c];
        dv_row[col] += acc_v[j][2 * r + c];
      }
  }
}

// dQ of a block, one block per (b*NH + h, query tile), over the key tiles its
// rows see.
template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_block_dq_tc_kernel(float* dq, const bf16* dout, const bf16* q, const bf16* k,
                                 const bf16* v, const float* lse, const float* delta,
                                 BlockDims dm) {
  constexpr int LD = kLd<HSP>;
  bf16* q_s = dev::dynamic_shared_memory<bf16>();
  bf16* do_s = q_s + kTile * LD;
  bf16* k_s = do_s + kTile * LD;
  bf16* v_s = k_s + kTile * LD;

  const int qt = dm.q_tiles() - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int q0 = qt * kTile, q_rows = min(kTile, dm.Tq - q0);
  const int n_kt = dm.key_tiles(q0, q_rows);
  if (n_kt == 0) return;  // no row of the tile sees a key (the whole block leaves: no barrier yet)
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  // The last key each row sees (< 0: none, and rows past Tq see none).
  const int last[2] = {row[0] < dm.Tq ? dm.last_key(row[0]) : -1,
                       row[1] < dm.Tq ? dm.last_key(row[1]) : -1};
  const bf16* k_base = k + b * dm.k_sb + dm.kv_head(h) * dm.hs;  // key row 0 of h's head
  const bf16* v_base = v + b * dm.v_sb + dm.kv_head(h) * dm.hs;
  load_tile<HSP>(q_s, q + b * dm.q_sb + q0 * dm.q_st + h * dm.hs, dm.q_st, q_rows, dm.hs, dm.vec);
  load_tile<HSP>(do_s, dout + b * dm.g_sb + q0 * dm.g_st + h * dm.hs, dm.g_st, q_rows, dm.hs,
                 dm.vec);
  float row_lse[2], row_d[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool in = row[r] < dm.Tq;
    const float x = in ? lse[b * dm.l_sb + h * dm.l_sh + row[r]] : 0.f;
    row_lse[r] = x == -INFINITY ? INFINITY : x * kLog2e;  // sees no key anywhere: P = 0
    row_d[r] = in ? delta[b * dm.d_sb + h * dm.d_sh + row[r]] : 0.f;
  }

  const float sl2 = dm.scale * kLog2e;
  float acc[HSP / 8][4];
  zero(acc);
  float p[kKeyNTiles][4], dp[kKeyNTiles][4];  // (16 queries x 64 keys): P, dP
  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kTile, keys = min(kTile, dm.Tk - k0);
    __syncthreads();  // everyone is done with the previous k_s / v_s
    load_tile<HSP>(k_s, k_base + k0 * dm.k_st, dm.k_st, keys, dm.hs, dm.vec);
    load_tile<HSP>(v_s, v_base + k0 * dm.v_st, dm.v_st, keys, dm.hs, dm.vec);
    __syncthreads();

    scores<HSP>(p, q_s, warp * 16, k_s);  // S = Q K^T
    const bool masked = !dm.tile_unmasked(q0, k0);
#pragma unroll
    for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + j * 8 + 2 * t + (i & 1);
        const bool live = !masked || key <= last[i >> 1];
        p[j][i] = live ? exp2f(p[j][i] * sl2 - row_lse[i >> 1]) : 0.f;
      }
    scores<HSP>(dp, do_s, warp * 16, v_s);  // dP = dO V^T
#pragma unroll
    for (int j = 0; j < kKeyNTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) dp[j][i] = p[j][i] * (dp[j][i] - row_d[i >> 1]) * dm.scale;
    accumulate_pv<HSP>(acc, dp, k_s);  // dQ += dS K
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (last[r] < 0) continue;  // past Tq, or a row that sees no key of the block
    float* drow = dq + b * dm.o_sb + row[r] * dm.o_st + h * dm.hs;
#pragma unroll
    for (int j = 0; j < HSP / 8; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = j * 8 + 2 * t + c;
        if (col < dm.hs) drow[col] += acc[j][2 * r + c];
      }
  }
}

// ---- launchers ------------------------------------------------------------------
Dims make_dims(int T, int NH, int KV, int hs, std::initializer_list<const void*> ptrs) {
  // Every row stride and head offset is a multiple of hs, so hs % 8 == 0
  // and aligned bases make every 8-element access 16-byte aligned.
  const float scale = 1.f / std::sqrt(static_cast<float>(hs));
  Dims d{T, NH, KV, hs, NH * hs, KV * hs, (NH + 2 * KV) * hs, scale, hs % 8 == 0};
  for (const void* p : ptrs) d.vec = d.vec && dev::aligned16(p);
  return d;
}

void check_shape(const char* what, int B, int T, int NH, int KV, int hs) {
  GT_CHECK(B >= 0 && T >= 1 && NH >= 1, what, ": B = ", B, ", T = ", T, ", NH = ", NH);
  GT_CHECK(KV >= 1 && NH % KV == 0, what, ": KV = ", KV, " key/value heads must divide NH = ", NH);
  if (!attention_tc_supported(hs))
    fail(what,
         ": the tensor-core kernel needs a head size that is a multiple of 16 up to 128, got ", hs);
  GT_CHECK((T + kTile - 1) / kTile <= 65535, what, ": T = ", T, " exceeds the grid");
}

template <typename Kernel, typename... Args>
void launch(Kernel kernel, size_t smem, dim3 grid, cudaStream_t stream, Args... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  dev::launch(kernel, {grid, kThreads, smem, stream}, args...);
  CUDA_CHECK_LAUNCH();
}

// One block per (b * heads + head, 64-row tile): heads = NH for the forward
// and dq kernels (query heads), KV for dkdv (key/value heads).
dim3 grid_of(int B, int heads, const Dims& d) {
  return dim3(static_cast<unsigned>(B * heads), static_cast<unsigned>((d.T + kTile - 1) / kTile));
}

template <int HSP>
void forward_hsp(bf16* out, float* lse, const bf16* qkv, int B, const Dims& d, cudaStream_t s) {
  launch(attention_forward_tc_kernel<HSP>, forward_smem_bytes<HSP>(), grid_of(B, d.NH, d), s, out,
         lse, qkv, d);
}

template <int HSP>
void backward_hsp(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
                  int B, const Dims& d, cudaStream_t s) {
  launch(attention_dkdv_tc_kernel<HSP>, dkdv_smem_bytes<HSP>(), grid_of(B, d.KV, d), s, dqkv, dout,
         qkv, lse, D, d);
  launch(attention_dq_tc_kernel<HSP>, dq_smem_bytes<HSP>(), grid_of(B, d.NH, d), s, dqkv, dout, qkv,
         lse, D, d);
}

// ---- launchers: attention over blocks ---------------------------------------------
void check_block_tc(const char* what, const AttentionBlock& blk) {
  blocks::check_block(what, blk);
  if (!attention_tc_supported(blk.hs))
    fail(what,
         ": the tensor-core kernel needs a head size that is a multiple of 16 up to 128, got ",
         blk.hs);
}

template <int HSP>
void block_forward_hsp(RowsView<float> out, StatsView<float> lse, RowsView<const bf16> q,
                       RowsView<const bf16> k, RowsView<const bf16> v, int B, const BlockDims& d,
                       bool accumulate, cudaStream_t s) {
  launch(attention_block_forward_tc_kernel<HSP>, forward_smem_bytes<HSP>(),
         dim3(static_cast<unsigned>(B * d.NH), static_cast<unsigned>(d.q_tiles())), s, out.p,
         lse.p, q.p, k.p, v.p, d, accumulate);
}

template <int HSP>
void block_backward_hsp(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                        RowsView<const bf16> dout, RowsView<const bf16> q, RowsView<const bf16> k,
                        RowsView<const bf16> v, StatsView<const float> lse,
                        StatsView<const float> delta, int B, const BlockDims& d, cudaStream_t s) {
  launch(attention_block_dkdv_tc_kernel<HSP>, dkdv_smem_bytes<HSP>(),
         dim3(static_cast<unsigned>(B * d.KV), static_cast<unsigned>(d.k_tiles())), s, dk.p, dv.p,
         dout.p, q.p, k.p, v.p, lse.p, delta.p, d);
  launch(attention_block_dq_tc_kernel<HSP>, dq_smem_bytes<HSP>(),
         dim3(static_cast<unsigned>(B * d.NH), static_cast<unsigned>(d.q_tiles())), s, dq.p,
         dout.p, q.p, k.p, v.p, lse.p, delta.p, d);
}

}  // namespace

bool attention_tc_supported(int hs) { return tensor_core_attention_supported(hs); }

void attention_forward_tc(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int KV,
                          int hs, cudaStream_t stream) {
  check_shape("attention_forward_tc", B, T, NH, KV, hs);
  if (B == 0) return;
  dev::NvtxRange range("attention_forward_tc");
  const Dims d = make_dims(T, NH, KV, hs, {qkv, out});
  if (hs <= 64)
    forward_hsp<64>(out, lse, qkv, B, d, stream);
  else
    forward_hsp<128>(out, lse, qkv, B, d, stream);
}

void attention_backward_tc(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                           const bf16* out, const float* lse, int B, int T, int NH, int KV, int hs,
                           cudaStream_t stream) {
  check_shape("attention_backward_tc", B, T, NH, KV, hs);
  if (B == 0) return;
  dev::NvtxRange range("attention_backward_tc");
  attention_backward_rowdot(scratch, dout, out, B, T, NH, hs, stream);
  const Dims d = make_dims(T, NH, KV, hs, {qkv, dout, dqkv});
  if (hs <= 64)
    backward_hsp<64>(dqkv, dout, qkv, lse, scratch, B, d, stream);
  else
    backward_hsp<128>(dqkv, dout, qkv, lse, scratch, B, d, stream);
}

void attention_block_forward_tc(RowsView<float> out, StatsView<float> lse,
                                RowsView<const bf16> q, RowsView<const bf16> k,
                                RowsView<const bf16> v, const AttentionBlock& blk,
                                bool accumulate, cudaStream_t stream) {
  check_block_tc("attention_block_forward_tc", blk);
  if (blk.B == 0 || blk.Tq == 0) return;
  // Merging a block no query sees changes nothing; assigned, it still writes 0 and -inf.
  if (accumulate && blocks::block_fully_masked(blk)) return;
  dev::NvtxRange range("attention_block_forward_tc");
  const BlockDims d = blocks::forward_dims(blk, out, lse, q, k, v);
  if (blk.hs <= 64)
    block_forward_hsp<64>(out, lse, q, k, v, blk.B, d, accumulate, stream);
  else
    block_forward_hsp<128>(out, lse, q, k, v, blk.B, d, accumulate, stream);
}

void attention_block_backward_tc(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                                 RowsView<const bf16> dout, RowsView<const bf16> q,
                                 RowsView<const bf16> k, RowsView<const bf16> v,
                                 StatsView<const float> lse, StatsView<const float> delta,
                                 const AttentionBlock& blk, cudaStream_t stream) {
  check_block_tc("attention_block_backward_tc", blk);
  if (blk.B == 0 || blk.Tq == 0 || blocks::block_fully_masked(blk)) return;  // adds nothing
  dev::NvtxRange range("attention_block_backward_tc");
  const BlockDims d = blocks::backward_dims(blk, dq, dk, dv, dout, q, k, v, lse, delta);
  if (blk.hs <= 64)
    block_backward_hsp<64>(dq, dk, dv, dout, q, k, v, lse, delta, blk.B, d, stream);
  else
    block_backward_hsp<128>(dq, dk, dv, dout, q, k, v, lse, delta, blk.B, d, stream);
}

}  // namespace gt::cuda
