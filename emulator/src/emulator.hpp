// The emulated device's process-wide state: device memory, streams and
// events, kernel attributes, the current device per host thread.
//
// Why global: it emulates the CUDA driver, whose state is per process by
// definition (the runtime API has no context argument); it is reached only
// from the emulator's C entry points, never from project code. One recursive
// mutex serialises every entry point (kernels run on the host thread that
// synchronises, while holding it).
//
// The internal API below is what the emulated libraries (cuBLASLt, NCCL)
// build on.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "device_memory.hpp"
#include "streams.hpp"
#include "traffic.hpp"

namespace gt::emu {

class Emulator {
 public:
  static Emulator& get();

  std::recursive_mutex mu;
  MemoryTable memory;
  StreamScheduler streams;
  TrafficCounter traffic;  // per-kernel page traffic, when enabled
  // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel.
  std::map<const void*, int> max_dynamic_smem;

  int device_count() const;
  // Runs queued work until everything is idle.
  cudaError_t synchronize_all();

 private:
  Emulator();
};

// The calling host thread's current device (cudaSetDevice).
int current_device();
void set_current_device(int d);

// The lock every entry point takes.
using Lock = std::lock_guard<std::recursive_mutex>;

// ---- the internal API of the emulated libraries ----------------------------------
// The stream named by `s` on the current device, or nullptr (reported) when
// it is not a live stream.
CUstream_st* stream_for(cudaStream_t s, const char* api);
// The device allocation holding all of [p, p + bytes), or nullptr.
const Allocation* device_range(const void* p, size_t bytes);

// Device limits the emulator enforces (those of an H100/H200, sm_90).
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kDefaultSharedPerBlock = 48 << 10;
constexpr int kMaxSharedPerBlockOptin = 232448;  // 227 KiB
constexpr size_t kDeviceMemoryBytes = size_t{141} << 30;

}  // namespace gt::emu
