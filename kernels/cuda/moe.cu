// Mixture-of-experts kernels and launchers (see moe.cuh). First versions
// written for correctness, determinism and no host round trip; what each
// costs and what a faster one would do is said where it matters (the
// dispatch plan's capacity pass, the grouped GEMM).
#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/moe.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / dev::kWarpSize;
// Grid-stride loops over rows: at most this many blocks.
constexpr int64_t kMaxRowBlocks = 8192;

unsigned warp_row_blocks(int64_t R) {
  return static_cast<unsigned>((R + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
unsigned block_row_blocks(int64_t R) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(R, kMaxRowBlocks)));
}

// ---- router -------------------------------------------------------------------

// The selection order of the top-k: a larger score first, equal scores to the
// lower expert index. A strict total order on (score, index) for non-NaN
// scores, so the j-th pick is the best of those ordered after pick j-1 and
// nothing has to remember which experts were taken.
__device__ __forceinline__ bool before(float sa, int a, float sb, int b) {
  return sa > sb || (sa == sb && a < b);
}

// One warp per row: softmax, log-sum-exp, then k rounds of a warp arg-max.
// Each lane scans its experts in ascending order and the shuffle reduction
// compares (score, index) pairs, so the result does not depend on the
// reduction tree. A row of NaN logits selects arbitrary in-range experts.
__global__ void router_forward_kernel(float* probs, float* lse, int32_t* topk_expert,
                                      float* topk_weight, const float* logits, const float* bias,
                                      int64_t R, int E, int k) {
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t r =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarpSize;
  if (r >= R) return;  // the whole warp: r is per warp
  const float* x = logits + r * E;
  float* p = probs + r * E;
  float m = -INFINITY;
  for (int c = lane; c < E; c += dev::kWarpSize) m = fmaxf(m, x[c]);
  m = dev::warp_max(m);
  float s = 0.f;
  for (int c = lane; c < E; c += dev::kWarpSize) s += expf(x[c] - m);
  s = dev::warp_sum(s);
  for (int c = lane; c < E; c += dev::kWarpSize) p[c] = expf(x[c] - m) / s;
  if (lane == 0) lse[r] = m + logf(s);

  int32_t* te = topk_expert + r * k;
  float* tw = topk_weight + r * k;
  float prev_s = 0.f, wsum = 0.f;
  int prev_e = -1;
  for (int j = 0; j < k; ++j) {
    // A lane reads back only the probs it wrote itself.
    float best_s = 0.f, best_p = 0.f;
    int best_e = INT_MAX;  // none yet
    for (int c = lane; c < E; c += dev::kWarpSize) {
      const float sc = p[c] + (bias ? bias[c] : 0.f);
      if (prev_e >= 0 && !before(prev_s, prev_e, sc, c)) continue;  // taken already
      if (best_e == INT_MAX || before(sc, c, best_s, best_e)) {
        best_s = sc;
        best_p = p[c];
        best_e = c;
      }
    }
    for (int o = dev::kWarpSize / 2; o > 0; o >>= 1) {
      const float os = __shfl_xor_sync(dev::kFullMask, best_s, o);
      const float op = __shfl_xor_sync(dev::kFullMask, best_p, o);
      const int oe = __shfl_xor_sync(dev::kFullMask, best_e, o);
      if (oe != INT_MAX && (best_e == INT_MAX || before(os, oe, best_s, best_e))) {
        best_s = os;
        best_p = op;
        best_e = oe;
      }
    }
    if (best_e == INT_MAX) best_e = j;  // NaN scores only: keep the index in range
    prev_s = best_s;
    prev_e = best_e;
    wsum += best_p;  // in pick order, the same on every lane
    if (lane == 0) {
      te[j] = best_e;
      tw[j] = best_p;  // renormalised below, by the same lane
    }
  }
  if (lane == 0)
    for (int j = 0; j < k; ++j) tw[j] = tw[j] / wsum;
}

// One warp per row. With S = sum_j p[e_j] and w_j = p[e_j] / S:
//   dp[e]   = dprob_shared[e] + sum over j with e_j = e of (dw_j - sum_i dw_i w_i) / S
//   dlogits = p (dp - sum_e p dp) + z_grad 2 lse p
__global__ void router_backward_kernel(float* dlogits, const float* dtopk_weight,
                                       const float* probs, const float* lse,
                                       const int32_t* topk_expert, const float* topk_weight,
                                       const float* dprob_shared, float z_grad, int64_t R, int E,
                                       int k) {
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t r =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarpSize;
  if (r >= R) return;
  const float* p = probs + r * E;
  const float* dw = dtopk_weight + r * k;
  const int32_t* te = topk_expert + r * k;
  const float* tw = topk_weight + r * k;
  float S = 0.f, g = 0.f;
  for (int j = 0; j < k; ++j) {  // k is small: every lane, serially, in j order
    S += p[te[j]];
    g += dw[j] * tw[j];
  }
  auto dp_of = [&](int c) {
    float d = dprob_shared ? dprob_shared[c] : 0.f;
    for (int j = 0; j < k; ++j)
      if (te[j] == c) d += (dw[j] - g) / S;
    return d;
  };
  float dot = 0.f;
  for (int c = lane; c < E; c += dev::kWarpSize) dot += p[c] * dp_of(c);
  dot = dev::warp_sum(dot);
  const float zl = 2.f * z_grad * lse[r];
  float* dl = dlogits + r * E;
  for (int c = lane; c < E; c += dev::kWarpSize) dl[c] = p[c] * (dp_of(c) - dot) + zl * p[c];
}

// Router statistics in two fixed-order passes (deterministic, no atomics):
// chunk k of rows -> partial[k] = (counts (E), prob sums (E)); then one block
// adds the chunks in order. The chunking depends on R only.
constexpr int64_t kStatsRowsPerChunk = 256;
constexpr int64_t kStatsMaxChunks = 256;
int64_t stats_chunks(int64_t R) {
  return std::max<int64_t>(
      1, std::min<int64_t>(kStatsMaxChunks, (R + kStatsRowsPerChunk - 1) / kStatsRowsPerChunk));
}

__global__ void router_stats_partial_kernel(float* partial, const float* probs,
                                            const int32_t* topk_expert, int64_t R, int E, int k,
                                            int64_t rows_per_chunk) {
  const int64_t ch = blockIdx.x;
  const int64_t r0 = ch * rows_per_chunk, r1 = std::min<int64_t>(R, r0 + rows_per_chunk);
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    float cnt = 0.f, ps = 0.f;  // cnt: exact integers (< 2^24 per chunk)
    for (int64_t r = r0; r < r1; ++r) {
      ps += probs[r * E + e];
      for (int j = 0; j < k; ++j) cnt += topk_expert[r * k + j] == e ? 1.f : 0.f;
    }
    partial[ch * 2 * E + e] = cnt;
    partial[ch * 2 * E + E + e] = ps;
  }
}

__global__ void router_stats_reduce_kernel(float* counts, float* prob_sums, const float* partial,
                                           int64_t chunks, int E) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    float cnt = 0.f, ps = 0.f;
    for (int64_t ch = 0; ch < chunks; ++ch) {  // fixed order
      cnt += partial[ch * 2 * E + e];
      ps += partial[ch * 2 * E + E + e];
    }
    counts[e] += cnt;
    prob_sums[e] += ps;
  }
}

// ---- dispatch plan ------------------------------------------------------------
//
// A stable counting sort of the N = R k slots by expert, in O(N) work over
// many blocks (chunks of kPlanChunk slots, one block each):
//   1. count: each chunk ranks its slots among the same expert's earlier
//      slots in the chunk (kept in `positions` for step 3) and counts them
//      per expert (chunk_counts (chunks, E));
//   2. scan (one block): chunk_base[c][e] = offsets0[e] + the expert's slots in
//      chunks before c, each expert's column summed in chunk order (O(chunks)
//      per thread), offsets0 the exclusive scan of the totals (O(E), serial);
//   3. place: positions[s] = chunk_base[chunk][e] + its rank in the chunk.
// Dropless, that is the plan (offsets0 = offsets). With a capacity the slots
// are also listed in sorted order (sorted_slot), and
//   4. capacity (one block per expert): an expert with more than `capacity`
//      slots keeps those with the `capacity` largest weights, found as the
//      capacity-th largest weight by a 32-step bitwise search on the
//      order-preserving bit pattern (O(32 n_e) per expert: no sort), slots
//      equal to it kept in row order while capacity lasts (so the later row
//      is dropped first); the kept ones are numbered in row order;
//   5. offsets (one thread): the exclusive scan of the kept counts, O(E);
//   6. final: positions[s] = offsets[e] + its number among the kept, or -1.
// Limits: E <= kMoeMaxExperts (step 1's shared table), N < 2^31. Step 2 runs
// on one block: O(N / kPlanChunk) serial steps per expert, fine for the
// R k of a micro-batch (1M slots: 4096 steps); step 4's search reads an
// expert's weights 33 times, which a per-expert radix sort would not.
// An expert index outside [0, E) gives its slot position -1 (dropped): the
// device cannot throw, and it must not write out of bounds.
constexpr int kPlanChunk = kThreads;
constexpr int kPlanWarps = kPlanChunk / dev::kWarpSize;

int64_t plan_chunks(int64_t N) { return std::max<int64_t>(1, (N + kPlanChunk - 1) / kPlanChunk); }

struct PlanScratch {
  int32_t *chunk_base, *offsets0, *kept, *sorted_slot, *kept_rank;
};
PlanScratch plan_scratch(int32_t* s, int64_t N, int E) {
  PlanScratch p;
  p.chunk_base = s;
  s += plan_chunks(N) * E;
  p.offsets0 = s;
  s += E + 1;
  p.kept = s;
  s += E;
  p.sorted_slot = s;
  s += N;
  p.kept_rank = s;
  return p;
}

__device__ __forceinline__ int valid_expert(int32_t e, int E) { return e >= 0 && e < E ? e : -1; }

// Step 1. Dynamic shared memory: kPlanWarps x E ints.
__global__ void plan_count_kernel(int32_t* rank_out, int32_t* chunk_counts,
                                  const int32_t* topk_expert, int64_t N, int E) {
  GT_SHARED(int, ex, [kPlanChunk]);
  int* cnt = dev::dynamic_shared_memory<int>();  // (warps, E)
  const int t = threadIdx.x, lane = t % dev::kWarpSize, w = t / dev::kWarpSize;
  const int64_t s = static_cast<int64_t>(blockIdx.x) * kPlanChunk + t;
  const int e = s < N ? valid_expert(topk_expert[s], E) : -1;
  ex[t] = e;
  for (int i = t; i < kPlanWarps * E; i += blockDim.x) cnt[i] = 0;
  __syncthreads();
  // Rank among the same expert's earlier slots of this warp; the last of them
  // records the warp's count.
  const int base = w * dev::kWarpSize;
  int rank = 0;
  bool last = true;
  for (int i = 0; i < lane; ++i) rank += ex[base + i] == e;
  for (int i = lane + 1; i < dev::kWarpSize; ++i) last = last && ex[base + i] != e;
  if (e >= 0 && last) cnt[w * E + e] = rank + 1;
  __syncthreads();
  if (s < N && e >= 0) {
    for (int v = 0; v < w; ++v) rank += cnt[v * E + e];
    rank_out[s] = rank;
  }
  for (int x = t; x < E; x += blockDim.x) {
    int total = 0;
    for (int v = 0; v < kPlanWarps; ++v) total += cnt[v * E + x];
    chunk_counts[blockIdx.x * static_cast<int64_t>(E) + x] = total;
  }
}

// Step 2, one block. chunk_base holds the chunk counts on entry.
__global__ void plan_scan_kernel(int32_t* chunk_base, int32_t* offsets0, int32_t* totals,
                                 int64_t chunks, int E) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int v = chunk_base[c * E + e];
      chunk_base[c * E + e] = run;
      run += v;
    }
    totals[e] = run;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int e = 0; e < E; ++e) {
      offsets0[e] = run;
      run += totals[e];
    }
    offsets0[E] = run;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    for (int64_t c = 0; c < chunks; ++c) chunk_base[c * E + e] += offsets0[e];
}

// Step 3. sorted_slot may be nullptr (dropless).
__global__ void plan_place_kernel(int32_t* positions, int32_t* sorted_slot,
                                  const int32_t* chunk_base, const int32_t* topk_expert, int64_t N,
                                  int E) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * kPlanChunk + threadIdx.x;
  if (s >= N) return;
  const int e = valid_expert(topk_expert[s], E);
  if (e < 0) {
    positions[s] = -1;
    return;
  }
  const int pos = chunk_base[blockIdx.x * static_cast<int64_t>(E) + e] + positions[s];
  positions[s] = pos;
  if (sorted_slot) sorted_slot[pos] = static_cast<int32_t>(s);
}

// A float's bits mapped so that unsigned order is the float order (negative
// values reversed below the positive ones). As on the CPU, NaN ranks lowest
// (dropped first) and -0 equals +0.
__device__ __forceinline__ uint32_t order_key(float x) {
  if (isnan(x)) x = -INFINITY;
  if (x == 0.f) x = 0.f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum over the block (blockDim.x a multiple of 32, <= 1024),
// `total` the block's sum; every thread must call it.
__device__ int block_exclusive_scan(int v, int& total) {
  GT_SHARED(int, warp_total, [dev::kWarpSize]);
  const int lane = threadIdx.x % dev::kWarpSize, warp = threadIdx.x / dev::kWarpSize;
  const int n_warps = blockDim.x / dev::kWarpSize;
  int inc = v;
  for (int o = 1; o < dev::kWarpSize; o <<= 1) {
    const int y = __shfl_up_sync(dev::kFullMask, inc, o);
    if (lane >= o) inc += y;
  }
  __syncthreads();  // a previous call may still be reading warp_total
  if (lane == dev::kWarpSize - 1) warp_total[warp] = inc;
  __syncthreads();
  int before_warp = 0;
  total = 0;
  for (int i = 0; i < n_warps; ++i) {
    if (i < warp) before_warp += warp_total[i];
    total += warp_total[i];
  }
  return before_warp + inc - v;
}

// Step 4, one block per expert: kept_rank[p] for the expert's sorted
// positions p = its number among the kept (row order), or -1; kept[e].
__global__ void plan_capacity_kernel(int32_t* kept_rank, int32_t* kept, const int32_t* offsets0,
                                     const int32_t* sorted_slot, const float* topk_weight,
                                     int capacity) {
  const int e = blockIdx.x;
  const int b = offsets0[e], n = offsets0[e + 1] - b;
  if (n <= capacity) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) kept_rank[b + i] = i;
    if (threadIdx.x == 0) kept[e] = n;
    return;
  }
  auto key = [&](int i) { return order_key(topk_weight[sorted_slot[b + i]]); };
  // thr = the largest key with at least `capacity` keys >= it: the
  // capacity-th largest (the predicate only weakens as thr grows).
  uint32_t thr = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = thr | (1u << bit);
    int c = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) c += key(i) >= cand;
    if (dev::block_sum(c) >= capacity) thr = cand;
  }
  int greater = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) greater += key(i) > thr;
  const int equal_kept = capacity - dev::block_sum(greater);  // >= 1
  // In row order (the group's order), tile by tile: the first equal_kept
  // slots equal to thr are kept, with every slot above it.
  int eq_before = 0, kept_before = 0;
  for (int i0 = 0; i0 < n; i0 += blockDim.x) {
    const int i = i0 + threadIdx.x;
    const uint32_t kv = i < n ? key(i) : 0u;
    const bool eq = i < n && kv == thr;
    int eq_tile = 0;
    const int eq_rank = eq_before + block_exclusive_scan(eq ? 1 : 0, eq_tile);
    const bool keep = i < n && (kv > thr || (eq && eq_rank < equal_kept));
    int kept_tile = 0;
    const int kr = kept_before + block_exclusive_scan(keep ? 1 : 0, kept_tile);
    if (i < n) kept_rank[b + i] = keep ? kr : -1;
    eq_before += eq_tile;
    kept_before += kept_tile;
  }
  if (threadIdx.x == 0) kept[e] = capacity;
}

// Step 5, one thread.
__global__ void plan_offsets_kernel(int32_t* offsets, const int32_t* kept, int E) {
  if (threadIdx.x != 0) return;
  int run = 0;
  for (int e = 0; e < E; ++e) {
    offsets[e] = run;
    run += kept[e];
  }
  offsets[E] = run;
}

// Step 6.
__global__ void plan_final_kernel(int32_t* positions, const int32_t* kept_rank,
                                  const int32_t* offsets, const int32_t* topk_expert, int64_t N) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * kPlanChunk + threadIdx.x;
  if (s >= N) return;
  const int p0 = positions[s];
  if (p0 < 0) return;  // an invalid expert: dropped already
  const int kr = kept_rank[p0];
  positions[s] = kr < 0 ? -1 : offsets[topk_expert[s]] + kr;
}

// ---- permute and combine ------------------------------------------------------
// One block per row r (grid-stride), threads over the columns; the k slots in
// order j, so every sum has one fixed order. No atomics: the backward of
// permute and the combine gather their row's slots.
constexpr int kRowThreads = 128;

template <typename T>
__global__ void permute_kernel(T* out, const T* inp, const int32_t* positions, int64_t R, int k,
                               int64_t C) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x)
    for (int j = 0; j < k; ++j) {
      const int64_t pos = positions[r * k + j];
      if (pos < 0) continue;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[pos * C + c] = inp[r * C + c];
    }
}

template <typename TD, typename TG>
__global__ void permute_backward_kernel(TD* dinp, const TG* dout, const int32_t* positions,
                                        int64_t R, int k, int64_t C) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x)
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.f;
      for (int j = 0; j < k; ++j) {
        const int64_t pos = positions[r * k + j];
        if (pos >= 0) acc += dev::to_float(dout[pos * C + c]);
      }
      dinp[r * C + c] = dev::from_float<TD>(acc);
    }
}

template <typename TO, typename TE>
__global__ void combine_forward_kernel(TO* out, const TE* expert_out, const int32_t* positions,
                                       const float* topk_weight, int64_t R, int k, int64_t C) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x)
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.f;
      for (int j = 0; j < k; ++j) {
        const int64_t pos = positions[r * k + j];
        if (pos >= 0) acc += topk_weight[r * k + j] * dev::to_float(expert_out[pos * C + c]);
      }
      out[r * C + c] = dev::from_float<TO>(acc);
    }
}

// dtopk_weight by block_sum (a fixed tree): deterministic.
template <typename TX, typename TG, typename TE>
__global__ void combine_backward_kernel(TX* dexpert_out, float* dtopk_weight, const TG* dout,
                                        const TE* expert_out, const int32_t* positions,
                                        const float* topk_weight, int64_t R, int k, int64_t C) {
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x)
    for (int j = 0; j < k; ++j) {
      const int64_t pos = positions[r * k + j];  // the same for the whole block
      if (pos < 0) {
        if (threadIdx.x == 0) dtopk_weight[r * k + j] = 0.f;
        continue;
      }
      const float w = topk_weight[r * k + j];
      float dot = 0.f;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float dy = dev::to_float(dout[r * C + c]);
        dexpert_out[pos * C + c] = dev::from_float<TX>(w * dy);
        dot += dy * dev::to_float(expert_out[pos * C + c]);
      }
      dot = dev::block_sum(dot);
      if (threadIdx.x == 0) dtopk_weight[r * k + j] = dot;
    }
}

// ---- grouped GEMM -------------------------------------------------------------
//
// One launch for all groups, the group sizes read from `offsets` on the
// device. The forward and dinp run a grid of (row tiles, column tiles) whose
// row tiles are numbered group by group: tile t belongs to the group g where
// the running sum of ceil(n_g / kBM) passes t (each CTA walks the G+1 offsets:
// O(G) loads, cached), so a CTA never straddles two groups and every group
// boundary is handled by masking the tile's rows past the group's end. The
// host sizes the grid by the bound ceil(N / kBM) + G >= sum_g ceil(n_g / kBM);
// the tiles past the last group exit at once. dweight runs one CTA per
// (group, OC tile, C tile) looping over the group's rows in order inside the
// CTA: fp32, deterministic, no atomics.
//
// The math is SIMT fp32 on shared-memory tiles (64 x 64 outputs per CTA, 4 x 4
// per thread, k steps of 16), bf16 converted on load: about a tenth of what
// the tensor cores give on Hopper for bf16, and no better than SIMT for fp32.
// A faster version would keep this tile->group mapping and feed mma.sync
// m16n8k16 (mma_sm80.cuh) from ldmatrix-loaded, cp.async double-buffered
// bf16 tiles (or wgmma from TMA on sm_90), as attention_tc.cu does for
// attention; dweight would split the rows into a fixed number of slices
// reduced in order afterwards to fill the chip when G is small.
constexpr int kBM = 64, kBN = 64, kBK = 16, kGemmThreads = 256;
constexpr int kTM = 4, kTN = 4;  // outputs per thread: rows ty + 16 i, cols tx + 16 j
static_assert(kBM * kBN == kGemmThreads * kTM * kTN, "one 4 x 4 patch per thread");
static_assert(kBM * kBK == 4 * kGemmThreads && kBN * kBK == 4 * kGemmThreads,
              "four loads per thread per operand tile");

// acc (kTM x kTN, the thread's patch) += A (m_valid x K) @ B (K x n_valid),
// A(m, k) = AK ? a[m lda + k] : a[k lda + m], B(k, n) = BK ? b[n ldb + k] :
// b[k ldb + n]; rows/columns outside the valid ranges read as 0. As, Bs:
// shared (kBK, kBM + 1) and (kBK, kBN + 1) floats. Every thread calls it.
template <bool AK, bool BK, typename T>
__device__ void tile_product(float (&acc)[kTM][kTN], const T* a, int64_t lda, int m_valid,
                             const T* b, int64_t ldb, int n_valid, int64_t K, float* As,
                             float* Bs) {
  constexpr int lda_s = kBM + 1, ldb_s = kBN + 1;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    for (int i = 0; i < 4; ++i) {
      const int idx = threadIdx.x + kGemmThreads * i;
      {
        const int m = AK ? idx / kBK : idx % kBM, kk = AK ? idx % kBK : idx / kBM;
        const int64_t kg = k0 + kk;
        float v = 0.f;
        if (m < m_valid && kg < K) v = dev::to_float(AK ? a[m * lda + kg] : a[kg * lda + m]);
        As[kk * lda_s + m] = v;
      }
      {
        const int n = BK ? idx / kBK : idx % kBN, kk = BK ? idx % kBK : idx / kBN;
        const int64_t kg = k0 + kk;
        float v = 0.f;
        if (n < n_valid && kg < K) v = dev::to_float(BK ? b[n * ldb + kg] : b[kg * ldb + n]);
        Bs[kk * ldb_s + n] = v;
      }
    }
    __syncthreads();
    for (int kk = 0; kk < kBK; ++kk) {
      float av[kTM], bv[kTN];
      for (int i = 0; i < kTM; ++i) av[i] = As[kk * lda_s + ty + 16 * i];
      for (int j = 0; j < kTN; ++j) bv[j] = Bs[kk * ldb_s + tx + 16 * j];
      for (int i = 0; i < kTM; ++i)
        for (int j = 0; j < kTN; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();  // before the next k step overwrites the tiles
  }
}

// Row tile `tile` of the group-by-group numbering: its group, first row and
// the group's end; false past the last group.
__device__ bool find_row_tile(const int32_t* offsets, int G, int64_t tile, int& g, int64_t& row0,
                              int64_t& row_end) {
  for (g = 0; g < G; ++g) {
    const int64_t b = offsets[g], e = offsets[g + 1];
    const int64_t tiles = (e - b + kBM - 1) / kBM;
    if (tile < tiles) {
      row0 = b + tile * kBM;
      row_end = e;
      return true;
    }
    tile -= tiles;
  }
  return false;
}

// out (rows of the group, n_out) = a (rows, K) @ B_g, B_g(k, n) from
// w + g w_stride (BK: w[n ldb + k], the forward's weight^T; else w[k ldb + n],
// dinp's weight).
template <bool BK, typename T>
__global__ void grouped_rows_kernel(T* out, const T* a, const T* w, const int32_t* offsets, int G,
                                    int64_t K, int64_t n_out, int64_t ldb, int64_t w_stride) {
  GT_SHARED(float, As, [kBK * (kBM + 1)]);
  GT_SHARED(float, Bs, [kBK * (kBN + 1)]);
  int g = 0;
  int64_t row0 = 0, row_end = 0;
  if (!find_row_tile(offsets, G, blockIdx.x, g, row0, row_end)) return;  // uniform per CTA
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const int m_valid = static_cast<int>(std::min<int64_t>(kBM, row_end - row0));
  const int n_valid = static_cast<int>(std::min<int64_t>(kBN, n_out - col0));
  const T* wg = w + g * w_stride + (BK ? col0 * ldb : col0);
  float acc[kTM][kTN] = {};
  tile_product<true, BK>(acc, a + row0 * K, K, m_valid, wg, ldb, n_valid, K, As, Bs);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int i = 0; i < kTM; ++i) {
    const int m = ty + 16 * i;
    if (m >= m_valid) continue;
    for (int j = 0; j < kTN; ++j) {
      const int n = tx + 16 * j;
      if (n < n_valid) out[(row0 + m) * n_out + col0 + n] = dev::from_float<T>(acc[i][j]);
    }
  }
}

// dweight[g] (OC, C) += dout[group rows]^T @ inp[group rows]; grid (C tiles,
// OC tiles, G).
template <typename T>
__global__ void grouped_dweight_kernel(float* dweight, const T* dout, const T* inp,
                                       const int32_t* offsets, int64_t C, int64_t OC) {
  GT_SHARED(float, As, [kBK * (kBM + 1)]);
  GT_SHARED(float, Bs, [kBK * (kBN + 1)]);
  const int g = blockIdx.z;
  const int64_t b = offsets[g], n = offsets[g + 1] - b;
  if (n <= 0) return;  // an empty group adds nothing
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kBM,
                c0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int m_valid = static_cast<int>(std::min<int64_t>(kBM, OC - o0));
  const int n_valid = static_cast<int>(std::min<int64_t>(kBN, C - c0));
  float acc[kTM][kTN] = {};
  tile_product<false, false>(acc, dout + b * OC + o0, OC, m_valid, inp + b * C + c0, C, n_valid, n,
                             As, Bs);
  float* dw = dweight + g * OC * C;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int i = 0; i < kTM; ++i) {
    const int m = ty + 16 * i;
    if (m >= m_valid) continue;
    for (int j = 0; j < kTN; ++j) {
      const int nn = tx + 16 * j;
      if (nn < n_valid) dw[(o0 + m) * C + c0 + nn] += acc[i][j];
    }
  }
}

unsigned row_tile_bound(int64_t N, int G) {
  return static_cast<unsigned>(std::max<int64_t>(1, (N + kBM - 1) / kBM + G));
}

// ---- load balance ---------------------------------------------------------------

// One thread: E terms summed in order, in double, rounded once.
__global__ void load_balance_kernel(float* aux, float* dprob, const float* counts,
                                    const float* prob_sums, int E, double rows, float grad_coef) {
  if (threadIdx.x != 0) return;
  double s = 0.0;
  for (int e = 0; e < E; ++e) {
    s += (static_cast<double>(counts[e]) / rows) * (static_cast<double>(prob_sums[e]) / rows);
    dprob[e] = static_cast<float>(static_cast<double>(grad_coef) * E * counts[e] / (rows * rows));
  }
  aux[0] = static_cast<float>(E * s);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------

void moe_router_forward(float* probs, float* lse, int32_t* topk_expert, float* topk_weight,
                        const float* logits, const float* bias, int64_t R, int E, int k,
                        cudaStream_t stream) {
  if (R == 0) return;
  dev::NvtxRange range("moe_router_forward");
  dev::launch(router_forward_kernel, {warp_row_blocks(R), kThreads, 0, stream}, probs, lse,
              topk_expert, topk_weight, logits, bias, R, E, k);
  CUDA_CHECK_LAUNCH();
}

void moe_router_backward(float* dlogits, const float* dtopk_weight, const float* probs,
                         const float* lse, const int32_t* topk_expert, const float* topk_weight,
                         const float* dprob_shared, float z_grad, int64_t R, int E, int k,
                         cudaStream_t stream) {
  if (R == 0) return;
  dev::NvtxRange range("moe_router_backward");
  dev::launch(router_backward_kernel, {warp_row_blocks(R), kThreads, 0, stream}, dlogits,
              dtopk_weight, probs, lse, topk_expert, topk_weight, dprob_shared, z_grad, R, E, k);
  CUDA_CHECK_LAUNCH();
}

int64_t moe_router_stats_scratch_floats(int64_t R, int E) { return stats_chunks(R) * 2 * E; }

void moe_router_stats(float* counts, float* prob_sums, const float* probs,
                      const int32_t* topk_expert, int64_t R, int E, int k, float* scratch,
                      cudaStream_t stream) {
  if (R == 0 || E == 0) return;
  dev::NvtxRange range("moe_router_stats");
  const int64_t chunks = stats_chunks(R);
  const int64_t rows_per_chunk = (R + chunks - 1) / chunks;
  const unsigned threads =
      static_cast<unsigned>(std::min(kThreads, std::max(dev::kWarpSize, (E + 31) / 32 * 32)));
  dev::launch(router_stats_partial_kernel, {static_cast<unsigned>(chunks), threads, 0, stream},
              scratch, probs, topk_expert, R, E, k, rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  dev::launch(router_stats_reduce_kernel, {1, threads, 0, stream}, counts, prob_sums, scratch,
              chunks, E);
  CUDA_CHECK_LAUNCH();
}

int64_t moe_dispatch_plan_scratch_ints(int64_t N, int E) {
  return plan_chunks(N) * E + 2 * static_cast<int64_t>(E) + 1 + 2 * N;
}

void moe_dispatch_plan(int32_t* positions, int32_t* offsets, const int32_t* topk_expert,
                       const float* topk_weight, int64_t R, int E, int k, int64_t capacity,
                       int32_t* scratch, cudaStream_t stream) {
  dev::NvtxRange range("moe_dispatch_plan");
  const int64_t N = R * k, chunks = plan_chunks(N);
  const PlanScratch sc = plan_scratch(scratch, N, E);
  // Capacity no smaller than N can drop nothing: the dropless plan.
  const bool capped = capacity > 0 && capacity < N;
  int32_t* offsets0 = capped ? sc.offsets0 : offsets;
  const unsigned grid = static_cast<unsigned>(chunks);
  if (N > 0) {
    dev::launch(plan_count_kernel,
                {grid, kPlanChunk, sizeof(int) * kPlanWarps * static_cast<size_t>(E), stream},
                positions, sc.chunk_base, topk_expert, N, E);
    CUDA_CHECK_LAUNCH();
  }
  // Runs for N = 0 too: the offsets are assigned (all 0).
  dev::launch(plan_scan_kernel, {1, kThreads, 0, stream}, sc.chunk_base, offsets0, sc.kept,
              N > 0 ? chunks : 0, E);
  CUDA_CHECK_LAUNCH();
  if (N == 0) return;
  dev::launch(plan_place_kernel, {grid, kPlanChunk, 0, stream}, positions,
              capped ? sc.sorted_slot : nullptr, sc.chunk_base, topk_expert, N, E);
  CUDA_CHECK_LAUNCH();
  if (!capped) return;
  dev::launch(plan_capacity_kernel, {static_cast<unsigned>(E), kThreads, 0, stream}, sc.kept_rank,
              sc.kept, sc.offsets0, sc.sorted_slot, topk_weight, static_cast<int>(capacity));
  CUDA_CHECK_LAUNCH();
  dev::launch(plan_offsets_kernel, {1, dev::kWarpSize, 0, stream}, offsets, sc.kept, E);
  CUDA_CHECK_LAUNCH();
  dev::launch(plan_final_kernel, {grid, kPlanChunk, 0, stream}, positions, sc.kept_rank, offsets,
              topk_expert, N);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void moe_permute(T* out, const T* inp, const int32_t* positions, int64_t R, int k, int64_t C,
                 cudaStream_t stream) {
  if (R * k * C == 0) return;
  dev::NvtxRange range("moe_permute");
  dev::launch(permute_kernel<T>, {block_row_blocks(R), kRowThreads, 0, stream}, out, inp,
              positions, R, k, C);
  CUDA_CHECK_LAUNCH();
}

template <typename TD, typename TG>
void moe_permute_backward(TD* dinp, const TG* dout, const int32_t* positions, int64_t R, int k,
                          int64_t C, cudaStream_t stream) {
  if (R * C == 0) return;
  dev::NvtxRange range("moe_permute_backward");
  dev::launch(permute_backward_kernel<TD, TG>, {block_row_blocks(R), kRowThreads, 0, stream}, dinp,
              dout, positions, R, k, C);
  CUDA_CHECK_LAUNCH();
}

template <typename TO, typename TE>
void moe_combine_forward(TO* out, const TE* expert_out, const int32_t* positions,
                         const float* topk_weight, int64_t R, int k, int64_t C,
                         cudaStream_t stream) {
  if (R * C == 0) return;
  dev::NvtxRange range("moe_combine_forward");
  dev::launch(combine_forward_kernel<TO, TE>, {block_row_blocks(R), kRowThreads, 0, stream}, out,
              expert_out, positions, topk_weight, R, k, C);
  CUDA_CHECK_LAUNCH();
}

template <typename TX, typename TG, typename TE>
void moe_combine_backward(TX* dexpert_out, float* dtopk_weight, const TG* dout,
                          const TE* expert_out, const int32_t* positions, const float* topk_weight,
                          int64_t R, int k, int64_t C, cudaStream_t stream) {
  if (R * k == 0) return;  // C = 0 still assigns dtopk_weight (0)
  dev::NvtxRange range("moe_combine_backward");
  dev::launch(combine_backward_kernel<TX, TG, TE>, {block_row_blocks(R), kRowThreads, 0, stream},
              dexpert_out, dtopk_weight, dout, expert_out, positions, topk_weight, R, k, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void grouped_matmul_forward(T* out, const T* inp, const T* weight, const int32_t* offsets,
                            int64_t N, int64_t C, int64_t OC, int G, cudaStream_t stream) {
  if (N == 0 || OC == 0 || G == 0) return;
  dev::NvtxRange range("grouped_matmul_forward");
  const dim3 grid(row_tile_bound(N, G), static_cast<unsigned>((OC + kBN - 1) / kBN));
  dev::launch(grouped_rows_kernel<true, T>, {grid, kGemmThreads, 0, stream}, out, inp, weight,
              offsets, G, C, OC, C, OC * C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void grouped_matmul_backward(T* dinp, float* dweight, const T* dout, const T* inp,
                             const T* weight, const int32_t* offsets, int64_t N, int64_t C,
                             int64_t OC, int G, cudaStream_t stream) {
  if (N == 0 || G == 0) return;
  dev::NvtxRange range("grouped_matmul_backward");
  if (dinp != nullptr && C > 0) {
    const dim3 grid(row_tile_bound(N, G), static_cast<unsigned>((C + kBN - 1) / kBN));
    dev::launch(grouped_rows_kernel<false, T>, {grid, kGemmThreads, 0, stream}, dinp, dout,
                weight, offsets, G, OC, C, C, OC * C);
    CUDA_CHECK_LAUNCH();
  }
  if (OC > 0 && C > 0) {
    const dim3 grid(static_cast<unsigned>((C + kBN - 1) / kBN),
                    static_cast<unsigned>((OC + kBM - 1) / kBM), static_cast<unsigned>(G));
    dev::launch(grouped_dweight_kernel<T>, {grid, kGemmThreads, 0, stream}, dweight, dout, inp,
                offsets, C, OC);
    CUDA_CHECK_LAUNCH();
  }
}

void moe_load_balance(float* aux, float* dprob, const float* counts, const float* prob_sums, int E,
                      double rows, float grad_coef, cudaStream_t stream) {
  dev::NvtxRange range("moe_load_balance");
  dev::launch(load_balance_kernel, {1, dev::kWarpSize, 0, stream}, aux, dprob, counts, prob_sums,
              E, rows, grad_coef);
  CUDA_CHECK_LAUNCH();
}

#define GT_MOE_STORAGE(T)                                                                    \
  template void moe_permute<T>(T*, const T*, const int32_t*, int64_t, int, int64_t,          \
                               cudaStream_t);                                                \
  template void grouped_matmul_forward<T>(T*, const T*, const T*, const int32_t*, int64_t,   \
                                          int64_t, int64_t, int, cudaStream_t);              \
  template void grouped_matmul_backward<T>(T*, float*, const T*, const T*, const T*,         \
                                           const int32_t*, int64_t, int64_t, int64_t, int,   \
                                           cudaStream_t);
GT_MOE_STORAGE(float)
GT_MOE_STORAGE(__nv_bfloat16)
#undef GT_MOE_STORAGE

#define GT_MOE_PAIR(A, B)                                                                     \
  template void moe_permute_backward<A, B>(A*, const B*, const int32_t*, int64_t, int, int64_t, \
                                           cudaStream_t);                                     \
  template void moe_combine_forward<A, B>(A*, const B*, const int32_t*, const float*, int64_t,  \
                                          int, int64_t, cudaStream_t);
#define GT_MOE_COMBINE_BWD(X, G, E)                                                           \
  template void moe_combine_backward<X, G, E>(X*, float*, const G*, const E*, const int32_t*, \
                                              const float*, int64_t, int, int64_t, cudaStream_t);
#define GT_MOE_TRIPLES(X, G)      \
  GT_MOE_COMBINE_BWD(X, G, float) \
  GT_MOE_COMBINE_BWD(X, G, __nv_bfloat16)
GT_MOE_PAIR(float, float)
GT_MOE_PAIR(float, __nv_bfloat16)
GT_MOE_PAIR(__nv_bfloat16, float)
GT_MOE_PAIR(__nv_bfloat16, __nv_bfloat16)
GT_MOE_TRIPLES(float, float)
GT_MOE_TRIPLES(float, __nv_bfloat16)
GT_MOE_TRIPLES(__nv_bfloat16, float)
GT_MOE_TRIPLES(__nv_bfloat16, __nv_bfloat16)
#undef GT_MOE_TRIPLES
#undef GT_MOE_COMBINE_BWD
#undef GT_MOE_PAIR

}  // namespace gt::cuda
