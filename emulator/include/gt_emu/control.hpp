// Host-side controls of the emulated device, for tests and the device
// banner (compiled only in TRAINER_CUDA_EMULATOR builds). Everything else
// about the emulator is reached through the ordinary CUDA API.
#pragma once

#include <string>
#include <vector>

namespace gt::emu {

// "gt-emu emulated CUDA device (8 devices; blocks forward, streams issue
// order, wmma layout seed 24301)": what the tests print as the device they
// ran on.
std::string describe_device();

// Switch the orders for the rest of the process (tests that show a missing
// wait or a grid-order assumption): "forward"/"reverse" and
// "issue"/"reverse"/"random". Returns false for an unknown name.
bool set_block_order(const std::string& order);
std::string block_order();
// A block's thread order from now on: "block", "forward", "reverse",
// "random:<seed>" or "warps" (GT_EMU_THREAD_ORDER's values; a seed of at
// most 18 digits). false for an unknown one.
bool set_thread_order(const std::string& order);
bool set_stream_order(const std::string& order);
// How many emulated devices are visible from now on (as CUDA_VISIBLE_DEVICES
// decides at start-up); 0 hides them all, for the "no device" paths.
void set_visible_devices(int n);
// The compute capability the device reports from now on, major x 10 + minor
// (90 at start-up unless GT_EMU_COMPUTE_CAPABILITY says otherwise); only
// cudaGetDeviceProperties changes, not what the kernels may use.
void set_compute_capability(int major_minor);
// Makes the cuBLASLt heuristic refuse every fused epilogue (or stop refusing).
void set_cublaslt_refuse_epilogues(bool refuse);

// The explanation of the current sticky device fault ("" when none).
std::string fault_message();

// Global-memory traffic per kernel launch, counted by page while enabled
// (src/traffic.hpp says how): the distinct pages each kernel loaded from and
// stored to, i.e. the least DRAM traffic it can cause at page granularity.
// cuBLASLt GEMMs and cudaMemcpy are not kernels and are not counted. Counting
// slows kernels by one fault per page touched; not under ThreadSanitizer.
struct KernelTraffic {
  std::string kernel;  // "kernel launched at kernels/cuda/layernorm.cu:120"
  unsigned long long pages_read = 0, pages_written = 0, page_bytes = 0;
  unsigned long long bytes_read() const { return pages_read * page_bytes; }
  unsigned long long bytes_written() const { return pages_written * page_bytes; }
};
void set_traffic_counting(bool on);
// The kernels that ran (cudaStreamSynchronize etc. run them) since the last
// call, in execution order.
std::vector<KernelTraffic> take_traffic();

}  // namespace gt::emu
