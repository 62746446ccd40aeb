// Causal attention forward for Hopper (sm_90a), head sizes 64 and 128, in
// FlashAttention-3's structure: the tensor memory accelerator moves Q, K and
// V tiles (kernels/cuda/async_sm90.cuh) into 128-byte-swizzled shared memory
// through a two-stage mbarrier pipeline, and warpgroup MMAs
// (kernels/cuda/wgmma_sm90.cuh) compute S = Q K^T from shared memory and
// O += P V with P in registers. Same contract as attention_forward_tc
// (attention.cuh): qkv (B,T,(NH + 2 KV) hs) bf16, query head h reads
// key/value head h / (NH / KV); out (B,T,NH hs) and lse (B,NH,T) assigned.
//
// A block is two warpgroups over 64 queries of one (batch, query head):
//   producer (threads 0..127): thread 0 loads the Q tile once, then for each
//            key tile 0..qt (causal) waits for its stage to be released and
//            loads K and V (each completing its own barrier, so S can start
//            before V has landed); the other 127 threads exit.
//   consumer (threads 128..255): per key tile, S (64 x 64) = Q K^T over hs/16
//            k16 steps; the online softmax in the log2 domain (running max m,
//            sum l per row; the causal mask on the diagonal tile); O rescaled;
//            P rounded to bf16 straight into wgmma's register-A fragments;
//            O (64 x hs) += P V (V MN-major) over the tile's 4 k16 steps; the
//            stage released. At the end O /= l, lse = (m + log2 l) ln 2.
// Accumulator layout (wgmma_sm90.cuh): thread l of warp w holds rows
// 16 w + l / 4 and + 8, columns 8 j + 2 (l % 4) + {0, 1} of every 8-column
// tile j; a row's reductions are two shuffles across the lanes of a quad.
//
// Shared memory (tiles at multiples of 1024 bytes of the shared window, the
// swizzle's repeat: the base is aligned in the kernel; each tile 64 rows of
// hs bf16 stored as hs / 64 column halves of 64 rows x 128 bytes, 128-byte
// swizzled by the copy): Q, then K[stage], then V[stage]: 40 KiB at hs 64,
// 80 KiB at hs 128, plus the alignment's slack.
// The tensor map views qkv as (B T) rows of (NH + 2 KV) hs columns: a tile
// that runs past its sequence reads the next sequence's rows (or the copy
// engine's zeros past the last), which the causal mask removes from every
// query row that is stored.
//
// Not yet: a second consumer warpgroup (128 queries per block), softmax
// overlapped with the next tile's S, the backward (attention_backward_tc
// serves runtime.attention: wgmma), fp8.
#include <cmath>

#include "kernels/core/error.hpp"
#include "kernels/cuda/async_sm90.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/tensor_map.hpp"
#include "kernels/cuda/wgmma_sm90.cuh"

namespace gt::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kBlockM = 64;   // queries per block
constexpr int kBlockN = 64;   // keys per tile
constexpr int kStages = 2;
constexpr int kGroup = 128;   // threads per warpgroup
constexpr int kThreads = 2 * kGroup;
constexpr int kHalfBytes = 64 * 128;  // one 64-column half of a tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HS>
struct Layout {
  static constexpr int kHalves = HS / 64;
  static constexpr int kTileBytes = kHalves * kHalfBytes;  // 64 x HS bf16
  static constexpr int kQ = 0;
  static constexpr int kK = kTileBytes;
  static constexpr int kV = kK + kStages * kTileBytes;
  // The tiles, and the slack that aligns them to the 1024-byte repeat of
  // the swizzle (dynamic shared memory starts only 128-byte aligned).
  static constexpr int kBytes = kV + kStages * kTileBytes + 1024 - 128;
};

struct Params {
  int T, NH, KV, n_qtiles;
  float scale_log2;  // log2(e) / sqrt(hs)
};

// A row's max and sum over the 4 lanes of its quad.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int HS>
__global__ void __launch_bounds__(kThreads, 1)
    attention_forward_sm90_kernel(const __grid_constant__ CUtensorMap qkv_map, bf16* out,
                                  float* lse, Params p) {
  using L = Layout<HS>;
  GT_SHARED(uint64_t, q_full, );
  GT_SHARED(uint64_t, k_full, [kStages]);
  GT_SHARED(uint64_t, v_full, [kStages]);
  GT_SHARED(uint64_t, kv_empty, [kStages]);
  unsigned char* smem = dev::align_shared<1024>(dev::dynamic_shared_memory<unsigned char>());
  // The longest causal rows first: the last query tiles have the most keys.
  const int qt = p.n_qtiles - 1 - static_cast<int>(blockIdx.x);
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const int kvh = h / (p.NH / p.KV);
  const int t = static_cast<int>(threadIdx.x);
  const int n_ktiles = qt + 1;
  if (t == 0) {
    dev::mbarrier_init(&q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      dev::mbarrier_init(&k_full[s], 1);
      dev::mbarrier_init(&v_full[s], 1);
      dev::mbarrier_init(&kv_empty[s], kGroup);
    }
    dev::fence_barrier_init();
  }
  __syncthreads();

  if (t < kGroup) {  // the producer warpgroup: one thread issues every copy
    if (t != 0) return;
    const int row0 = b * p.T;
    const int qcol = h * HS, kcol = (p.NH + kvh) * HS, vcol = (p.NH + p.KV + kvh) * HS;
    dev::mbarrier_arrive_expect_tx(&q_full, L::kTileBytes);
    for (int j = 0; j < L::kHalves; ++j)
      dev::tma_load_2d(smem + L::kQ + j * kHalfBytes, &qkv_map, qcol + 64 * j,
                       row0 + qt * kBlockM, &q_full);
    for (int i = 0; i < n_ktiles; ++i) {
      const int s = i % kStages;
      const unsigned phase = static_cast<unsigned>(i / kStages) & 1u;
      dev::mbarrier_wait(&kv_empty[s], phase ^ 1u);
      const int krow = row0 + i * kBlockN;
      dev::mbarrier_arrive_expect_tx(&k_full[s], L::kTileBytes);
      for (int j = 0; j < L::kHalves; ++j)
        dev::tma_load_2d(smem + L::kK + s * L::kTileBytes + j * kHalfBytes, &qkv_map,
                         kcol + 64 * j, krow, &k_full[s]);
      dev::mbarrier_arrive_expect_tx(&v_full[s], L::kTileBytes);
      for (int j = 0; j < L::kHalves; ++j)
        dev::tma_load_2d(smem + L::kV + s * L::kTileBytes + j * kHalfBytes, &qkv_map,
                         vcol + 64 * j, krow, &v_full[s]);
    }
    return;
  }

  // The consumer warpgroup: 64 query rows, warp w rows 16 w .. 16 w + 15.
  const int ct = t - kGroup, w = ct / 32, lane = ct % 32;
  float o[HS / 2];
#pragma unroll
  for (float& x : o) x = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // l: this thread's partial sums
  const int q_row[2] = {qt * kBlockM + 16 * w + lane / 4, qt * kBlockM + 16 * w + lane / 4 + 8};
  dev::mbarrier_wait(&q_full, 0);
  for (int i = 0; i < n_ktiles; ++i) {
    const int s = i % kStages;
    const unsigned phase = static_cast<unsigned>(i / kStages) & 1u;
    unsigned char* k_tile = smem + L::kK + s * L::kTileBytes;
    unsigned char* v_tile = smem + L::kV + s * L::kTileBytes;

    // S = Q K^T: k16 steps of 32 bytes along each 128-byte swizzled row.
    float sc[kBlockN / 2];
    dev::mbarrier_wait(&k_full[s], phase);
    dev::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < HS / 16; ++ks) {
      const int off = (ks / 4) * kHalfBytes + (ks % 4) * 32;
      const uint64_t da = dev::wgmma_descriptor(smem + L::kQ + off, dev::WgmmaSwizzle::b128, 16, 1024);
      const uint64_t db = dev::wgmma_descriptor(k_tile + off, dev::WgmmaSwizzle::b128, 16, 1024);
      dev::wgmma_ss<kBlockN, false, false>(sc, da, db, ks > 0);
    }
    dev::wgmma_commit_group();
    dev::wgmma_wait_group<0>();
    dev::wgmma_fence_operands(sc);

    // The online softmax, row r = 0, 1 of this thread (elements i with
    // (i / 2) % 2 == r); the causal mask on the diagonal tile.
    const bool diagonal = i == qt;
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < kBlockN / 2; ++e) {
        if ((e / 2) % 2 != r) continue;
        const int key = i * kBlockN + 8 * (e / 4) + 2 * (lane % 4) + e % 2;
        sc[e] = diagonal && key > q_row[r] ? -INFINITY : sc[e] * p.scale_log2;
        mx = fmaxf(mx, sc[e]);
      }
      const float m_new = fmaxf(m[r], quad_max(mx));  // finite: key 0 <= every query
      corr[r] = exp2f(m[r] - m_new);
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int e = 0; e < kBlockN / 2; ++e) {
        if ((e / 2) % 2 != r) continue;
        sc[e] = exp2f(sc[e] - m_new);
        sum += sc[e];
      }
      l[r] = l[r] * corr[r] + sum;
    }
#pragma unroll
    for (int e = 0; e < HS / 2; ++e) o[e] *= corr[(e / 2) % 2];
    // P as the A operand of four k16 steps: step kk covers keys 16 kk ..
    // 16 kk + 15, i.e. accumulator elements 8 kk .. 8 kk + 7 (mma.sync's A
    // layout: rows g, g + 8 by columns 2t, 2t + 8).
    uint32_t pa[kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kk][r] = dev::pack_bf16(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);

    // O += P V: V's rows are keys (MN-major B): a k16 step is 16 rows
    // (2048 bytes) down, SBO 8 rows, LBO the next 64 columns of the head.
    dev::mbarrier_wait(&v_full[s], phase);
    dev::wgmma_fence_operands(o);
    dev::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint64_t db = dev::wgmma_descriptor(v_tile + kk * 2048, dev::WgmmaSwizzle::b128,
                                                kHalfBytes, 1024);
      dev::wgmma_rs<HS, true>(o, pa[kk], db, true);
    }
    dev::wgmma_commit_group();
    dev::wgmma_wait_group<0>();
    dev::wgmma_fence_operands(o);
    dev::mbarrier_arrive(&kv_empty[s]);
  }

  const int C = p.NH * HS;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(l[r]);
    if (q_row[r] >= p.T) continue;
    const int64_t row = int64_t{b} * p.T + q_row[r];
    if (lane % 4 == 0) lse[(int64_t{b} * p.NH + h) * p.T + q_row[r]] = (m[r] + log2f(total)) * kLn2;
    const float inv = 1.f / total;
#pragma unroll
    for (int e = 0; e < HS / 2; e += 2) {
      if ((e / 2) % 2 != r) continue;
      const int col = 8 * (e / 4) + 2 * (lane % 4);
      *reinterpret_cast<__nv_bfloat162*>(out + row * C + h * HS + col) =
          __floats2bfloat162_rn(o[e] * inv, o[e + 1] * inv);
    }
  }
}

template <int HS>
void launch_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int KV,
                    cudaStream_t stream) {
  TileMapShape shape;
  shape.rank = 2;
  shape.dims[0] = static_cast<uint64_t>(NH + 2 * KV) * HS;
  shape.dims[1] = static_cast<uint64_t>(B) * T;
  shape.strides[0] = shape.dims[0] * sizeof(bf16);
  shape.box[0] = 64;
  shape.box[1] = 64;
  const CUtensorMap map =
      encode_tile_map(qkv, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, shape, TileSwizzle::b128);
  const int n_qtiles = (T + kBlockM - 1) / kBlockM;
  const Params p{T, NH, KV, n_qtiles, kLog2e / std::sqrt(static_cast<float>(HS))};
  const size_t smem = Layout<HS>::kBytes;
  CUDA_CHECK(cudaFuncSetAttribute(attention_forward_sm90_kernel<HS>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  dev::launch(attention_forward_sm90_kernel<HS>,
              {dim3(static_cast<unsigned>(n_qtiles), static_cast<unsigned>(NH),
                    static_cast<unsigned>(B)),
               kThreads, smem, stream},
              map, out, lse, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_sm90_supported(int hs) { return hs == 64 || hs == 128; }

void attention_forward_sm90(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int KV,
                            int hs, cudaStream_t stream) {
  GT_CHECK(attention_sm90_supported(hs), "attention_forward_sm90: head size ", hs,
           " (the sm_90 kernels take 64 and 128)");
  GT_CHECK(KV > 0 && NH % KV == 0, "attention_forward_sm90: ", KV,
           " key/value heads do not divide ", NH, " query heads");
  if (B == 0 || T == 0) return;
  if (hs == 64) launch_forward<64>(out, lse, qkv, B, T, NH, KV, stream);
  else launch_forward<128>(out, lse, qkv, B, T, NH, KV, stream);
}

}  // namespace gt::cuda
