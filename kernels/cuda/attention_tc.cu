// Tensor-core (WMMA, bf16 in, fp32 accumulate) variant of the flash-style
// causal attention in attention.cu, for bf16 tensors with hs % 16 == 0. Same
// layouts, same saved log-sum-exp, same D scratch, same assigned outputs; see
// attention.cuh for the contract (the *_tc launchers there).
//
// Structure: a block of 4 warps owns 64 rows (queries in the forward and dq
// kernels, keys in the dkdv kernel); warp w owns rows [16w, 16w + 16). Each
// product is WMMA 16x16x16 on bf16 tiles in shared memory. Everything
// elementwise (mask, exp, the softmax statistics, dS) is done in fp32 on a
// copy of the warp's accumulators stored to shared memory in row-major order,
// so no assumption is made about the (unspecified) fragment layout: two lanes
// per row, 32 columns each.
//   forward, two passes over the key tiles (no rescaling of accumulators):
//     1. S = Q K^T -> running row max m and sum l   => lse = m + log l
//     2. S again, P = exp(S - lse) (final, normalised) as bf16, O += P V.
//   dkdv: S^T = K Q^T, P^T, dP^T = V dO^T, dS^T = P^T (dP^T - D) * scale;
//         dV += P^T dO, dK += dS^T Q, accumulated in fragments over query tiles.
//   dq:   S, P, dP = dO V^T, dS * scale; dQ += dS K over key tiles.
// P and dS are rounded to bf16 for the tensor-core products (as in
// FlashAttention-2); accumulation and statistics stay fp32. Deterministic: no
// atomics, a fixed order of tiles and products.
#include <mma.h>

#include <cmath>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kTile = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * dev::kWarpSize;  // 128
constexpr int kLdF = kTile + 4;                     // fp32 (64 x 64) staging row stride
constexpr int kLdP = kTile + 8;                     // bf16 (64 x 64) P / dS row stride

template <int HSP>
constexpr int ld_bf() { return HSP + 8; }  // bf16 (64 x HSP) tile row stride (16-byte rows)
template <int HSP>
constexpr int ld_out() { return HSP + 4; }  // fp32 (64 x HSP) output staging row stride

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

struct Dims {
  int T, NH, hs, C;
  float scale;
  bool vec;  // 16-byte loads legal (base pointers aligned; C, hs multiples of 8)
};

// Rows [0, rows) x columns [0, hs) of a strided bf16 slice into a (64 x HSP)
// bf16 shared tile; the rest of the tile (columns < HSP) is zero.
template <int HSP>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int64_t row_stride, int rows,
                                          int hs, bool vec) {
  constexpr int LD = ld_bf<HSP>();
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

// acc[j] (16 x 16 block j of the warp's 16 x 64 result) = A (16 x HSP, rows of
// `a`) times B^T where B is (64 x HSP) row-major: S = Q K^T and friends.
template <int HSP>
__device__ __forceinline__ void warp_abt(FragC (&acc)[kTile / 16], const bf16* a, const bf16* b) {
  constexpr int LD = ld_bf<HSP>();
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) wmma::fill_fragment(acc[j], 0.f);
#pragma unroll
  for (int k = 0; k < HSP / 16; ++k) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + k * 16, LD);
#pragma unroll
    for (int j = 0; j < kTile / 16; ++j) {
      FragBt fb;  // B^T (d x key) is B (key x d) read column-major
      wmma::load_matrix_sync(fb, b + j * 16 * LD + k * 16, LD);
      wmma::mma_sync(acc[j], fa, fb, acc[j]);
    }
  }
}

// acc[j] += P (16 x 64, rows of `p`, stride kLdP) times V (64 x HSP row-major).
template <int HSP>
__device__ __forceinline__ void warp_ab(FragC (&acc)[HSP / 16], const bf16* p, const bf16* v) {
  constexpr int LD = ld_bf<HSP>();
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    FragA fa;
    wmma::load_matrix_sync(fa, p + k * 16, kLdP);
#pragma unroll
    for (int j = 0; j < HSP / 16; ++j) {
      FragB fb;
      wmma::load_matrix_sync(fb, v + k * 16 * LD + j * 16, LD);
      wmma::mma_sync(acc[j], fa, fb, acc[j]);
    }
  }
}

__device__ __forceinline__ void store_scores(float* s_warp, FragC (&acc)[kTile / 16]) {
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j)
    wmma::store_matrix_sync(s_warp + j * 16, acc[j], kLdF, wmma::mem_row_major);
}

// Writes the warp's (16 x HSP) fragments to fp32 staging, then rows [row0 +
// 16w, ...) columns < hs to global memory as bf16 (times `mult`).
template <int HSP>
__device__ __forceinline__ void write_rows(bf16* dst, int64_t row_stride, int valid_rows,
                                           float* stage_warp, FragC (&acc)[HSP / 16], int hs,
                                           float mult) {
  constexpr int LDO = ld_out<HSP>();
  const int lane = threadIdx.x % dev::kWarpSize;
#pragma unroll
  for (int j = 0; j < HSP / 16; ++j)
    wmma::store_matrix_sync(stage_warp + j * 16, acc[j], LDO, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 16 * hs; e += dev::kWarpSize) {
    const int r = e / hs, d = e % hs;
    if (r < valid_rows) dst[r * row_stride + d] = __float2bfloat16_rn(stage_warp[r * LDO + d] * mult);
  }
  __syncwarp();
}

template <int HSP>
constexpr size_t forward_smem_bytes() {
  return 3 * kTile * ld_bf<HSP>() * sizeof(bf16)  // q, k, v
         + kTile * kLdF * sizeof(float)           // scores
         + kTile * kLdP * sizeof(bf16)            // P
         + kTile * sizeof(float);                 // lse
}

// ---- forward --------------------------------------------------------------------
template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(bf16* out, float* lse, const bf16* qkv, Dims dm) {
  constexpr int LD = ld_bf<HSP>();
  unsigned char* smem_raw = dev::dynamic_shared_memory<unsigned char>();
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* k_s = q_s + kTile * LD;
  bf16* v_s = k_s + kTile * LD;
  float* s_s = reinterpret_cast<float*>(v_s + kTile * LD);
  bf16* p_s = reinterpret_cast<bf16*>(s_s + kTile * kLdF);
  float* lse_s = reinterpret_cast<float*>(p_s + kTile * kLdP);
  float* stage = reinterpret_cast<float*>(k_s);  // output staging, after the last tile

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int C3 = 3 * dm.C;
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int q0 = qt * kTile;
  const bf16* base = qkv + static_cast<int64_t>(b) * dm.T * C3 + h * dm.hs;
  load_tile<HSP>(q_s, base + static_cast<int64_t>(q0) * C3, C3, min(kTile, dm.T - q0), dm.hs, dm.vec);

  // This lane's row of the warp's 16, and which half of the 64 columns.
  const int r = warp * 16 + lane / 2, qr = q0 + r, c0 = (lane % 2) * 32;
  float* s_row = s_s + r * kLdF;
  FragC acc[kTile / 16];

  // Pass 1: the row statistics.
  float m = -INFINITY, l = 0.f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile<HSP>(k_s, base + static_cast<int64_t>(k0) * C3 + dm.C, C3, min(kTile, dm.T - k0),
                   dm.hs, dm.vec);
    __syncthreads();
    warp_abt<HSP>(acc, q_s + warp * 16 * LD, k_s);
    store_scores(s_s + warp * 16 * kLdF, acc);
    __syncwarp();
    float mx = -INFINITY;
    for (int c = c0; c < c0 + 32; ++c) {
      const int kc = k0 + c;
      if (kc <= qr && kc < dm.T) mx = fmaxf(mx, s_row[c] * dm.scale);
    }
    mx = fmaxf(mx, __shfl_xor_sync(dev::kFullMask, mx, 1));
    const float m_new = fmaxf(m, mx);  // finite: key k0 <= qr is in every tile
    float sum = 0.f;
    for (int c = c0; c < c0 + 32; ++c) {
      const int kc = k0 + c;
      if (kc <= qr && kc < dm.T) sum += expf(s_row[c] * dm.scale - m_new);
    }
    sum += __shfl_xor_sync(dev::kFullMask, sum, 1);
    l = l * expf(m - m_new) + sum;
    m = m_new;
    __syncwarp();  // s_s is rewritten by the next tile
  }
  const float row_lse = m + logf(l);
  if (lane % 2 == 0) {
    lse_s[r] = row_lse;
    if (qr < dm.T) lse[static_cast<int64_t>(bh) * dm.T + qr] = row_lse;
  }

  // Pass 2: O = sum over tiles of exp(S - lse) V.
  FragC o[HSP / 16];
#pragma unroll
  for (int j = 0; j < HSP / 16; ++j) wmma::fill_fragment(o[j], 0.f);
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    const bf16* kv = base + static_cast<int64_t>(k0) * C3;
    load_tile<HSP>(k_s, kv + dm.C, C3, min(kTile, dm.T - k0), dm.hs, dm.vec);
    load_tile<HSP>(v_s, kv + 2 * dm.C, C3, min(kTile, dm.T - k0), dm.hs, dm.vec);
    __syncthreads();
    warp_abt<HSP>(acc, q_s + warp * 16 * LD, k_s);
    store_scores(s_s + warp * 16 * kLdF, acc);
    __syncwarp();
    for (int c = c0; c < c0 + 32; ++c) {
      const int kc = k0 + c;
      const float p = (kc <= qr && kc < dm.T) ? expf(s_row[c] * dm.scale - row_lse) : 0.f;
      p_s[r * kLdP + c] = __float2bfloat16_rn(p);
    }
    __syncwarp();
    warp_ab<HSP>(o, p_s + warp * 16 * kLdP, v_s);
  }
  __syncthreads();  // every warp is done with k_s / v_s: the staging reuses them
  bf16* out_rows = out + (static_cast<int64_t>(b) * dm.T + q0 + warp * 16) * dm.C + h * dm.hs;
  write_rows<HSP>(out_rows, dm.C, dm.T - q0 - warp * 16, stage + warp * 16 * ld_out<HSP>(), o,
                  dm.hs, 1.f);
}

// ---- backward: dK, dV ------------------------------------------------------------
template <int HSP>
constexpr size_t dkdv_smem_bytes() {
  return 4 * kTile * ld_bf<HSP>() * sizeof(bf16)  // k, v, q, dout
         + kTile * kLdF * sizeof(float)           // S^T, then dP^T
         + 2 * kTile * kLdP * sizeof(bf16)        // P^T, dS^T
         + 2 * kTile * sizeof(float);             // lse, D
}

template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_tc_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                             const float* D, Dims dm) {
  constexpr int LD = ld_bf<HSP>();
  unsigned char* smem_raw = dev::dynamic_shared_memory<unsigned char>();
  bf16* k_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* v_s = k_s + kTile * LD;
  bf16* q_s = v_s + kTile * LD;
  bf16* do_s = q_s + kTile * LD;
  float* s_s = reinterpret_cast<float*>(do_s + kTile * LD);
  bf16* pt_s = reinterpret_cast<bf16*>(s_s + kTile * kLdF);
  bf16* dst_s = pt_s + kTile * kLdP;
  float* lse_s = reinterpret_cast<float*>(dst_s + kTile * kLdP);
  float* d_s = lse_s + kTile;
  float* stage = reinterpret_cast<float*>(q_s);  // output staging, after the last tile

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int kt = blockIdx.y;  // key tile 0 sees every query tile: the longest first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int C3 = 3 * dm.C;
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int k0 = kt * kTile;
  const bf16* base = qkv + static_cast<int64_t>(b) * dm.T * C3 + h * dm.hs;
  const bf16* dout_base = dout + static_cast<int64_t>(b) * dm.T * dm.C + h * dm.hs;
  load_tile<HSP>(k_s, base + static_cast<int64_t>(k0) * C3 + dm.C, C3, min(kTile, dm.T - k0),
                 dm.hs, dm.vec);
  load_tile<HSP>(v_s, base + static_cast<int64_t>(k0) * C3 + 2 * dm.C, C3, min(kTile, dm.T - k0),
                 dm.hs, dm.vec);

  // This lane's key row of the warp's 16, and which half of the 64 query columns.
  const int c = warp * 16 + lane / 2, kc = k0 + c, r0 = (lane % 2) * 32;
  float* s_row = s_s + c * kLdF;
  FragC acc[kTile / 16], dk[HSP / 16], dv[HSP / 16];
#pragma unroll
  for (int j = 0; j < HSP / 16; ++j) {
    wmma::fill_fragment(dk[j], 0.f);
    wmma::fill_fragment(dv[j], 0.f);
  }
  for (int qt = kt; qt < n_tiles; ++qt) {
    const int q0 = qt * kTile, rows = min(kTile, dm.T - q0);
    __syncthreads();
    load_tile<HSP>(q_s, base + static_cast<int64_t>(q0) * C3, C3, rows, dm.hs, dm.vec);
    load_tile<HSP>(do_s, dout_base + static_cast<int64_t>(q0) * dm.C, dm.C, rows, dm.hs, dm.vec);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      lse_s[i] = i < rows ? lse[static_cast<int64_t>(bh) * dm.T + q0 + i] : 0.f;
      d_s[i] = i < rows ? D[static_cast<int64_t>(bh) * dm.T + q0 + i] : 0.f;
    }
    __syncthreads();

    warp_abt<HSP>(acc, k_s + warp * 16 * LD, q_s);  // S^T (keys x queries)
    store_scores(s_s + warp * 16 * kLdF, acc);
    __syncwarp();
    float p[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int r = r0 + i, qr = q0 + r;
      p[i] = (kc <= qr && qr < dm.T && kc < dm.T) ? expf(s_row[r] * dm.scale - lse_s[r]) : 0.f;
      pt_s[c * kLdP + r] = __float2bfloat16_rn(p[i]);
    }
    __syncwarp();
    warp_abt<HSP>(acc, v_s + warp * 16 * LD, do_s);  // dP^T (keys x queries)
    store_scores(s_s + warp * 16 * kLdF, acc);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int r = r0 + i;
      dst_s[c * kLdP + r] = __float2bfloat16_rn(p[i] * (s_row[r] - d_s[r]) * dm.scale);
    }
    __syncwarp();
    warp_ab<HSP>(dv, pt_s + warp * 16 * kLdP, do_s);  // dV += P^T dO
    warp_ab<HSP>(dk, dst_s + warp * 16 * kLdP, q_s);  // dK += (scale dS^T) Q
  }
  __syncthreads();  // every warp is done with q_s / do_s: the staging reuses them
  bf16* dk_rows = dqkv + (static_cast<int64_t>(b) * dm.T + k0 + warp * 16) * C3 + dm.C + h * dm.hs;
  float* stage_warp = stage + warp * 16 * ld_out<HSP>();
  const int valid = dm.T - k0 - warp * 16;
  write_rows<HSP>(dk_rows, C3, valid, stage_warp, dk, dm.hs, 1.f);
  write_rows<HSP>(dk_rows + dm.C, C3, valid, stage_warp, dv, dm.hs, 1.f);
}

// ---- backward: dQ ----------------------------------------------------------------
template <int HSP>
constexpr size_t dq_smem_bytes() {
  return 4 * kTile * ld_bf<HSP>() * sizeof(bf16)  // q, dout, k, v
         + kTile * kLdF * sizeof(float)           // S, then dP
         + kTile * kLdP * sizeof(bf16)            // dS
         + 2 * kTile * sizeof(float);             // lse, D
}

template <int HSP>
__global__ void __launch_bounds__(kThreads)
    attention_dq_tc_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                           const float* D, Dims dm) {
  constexpr int LD = ld_bf<HSP>();
  unsigned char* smem_raw = dev::dynamic_shared_memory<unsigned char>();
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* do_s = q_s + kTile * LD;
  bf16* k_s = do_s + kTile * LD;
  bf16* v_s = k_s + kTile * LD;
  float* s_s = reinterpret_cast<float*>(v_s + kTile * LD);
  bf16* ds_s = reinterpret_cast<bf16*>(s_s + kTile * kLdF);
  float* lse_s = reinterpret_cast<float*>(ds_s + kTile * kLdP);
  float* d_s = lse_s + kTile;
  float* stage = reinterpret_cast<float*>(k_s);  // output staging, after the last tile

  const int n_tiles = (dm.T + kTile - 1) / kTile;
  const int qt = n_tiles - 1 - static_cast<int>(blockIdx.y);  // longest rows first
  const int bh = blockIdx.x, b = bh / dm.NH, h = bh % dm.NH;
  const int C3 = 3 * dm.C;
  const int warp = threadIdx.x / dev::kWarpSize, lane = threadIdx.x % dev::kWarpSize;
  const int q0 = qt * kTile, rows = min(kTile, dm.T - q0);
  const bf16* base = qkv + static_cast<int64_t>(b) * dm.T * C3 + h * dm.hs;
  load_tile<HSP>(q_s, base + static_cast<int64_t>(q0) * C3, C3, rows, dm.hs, dm.vec);
  load_tile<HSP>(do_s, dout + (static_cast<int64_t>(b) * dm.T + q0) * dm.C + h * dm.hs, dm.C, rows,
                 dm.hs, dm.vec);
  for (int i = threadIdx.x; i < kTile; i += kThreads) {
    lse_s[i] = i < rows ? lse[static_cast<int64_t>(bh) * dm.T + q0 + i] : 0.f;
    d_s[i] = i < rows ? D[static_cast<int64_t>(bh) * dm.T + q0 + i] : 0.f;
  }

  const int r = warp * 16 + lane / 2, qr = q0 + r, c0 = (lane % 2) * 32;
  float* s_row = s_s + r * kLdF;
  FragC acc[kTile / 16], dq[HSP / 16];
#pragma unroll
  for (int j = 0; j < HSP / 16; ++j) wmma::fill_fragment(dq[j], 0.f);
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // (also orders the loads above before the first use)
    const bf16* kv = base + static_cast<int64_t>(k0) * C3;
    load_tile<HSP>(k_s, kv + dm.C, C3, min(kTile, dm.T - k0), dm.hs, dm.vec);
    load_tile<HSP>(v_s, kv + 2 * dm.C, C3, min(kTile, dm.T - k0), dm.hs, dm.vec);
    __syncthreads();

    warp_abt<HSP>(acc, q_s + warp * 16 * LD, k_s);  // S
    store_scores(s_s + warp * 16 * kLdF, acc);
    __syncwarp();
    float p[32];
    const float row_lse = lse_s[r], row_d = d_s[r];
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int kc = k0 + c0 + i;
      p[i] = (kc <= qr && kc < dm.T && qr < dm.T) ? expf(s_row[c0 + i] * dm.scale - row_lse) : 0.f;
    }
    __syncwarp();
    warp_abt<HSP>(acc, do_s + warp * 16 * LD, v_s);  // dP
    store_scores(s_s + warp * 16 * kLdF, acc);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 32; ++i)
      ds_s[r * kLdP + c0 + i] = __float2bfloat16_rn(p[i] * (s_row[c0 + i] - row_d) * dm.scale);
    __syncwarp();
    warp_ab<HSP>(dq, ds_s + warp * 16 * kLdP, k_s);  // dQ += (scale dS) K
  }
  __syncthreads();  // every warp is done with k_s / v_s: the staging reuses them
  bf16* dq_rows = dqkv + (static_cast<int64_t>(b) * dm.T + q0 + warp * 16) * C3 + h * dm.hs;
  write_rows<HSP>(dq_rows, C3, dm.T - q0 - warp * 16, stage + warp * 16 * ld_out<HSP>(), dq,
                  dm.hs, 1.f);
}

// ---- launchers ------------------------------------------------------------------
Dims make_dims(int T, int NH, int hs, std::initializer_list<const void*> ptrs) {
  Dims d{T, NH, hs, NH * hs, 1.f / std::sqrt(static_cast<float>(hs)), hs % 8 == 0};
  for (const void* p : ptrs) d.vec = d.vec && dev::aligned16(p);
  return d;
}

void check_shape(const char* what, int B, int T, int NH, int hs) {
  GT_CHECK(B >= 0 && T >= 1 && NH >= 1, what, ": B = ", B, ", T = ", T, ", NH = ", NH);
  if (!attention_tc_supported(hs))
    fail(what, ": the tensor-core kernel needs a head size that is a multiple of 16 up to 128, got ",
         hs);
  GT_CHECK((T + kTile - 1) / kTile <= 65535, what, ": T = ", T, " exceeds the grid");
}

template <typename Kernel, typename... Args>
void launch(Kernel kernel, size_t smem, dim3 grid, cudaStream_t stream, Args... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  dev::launch(kernel, {grid, kThreads, smem, stream}, args...);
  CUDA_CHECK_LAUNCH();
}

dim3 grid_of(int B, const Dims& d) {
  return dim3(static_cast<unsigned>(B * d.NH), static_cast<unsigned>((d.T + kTile - 1) / kTile));
}

template <int HSP>
void forward_hsp(bf16* out, float* lse, const bf16* qkv, int B, const Dims& d, cudaStream_t s) {
  launch(attention_forward_tc_kernel<HSP>, forward_smem_bytes<HSP>(), grid_of(B, d), s, out, lse,
         qkv, d);
}

template <int HSP>
void backward_hsp(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
                  int B, const Dims& d, cudaStream_t s) {
  launch(attention_dkdv_tc_kernel<HSP>, dkdv_smem_bytes<HSP>(), grid_of(B, d), s, dqkv, dout, qkv,
         lse, D, d);
  launch(attention_dq_tc_kernel<HSP>, dq_smem_bytes<HSP>(), grid_of(B, d), s, dqkv, dout, qkv, lse,
         D, d);
}

}  // namespace

bool attention_tc_supported(int hs) { return hs >= 16 && hs <= 128 && hs % 16 == 0; }

void attention_forward_tc(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int hs,
                          cudaStream_t stream) {
  check_shape("attention_forward_tc", B, T, NH, hs);
  if (B == 0) return;
  dev::NvtxRange range("attention_forward_tc");
  const Dims d = make_dims(T, NH, hs, {qkv});
  if (hs <= 64) forward_hsp<64>(out, lse, qkv, B, d, stream);
  else forward_hsp<128>(out, lse, qkv, B, d, stream);
}

void attention_backward_tc(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv,
                           const bf16* out, const float* lse, int B, int T, int NH, int hs,
                           cudaStream_t stream) {
  check_shape("attention_backward_tc", B, T, NH, hs);
  if (B == 0) return;
  dev::NvtxRange range("attention_backward_tc");
  attention_backward_rowdot(scratch, dout, out, B, T, NH, hs, stream);
  const Dims d = make_dims(T, NH, hs, {qkv, dout});
  if (hs <= 64) backward_hsp<64>(dqkv, dout, qkv, lse, scratch, B, d, stream);
  else backward_hsp<128>(dqkv, dout, qkv, lse, scratch, B, d, stream);
}

}  // namespace gt::cuda
