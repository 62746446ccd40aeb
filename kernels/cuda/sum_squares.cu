// Two-pass deterministic sum of squares (see sum_squares.cuh).
#include "kernels/cuda/chunk_table.cuh"
#include "kernels/cuda/sum_squares.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;
constexpr int64_t kElemsPerThread = 16;  // aim: each thread loops over >= 16 elements

int64_t n_blocks(int64_t n) {
  const int64_t per_block = kThreads * kElemsPerThread;
  return std::max<int64_t>(1, std::min(kMaxBlocks, (n + per_block - 1) / per_block));
}

// x[i]^2 summed in double over this thread's share of n elements: the
// 16-byte packs first, first + stride, ... when `vec`, then the elements of
// the tail likewise.
__device__ __forceinline__ double thread_squares(const float* x, int64_t n, bool vec, int64_t first,
                                                 int64_t stride) {
  double acc = 0.0;
  const int64_t packs = vec ? n / 4 : 0;
  for (int64_t i = first; i < packs; i += stride) {
    const float4 v = *reinterpret_cast<const float4*>(x + 4 * i);
    acc += static_cast<double>(v.x) * v.x;
    acc += static_cast<double>(v.y) * v.y;
    acc += static_cast<double>(v.z) * v.z;
    acc += static_cast<double>(v.w) * v.w;
  }
  for (int64_t i = 4 * packs + first; i < n; i += stride) {
    const double v = x[i];
    acc += v * v;
  }
  return acc;
}

__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double acc = thread_squares(x, n, vec, tid, stride);
  acc = dev::block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// out[0] = the blocks' sums added in a fixed tree (rounded once when Out is float).
template <typename Out>
__global__ void sum_partials_kernel(Out* out, const double* partial, int64_t n_partial) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n_partial; i += blockDim.x) acc += partial[i];
  acc = dev::block_sum(acc);
  if (threadIdx.x == 0) out[0] = static_cast<Out>(acc);
}

// ---- over runs (the gradient norm of a multi-tensor step) --------------------

constexpr int64_t kRunChunk = kThreads * kElemsPerThread;

__global__ void sum_squares_runs_partial_kernel(double* partial, const float* x,
                                                const dev::ChunkRun* runs, int n_runs,
                                                int64_t n_chunks) {
  double acc = 0.0;
  for (int64_t chunk = blockIdx.x; chunk < n_chunks; chunk += gridDim.x) {
    const dev::Chunk ch = dev::chunk_at(runs, n_runs, chunk, kRunChunk);
    const float* p = x + ch.run.state + ch.off;
    acc += thread_squares(p, ch.len, dev::aligned16(p), threadIdx.x, blockDim.x);
  }
  acc = dev::block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void clip_scale_kernel(float* scale, const float* stats, float max_norm) {
  const float sq = stats[0], loss_check = stats[1];
  float s = __int_as_float(0x7fc00000);  // NaN: skip the step
  if (isfinite(sq) && isfinite(loss_check))
    s = max_norm > 0.f ? fminf(1.f, max_norm / (sqrtf(sq) + 1e-6f)) : 1.f;
  scale[0] = s;
}

// The table's bytes rounded up so the partials that follow stay 256-aligned.
size_t table_bytes(size_t n_runs) { return (n_runs * sizeof(dev::ChunkRun) + 255) / 256 * 256; }

int64_t count_chunks(const std::vector<AdamWRun>& runs) {
  int64_t chunks = 0;
  for (const auto& r : runs) chunks += (r.n + kRunChunk - 1) / kRunChunk;
  return chunks;
}

}  // namespace

size_t sum_squares_runs_scratch_bytes(const std::vector<AdamWRun>& runs) {
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, std::max<int64_t>(1, count_chunks(runs)));
  return table_bytes(runs.size()) + sizeof(double) * static_cast<size_t>(blocks);
}

void sum_squares_runs(float* out, const float* x, const std::vector<AdamWRun>& runs, void* scratch,
                      UploadStaging& uploads, cudaStream_t stream) {
  dev::NvtxRange range("sum_squares_runs");
  std::vector<dev::ChunkRun> host;
  const int64_t n_chunks = dev::make_chunk_table(
      runs, kRunChunk, [](const AdamWRun&) { return 1.f; }, host);
  char* base = static_cast<char*>(scratch);
  double* partial = reinterpret_cast<double*>(base + table_bytes(runs.size()));
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, n_chunks);
  if (n_chunks > 0) {
    uploads.copy_or_wait(base, host.data(), host.size() * sizeof(dev::ChunkRun), stream);
    dev::launch(sum_squares_runs_partial_kernel,
                {static_cast<unsigned>(blocks), kThreads, 0, stream}, partial, x,
                reinterpret_cast<const dev::ChunkRun*>(base), static_cast<int>(host.size()),
                n_chunks);
    CUDA_CHECK_LAUNCH();
  }
  dev::launch(sum_partials_kernel<float>, {1, kThreads, 0, stream}, out, partial, blocks);
  CUDA_CHECK_LAUNCH();
}

void clip_scale(float* scale, const float* stats, float max_norm, cudaStream_t stream) {
  dev::NvtxRange range("clip_scale");
  dev::launch(clip_scale_kernel, {1, 1, 0, stream}, scale, stats, max_norm);
  CUDA_CHECK_LAUNCH();
}

int64_t sum_squares_scratch_doubles(int64_t n) { return n_blocks(n); }

void sum_squares(double* out, const float* x, int64_t n, double* scratch, cudaStream_t stream) {
  GT_CHECK(n >= 0, "sum_squares: n = ", n);
  dev::NvtxRange range("sum_squares");
  const int64_t blocks = n_blocks(n);
  dev::launch(sum_squares_partial_kernel, {static_cast<unsigned>(blocks), kThreads, 0, stream},
              scratch, x, n, dev::aligned16(x));
  CUDA_CHECK_LAUNCH();
  dev::launch(sum_partials_kernel<double>, {1, kThreads, 0, stream}, out, scratch, blocks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gt::cuda
