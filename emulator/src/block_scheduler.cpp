// Block execution: fibers, barriers, warp collectives (see block_scheduler.hpp).
#include "block_scheduler.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <sstream>

#include "config.hpp"
#include "device_memory.hpp"
#include "diagnostics.hpp"
#include "sanitizer_hooks.hpp"

// Bounds of the section holding every (non-template) __shared__ static.
extern "C" unsigned char __start_gt_emu_shared[] __attribute__((weak));
extern "C" unsigned char __stop_gt_emu_shared[] __attribute__((weak));

namespace gt::emu {

namespace detail {
uint3 g_thread_idx{};
uint3 g_block_idx{};
dim3 g_block_dim{};
dim3 g_grid_dim{};

void sync_block(Site site) { block_runner().sync_block(site); }
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width, Site site) {
  return block_runner().warp_collective(op, mask, value, arg, width, site);
}
unsigned char* dynamic_shared_base() { return block_runner().dynamic_shared(); }
void shared_array(void* p, size_t bytes) { block_runner().shared_array(p, bytes); }
void device_fault(const char* what, Site site) {
  block_runner().fault(cudaErrorLaunchFailure,
                       std::string(what) + " at " + site.file + ":" + std::to_string(site.line));
}
}  // namespace detail

namespace {

constexpr uint64_t kPoison = ~uint64_t{0};  // NaN in every float width, -1 as an integer

// SplitMix64's step: the random thread order's generator.
uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr int kWarp = 32;

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kDefaultStack = 256 << 10;
#else
constexpr size_t kDefaultStack = 128 << 10;
#endif

const char* op_name(detail::WarpOp op) {
  switch (op) {
    case detail::WarpOp::shfl_idx: return "__shfl_sync";
    case detail::WarpOp::shfl_up: return "__shfl_up_sync";
    case detail::WarpOp::shfl_down: return "__shfl_down_sync";
    case detail::WarpOp::shfl_xor: return "__shfl_xor_sync";
    case detail::WarpOp::ballot: return "__ballot_sync";
    case detail::WarpOp::any: return "__any_sync";
    case detail::WarpOp::all: return "__all_sync";
    case detail::WarpOp::syncwarp: return "__syncwarp";
    case detail::WarpOp::mma: return "wmma::mma_sync";
    case detail::WarpOp::ptx_mma:
      return "mma.sync.m16n8k16";
    case detail::WarpOp::ldmatrix:
      return "ldmatrix.sync";
  }
  return "?";
}

std::string where(Site s) { return std::string(s.file) + ":" + std::to_string(s.line); }
bool same_site(Site a, Site b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

std::string hex(unsigned m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", m);
  return buf;
}

std::string lanes(unsigned m) {
  std::string out;
  for (int l = 0; l < kWarp; ++l) {
    if (!(m >> l & 1u)) continue;
    int e = l;
    while (e + 1 < kWarp && (m >> (e + 1) & 1u)) ++e;
    if (!out.empty()) out += ",";
    out += e == l ? std::to_string(l) : std::to_string(l) + "-" + std::to_string(e);
    l = e;
  }
  return out.empty() ? "none" : out;
}

// The lane a shuffle reads, by PTX's shfl.sync rules (the CUDA intrinsics
// pass c = ((32 - width) << 8) | (up ? 0 : 31)).
int source_lane(detail::WarpOp op, int lane, int b, int width) {
  const int segmask = (kWarp - width) & 31;
  const int cval = op == detail::WarpOp::shfl_up ? 0 : 31;
  const int max_lane = (lane & segmask) | (cval & ~segmask);
  const int min_lane = lane & segmask;
  b &= 31;
  int j = lane;
  bool ok = false;
  switch (op) {
    case detail::WarpOp::shfl_up: j = lane - b; ok = j >= max_lane; break;
    case detail::WarpOp::shfl_down: j = lane + b; ok = j <= max_lane; break;
    case detail::WarpOp::shfl_xor: j = lane ^ b; ok = j <= max_lane; break;
    case detail::WarpOp::shfl_idx: j = min_lane | (b & ~segmask); ok = j <= max_lane; break;
    default: break;
  }
  return ok ? j : lane;
}


}  // namespace

BlockRunner& block_runner() {
  static BlockRunner* r = new BlockRunner;  // lives as long as the process
  return *r;
}

BlockRunner::BlockRunner() = default;
BlockRunner::~BlockRunner() {
  if (smem_mapping_) munmap(smem_mapping_, smem_mapping_bytes_);
}

std::string BlockRunner::block_name() const {
  const uint3 b = detail::g_block_idx;
  return "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) +
         ")";
}

std::string BlockRunner::thread_name(const Thread& t) const {
  return "thread (" + std::to_string(t.idx.x) + "," + std::to_string(t.idx.y) + "," +
         std::to_string(t.idx.z) + ") [warp " + std::to_string(t.linear / kWarp) + " lane " +
         std::to_string(t.linear % kWarp) + "]";
}

std::string BlockRunner::describe_running() const {
  if (!launch_) return "";
  std::string s = launch_->name + ", " + block_name();
  if (current_ >= 0) s += ", " + thread_name(threads_[static_cast<size_t>(current_)]);
  return s;
}

std::string BlockRunner::describe_address(const void* p) const {
  const auto* b = static_cast<const unsigned char*>(p);
  if (smem_mapping_ && b >= smem_mapping_ && b < smem_mapping_ + smem_mapping_bytes_) {
    const long long off = static_cast<long long>(b - smem_);
    const size_t n = launch_ ? launch_->dynamic_smem : 0;
    if (off >= 0 && static_cast<size_t>(off) >= n)
      return "byte " + std::to_string(off) + " of dynamic shared memory, past the " +
             std::to_string(n) + " bytes the launch requested";
    return "byte " + std::to_string(off) + " of dynamic shared memory";
  }
  for (const Thread& t : threads_) {
    if (t.fiber && t.fiber->in_guard_page(p))
      return "the guard page below the stack of " + thread_name(t) +
             ": a CUDA thread's stack overflowed (the emulator gives each " +
             std::to_string(t.fiber->stack_bytes() >> 10) + " KiB)";
  }
  return "";
}

namespace {
// Unwinds the faulting CUDA thread's stack (destroying what its frames own)
// up to thread_main, which ends the fiber.
struct KernelFault {};
}  // namespace

void BlockRunner::fault(cudaError_t code, const std::string& msg) {
  if (!faulted_) {
    faulted_ = true;
    fault_code_ = code;
    fault_text_ = msg;
  }
  throw KernelFault{};
}

void BlockRunner::prepare_shared_memory() {
  unsigned char* begin = __start_gt_emu_shared;
  unsigned char* end = __stop_gt_emu_shared;
  if (begin && end > begin) std::memset(begin, 0xFF, static_cast<size_t>(end - begin));
  if (launch_->dynamic_smem) std::memset(smem_, 0xFF, launch_->dynamic_smem);
}

void BlockRunner::shared_array(void* p, size_t bytes) {
  // The first thread of this block to declare the array: no thread of the
  // block can have written it yet (each writes only after its declaration).
  SharedArray& a = shared_arrays_[p];
  if (a.serial == block_serial_) return;
  a.serial = block_serial_;
  a.bytes = bytes;
  // The poison is the emulator's write, not the program's: hidden from TSan
  // (a release/acquire pair here would order every later declarer after
  // everything this thread did before, hiding the races TSan is there for).
  GT_EMU_IGNORE_WRITES_BEGIN();
  std::memset(p, 0xFF, bytes);
  GT_EMU_IGNORE_WRITES_END();
}

void BlockRunner::run_grid(const GridLaunch& launch) {
  launch_ = &launch;
  faulted_ = false;
  n_threads_ = static_cast<int>(launch.block.x * launch.block.y * launch.block.z);
  const size_t stack = config().fiber_stack_bytes ? config().fiber_stack_bytes : kDefaultStack;
  if (threads_.size() < static_cast<size_t>(n_threads_)) threads_.resize(n_threads_);
  for (int i = 0; i < n_threads_; ++i) {
    Thread& t = threads_[static_cast<size_t>(i)];
    if (!t.fiber || t.fiber->stack_bytes() < stack) t.fiber = std::make_unique<Fiber>(stack);
  }
  warps_.assign(static_cast<size_t>((n_threads_ + kWarp - 1) / kWarp), Warp{});

  // Dynamic shared memory ending at a guard page (grown, never shrunk).
  if (launch.dynamic_smem) {
    const size_t page = page_size();
    const size_t data = (launch.dynamic_smem + 255) / 256 * 256;
    const size_t need = (data + page - 1) / page * page + page;
    if (need > smem_mapping_bytes_) {
      if (smem_mapping_) munmap(smem_mapping_, smem_mapping_bytes_);
      void* m = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) {
        set_sticky(cudaErrorMemoryAllocation, "cannot map dynamic shared memory for " + launch.name);
        launch_ = nullptr;
        return;
      }
      smem_mapping_ = static_cast<unsigned char*>(m);
      smem_mapping_bytes_ = need;
      mprotect(smem_mapping_ + need - page, page, PROT_NONE);
    }
    smem_ = smem_mapping_ + smem_mapping_bytes_ - page - data;
#if defined(__SANITIZE_ADDRESS__)
    ASAN_UNPOISON_MEMORY_REGION(smem_mapping_, smem_mapping_bytes_ - page);
    ASAN_POISON_MEMORY_REGION(smem_ + launch.dynamic_smem, data - launch.dynamic_smem);
#endif
  } else {
    smem_ = smem_mapping_ ? smem_mapping_ + smem_mapping_bytes_ - page_size() : nullptr;
  }

  detail::g_block_dim = launch.block;
  detail::g_grid_dim = launch.grid;
  const unsigned n_blocks = launch.grid.x * launch.grid.y * launch.grid.z;
  const bool reverse = config().block_order == BlockOrder::reverse;
  for (unsigned i = 0; i < n_blocks && !faulted_; ++i)
    run_block(reverse ? n_blocks - 1 - i : i);

  if (faulted_) {
    for (int i = 0; i < n_threads_; ++i) {
      Thread& t = threads_[static_cast<size_t>(i)];
      if (t.state != State::exited) t.fiber->mark_abandoned();
    }
    set_sticky(fault_code_, fault_text_ + "\n  in " + launch.name + ", " + block_name());
  }
  current_ = -1;
  launch_ = nullptr;
}

void BlockRunner::thread_main(Fiber* f) {
  BlockRunner& r = block_runner();
  Thread& t = *static_cast<Thread*>(f->user());
  GT_EMU_ACQUIRE(&r.start_token_);
  // A fault (from the device layer, or found when this thread exits) unwinds
  // to here and ends the fiber; the block is then abandoned.
  auto record = [&](const std::string& msg) {
    if (!r.faulted_) {
      r.faulted_ = true;
      r.fault_code_ = cudaErrorLaunchFailure;
      r.fault_text_ = msg;
    }
  };
  try {
    r.launch_->body->run();
    GT_EMU_RELEASE(&r.exit_token_);
    r.check_exit(t);
  } catch (const KernelFault&) {
  } catch (const std::exception& e) {
    record(std::string("a C++ exception escaped the kernel: ") + e.what());
  } catch (...) {
    record("a C++ exception escaped the kernel");
  }
}

void BlockRunner::check_exit(Thread& t) {
  t.state = State::exited;
  ++exited_;
  if (barrier_arrived_ > 0)
    fault(cudaErrorLaunchFailure,
          "divergent __syncthreads: " + thread_name(t) + " exited while " +
              std::to_string(barrier_arrived_) + " thread(s) of its block wait at __syncthreads() " +
              where(barrier_site_));
  check_exit_warpgroup(t);
  const int lane = t.linear % kWarp;
  warps_[static_cast<size_t>(t.linear / kWarp)].exited |= 1u << lane;
  for (const WarpGroup& g : warps_[static_cast<size_t>(t.linear / kWarp)].groups)
    if ((g.mask >> lane & 1u) && !(g.arrived >> lane & 1u))
      fault(cudaErrorLaunchFailure, thread_name(t) + " exited while lanes " + lanes(g.arrived) +
                                        " wait for it in " + op_name(g.op) + "(mask " +
                                        hex(g.mask) + ") at " + where(g.site));
}

void BlockRunner::run_block(unsigned linear_block) {
  const dim3 g = launch_->grid;
  detail::g_block_idx = uint3{linear_block % g.x, linear_block / g.x % g.y, linear_block / (g.x * g.y)};
  ++block_serial_;
  reset_async();  // before the poison: a faulted block may leave copies in flight
  prepare_shared_memory();
  async_.warpgroups.assign(static_cast<size_t>((n_threads_ + 127) / 128), Warpgroup{});
  async_.async_view.assign(smem_, smem_ + launch_->dynamic_smem);
  const dim3 b = launch_->block;
  for (int i = 0; i < n_threads_; ++i) {
    Thread& t = threads_[static_cast<size_t>(i)];
    const unsigned u = static_cast<unsigned>(i);
    t.idx = uint3{u % b.x, u / b.x % b.y, u / (b.x * b.y)};
    t.linear = i;
    t.state = State::runnable;
    t.fiber->reset(&BlockRunner::thread_main, &t);
  }
  for (Warp& w : warps_) {
    w.groups.clear();
    w.exited = 0;
  }
  barrier_arrived_ = 0;
  barrier_generation_ = 0;
  exited_ = 0;
  GT_EMU_RELEASE(&start_token_);

  // The order the runnable threads run in, round by round (a round runs
  // each to its next synchronisation point): fixed, or a new seeded
  // permutation every round, so that a thread reading what another has not
  // yet written (a missing barrier) meets it in some round.
  const Config& cfg = config();
  const ThreadOrder order =
      cfg.thread_order != ThreadOrder::block ? cfg.thread_order
      : cfg.block_order == BlockOrder::reverse ? ThreadOrder::reverse
                                               : ThreadOrder::forward;
  // Seeded by the seed, the kernel and the block alone: a test rerun on its
  // own (--gtest_filter) meets the same permutations.
  uint64_t rng = splitmix(cfg.thread_seed ^ splitmix(std::hash<std::string>{}(launch_->name) ^
                                                      splitmix(linear_block)));
  order_.resize(static_cast<size_t>(n_threads_));
  for (int i = 0; i < n_threads_; ++i) order_[static_cast<size_t>(i)] = i;
  while (exited_ < n_threads_ && !faulted_) {
    bool ran = false;
    if (order == ThreadOrder::warps) {
      // Each warp in turn, as long as any of its lanes can run: through
      // its warp collectives, up to the next barrier (or its exit), before
      // the next warp runs at all. A barrier completing ends the round, so
      // that every round after one starts with warp 0 again.
      const unsigned generation = barrier_generation_;
      for (int w0 = 0; w0 < n_threads_ && !faulted_ && barrier_generation_ == generation;
           w0 += kWarp) {
        for (bool again = true; again && !faulted_ && barrier_generation_ == generation;) {
          again = false;
          for (int i = w0; i < std::min(n_threads_, w0 + kWarp) && !faulted_ &&
                           barrier_generation_ == generation;
               ++i) {
            if (threads_[static_cast<size_t>(i)].state != State::runnable) continue;
            run_thread(i);
            ran = again = true;
          }
        }
      }
    }
    if (order == ThreadOrder::random)
      for (int k = n_threads_ - 1; k > 0; --k) {
        rng = splitmix(rng);
        std::swap(order_[static_cast<size_t>(k)], order_[rng % static_cast<uint64_t>(k + 1)]);
      }
    for (int k = 0; k < n_threads_ && !faulted_ && order != ThreadOrder::warps; ++k) {
      const int i = order == ThreadOrder::reverse ? n_threads_ - 1 - k
                    : order == ThreadOrder::random ? order_[static_cast<size_t>(k)]
                                                   : k;
      if (threads_[static_cast<size_t>(i)].state != State::runnable) continue;
      run_thread(i);
      ran = true;
    }
    // Nobody can run: the copies in flight land now (on a GPU they would
    // have by now), which may complete a phase someone waits for.
    if (!ran && exited_ < n_threads_ && !faulted_ && land_copies(nullptr) > 0) continue;
    if (!ran && exited_ < n_threads_ && !faulted_) {
      faulted_ = true;
      fault_code_ = cudaErrorLaunchFailure;
      fault_text_ = deadlock_report();
    }
  }
  if (!faulted_ && !async_.copies.empty()) {
    faulted_ = true;
    fault_code_ = cudaErrorLaunchFailure;
    fault_text_ = copies_in_flight_report();
  }
  GT_EMU_ACQUIRE(&exit_token_);
}

void BlockRunner::run_thread(int i) {
  Thread& t = threads_[static_cast<size_t>(i)];
  current_ = i;
  detail::g_thread_idx = t.idx;
  t.fiber->run();
  current_ = -1;
}

void BlockRunner::sync_block(Site site) {
  Thread& t = current();
  if (barrier_arrived_ > 0 && !same_site(site, barrier_site_))
    fault(cudaErrorLaunchFailure,
          "divergent __syncthreads: " + thread_name(t) + " arrives at " + where(site) + " while " +
              std::to_string(barrier_arrived_) + " thread(s) of its block wait at " +
              where(barrier_site_));
  if (exited_ > 0) {
    std::string who;
    for (int i = 0; i < n_threads_ && who.empty(); ++i)
      if (threads_[static_cast<size_t>(i)].state == State::exited)
        who = thread_name(threads_[static_cast<size_t>(i)]);
    fault(cudaErrorLaunchFailure, "divergent __syncthreads: " + thread_name(t) + " arrives at " +
                                      where(site) + " but " + std::to_string(exited_) +
                                      " thread(s) of its block, first " + who +
                                      ", have exited and will never arrive");
  }
  t.state = State::at_barrier;
  t.site = site;
  barrier_site_ = site;
  char* token = &barrier_tokens_[barrier_generation_ & 1u];
  GT_EMU_RELEASE(token);
  if (++barrier_arrived_ == n_threads_) {
    barrier_arrived_ = 0;
    ++barrier_generation_;
    for (int i = 0; i < n_threads_; ++i) threads_[static_cast<size_t>(i)].state = State::runnable;
  }
  // The last to arrive yields too: the next round starts in the scheduler's
  // order (forward, reverse, or a new random permutation), not with it.
  t.fiber->yield(false);
  GT_EMU_ACQUIRE(token);
}

uint64_t BlockRunner::warp_collective(detail::WarpOp op, unsigned mask, uint64_t value, int arg,
                                      int width, Site site) {
  Thread& t = current();
  t.op = op;
  t.mask = mask;
  t.value = value;
  t.arg = arg;
  t.width = width;
  t.payload = nullptr;
  join_group(t, site);
  return t.result;
}

void BlockRunner::warp_mma(const detail::MmaLane& lane, Site site) {
  warp_exchange(detail::WarpOp::mma, &lane, site);
}

void BlockRunner::warp_exchange(detail::WarpOp op, const void* payload, Site site) {
  Thread& t = current();
  t.op = op;
  t.mask = ~0u;
  t.value = 0;
  t.arg = 0;
  t.width = kWarp;
  t.payload = payload;
  join_group(t, site);
}

void BlockRunner::join_group(Thread& t, Site site) {
  const detail::WarpOp op = t.op;
  const unsigned mask = t.mask;
  const int width = t.width;
  const int w = t.linear / kWarp, lane = t.linear % kWarp;
  // Built only for a report: this is the emulator's hottest path.
  auto call = [&] { return std::string(op_name(op)) + "(mask " + hex(mask) + ") at " + where(site); };
  if (!(mask >> lane & 1u))
    fault(cudaErrorLaunchFailure, thread_name(t) + " calls " + call() + " with a mask that excludes itself");
  if (width < 1 || width > kWarp || (width & (width - 1)) != 0)
    fault(cudaErrorLaunchFailure, thread_name(t) + " calls " + call() + " with width " +
                                      std::to_string(width) + ", not a power of two in 1..32");
  const int lanes_here = std::min(kWarp, n_threads_ - w * kWarp);
  const unsigned existing = lanes_here == kWarp ? ~0u : (1u << lanes_here) - 1u;
  if (mask & ~existing)
    fault(cudaErrorLaunchFailure, thread_name(t) + " calls " + call() + ": lanes " +
                                      lanes(mask & ~existing) + " do not exist (the block has " +
                                      std::to_string(n_threads_) + " threads)");
  Warp& warp = warps_[static_cast<size_t>(w)];
  if (mask & warp.exited)
    fault(cudaErrorLaunchFailure, thread_name(t) + " calls " + call() + " but lanes " +
                                      lanes(mask & warp.exited) + " have exited and will never join");

  t.state = State::at_warp;
  t.site = site;
  size_t gi = 0;
  for (; gi < warp.groups.size(); ++gi) {
    const WarpGroup& g = warp.groups[gi];
    if (g.op == op && g.mask == mask && same_site(g.site, site)) break;
  }
  if (gi == warp.groups.size())
    warp.groups.push_back(WarpGroup{op, site, mask, 0u, width, warp.next_serial++});
  WarpGroup& g = warp.groups[gi];
  if (g.width != width)
    fault(cudaErrorLaunchFailure, thread_name(t) + " calls " + call() + " with width " +
                                      std::to_string(width) + " where lanes " + lanes(g.arrived) +
                                      " passed " + std::to_string(g.width));
  g.arrived |= 1u << lane;
  // Only __syncwarp orders memory; shuffles, votes and mma move values.
  char* token = op == detail::WarpOp::syncwarp ? &warp.tokens[g.serial % kWarpTokens] : nullptr;
  if (token) GT_EMU_RELEASE(token);
  if (g.arrived == mask) complete_group(w, gi);  // invalidates g
  else t.fiber->yield(false);
  if (token) GT_EMU_ACQUIRE(token);
}

void BlockRunner::complete_group(int w, size_t gi) {
  Warp& warp = warps_[static_cast<size_t>(w)];
  const WarpGroup g = warp.groups[gi];
  warp.groups.erase(warp.groups.begin() + static_cast<long>(gi));
  auto lane_thread = [&](int l) -> Thread& { return threads_[static_cast<size_t>(w * kWarp + l)]; };
  if (g.op == detail::WarpOp::mma) compute_mma(w, g.mask);
  if (g.op == detail::WarpOp::ptx_mma) compute_ptx_mma(w);
  if (g.op == detail::WarpOp::ldmatrix) compute_ldmatrix(w);
  uint64_t votes = 0;
  for (int l = 0; l < kWarp; ++l)
    if ((g.mask >> l & 1u) && lane_thread(l).value != 0) votes |= uint64_t{1} << l;
  for (int l = 0; l < kWarp; ++l) {
    if (!(g.mask >> l & 1u)) continue;
    Thread& t = lane_thread(l);
    switch (g.op) {
      case detail::WarpOp::ballot: t.result = votes; break;
      case detail::WarpOp::any: t.result = votes != 0; break;
      case detail::WarpOp::all: t.result = votes == g.mask; break;
      case detail::WarpOp::syncwarp:
      case detail::WarpOp::mma:
      case detail::WarpOp::ptx_mma:
      case detail::WarpOp::ldmatrix:
        t.result = 0;
        break;
      default: {
        const int j = source_lane(g.op, l, t.arg, g.width);
        t.result = (g.mask >> j & 1u) ? lane_thread(j).value : kPoison;
      }
    }
    t.state = State::runnable;
  }
}

std::string BlockRunner::deadlock_report() const {
  std::ostringstream out;
  out << "deadlock: no thread of the block can run";
  std::map<std::string, int> at_barrier;
  for (int i = 0; i < n_threads_; ++i) {
    const Thread& t = threads_[static_cast<size_t>(i)];
    if (t.state == State::at_barrier) ++at_barrier[where(t.site)];
  }
  for (const auto& [site, n] : at_barrier)
    out << "\n  " << n << " thread(s) wait at __syncthreads() " << site;
  for (size_t w = 0; w < warps_.size(); ++w) {
    for (const WarpGroup& g : warps_[w].groups) {
      out << "\n  warp " << w << " lanes " << lanes(g.arrived) << " wait in " << op_name(g.op)
          << "(mask " << hex(g.mask) << ") at " << where(g.site) << " for lanes "
          << lanes(g.mask & ~g.arrived);
      for (int l = 0; l < kWarp; ++l) {
        if (!((g.mask & ~g.arrived) >> l & 1u)) continue;
        const Thread& t = threads_[w * kWarp + static_cast<size_t>(l)];
        out << "\n    lane " << l << ": ";
        if (t.state == State::at_barrier) out << "waits at __syncthreads() " << where(t.site);
        else if (t.state == State::at_warp)
          out << "waits in " << op_name(t.op) << "(mask " << hex(t.mask) << ") at " << where(t.site);
        else if (t.state == State::at_mbarrier)
          out << "waits in mbarrier_wait at " << where(t.site);
        else if (t.state == State::at_warpgroup)
          out << "waits in a warpgroup collective at " << where(t.site);
        else out << (t.state == State::exited ? "exited" : "runnable");
      }
    }
  }
  out << mbarrier_waits_report() << warpgroup_waits_report();
  if (exited_ > 0) out << "\n  " << exited_ << " thread(s) exited";
  return out.str();
}

unsigned char* BlockRunner::dynamic_shared() { return smem_; }

bool BlockRunner::in_shared_memory(const void* p, size_t bytes) const {
  const auto* b = static_cast<const unsigned char*>(p);
  const size_t dyn = launch_ ? launch_->dynamic_smem : 0;
  if (smem_ && b >= smem_ && b + bytes <= smem_ + dyn) return true;
  if (__start_gt_emu_shared && b >= __start_gt_emu_shared && b + bytes <= __stop_gt_emu_shared)
    return true;
  // A GT_SHARED array of a template or inline function, declared in this block.
  for (const auto& [base, a] : shared_arrays_) {
    const auto* lo = static_cast<const unsigned char*>(base);
    if (a.serial == block_serial_ && b >= lo && b + bytes <= lo + a.bytes) return true;
  }
  return false;
}

}  // namespace gt::emu
