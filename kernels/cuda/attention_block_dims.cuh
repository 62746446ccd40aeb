// What the SIMT (attention.cu) and tensor-core (attention_tc.cu) kernels of
// attention over blocks (attention_blocks.cuh) share: the block's geometry
// as the kernels see it (extents, strides, the position offset and the
// visibility rules derived from it) and the merge of two partial results by
// their log-sum-exp. Both kernel families use 64-row tiles.
//
// Device code: include from .cu files only (after device_common.cuh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_blocks.cuh"
#include "kernels/cuda/device_common.cuh"

namespace gt::cuda::blocks {

constexpr int kTile = 64;  // queries and keys per tile, in both kernel families

// One block as its kernels see it. Strides are in elements; a view's
// innermost dimension is contiguous (attention_blocks.cuh).
struct BlockDims {
  int Tq, Tk, NH, KV, hs;
  // clamp(q_pos - k_pos, -Tq, Tk): query i sees key j iff j <= i + off.
  // Clamped, every sum below stays far inside int.
  int off;
  float scale;  // 1/sqrt(hs)
  bool vec;     // 16-byte loads are legal for q, k, v (and dout)
  int64_t q_sb, q_st, k_sb, k_st, v_sb, v_st;
  int64_t g_sb, g_st;  // dout (backward)
  int64_t o_sb, o_st;  // out (forward) or dq (backward), fp32
  int64_t dk_sb, dk_st, dv_sb, dv_st;
  int64_t l_sb, l_sh, d_sb, d_sh;  // lse, delta (B, NH, Tq)

  // The key/value head query head h reads (HF's repeat_kv).
  __device__ int kv_head(int h) const { return h / (NH / KV); }
  __host__ __device__ int q_tiles() const { return (Tq + kTile - 1) / kTile; }
  __host__ __device__ int k_tiles() const { return (Tk + kTile - 1) / kTile; }
  // The last key query row i sees; < 0: none.
  __device__ int last_key(int i) const { return min(i + off, Tk - 1); }
  // Key tiles [0, n) hold every key some row of [q0, q0 + rows) sees (the
  // last row sees the most; key 0 is seen by every row that sees any).
  __device__ int key_tiles(int q0, int rows) const {
    const int last = last_key(q0 + rows - 1);
    return last < 0 ? 0 : last / kTile + 1;
  }
  // The first query tile some row of which sees key k0 (and so every later
  // one, and every later key of the tile is seen by later rows only);
  // q_tiles() when no query sees it.
  __device__ int first_query_tile(int k0) const {
    const int first = max(0, k0 - off);
    return first >= Tq ? q_tiles() : first / kTile;
  }
  // Whether some query of the block sees key kc.
  __device__ bool key_seen(int kc) const { return kc <= Tq - 1 + off; }
  // Whether every (query, key) pair of query tile q0 and key tile k0 is
  // visible and inside the block, so that the tile needs no mask: its last
  // key is seen by its first row.
  __device__ bool tile_unmasked(int q0, int k0) const {
    return k0 + kTile - 1 <= q0 + off && k0 + kTile <= Tk && q0 + kTile <= Tq;
  }
};

// What every launcher of a block needs of its geometry (the head sizes each
// family takes are its own rule).
inline void check_block(const char* what, const AttentionBlock& blk) {
  GT_CHECK(blk.B >= 0 && blk.Tq >= 0 && blk.Tk >= 0 && blk.NH >= 1 && blk.hs >= 1, what,
           ": B = ", blk.B, ", Tq = ", blk.Tq, ", Tk = ", blk.Tk, ", NH = ", blk.NH, ", hs = ",
           blk.hs);
  GT_CHECK(blk.KV >= 1 && blk.NH % blk.KV == 0, what, ": KV = ", blk.KV,
           " key/value heads must divide NH = ", blk.NH);
  GT_CHECK(blk.q_pos >= 0 && blk.k_pos >= 0, what, ": positions must be >= 0, got q_pos ",
           blk.q_pos, " and k_pos ", blk.k_pos);
  GT_CHECK(static_cast<int64_t>(blk.B) * blk.NH <= 0x7fffffff, what, ": B*NH too large");
  GT_CHECK((blk.Tq + kTile - 1) / kTile <= 65535 && (blk.Tk + kTile - 1) / kTile <= 65535, what,
           ": Tq = ", blk.Tq, " or Tk = ", blk.Tk, " exceeds the grid");
}

// Whether rows of `v` allow 16-byte loads of n elements at every row start
// and head offset (head offsets are multiples of hs; the caller checks hs).
template <typename T>
bool rows_vec(const RowsView<T>& v, int n) {
  return dev::aligned16(v.p) && v.sb % n == 0 && v.st % n == 0;
}

// The fields every launcher fills the same way.
template <typename T>
BlockDims input_dims(const AttentionBlock& blk, const RowsView<const T>& q,
                     const RowsView<const T>& k, const RowsView<const T>& v) {
  BlockDims d{};
  d.Tq = blk.Tq;
  d.Tk = blk.Tk;
  d.NH = blk.NH;
  d.KV = blk.KV;
  d.hs = blk.hs;
  // Positions are >= 0 (check_block), so the difference cannot overflow.
  const int64_t off = blk.q_pos - blk.k_pos;
  d.off = static_cast<int>(std::clamp<int64_t>(off, -int64_t{blk.Tq}, int64_t{blk.Tk}));
  d.scale = 1.f / std::sqrt(static_cast<float>(blk.hs));
  d.q_sb = q.sb, d.q_st = q.st, d.k_sb = k.sb, d.k_st = k.st, d.v_sb = v.sb, d.v_st = v.st;
  constexpr int N = dev::Pack<T>::N;  // 16 bytes of T
  d.vec = blk.hs % N == 0 && rows_vec(q, N) && rows_vec(k, N) && rows_vec(v, N);
  return d;
}

template <typename T>
BlockDims forward_dims(const AttentionBlock& blk, const RowsView<float>& out,
                       const StatsView<float>& lse, const RowsView<const T>& q,
                       const RowsView<const T>& k, const RowsView<const T>& v) {
  BlockDims d = input_dims(blk, q, k, v);
  d.o_sb = out.sb, d.o_st = out.st, d.l_sb = lse.sb, d.l_sh = lse.sh;
  return d;
}

template <typename T>
BlockDims backward_dims(const AttentionBlock& blk, const RowsView<float>& dq,
                        const RowsView<float>& dk, const RowsView<float>& dv,
                        const RowsView<const T>& dout, const RowsView<const T>& q,
                        const RowsView<const T>& k, const RowsView<const T>& v,
                        const StatsView<const float>& lse, const StatsView<const float>& delta) {
  BlockDims d = input_dims(blk, q, k, v);
  d.g_sb = dout.sb, d.g_st = dout.st;
  d.vec = d.vec && rows_vec(dout, dev::Pack<T>::N);
  d.o_sb = dq.sb, d.o_st = dq.st;
  d.dk_sb = dk.sb, d.dk_st = dk.st, d.dv_sb = dv.sb, d.dv_st = dv.st;
  d.l_sb = lse.sb, d.l_sh = lse.sh, d.d_sb = delta.sb, d.d_sh = delta.sh;
  return d;
}

// No query of the block sees any key: the forward writes out 0 and lse -inf
// (or, accumulating, changes nothing) and the backward adds nothing.
inline bool block_fully_masked(const AttentionBlock& blk) {
  return blk.Tk == 0 || blk.q_pos + blk.Tq - 1 < blk.k_pos;
}

// ops.hpp's merge of a row's partial result (lse_old, out) with a block's
// (lse_b, out_b), for a finite lse_b: the merged lse and the weights
// e^(lse_old - lse') and e^(lse_b - lse') of the two outputs. lse_old = -inf
// is "nothing yet": weight 0 (the caller does not read the old output), and
// no -inf - -inf is ever formed.
struct Merged {
  float lse, w_old, w_new;
};
__device__ __forceinline__ Merged merge_rows(float lse_old, float lse_b) {
  if (lse_old == -INFINITY) return {lse_b, 0.f, 1.f};
  const float m = fmaxf(lse_old, lse_b);
  const float lse = m + logf(expf(lse_old - m) + expf(lse_b - m));
  return {lse, expf(lse_old - lse), expf(lse_b - lse)};
}

}  // namespace gt::cuda::blocks
