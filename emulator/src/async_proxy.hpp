// The state behind gt_emu/async.hpp for the block that runs now: its
// mbarriers and the bulk tensor copies in flight. Owned by the BlockRunner,
// cleared at every block start; the rules live in async_proxy.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "gt_emu/device.hpp"
#include "gt_emu/wgmma.hpp"
#include "tensor_map.hpp"

namespace gt::emu {

struct MBarrier {
  unsigned count = 0;          // arrivals per phase (mbarrier.init's count)
  unsigned pending = 0;        // arrivals the current phase still needs
  int64_t tx = 0;              // the current phase's tx-count, in bytes
  unsigned phase = 0;          // phases completed; the current phase's parity is phase & 1
  uint64_t token = 0;          // what the 8 bytes hold while the barrier lives
  Site init_site{"", 0};
  int init_thread = -1;        // linear index of the initializing thread
  unsigned init_generation = 0;  // the block's __syncthreads generation at init
  bool async_visible = false;  // the init thread fenced (proxy.async / mbarrier_init) since
  int64_t expected_tx = 0;     // this phase: bytes announced by expect_tx,
  int64_t landed_tx = 0;       //   and landed by copies (for reports)
  char tsan_token = 0;         // arrive releases, a completed wait acquires
};

struct BulkCopy {
  unsigned char* dst;
  EmuTensorMap map;
  int coords[5];
  uint64_t* bar;
  Site site;
  int thread;  // the issuing thread's linear index
};

// wgmma (emulator/src/wgmma.cpp): the warpgroup collectives and the
// groups of mma_async in flight.
enum class WarpgroupOp { fence, mma, commit, wait };

struct PendingMma {
  Site site;
  std::vector<detail::WgmmaLane> lanes;  // the group's 128 threads, in order
  std::vector<float> d_in;               // what each thread's d held at issue
  // Accumulates into the registers of an earlier mma_async still in
  // flight: its d_in is that one's result, read from d when retired (in
  // issue order), as the tensor cores chain them.
  bool chained = false;
};

struct Warpgroup {
  // The collective being gathered: its op, site and argument, and how many
  // of the 128 threads have arrived.
  WarpgroupOp op = WarpgroupOp::fence;
  Site site{"", 0};
  int arg = 0;
  int arrived = 0;
  bool fenced = false;                       // a wgmma.fence since the last wait_group
  std::vector<PendingMma> uncommitted;       // issued, not yet in a group
  std::deque<std::vector<PendingMma>> groups;  // committed, oldest first
};

struct AsyncState {
  std::map<const void*, MBarrier> barriers;  // by address; node addresses stay put
  std::vector<BulkCopy> copies;              // issued, not yet landed, in issue order
  uint64_t serial = 0;                       // makes every barrier's token distinct
  std::vector<Warpgroup> warpgroups;         // one per 128 threads of the block
  // The async proxy's view of dynamic shared memory: what the copy engine
  // and the tensor cores see. Ordinary stores reach it at a
  // fence.proxy.async (by any thread: the emulator does not tell writers
  // apart), copies as they land.
  std::vector<unsigned char> async_view;
};

}  // namespace gt::emu
