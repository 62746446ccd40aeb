// The device layer of the emulated CUDA device: what a kernel in
// kernels/cuda/*.cu sees when it is compiled by g++ instead of nvcc (see
// docs/EMULATOR.md). Included through the shadow <cuda_runtime.h> in
// emulator/include, after NVIDIA's own header, which supplies dim3, uint3,
// the vector types and the bf16 conversions.
//
// What it provides, and the rule each follows:
//   * threadIdx, blockIdx, blockDim, gridDim, warpSize: read-only views of the
//     CUDA thread that runs now. Every CUDA thread is a fiber; the block
//     scheduler (emulator/src/block_scheduler.cpp) points these at the running
//     fiber's coordinates before every switch.
//   * __global__/__device__/__host__ expand to nothing; __shared__ to a
//     function-local static (blocks of a grid run one after another, so one
//     copy per kernel is one copy per block), placed in the section
//     gt_emu_shared so that the scheduler can poison it with NaN bytes at every
//     block start. GCC ignores the section for statics of templates and inline
//     functions: the kernels declare their static shared arrays through
//     GT_SHARED (kernels/cuda/device_common.cuh), which also hands each to
//     detail::shared_array, poisoned by the first thread of every block that
//     reaches it.
//   * __syncthreads, __syncwarp and the warp collectives (__shfl*_sync,
//     __ballot_sync, __any_sync, __all_sync) record their call site and block
//     the fiber until every thread they wait for has arrived at the same site;
//     anything else is reported as divergence or deadlock. A shuffle that reads
//     a lane outside the mask returns poison (all bits set), never a plausible
//     value.
//   * launch_kernel: the target of dev::launch (kernels/cuda/device_common.cuh)
//     under g++. It checks the launch like the runtime does and queues the grid
//     on the stream.
//   * dynamic_shared_memory(): the block's dynamic shared memory, exactly the
//     bytes requested at launch, NaN-poisoned at every block start.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- qualifiers ----------------------------------------------------------------
// NVIDIA's host_defines.h defines these away for a host compiler, but only when
// they are not defined yet: ours win whichever header comes first.
#undef __shared__
#define __shared__ __attribute__((section("gt_emu_shared"))) static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#ifndef __grid_constant__
#define __grid_constant__
#endif

namespace gt::emu {

// Where a device-side call was made: the site barriers and collectives are
// matched by, and what a report names.
struct Site {
  const char* file;
  int line;
};

namespace detail {
// The running CUDA thread's coordinates (written by the block scheduler only).
extern uint3 g_thread_idx;
extern uint3 g_block_idx;
extern dim3 g_block_dim;
extern dim3 g_grid_dim;

// Read-only views of the coordinates above: reading through a reference to
// non-const storage makes the compiler reload after every call that may
// switch fibers.
struct BuiltinUint3 {
  const unsigned& x;
  const unsigned& y;
  const unsigned& z;
  operator uint3() const { return uint3{x, y, z}; }
};
struct BuiltinDim3 {
  const unsigned& x;
  const unsigned& y;
  const unsigned& z;
  operator dim3() const { return dim3(x, y, z); }
};

enum class WarpOp {
  shfl_idx,
  shfl_up,
  shfl_down,
  shfl_xor,
  ballot,
  any,
  all,
  syncwarp,
  mma,      // wmma::mma_sync (gt_emu/wmma.hpp)
  ptx_mma,  // mma.sync.m16n8k16 (gt_emu/ptx.hpp)
  ldmatrix  // ldmatrix.sync.m8n8 (gt_emu/ptx.hpp)
};

// Block the calling CUDA thread until its block (or the lanes of `mask`)
// arrive; implemented in emulator/src/block_scheduler.cpp.
void sync_block(Site site);
// Returns this lane's result (the shuffled bits, the ballot, ...).
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width, Site site);
// The block's dynamic shared memory (poisoned, exactly the launch's bytes).
unsigned char* dynamic_shared_base();
// A static shared array of `bytes` at `p`, declared through GT_SHARED
// (kernels/cuda/device_common.cuh) by the calling thread: the first thread
// of a block to declare it NaN-poisons it, before any thread of the block
// can have written it. What the gt_emu_shared section does for the statics
// g++ places there, for those it does not (in templates and inline
// functions).
void shared_array(void* p, size_t bytes);
// Reports a broken device-side rule and ends the kernel (sticky launch failure).
[[noreturn]] void device_fault(const char* what, Site site);

template <typename T>
uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "warp shuffles move values of at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
}  // namespace detail
}  // namespace gt::emu

// ---- built-in variables ----------------------------------------------------------
inline const gt::emu::detail::BuiltinUint3 threadIdx{gt::emu::detail::g_thread_idx.x,
                                                      gt::emu::detail::g_thread_idx.y,
                                                      gt::emu::detail::g_thread_idx.z};
inline const gt::emu::detail::BuiltinUint3 blockIdx{gt::emu::detail::g_block_idx.x,
                                                     gt::emu::detail::g_block_idx.y,
                                                     gt::emu::detail::g_block_idx.z};
inline const gt::emu::detail::BuiltinDim3 blockDim{gt::emu::detail::g_block_dim.x,
                                                    gt::emu::detail::g_block_dim.y,
                                                    gt::emu::detail::g_block_dim.z};
inline const gt::emu::detail::BuiltinDim3 gridDim{gt::emu::detail::g_grid_dim.x,
                                                   gt::emu::detail::g_grid_dim.y,
                                                   gt::emu::detail::g_grid_dim.z};
constexpr int warpSize = 32;

// ---- synchronisation ---------------------------------------------------------------
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  gt::emu::detail::sync_block({file, line});
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  gt::emu::detail::warp_collective(gt::emu::detail::WarpOp::syncwarp, mask, 0, 0, 32,
                                   {file, line});
}

// ---- warp collectives --------------------------------------------------------------
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace gt::emu::detail;
  return from_bits<T>(warp_collective(WarpOp::shfl_idx, mask, to_bits(var), src_lane, width,
                                      {file, line}));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace gt::emu::detail;
  return from_bits<T>(warp_collective(WarpOp::shfl_up, mask, to_bits(var),
                                      static_cast<int>(delta), width, {file, line}));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace gt::emu::detail;
  return from_bits<T>(warp_collective(WarpOp::shfl_down, mask, to_bits(var),
                                      static_cast<int>(delta), width, {file, line}));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace gt::emu::detail;
  return from_bits<T>(warp_collective(WarpOp::shfl_xor, mask, to_bits(var), lane_mask, width,
                                      {file, line}));
}
inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  using namespace gt::emu::detail;
  return static_cast<unsigned>(
      warp_collective(WarpOp::ballot, mask, predicate != 0, 0, 32, {file, line}));
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  using namespace gt::emu::detail;
  return static_cast<int>(warp_collective(WarpOp::any, mask, predicate != 0, 0, 32, {file, line}));
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  using namespace gt::emu::detail;
  return static_cast<int>(warp_collective(WarpOp::all, mask, predicate != 0, 0, 32, {file, line}));
}

// ---- integer and bit intrinsics, min/max -------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline float __int_as_float(int x) { return gt::emu::detail::from_bits<float>(static_cast<uint32_t>(x)); }
inline int __float_as_int(float x) { return static_cast<int>(static_cast<uint32_t>(gt::emu::detail::to_bits(x))); }
inline float __uint_as_float(unsigned x) { return gt::emu::detail::from_bits<float>(x); }
inline unsigned __float_as_uint(float x) { return static_cast<uint32_t>(gt::emu::detail::to_bits(x)); }
inline float rsqrtf(float x) { return 1.f / __builtin_sqrtf(x); }
inline float __fdividef(float x, float y) { return x / y; }

// CUDA's global min/max overloads (device code calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return __builtin_fminf(a, b); }
inline float max(float a, float b) { return __builtin_fmaxf(a, b); }
inline double min(double a, double b) { return __builtin_fmin(a, b); }
inline double max(double a, double b) { return __builtin_fmax(a, b); }

// The typed overload nvcc's <cuda_runtime.h> declares for __global__ functions.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}

// ---- kernel launch ------------------------------------------------------------------
namespace gt::emu {

// One launch's configuration and the line of the launcher that made it.
struct LaunchConfig {
  dim3 grid, block;
  size_t dynamic_smem_bytes = 0;
  cudaStream_t stream = nullptr;
  Site site{"?", 0};
};

namespace detail {
// The kernel body as every CUDA thread runs it: a call of the kernel with
// the launch's (already converted) arguments.
class KernelBody {
 public:
  virtual ~KernelBody() = default;
  virtual void run() const = 0;
};

template <typename... Params>
class BoundKernel final : public KernelBody {
 public:
  template <typename... Args>
  BoundKernel(void (*kernel)(Params...), Args&&... args)
      : kernel_(kernel), args_(std::forward<Args>(args)...) {}
  // Each CUDA thread gets its own copy of the parameters, as on a GPU.
  void run() const override { std::apply(kernel_, args_); }
  const std::tuple<std::decay_t<Params>...>& args() const { return args_; }

 private:
  void (*kernel_)(Params...);
  std::tuple<std::decay_t<Params>...> args_;
};

// A pointer argument of a launch: which parameter, and its value.
struct PointerArg {
  int index;
  const void* value;
};

// Checks the launch and queues it on config.stream; returns what the runtime
// would (cudaSuccess, or a launch-configuration error, also left for
// cudaGetLastError).
cudaError_t submit_launch(const void* kernel, const LaunchConfig& config,
                          const PointerArg* pointers, int n_pointers,
                          std::shared_ptr<const KernelBody> body);

template <typename Tuple, size_t... I>
int collect_pointers(const Tuple& t, PointerArg* out, std::index_sequence<I...>) {
  int n = 0;
  [[maybe_unused]] auto one = [&](int index, const auto& v) {
    if constexpr (std::is_pointer_v<std::decay_t<decltype(v)>>)
      out[n++] = PointerArg{index, static_cast<const void*>(v)};
  };
  (one(static_cast<int>(I), std::get<I>(t)), ...);
  return n;
}
}  // namespace detail

template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), const LaunchConfig& config,
                          Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "kernel launched with the wrong arity");
  auto body = std::make_shared<detail::BoundKernel<Params...>>(kernel, std::forward<Args>(args)...);
  detail::PointerArg pointers[sizeof...(Params) + 1];
  const int n = detail::collect_pointers(body->args(), pointers,
                                         std::index_sequence_for<Params...>{});
  return detail::submit_launch(reinterpret_cast<const void*>(kernel), config, pointers, n,
                               std::move(body));
}

// The block's dynamic shared memory, as `extern __shared__ T name[]` gives it.
template <typename T>
T* dynamic_shared_memory() {
  return reinterpret_cast<T*>(detail::dynamic_shared_base());
}

// CUDA's __expf, the SFU's exp: ex2.approx.ftz of x * log2(e). (glibc
// declares an unrelated __expf, hence the name; device_common.cuh's
// dev::fast_exp picks one or the other.) An exact exp2 of the same rounded
// product, within the hardware's 2 ulp, and a subnormal result flushed to
// zero as .ftz does.
inline float fast_exp(float x) {
  const float r = __builtin_exp2f(x * 1.44269504088896341f);
  return r < 1.17549435e-38f ? 0.f : r;
}

}  // namespace gt::emu
