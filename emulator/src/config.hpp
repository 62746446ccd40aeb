// The emulated device's settings, read once from the environment (all
// optional; docs/EMULATOR.md lists them):
//   GT_EMU_DEVICES=N           emulated devices (default 8), then filtered by
//                              CUDA_VISIBLE_DEVICES as the real runtime does
//   GT_EMU_BLOCK_ORDER=forward|reverse
//                              the order blocks of a grid run in, and threads of
//                              a block are scheduled in (default forward)
//   GT_EMU_THREAD_ORDER=block|forward|reverse|random[:seed]|warps
//                              the order a block's runnable threads run in
//                              between two synchronisation points: random
//                              draws a new permutation for every such round
//                              (seeded: reproducible); warps runs each warp,
//                              in order, through its warp collectives to its
//                              next barrier before the next warp starts (so a
//                              warp's writes after a missing barrier land
//                              before the later warps' reads); block (the
//                              default) follows GT_EMU_BLOCK_ORDER
//   GT_EMU_STREAM_ORDER=issue|reverse|random[:seed]
//                              which runnable stream runs next at a
//                              synchronisation point (default issue)
//   GT_EMU_PROTECT=0|1         device memory PROT_NONE while host code runs
//                              (default 1)
//   GT_EMU_CUBLASLT_REFUSE_EPILOGUES=0|1
//                              the cuBLASLt heuristic refuses every fused
//                              epilogue, so callers' fallbacks run (default 0)
//   GT_EMU_WMMA_LAYOUT=seed    the permutation of fragment elements over lanes
//   GT_EMU_HANG_TIMEOUT_S=s    a blocking synchronisation that waits this long
//                              on another rank reports and aborts (default 300)
// A value that does not parse is a fatal error naming the variable.
#pragma once

#include <cstdint>
#include <string>

namespace gt::emu {

enum class BlockOrder { forward, reverse };
enum class ThreadOrder { block, forward, reverse, random, warps };
enum class StreamOrder { issue, reverse, random };

struct Config {
  int devices = 8;            // after CUDA_VISIBLE_DEVICES
  BlockOrder block_order = BlockOrder::forward;
  ThreadOrder thread_order = ThreadOrder::block;
  uint64_t thread_seed = 1;
  StreamOrder stream_order = StreamOrder::issue;
  uint64_t stream_seed = 1;
  bool protect_device_memory = true;
  bool cublaslt_refuse_epilogues = false;
  uint64_t wmma_layout_seed = 0x5eed;
  double hang_timeout_s = 300;
  size_t fiber_stack_bytes = 0;  // 0: the build's default
  // What cudaGetDeviceProperties reports as major.minor (the limits stay
  // the H200's): 90 by default; GT_EMU_COMPUTE_CAPABILITY=80 makes the
  // device say sm_80, for the paths that refuse an older GPU (fp8).
  int compute_capability = 90;
};

// The settings of this process (read at first use, then fixed, except through
// the test hooks in gt_emu/control.hpp).
Config& config();

const char* to_string(BlockOrder o);
const char* to_string(ThreadOrder o);
const char* to_string(StreamOrder o);

}  // namespace gt::emu
