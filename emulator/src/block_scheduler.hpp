// Runs the blocks of a kernel launch: every CUDA thread a fiber, every block
// to completion before the next (GT_EMU_BLOCK_ORDER: forward or reverse over
// the grid, and over the threads of a block when scheduling them unless
// GT_EMU_THREAD_ORDER says otherwise: forward, reverse, a seeded random
// permutation for every round between synchronisation points, or a warp at
// a time through its collectives to its next barrier).
//
// The rules it enforces, each a device fault (sticky cudaErrorLaunchFailure,
// reported with the file:line of every party) when broken:
//   * __syncthreads: every thread of the block arrives at the same call site;
//     arriving at another site, or exiting while others wait (or after
//     others have passed a barrier the exited thread never reached), is
//     divergence.
//   * warp collectives wait for exactly the lanes of their mask, at the same
//     site and with the same width; a mask naming a lane that exited or does
//     not exist, or one that excludes the caller, is a fault; nobody runnable
//     is a deadlock, reported as who waits where for whom.
//   * shared memory (the gt_emu_shared section and the dynamic region) is
//     NaN-poisoned at every block start, and each static array declared
//     through GT_SHARED at its first declaration in the block (templates and
//     inline functions included); the dynamic region is exactly the launch's
//     bytes, followed by a guard page.
//   * mbarriers and bulk tensor copies (gt_emu/async.hpp): the rules in
//     async_proxy.cpp; a thread in mbarrier_wait sleeps until its phase
//     completes or a copy is issued on its barrier, and when no thread can
//     run the copies in flight land before a deadlock is called.
// Threads run until they block, in the order above (a barrier's last
// arrival yields too, so each round starts in it; in the warps order a
// barrier completing ends the round); blocks never overlap, so
// a kernel's __shared__ statics are one block's shared memory.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "async_proxy.hpp"
#include "fiber.hpp"
#include "gt_emu/device.hpp"
#include "gt_emu/ptx.hpp"
#include "gt_emu/wmma.hpp"

namespace gt::emu {

struct GridLaunch {
  std::string name;  // "kernel launched at <file>:<line>"
  dim3 grid, block;
  size_t dynamic_smem = 0;
  std::shared_ptr<const detail::KernelBody> body;
};

class BlockRunner {
 public:
  BlockRunner();
  ~BlockRunner();

  // Runs the whole grid (on this host thread). On a fault: reported, sticky
  // error set, the rest of the grid skipped.
  void run_grid(const GridLaunch& launch);

  // The device layer's entry points (gt_emu/device.hpp), from a fiber.
  void sync_block(Site site);
  uint64_t warp_collective(detail::WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                           Site site);
  void warp_mma(const detail::MmaLane& lane, Site site);
  // The PTX warp instructions (gt_emu/ptx.hpp): `payload` is the lane's
  // PtxMmaLane or LdMatrixLane, read by whichever lane completes the group.
  void warp_exchange(detail::WarpOp op, const void* payload, Site site);
  // ldmatrix's rules on one lane's row address (ptx.cpp): faults when broken.
  void check_ldmatrix_row(const void* row, Site site);
  unsigned char* dynamic_shared();
  // Hopper's mbarriers, bulk tensor copies and proxy fences
  // (gt_emu/async.hpp; the rules are in async_proxy.cpp).
  void mbarrier_init(uint64_t* bar, unsigned count, Site site);
  void mbarrier_arrive(uint64_t* bar, unsigned count, unsigned tx_bytes, Site site);
  void mbarrier_expect_tx(uint64_t* bar, unsigned bytes, Site site);
  void mbarrier_wait(uint64_t* bar, unsigned parity, Site site);
  void mbarrier_inval(uint64_t* bar, Site site);
  void fence_proxy_async(Site site);
  void tma_load(void* dst, const CUtensorMap* map, const int* coords, int rank, uint64_t* bar,
                Site site);
  // Where dynamic shared memory starts in the emulated shared window (what
  // __cvta_generic_to_shared, descriptors and the swizzles see): 128, as
  // `extern __shared__ __align__(128)` promises and no more, so that a
  // kernel assuming a 1024-byte aligned window (what the 128-byte swizzle
  // repeats over) must align its tiles itself, as on a GPU where static
  // shared memory comes first.
  static constexpr uint32_t kDynamicWindow = 128;
  // wgmma (wgmma.cpp): a collective of the caller's warpgroup.
  void warpgroup_collective(WarpgroupOp op, const void* payload, int arg, Site site);
  uint32_t shared_window_address(const void* p, Site site);
  // detail::shared_array: poisons [p, p + bytes) at its first declaration
  // in the running block.
  void shared_array(void* p, size_t bytes);
  // Records the fault and unwinds the running CUDA thread (an exception
  // caught in thread_main); only ever called from a fiber.
  [[noreturn]] void fault(cudaError_t code, const std::string& msg);

  // For the SIGSEGV handler: what is running, and what `p` is to us.
  bool running() const { return launch_ != nullptr; }
  std::string describe_running() const;
  std::string describe_address(const void* p) const;

 private:
  enum class State { runnable, at_barrier, at_warp, at_mbarrier, at_warpgroup, exited };
  struct Thread {
    std::unique_ptr<Fiber> fiber;
    uint3 idx{};
    int linear = 0;
    State state = State::runnable;
    Site site{"", 0};
    detail::WarpOp op{};
    unsigned mask = 0;
    uint64_t value = 0, result = 0;
    int arg = 0, width = 32;
    const void* payload = nullptr;  // wmma / PTX warp instructions: the lane's operands
    const void* wait_bar = nullptr;  // at_mbarrier: the mbarrier and the parity it waits for
    unsigned wait_parity = 0;
  };
  struct WarpGroup {
    detail::WarpOp op;
    Site site;
    unsigned mask, arrived;
    int width;
    unsigned serial;  // picks the group's TSan token
  };
  // TSan sync addresses: a __syncwarp group releases and acquires its own
  // token, so that a lane resuming late from one group does not acquire what
  // a faster lane already released into the next (a ring of tokens is
  // enough: a lane waits in one group at a time).
  static constexpr unsigned kWarpTokens = 64;
  struct Warp {
    std::vector<WarpGroup> groups;
    unsigned exited = 0;  // lanes that have exited
    unsigned next_serial = 0;
    char tokens[kWarpTokens] = {};
  };

  static void thread_main(Fiber* f);
  void run_block(unsigned linear_block);
  // Runs thread i (runnable) until it blocks, yields or returns.
  void run_thread(int i);
  void prepare_shared_memory();
  // Joins the warp collective described by t's fields; returns once complete.
  void join_group(Thread& t, Site site);
  void complete_group(int warp, size_t group_index);
  void compute_mma(int warp, unsigned mask);
  void compute_ptx_mma(int warp);   // ptx.cpp
  void compute_ldmatrix(int warp);  // ptx.cpp
  // Whether [p, p + bytes) lies in this block's shared memory (the dynamic
  // region or the __shared__ statics' section).
  bool in_shared_memory(const void* p, size_t bytes) const;
  Thread& current() { return threads_[static_cast<size_t>(current_)]; }
  std::string thread_name(const Thread& t) const;
  std::string block_name() const;
  std::string deadlock_report() const;
  void check_exit(Thread& t);
  // async_proxy.cpp: the live mbarrier at `bar` (faults when there is none,
  // or its bytes were overwritten, or this thread cannot see its init yet).
  MBarrier& live_mbarrier(const void* bar, const char* op, Site site);
  // Completes the current phase if it can, waking its waiters.
  void try_complete_phase(MBarrier& b, const void* bar);
  // Lands the copies in flight that complete on `bar` (all, for nullptr),
  // in issue order; returns how many landed. Never faults: each copy's
  // rules were checked when it was issued.
  size_t land_copies(const void* bar);
  // At a block start: forgets the last block's barriers and copies.
  void reset_async();
  void land(const BulkCopy& c);
  // Deadlock and block-exit reports on the async state.
  std::string mbarrier_waits_report() const;
  std::string copies_in_flight_report() const;
  std::string shared_name(const void* p) const;
  // wgmma.cpp: the collective's effect once all 128 threads arrived; the
  // retirement of a warpgroup's oldest group (the products computed);
  // what a deadlock report and a thread's exit say about warpgroups.
  void complete_warpgroup(int g);
  void issue_mma(Warpgroup& wg);
  void retire_oldest_group(Warpgroup& wg);
  const unsigned char* wgmma_operand_byte(uint32_t window_address, size_t bytes, Site site);
  std::string warpgroup_waits_report() const;
  void check_exit_warpgroup(const Thread& t);

  const GridLaunch* launch_ = nullptr;
  std::vector<Thread> threads_;  // the block's threads; fibers are kept across blocks
  std::vector<Warp> warps_;
  int n_threads_ = 0;
  int current_ = -1;
  int barrier_arrived_ = 0;
  Site barrier_site_{"", 0};
  int exited_ = 0;
  bool faulted_ = false;
  cudaError_t fault_code_ = cudaSuccess;
  std::string fault_text_;
  // TSan sync addresses. __syncthreads alternates two tokens by generation,
  // for the same reason as the warp tokens (generation g + 2 cannot start
  // before every thread has left generation g). Start and exit have their
  // own: a thread starting late must not acquire another's exit.
  unsigned barrier_generation_ = 0;
  char barrier_tokens_[2] = {};
  char start_token_ = 0;  // the scheduler releases, every thread acquires at start
  char exit_token_ = 0;   // every thread releases at exit, the scheduler acquires
  // Dynamic shared memory: data placed to end at a PROT_NONE guard page.
  unsigned char* smem_mapping_ = nullptr;
  size_t smem_mapping_bytes_ = 0;
  unsigned char* smem_ = nullptr;
  // Static shared arrays declared through GT_SHARED: the block (block_serial_)
  // that last poisoned each. Every block run gets a new serial.
  uint64_t block_serial_ = 0;
  std::vector<int> order_;  // GT_EMU_THREAD_ORDER=random: this round's permutation
  struct SharedArray {
    uint64_t serial = 0;  // the block that last poisoned it
    size_t bytes = 0;
  };
  std::unordered_map<const void*, SharedArray> shared_arrays_;
  AsyncState async_;  // the running block's mbarriers and copies in flight
};

BlockRunner& block_runner();

}  // namespace gt::emu
