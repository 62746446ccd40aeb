// Embedding kernels and launchers (see embedding.cuh for invariants).
#include "kernels/cuda/embedding.cuh"

#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

constexpr int kFwdThreads = 256;

// One block per (b,t) row; threads stride over C (16-byte packs when vec).
__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                         const float* wpe, int T, int C, int V, bool vec) {
  constexpr int N = dev::Pack<float>::N;
  const int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % T);
  const int32_t tok = tokens[row];
  float* o = out + row * C;
  if (tok < 0 || tok >= V) {
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = __int_as_float(0x7fffffff);  // NaN
    return;
  }
  const float* e = wte + static_cast<int64_t>(tok) * C;
  const float* p = wpe + static_cast<int64_t>(t) * C;
  if (vec) {
    for (int c = threadIdx.x * N; c < C; c += blockDim.x * N) {
      const dev::Pack<float> a = dev::load_pack(e + c);
      const dev::Pack<float> b = dev::load_pack(p + c);
      dev::Pack<float> s;
#pragma unroll
      for (int k = 0; k < N; ++k) s.v[k] = a.v[k] + b.v[k];
      dev::store_pack(o + c, s);
    }
  } else {
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = e[c] + p[c];
  }
}

// ---- backward -----------------------------------------------------------------
constexpr int kBwdThreads = 256;  // = column slice width = token tile size
constexpr int kBwdWarps = kBwdThreads / dev::kWarpSize;
constexpr int kTargetBlocks = 1024;

// Grid (column slices, vocab groups). Each thread owns column c of the vocab
// rows [v0, v1); contributions arrive in increasing position order.
// Tokens are shifted by vocab_start first (0 for the fused embedding), so
// the same kernel serves a vocabulary shard.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout,
                                              const int32_t* tokens, int64_t n_pos, int C,
                                              int V, int vocab_per_group, int64_t vocab_start) {
  GT_SHARED(int64_t, s_pos, [kBwdThreads]);
  GT_SHARED(int32_t, s_tok, [kBwdThreads]);
  GT_SHARED(int, s_count, [kBwdWarps]);
  const int c = blockIdx.x * kBwdThreads + threadIdx.x;
  const int v0 = blockIdx.y * vocab_per_group;
  const int v1 = min(V, v0 + vocab_per_group);
  const int lane = threadIdx.x % dev::kWarpSize, warp = threadIdx.x / dev::kWarpSize;

  for (int64_t tile = 0; tile < n_pos; tile += kBwdThreads) {
    // 1. Ordered compaction of this tile's positions whose token is ours.
    const int64_t p = tile + threadIdx.x;
    const int64_t tok64 = p < n_pos ? static_cast<int64_t>(tokens[p]) - vocab_start : -1;
    const bool mine = tok64 >= v0 && tok64 < v1;
    const int32_t tok = static_cast<int32_t>(mine ? tok64 : -1);
    const unsigned ballot = __ballot_sync(dev::kFullMask, mine);
    if (lane == 0) s_count[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kBwdWarps; ++w) {
      offset += w < warp ? s_count[w] : 0;
      total += s_count[w];
    }
    if (mine) {
      const int idx = offset + __popc(ballot & ((1u << lane) - 1u));
      s_pos[idx] = p;
      s_tok[idx] = tok;
    }
    __syncthreads();
    // 2. Each thread adds the matched rows to its column, in position order.
    if (c < C) {
      for (int k = 0; k < total; ++k) {
        float* dst = dwte + static_cast<int64_t>(s_tok[k]) * C + c;
        *dst += dout[s_pos[k] * C + c];
      }
    }
    __syncthreads();  // shared lists are rewritten by the next tile
  }
}

// One thread per (t, c): dwpe[t,c] += dout[0,t,c] + dout[1,t,c] + ... in b order.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T,
                                              int C) {
  const int64_t n = static_cast<int64_t>(T) * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += dout[b * n + i];
    dwpe[i] = acc;
  }
}

// Grid and launch of the dwte kernel: enough vocab groups for ~kTargetBlocks
// blocks; the result is the same for any grouping (each element is summed by
// one thread in position order).
void launch_wte_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t n_pos,
                         int C, int V, int64_t vocab_start, cudaStream_t stream) {
  const int col_slices = (C + kBwdThreads - 1) / kBwdThreads;
  const int groups = std::max(1, std::min(V, std::min(65535, kTargetBlocks / col_slices)));
  const int per_group = (V + groups - 1) / groups;
  const int n_groups = (V + per_group - 1) / per_group;
  const dim3 grid(static_cast<unsigned>(col_slices), static_cast<unsigned>(n_groups));
  dev::launch(embedding_backward_wte_kernel, {grid, kBwdThreads, 0, stream}, dwte, dout, tokens,
              n_pos, C, V, per_group, vocab_start);
  CUDA_CHECK_LAUNCH();
}

void check_dims(const char* what, int B, int T, int C, int V) {
  GT_CHECK(B >= 0 && T > 0 && C > 0 && V > 0, what, ": B = ", B, ", T = ", T, ", C = ", C,
           ", V = ", V);
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C, int V, cudaStream_t stream) {
  check_dims("embedding_forward", B, T, C, V);
  if (B == 0) return;
  dev::NvtxRange range("embedding_forward");
  const bool vec = C % dev::Pack<float>::N == 0 && dev::aligned16(out) && dev::aligned16(wte) &&
                   dev::aligned16(wpe);
  const unsigned rows = static_cast<unsigned>(static_cast<int64_t>(B) * T);
  dev::launch(embedding_forward_kernel, {rows, kFwdThreads, 0, stream}, out, tokens, wte, wpe, T, C,
              V, vec);
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int B, int T, int C, int V, cudaStream_t stream) {
  check_dims("embedding_backward", B, T, C, V);
  if (B == 0) return;
  dev::NvtxRange range("embedding_backward");
  if (dwte) launch_wte_backward(dwte, dout, tokens, static_cast<int64_t>(B) * T, C, V, 0, stream);
  if (dwpe) {
    constexpr int kThreads = 256;
    dev::launch(embedding_backward_wpe_kernel,
                {dev::grid_for(static_cast<int64_t>(T) * C, kThreads), kThreads, 0, stream}, dwpe,
                dout, B, T, C);
    CUDA_CHECK_LAUNCH();
  }
}

// ---- the split halves (tensor parallelism) ---------------------------------------
namespace {

// One block per row; a zero row when the token is not in this shard.
__global__ void token_embedding_forward_kernel(float* out, const int32_t* tokens,
                                               const float* wte, int C, int V_shard,
                                               int64_t vocab_start, bool vec) {
  constexpr int N = dev::Pack<float>::N;
  const int64_t i = blockIdx.x;
  const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
  const bool mine = row >= 0 && row < V_shard;
  const float* e = wte + (mine ? row : 0) * C;
  float* o = out + i * C;
  if (vec) {
    for (int c = threadIdx.x * N; c < C; c += blockDim.x * N)
      dev::store_pack(o + c, mine ? dev::load_pack(e + c) : dev::Pack<float>{});
  } else {
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = mine ? e[c] : 0.f;
  }
}

// out[i, c] += wpe[(first_row + i) % T, c]; grid-stride over N*C.
__global__ void position_embedding_forward_kernel(float* out, const float* wpe, int64_t N,
                                                  int C, int64_t first_row, int T) {
  const int64_t n = N * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const int64_t i = k / C, c = k % C;
    out[k] += wpe[((first_row + i) % T) * C + c];
  }
}

// One thread per (p, c), p < T: the rows at position p are i0, i0 + T, ...
// with i0 = (p - first_row) mod T, added in that order.
__global__ void position_embedding_backward_kernel(float* dwpe, const float* dout, int64_t N,
                                                   int C, int64_t first_row, int T) {
  const int64_t n = static_cast<int64_t>(T) * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t shift = first_row % T;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const int64_t p = k / C, c = k % C;
    float acc = dwpe[k];
    for (int64_t i = (p - shift + T) % T; i < N; i += T) acc += dout[i * C + c];
    dwpe[k] = acc;
  }
}

void check_rows(const char* what, int64_t N, int C, int V) {
  GT_CHECK(N >= 0 && C > 0 && V > 0, what, ": N = ", N, ", C = ", C, ", V = ", V);
  GT_CHECK(N <= 0x7fffffff, what, ": N = ", N, " exceeds the grid");
}

void check_positions(const char* what, int64_t N, int C, int64_t first_row, int T) {
  GT_CHECK(N >= 0 && C > 0 && T > 0 && first_row >= 0, what, ": N = ", N, ", C = ", C,
           ", first_row = ", first_row, ", T = ", T);
}

}  // namespace

void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N,
                             int C, int V_shard, int64_t vocab_start, cudaStream_t stream) {
  check_rows("token_embedding_forward", N, C, V_shard);
  if (N == 0) return;
  dev::NvtxRange range("token_embedding_forward");
  const bool vec = C % dev::Pack<float>::N == 0 && dev::aligned16(out) && dev::aligned16(wte);
  dev::launch(token_embedding_forward_kernel, {static_cast<unsigned>(N), kFwdThreads, 0, stream},
              out, tokens, wte, C, V_shard, vocab_start, vec);
  CUDA_CHECK_LAUNCH();
}

void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N,
                              int C, int V_shard, int64_t vocab_start, cudaStream_t stream) {
  check_rows("token_embedding_backward", N, C, V_shard);
  if (N == 0) return;
  dev::NvtxRange range("token_embedding_backward");
  launch_wte_backward(dwte, dout, tokens, N, C, V_shard, vocab_start, stream);
}

void position_embedding_forward(float* out, const float* wpe, int64_t N, int C,
                                int64_t first_row, int T, cudaStream_t stream) {
  check_positions("position_embedding_forward", N, C, first_row, T);
  if (N == 0) return;
  dev::NvtxRange range("position_embedding_forward");
  constexpr int kThreads = 256;
  dev::launch(position_embedding_forward_kernel,
              {dev::grid_for(N * C, kThreads), kThreads, 0, stream}, out, wpe, N, C, first_row, T);
  CUDA_CHECK_LAUNCH();
}

void position_embedding_backward(float* dwpe, const float* dout, int64_t N, int C,
                                 int64_t first_row, int T, cudaStream_t stream) {
  check_positions("position_embedding_backward", N, C, first_row, T);
  if (N == 0) return;
  dev::NvtxRange range("position_embedding_backward");
  constexpr int kThreads = 256;
  dev::launch(position_embedding_backward_kernel,
              {dev::grid_for(static_cast<int64_t>(T) * C, kThreads), kThreads, 0, stream}, dwpe,
              dout, N, C, first_row, T);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gt::cuda
