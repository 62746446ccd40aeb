// mbarriers, bulk tensor copies and the async-proxy fence on the emulated
// device (gt_emu/async.hpp has the model). The rules, each a device fault
// naming the call site when broken (the PTX ISA's, unless marked as the
// emulator's own limit):
//   mbarrier.init     8-byte aligned, in shared memory; count in 1..2^20-1;
//                     not over a live mbarrier (PTX leaves that undefined:
//                     mbarrier.inval first).
//   any operation     on a live mbarrier whose 8 bytes still hold what init
//                     left (an ordinary store over a live barrier corrupts
//                     it on a GPU); by the initializing thread, or by
//                     another only after a __syncthreads() that followed
//                     the init (the init is an ordinary shared-memory write).
//   arrive            not more arrivals in one phase than the barrier's count.
//   expect_tx         sm_90; the tx-count stays within +-(2^20 - 1).
//   wait (parity)     parity 0 or 1; returns once the phase of that parity
//                     has completed (current phase parity != parity).
//   bulk tensor copy  sm_90; a tensor map our cuTensorMapEncodeTiled wrote,
//                     of the copy's rank, 64-byte aligned; the destination
//                     128-byte aligned and wholly in shared memory, over no
//                     live mbarrier and no other copy's destination in
//                     flight; the map's global extent inside one device
//                     allocation; the mbarrier's init made visible to the
//                     async proxy (fence.proxy.async.shared::cta or
//                     fence.mbarrier_init by the initializing thread after
//                     init) before the copy is issued.
//   block exit        no copy still in flight (the copy engine would write
//                     into shared memory that the next block owns).
// A phase that never completes is a deadlock, reported with the barrier's
// arrivals and tx-count: a wrong expected byte count shows there.
#include <cstdio>
#include <cstring>
#include <string>

#include "block_scheduler.hpp"
#include "config.hpp"
#include "diagnostics.hpp"
#include "emulator.hpp"

#include "sanitizer_hooks.hpp"

namespace gt::emu {

namespace detail {
void mbarrier_init(uint64_t* bar, unsigned count, Site site) {
  block_runner().mbarrier_init(bar, count, site);
}
void mbarrier_arrive(uint64_t* bar, unsigned count, unsigned tx_bytes, Site site) {
  block_runner().mbarrier_arrive(bar, count, tx_bytes, site);
}
void mbarrier_expect_tx(uint64_t* bar, unsigned bytes, Site site) {
  block_runner().mbarrier_expect_tx(bar, bytes, site);
}
void mbarrier_wait(uint64_t* bar, unsigned parity, Site site) {
  block_runner().mbarrier_wait(bar, parity, site);
}
void mbarrier_inval(uint64_t* bar, Site site) { block_runner().mbarrier_inval(bar, site); }
void fence_proxy_async(Site site) { block_runner().fence_proxy_async(site); }
void tma_load(void* dst, const CUtensorMap* map, const int* coords, int rank, uint64_t* bar,
              Site site) {
  block_runner().tma_load(dst, map, coords, rank, bar, site);
}
}  // namespace detail

namespace {

constexpr unsigned kMaxArrivals = (1u << 20) - 1;
constexpr int64_t kMaxTx = (int64_t{1} << 20) - 1;
constexpr uint64_t kTokenBase = 0x6d62617272696572ull;  // "mbarrier"

std::string at(Site s) { return std::string(s.file) + ":" + std::to_string(s.line); }

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  return x < y + bn && y < x + an;
}

}  // namespace

std::string BlockRunner::shared_name(const void* p) const {
  const auto* b = static_cast<const unsigned char*>(p);
  const size_t dyn = launch_ ? launch_->dynamic_smem : 0;
  if (smem_ && b >= smem_ && b < smem_ + dyn)
    return "dynamic shared byte " + std::to_string(b - smem_);
  return "shared " + address(p);
}

MBarrier& BlockRunner::live_mbarrier(const void* bar, const char* op, Site site) {
  auto it = async_.barriers.find(bar);
  if (it == async_.barriers.end())
    fault(cudaErrorLaunchFailure,
          std::string(op) + " at " + at(site) + ": " +
              (in_shared_memory(bar, 8) ? shared_name(bar) : "address " + address(bar) + ", not shared memory,") +
              " is not an initialized mbarrier of this block (mbarrier.init it first)");
  MBarrier& b = it->second;
  bool intact;
  {
    GtEmuHidden hidden;
    intact = std::memcmp(bar, &b.token, sizeof b.token) == 0;
  }
  if (!intact)
    fault(cudaErrorLaunchFailure,
          std::string(op) + " at " + at(site) + ": the 8 bytes of the mbarrier at " +
              shared_name(bar) + " (initialized at " + at(b.init_site) +
              ") were overwritten since: an ordinary store or a copy over a live mbarrier "
              "corrupts it");
  if (current_ != b.init_thread && barrier_generation_ == b.init_generation)
    fault(cudaErrorLaunchFailure,
          std::string(op) + " at " + at(site) + ": " + thread_name(current()) +
              " uses the mbarrier at " + shared_name(bar) + " that " +
              thread_name(threads_[static_cast<size_t>(b.init_thread)]) + " initialized at " +
              at(b.init_site) + " with no __syncthreads() since to make the init visible");
  return b;
}

void BlockRunner::mbarrier_init(uint64_t* bar, unsigned count, Site site) {
  GtEmuHidden hidden;  // the emulator's bookkeeping, not the program's accesses
  char buf[160];
  if (reinterpret_cast<uintptr_t>(bar) % 8 != 0 || !in_shared_memory(bar, 8)) {
    std::snprintf(buf, sizeof buf, "%p is not an 8-byte aligned shared-memory address", static_cast<void*>(bar));
    fault(cudaErrorLaunchFailure, "mbarrier.init at " + at(site) + ": " + buf);
  }
  if (count < 1 || count > kMaxArrivals)
    fault(cudaErrorLaunchFailure, "mbarrier.init at " + at(site) + ": count " +
                                      std::to_string(count) + " is outside 1..2^20-1");
  auto it = async_.barriers.find(bar);
  if (it != async_.barriers.end())
    fault(cudaErrorLaunchFailure,
          "mbarrier.init at " + at(site) + " over the live mbarrier at " + shared_name(bar) +
              " (initialized at " + at(it->second.init_site) +
              "): PTX leaves re-initializing undefined; mbarrier.inval it first");
  for (const BulkCopy& c : async_.copies)
    if (overlaps(bar, 8, c.dst, c.map.box_bytes()))
      fault(cudaErrorLaunchFailure, "mbarrier.init at " + at(site) + " inside the destination of the "
                                    "bulk tensor copy issued at " + at(c.site) + ", still in flight");
  MBarrier b;
  b.count = b.pending = count;
  b.token = kTokenBase ^ ++async_.serial;
  b.init_site = site;
  b.init_thread = current_;
  b.init_generation = barrier_generation_;
  std::memcpy(bar, &b.token, sizeof b.token);
  async_.barriers.emplace(bar, b);
}

void BlockRunner::try_complete_phase(MBarrier& b, const void* bar) {
  if (b.pending != 0 || b.tx != 0) return;
  ++b.phase;
  b.pending = b.count;
  b.expected_tx = b.landed_tx = 0;
  for (int i = 0; i < n_threads_; ++i) {
    Thread& t = threads_[static_cast<size_t>(i)];
    if (t.state == State::at_mbarrier && t.wait_bar == bar) t.state = State::runnable;
  }
}

void BlockRunner::mbarrier_arrive(uint64_t* bar, unsigned count, unsigned tx_bytes, Site site) {
  GtEmuHidden hidden;  // the emulator's bookkeeping, not the program's accesses
  MBarrier& b = live_mbarrier(bar, "mbarrier.arrive", site);
  // A correct pipeline re-arms a stage only after the stage's consumers have
  // waited on it, which lands its copies and completes the phase: an arrival
  // beyond the count means nobody waited (on a GPU, a race on whether the
  // copies had landed; here always reported).
  if (count > b.pending)
    fault(cudaErrorLaunchFailure,
          "mbarrier.arrive at " + at(site) + " by " + thread_name(current()) + ": phase " +
              std::to_string(b.phase) + " of the mbarrier at " + shared_name(bar) +
              " has had all " + std::to_string(b.count) + " arrivals its init (" +
              at(b.init_site) + ") asked for, with " + std::to_string(b.tx) +
              " tx bytes outstanding: more arrivals in one phase than its count" +
              (b.tx != 0 ? " (its copies have not landed: nobody waited on this phase before "
                           "the barrier was re-armed)"
                         : ""));
  if (tx_bytes) mbarrier_expect_tx(bar, tx_bytes, site);  // completes nothing: count > 0 pending
  GT_EMU_RELEASE(&b.tsan_token);
  b.pending -= count;
  try_complete_phase(b, bar);
}

void BlockRunner::mbarrier_expect_tx(uint64_t* bar, unsigned bytes, Site site) {
  GtEmuHidden hidden;  // the emulator's bookkeeping, not the program's accesses
  if (config().compute_capability < 90)
    fault(cudaErrorLaunchFailure, "mbarrier.expect_tx at " + at(site) + " needs sm_90");
  MBarrier& b = live_mbarrier(bar, "mbarrier.expect_tx", site);
  b.tx += bytes;
  b.expected_tx += bytes;
  if (b.tx > kMaxTx || b.tx < -kMaxTx)
    fault(cudaErrorLaunchFailure, "mbarrier.expect_tx at " + at(site) + ": the tx-count of the "
                                  "mbarrier at " + shared_name(bar) + " reaches " +
                                      std::to_string(b.tx) + " bytes, outside +-(2^20-1)");
  // Copies that landed first left the count negative: this may zero it.
  try_complete_phase(b, bar);
}

void BlockRunner::mbarrier_wait(uint64_t* bar, unsigned parity, Site site) {
  if (parity > 1)
    fault(cudaErrorLaunchFailure, "mbarrier.try_wait.parity at " + at(site) + ": parity " +
                                      std::to_string(parity) + " is not 0 or 1");
  for (;;) {
    MBarrier& b = live_mbarrier(bar, "mbarrier.try_wait.parity", site);
    // The copies this barrier tracks land only now: until a thread waits,
    // their destinations hold poison. (Landing erases no barrier: b stays.)
    land_copies(bar);
    if ((b.phase & 1u) != parity) {
      GT_EMU_ACQUIRE(&b.tsan_token);
      return;
    }
    Thread& t = current();
    t.state = State::at_mbarrier;
    t.site = site;
    t.wait_bar = bar;
    t.wait_parity = parity;
    t.fiber->yield(false);
  }
}

void BlockRunner::mbarrier_inval(uint64_t* bar, Site site) {
  GtEmuHidden hidden;  // the emulator's bookkeeping, not the program's accesses
  live_mbarrier(bar, "mbarrier.inval", site);
  for (const BulkCopy& c : async_.copies)
    if (c.bar == bar)
      fault(cudaErrorLaunchFailure, "mbarrier.inval at " + at(site) + ": the bulk tensor copy "
                                    "issued at " + at(c.site) + " still completes on it");
  for (int i = 0; i < n_threads_; ++i) {
    const Thread& t = threads_[static_cast<size_t>(i)];
    if (t.state == State::at_mbarrier && t.wait_bar == bar)
      fault(cudaErrorLaunchFailure, "mbarrier.inval at " + at(site) + " while " + thread_name(t) +
                                        " waits on it at " + at(t.site));
  }
  async_.barriers.erase(bar);
  std::memset(bar, 0xFF, 8);
}

void BlockRunner::fence_proxy_async(Site) {
  GtEmuHidden hidden;  // the emulator's bookkeeping, not the program's accesses
  for (auto& [addr, b] : async_.barriers)
    if (b.init_thread == current_) b.async_visible = true;
  // Ordinary stores so far become what the async proxy sees (all of them:
  // the emulator does not know which thread wrote what).
  if (async_.async_view.empty()) return;
  // Copies in flight are poisoned for ASan: their bytes are read too (what
  // the async proxy sees of them is replaced when they land).
  for (const BulkCopy& c : async_.copies) GT_EMU_LANDED(c.dst, c.map.box_bytes());
  std::memcpy(async_.async_view.data(), smem_, async_.async_view.size());
  for (const BulkCopy& c : async_.copies) GT_EMU_IN_FLIGHT(c.dst, c.map.box_bytes());
}

void BlockRunner::tma_load(void* dst, const CUtensorMap* map, const int* coords, int rank,
                           uint64_t* bar, Site site) {
  GtEmuHidden hidden;  // the emulator's bookkeeping, not the program's accesses
  const std::string op = "cp.async.bulk.tensor." + std::to_string(rank) + "d at " + at(site);
  if (config().compute_capability < 90) fault(cudaErrorLaunchFailure, op + " needs sm_90");
  std::string why;
  const EmuTensorMap* m = decode_tensor_map(map, &why);
  if (!m) fault(cudaErrorLaunchFailure, op + ": " + why);
  if (m->rank != rank)
    fault(cudaErrorLaunchFailure, op + " through a tensor map of rank " + std::to_string(m->rank));
  const size_t bytes = m->box_bytes();
  if (reinterpret_cast<uintptr_t>(dst) % 128 != 0)
    fault(cudaErrorMisalignedAddress,
          op + ": the destination " + shared_name(dst) + " is not 128-byte aligned");
  if (!in_shared_memory(dst, bytes))
    fault(cudaErrorIllegalAddress, op + ": the box's " + std::to_string(bytes) + " bytes at " +
                                       address(dst) + " are not all in the block's shared memory");
  MBarrier& b = live_mbarrier(bar, op.c_str(), site);
  if (!b.async_visible)
    fault(cudaErrorLaunchFailure,
          op + ": the mbarrier at " + shared_name(bar) + " was initialized at " + at(b.init_site) +
              " but never made visible to the async proxy: fence.proxy.async.shared::cta (or "
              "fence.mbarrier_init) by the initializing thread after mbarrier.init");
  if (!device_range(reinterpret_cast<const void*>(m->base), m->extent_bytes()))
    fault(cudaErrorIllegalAddress,
          op + ": the tensor map's global extent (" + std::to_string(m->extent_bytes()) +
              " bytes from " + address(reinterpret_cast<const void*>(m->base)) +
              ") is not inside one device allocation");
  for (const auto& [addr, other] : async_.barriers)
    if (overlaps(dst, bytes, addr, 8))
      fault(cudaErrorLaunchFailure, op + ": the destination covers the live mbarrier at " +
                                        shared_name(addr) + " (initialized at " +
                                        at(other.init_site) + ")");
  for (const BulkCopy& c : async_.copies)
    if (overlaps(dst, bytes, c.dst, c.map.box_bytes()))
      fault(cudaErrorLaunchFailure, op + ": the destination overlaps that of the copy issued at " +
                                        at(c.site) + ", still in flight");
  BulkCopy c{static_cast<unsigned char*>(dst), *m, {}, bar, site, current_};
  for (int i = 0; i < rank; ++i) c.coords[i] = coords[i];
  // Until it lands, the destination holds nothing a reader may use.
  std::memset(dst, 0xFF, bytes);
  GT_EMU_IN_FLIGHT(dst, bytes);
  async_.copies.push_back(c);
  // Threads asleep on the barrier retry their wait, which lands the copy.
  for (int i = 0; i < n_threads_; ++i) {
    Thread& t = threads_[static_cast<size_t>(i)];
    if (t.state == State::at_mbarrier && t.wait_bar == bar) t.state = State::runnable;
  }
}

void BlockRunner::land(const BulkCopy& c) {
  const EmuTensorMap& m = c.map;
  GtEmuHidden hidden;  // the copy engine's writes, not a CUDA thread's
  GT_EMU_LANDED(c.dst, m.box_bytes());
  const int rank = m.rank, eb = m.elem_bytes;
  const auto* base = reinterpret_cast<const unsigned char*>(m.base);
  // The swizzle XORs bits of the shared-window address: dynamic shared
  // memory starts at kDynamicWindow in the window (block_scheduler.hpp); a
  // static array's host address keeps its declared alignment.
  const bool dynamic = smem_ && c.dst >= smem_ && c.dst < smem_ + launch_->dynamic_smem;
  const uintptr_t window =
      dynamic ? reinterpret_cast<uintptr_t>(smem_) - kDynamicWindow : 0;
  // Row by row (every index but the innermost), in the box's packed order.
  int idx[5] = {0, 0, 0, 0, 0};
  size_t off = 0;
  const size_t row_bytes = size_t{m.box[0]} * static_cast<size_t>(eb);
  for (bool more = true; more; off += row_bytes) {
    bool row_in = true;
    uint64_t row_src = 0;
    for (int d = 1; d < rank; ++d) {
      const int64_t g = int64_t{c.coords[d]} + idx[d];
      if (g < 0 || static_cast<uint64_t>(g) >= m.dim[d]) row_in = false;
      else row_src += static_cast<uint64_t>(g) * m.stride[d];
    }
    for (int j = 0; j < m.box[0]; ++j) {
      const int64_t g = int64_t{c.coords[0]} + j;
      const uintptr_t a =
          reinterpret_cast<uintptr_t>(c.dst) - window + off + static_cast<size_t>(j * eb);
      auto* out = reinterpret_cast<unsigned char*>(window + swizzle_address(a, m.swizzle_bytes));
      if (row_in && g >= 0 && static_cast<uint64_t>(g) < m.dim[0])
        std::memcpy(out, base + row_src + static_cast<uint64_t>(g) * m.stride[0],
                    static_cast<size_t>(eb));
      else std::memset(out, m.oob_nan ? 0xFF : 0x00, static_cast<size_t>(eb));
    }
    more = false;
    for (int d = 1; d < rank && !more; ++d) {
      if (++idx[d] < m.box[d]) more = true;
      else idx[d] = 0;
    }
  }
  // The copy engine writes through the async proxy: both views hold it.
  // (The swizzle keeps every byte inside [dst, dst + box bytes): it permutes
  // 16-byte chunks within a 128-byte aligned row.)
  if (dynamic)
    std::memcpy(async_.async_view.data() + (c.dst - smem_), c.dst, m.box_bytes());
  auto it = async_.barriers.find(c.bar);
  if (it == async_.barriers.end()) return;  // inval refuses while copies are in flight
  MBarrier& b = it->second;
  b.tx -= static_cast<int64_t>(m.box_bytes());
  b.landed_tx += static_cast<int64_t>(m.box_bytes());
  try_complete_phase(b, c.bar);
}

void BlockRunner::reset_async() {
  for (const BulkCopy& c : async_.copies) GT_EMU_LANDED(c.dst, c.map.box_bytes());
  async_.barriers.clear();
  async_.copies.clear();
  async_.warpgroups.clear();
}

size_t BlockRunner::land_copies(const void* bar) {
  GtEmuHidden hidden;  // the emulator's bookkeeping, not the program's accesses
  size_t n = 0;
  for (size_t i = 0; i < async_.copies.size();) {
    if (bar && async_.copies[i].bar != bar) {
      ++i;
      continue;
    }
    const BulkCopy c = async_.copies[i];
    async_.copies.erase(async_.copies.begin() + static_cast<long>(i));
    land(c);
    ++n;
  }
  return n;
}

std::string BlockRunner::mbarrier_waits_report() const {
  std::string out;
  for (const auto& [addr, b] : async_.barriers) {
    int waiting = 0;
    Site site{"", 0};
    unsigned parity = 0;
    for (int i = 0; i < n_threads_; ++i) {
      const Thread& t = threads_[static_cast<size_t>(i)];
      if (t.state != State::at_mbarrier || t.wait_bar != addr) continue;
      if (waiting++ == 0) {
        site = t.site;
        parity = t.wait_parity;
      }
    }
    if (waiting == 0) continue;
    out += "\n  " + std::to_string(waiting) + " thread(s) wait at mbarrier_wait " + at(site) +
           " (parity " + std::to_string(parity) + ") on the mbarrier at " + shared_name(addr) +
           " (initialized at " + at(b.init_site) + ", count " + std::to_string(b.count) +
           "): phase " + std::to_string(b.phase) + " still needs " + std::to_string(b.pending) +
           " arrival(s), tx-count " + std::to_string(b.tx) + " bytes (expect_tx announced " +
           std::to_string(b.expected_tx) + ", copies landed " + std::to_string(b.landed_tx) + ")";
    if (b.tx < 0)
      out += ": the copies landed more bytes than expect_tx announced";
    else if (b.tx > 0)
      out += ": expect_tx announced more bytes than the copies delivered";
  }
  return out;
}

std::string BlockRunner::copies_in_flight_report() const {
  const BulkCopy& c = async_.copies.front();
  return "the block's threads all exited with bulk tensor copies in flight (" +
         std::to_string(async_.copies.size()) + "), the first issued at " + at(c.site) + " by " +
         thread_name(threads_[static_cast<size_t>(c.thread)]) + " into " + shared_name(c.dst) +
         ": wait on their mbarrier before exiting (the copy engine would write into shared "
         "memory the next block owns)";
}

}  // namespace gt::emu
