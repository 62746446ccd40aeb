// The state behind gt_emu/async.hpp for the block that runs now: its
// mbarriers and the bulk tensor copies in flight. Owned by the BlockRunner,
// cleared at every block start; the rules live in async_proxy.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "gt_emu/device.hpp"
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

struct AsyncState {
  std::map<const void*, MBarrier> barriers;  // by address; node addresses stay put
  std::vector<BulkCopy> copies;              // issued, not yet landed, in issue order
  uint64_t serial = 0;                       // makes every barrier's token distinct
};

}  // namespace gt::emu
