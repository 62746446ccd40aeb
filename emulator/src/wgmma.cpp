// wgmma on the emulated device (gt_emu/wgmma.hpp has the model). The rules,
// each a device fault naming the call site (the PTX ISA's, or marked as the
// emulator's stricter reading):
//   collective     all 128 threads of a warpgroup (4 whole warps, the first
//                  at a warp index divisible by 4) reach the same call with
//                  the same operation; a thread that exits while others of
//                  its group wait, or with mma_async groups in flight, is a
//                  fault; the threads agree on N, descriptors and flags
//                  (the emulator's reading: operands are warpgroup-uniform).
//   fence          an mma_async needs a wgmma.fence since the warpgroup's
//                  last wait_group (the accumulators were readable in
//                  between) or since the kernel's start.
//   descriptors    layout type 0..3, base offset 0 (other offsets are not
//                  modelled), every byte an operand reads inside the
//                  block's dynamic shared memory (the emulated shared window
//                  starts there), not in the destination of a bulk copy in
//                  flight, and unchanged by ordinary stores since the last
//                  fence.proxy.async (the tensor cores read through the
//                  async proxy).
//   wait_group     0..7 groups; the accumulators of a group hold NaN from
//                  its issue until a wait_group retires it.
#include <cmath>
#include <cstring>
#include <string>

#include "block_scheduler.hpp"
#include "config.hpp"
#include "diagnostics.hpp"
#include "sanitizer_hooks.hpp"

namespace gt::emu {

namespace detail {
void wgmma_fence(Site site) {
  block_runner().warpgroup_collective(WarpgroupOp::fence, nullptr, 0, site);
}
void wgmma_mma(const WgmmaLane& lane, Site site) {
  block_runner().warpgroup_collective(WarpgroupOp::mma, &lane, 0, site);
}
void wgmma_commit(Site site) {
  block_runner().warpgroup_collective(WarpgroupOp::commit, nullptr, 0, site);
}
void wgmma_wait(int pending, Site site) {
  block_runner().warpgroup_collective(WarpgroupOp::wait, nullptr, pending, site);
}
uint32_t shared_window_address(const void* p, Site site) {
  return block_runner().shared_window_address(p, site);
}
}  // namespace detail

namespace {

constexpr int kGroupThreads = 128;

std::string at(Site s) { return std::string(s.file) + ":" + std::to_string(s.line); }

const char* op_name(WarpgroupOp op) {
  switch (op) {
    case WarpgroupOp::fence: return "wgmma.fence";
    case WarpgroupOp::mma: return "wgmma.mma_async";
    case WarpgroupOp::commit: return "wgmma.commit_group";
    case WarpgroupOp::wait: return "wgmma.wait_group";
  }
  return "?";
}

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t f = uint32_t{bits} << 16;
  float x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

// A decoded matrix descriptor.
struct Descriptor {
  uint32_t start, lbo, sbo;
  unsigned base_offset;
  int units;  // 16-byte units per swizzle row: 8 (128B), 4 (64B), 2 (32B); 0: none
};

Descriptor decode(uint64_t d) {
  Descriptor x;
  x.start = static_cast<uint32_t>(d & 0x3FFFu) << 4;
  x.lbo = static_cast<uint32_t>((d >> 16) & 0x3FFFu) << 4;
  x.sbo = static_cast<uint32_t>((d >> 32) & 0x3FFFu) << 4;
  x.base_offset = static_cast<unsigned>((d >> 49) & 7u);
  const unsigned type = static_cast<unsigned>(d >> 62);
  x.units = type == 1 ? 8 : type == 2 ? 4 : type == 3 ? 2 : 0;
  return x;
}

// The window address of element (mn, k) (k in 0..15) of a bf16 operand:
// CUTLASS's canonical GMMA layouts, then the swizzle of the address.
uint32_t element_address(const Descriptor& x, bool mn_major, int mn, int k) {
  uint32_t a;
  const uint32_t w = static_cast<uint32_t>(x.units);
  if (!mn_major) {
    const uint32_t r = static_cast<uint32_t>(mn), c = static_cast<uint32_t>(k / 8);
    a = w == 0 ? x.start + (r % 8) * 16 + (r / 8) * x.sbo + c * x.lbo
               : x.start + (r % 8) * 16 * w + (r / 8) * x.sbo + c * 16;
    a += static_cast<uint32_t>(k % 8) * 2;
  } else {
    const uint32_t u = static_cast<uint32_t>(mn / 8), kk = static_cast<uint32_t>(k);
    a = w == 0 ? x.start + u * x.sbo + (kk % 8) * 16 + (kk / 8) * x.lbo
               : x.start + (u % w) * 16 + (u / w) * x.lbo + (kk % 8) * 16 * w + (kk / 8) * x.sbo;
    a += static_cast<uint32_t>(mn % 8) * 2;
  }
  return static_cast<uint32_t>(swizzle_address(a, static_cast<int>(16 * w)));
}

}  // namespace

uint32_t BlockRunner::shared_window_address(const void* p, Site site) {
  const auto* b = static_cast<const unsigned char*>(p);
  const size_t dyn = launch_ ? launch_->dynamic_smem : 0;
  if (!smem_ || b < smem_ || b >= smem_ + dyn)
    fault(cudaErrorLaunchFailure,
          "a wgmma descriptor at " + at(site) + " for " + address(p) +
              ", which is not in the block's dynamic shared memory: on the emulated device the "
              "shared window (what descriptors address) is the dynamic region");
  return static_cast<uint32_t>(b - smem_) + kDynamicWindow;
}

const unsigned char* BlockRunner::wgmma_operand_byte(uint32_t window_address, size_t bytes,
                                                     Site site) {
  const size_t dyn = launch_->dynamic_smem;
  if (window_address < kDynamicWindow || window_address - kDynamicWindow + bytes > dyn)
    fault(cudaErrorIllegalAddress,
          "wgmma.mma_async issued at " + at(site) + " reads shared window bytes " +
              std::to_string(window_address) + ".." + std::to_string(window_address + bytes) +
              ", outside the " + std::to_string(dyn) +
              " bytes of dynamic shared memory (window " + std::to_string(kDynamicWindow) + "..)");
  const unsigned char* p = smem_ + (window_address - kDynamicWindow);
  for (const BulkCopy& c : async_.copies)
    if (p < c.dst + c.map.box_bytes() && c.dst < p + bytes)
      fault(cudaErrorLaunchFailure,
            "wgmma.mma_async issued at " + at(site) + " reads " + shared_name(p) +
                ", the destination of the bulk tensor copy issued at " + at(c.site) +
                ", still in flight: wait on its mbarrier first");
  bool seen;
  {
    GtEmuHidden hidden;
    seen = std::memcmp(p, async_.async_view.data() + (p - smem_), bytes) == 0;
  }
  if (!seen)
    fault(cudaErrorLaunchFailure,
          "wgmma.mma_async issued at " + at(site) + " reads " + shared_name(p) +
              ", which ordinary stores changed since the last fence.proxy.async: the tensor "
              "cores read through the async proxy (fence_proxy_async_shared() in the writers, "
              "then a barrier, before the wgmma)");
  return p;
}

void BlockRunner::warpgroup_collective(WarpgroupOp op, const void* payload, int arg, Site site) {
  Thread& t = current();
  if (config().compute_capability < 90)
    fault(cudaErrorLaunchFailure, std::string(op_name(op)) + " at " + at(site) + " needs sm_90a");
  const int g = t.linear / kGroupThreads;
  if ((g + 1) * kGroupThreads > n_threads_)
    fault(cudaErrorLaunchFailure,
          std::string(op_name(op)) + " at " + at(site) + " by " + thread_name(t) +
              ": its warpgroup (threads " + std::to_string(g * kGroupThreads) + ".." +
              std::to_string(g * kGroupThreads + kGroupThreads - 1) +
              ") is not 4 whole warps; the block has " + std::to_string(n_threads_) + " threads");
  Warpgroup& wg = async_.warpgroups[static_cast<size_t>(g)];
  if (wg.arrived == 0) {
    wg.op = op;
    wg.site = site;
    wg.arg = arg;
  } else if (wg.op != op || !(wg.site.line == site.line && std::strcmp(wg.site.file, site.file) == 0) ||
             wg.arg != arg) {
    fault(cudaErrorLaunchFailure,
          "divergent warpgroup: " + thread_name(t) + " calls " + op_name(op) + " at " + at(site) +
              " while " + std::to_string(wg.arrived) + " thread(s) of warpgroup " +
              std::to_string(g) + " wait in " + op_name(wg.op) + " at " + at(wg.site));
  }
  t.payload = payload;
  t.site = site;
  t.state = State::at_warpgroup;
  if (++wg.arrived == kGroupThreads) {
    wg.arrived = 0;
    complete_warpgroup(g);  // may fault (in this fiber)
    for (int i = g * kGroupThreads; i < (g + 1) * kGroupThreads; ++i)
      threads_[static_cast<size_t>(i)].state = State::runnable;
  }
  t.fiber->yield(false);
}

void BlockRunner::complete_warpgroup(int g) {
  GtEmuHidden hidden;  // the emulator's bookkeeping, not the program's accesses
  Warpgroup& wg = async_.warpgroups[static_cast<size_t>(g)];
  switch (wg.op) {
    case WarpgroupOp::fence: wg.fenced = true; break;
    case WarpgroupOp::mma: issue_mma(wg); break;
    case WarpgroupOp::commit:
      wg.groups.push_back(std::move(wg.uncommitted));
      wg.uncommitted.clear();
      break;
    case WarpgroupOp::wait:
      if (wg.arg < 0 || wg.arg > 7)
        fault(cudaErrorLaunchFailure, "wgmma.wait_group at " + at(wg.site) + ": " +
                                          std::to_string(wg.arg) + " is not 0..7");
      while (wg.groups.size() > static_cast<size_t>(wg.arg)) retire_oldest_group(wg);
      wg.fenced = false;
      break;
  }
}

void BlockRunner::issue_mma(Warpgroup& wg) {
  GtEmuHidden hidden;  // the tensor cores' bookkeeping and register accesses
  const int g = static_cast<int>(&wg - async_.warpgroups.data());
  PendingMma m;
  m.site = wg.site;
  m.lanes.reserve(kGroupThreads);
  for (int i = 0; i < kGroupThreads; ++i)
    m.lanes.push_back(*static_cast<const detail::WgmmaLane*>(
        threads_[static_cast<size_t>(g * kGroupThreads + i)].payload));
  const detail::WgmmaLane& first = m.lanes.front();
  const std::string where = "wgmma.mma_async at " + at(wg.site);
  if (!wg.fenced)
    fault(cudaErrorLaunchFailure,
          where + " without a wgmma.fence since the warpgroup's last wait_group (or the "
                  "kernel's start): the accumulators and A registers were ordinary registers "
                  "in between");
  if (first.n < 8 || first.n > 256 || first.n % 8 != 0)
    fault(cudaErrorLaunchFailure, where + ": N = " + std::to_string(first.n) +
                                      " is not a multiple of 8 in 8..256");
  for (const detail::WgmmaLane& l : m.lanes)
    if (l.n != first.n || l.desc_b != first.desc_b || (l.a_regs == nullptr) != (first.a_regs == nullptr) ||
        (!first.a_regs && l.desc_a != first.desc_a) || l.trans_a != first.trans_a ||
        l.trans_b != first.trans_b || l.scale_d != first.scale_d)
      fault(cudaErrorLaunchFailure,
            where + ": the warpgroup's threads disagree on N, the descriptors or the flags");
  for (const uint64_t desc : {first.a_regs ? uint64_t{0} : first.desc_a, first.desc_b}) {
    if (desc == 0) continue;
    const Descriptor x = decode(desc);
    if (x.base_offset != 0)
      fault(cudaErrorLaunchFailure, where + ": a descriptor with base offset " +
                                        std::to_string(x.base_offset) +
                                        " (the emulator models 0: patterns aligned to their repeat)");
    // Base offset 0 says the swizzle pattern starts at a multiple of its
    // repeat (8 rows of 16 W bytes): the start must lie in such a repeat's
    // first row (a k16 step into it is fine).
    const uint32_t row = 16u * static_cast<uint32_t>(x.units), repeat = 8 * row;
    if (x.units != 0 && x.start % repeat >= row)
      fault(cudaErrorLaunchFailure,
            where + ": a " + std::to_string(row) + "-byte swizzled operand starting at window " +
                "address " + std::to_string(x.start) + ", which is row " +
                std::to_string(x.start % repeat / row) + " of a " + std::to_string(repeat) +
                "-byte swizzle repeat, with base offset 0 (which says the pattern starts at a "
                "multiple of " + std::to_string(repeat) + " bytes): align the tile to " +
                std::to_string(repeat) + " bytes");
  }
  // Capture what the accumulators add to, then poison them until retired.
  const size_t per = static_cast<size_t>(first.n / 2);
  auto writes_d = [&](const std::vector<PendingMma>& ms) {
    for (const PendingMma& p : ms)
      if (p.lanes.front().d == first.d) return true;
    return false;
  };
  bool in_flight = writes_d(wg.uncommitted);
  for (const std::vector<PendingMma>& grp : wg.groups) in_flight = in_flight || writes_d(grp);
  m.chained = first.scale_d && in_flight;
  if (first.scale_d && !m.chained) {
    m.d_in.resize(per * kGroupThreads);
    for (int i = 0; i < kGroupThreads; ++i)
      std::memcpy(&m.d_in[per * static_cast<size_t>(i)], m.lanes[static_cast<size_t>(i)].d,
                  per * sizeof(float));
  }
  for (const detail::WgmmaLane& l : m.lanes)
    for (size_t i = 0; i < per; ++i) l.d[i] = std::nanf("");
  wg.uncommitted.push_back(std::move(m));
}

void BlockRunner::retire_oldest_group(Warpgroup& wg) {
  std::vector<PendingMma> group = std::move(wg.groups.front());
  wg.groups.pop_front();
  GtEmuHidden hidden;
  for (const PendingMma& m : group) {
    const detail::WgmmaLane& first = m.lanes.front();
    const int n = first.n;
    float A[64][16];
    std::vector<float> B(static_cast<size_t>(n) * 16);  // B[nn][k]
    auto read = [&](uint32_t window) {
      uint16_t v;
      std::memcpy(&v, wgmma_operand_byte(window, 2, m.site), 2);
      return bf16_bits_to_float(v);
    };
    if (first.a_regs) {
      // Warp w of the group holds rows 16 w .. 16 w + 15 as mma.sync's A.
      for (int t = 0; t < kGroupThreads; ++t) {
        const uint32_t* a = m.lanes[static_cast<size_t>(t)].a_regs;
        const int w = t / 32, l = t % 32, gq = l / 4, tq = l % 4;
        for (int r = 0; r < 4; ++r) {
          const int row = 16 * w + gq + (r & 1) * 8, col = 2 * tq + (r >> 1) * 8;
          A[row][col] = bf16_bits_to_float(static_cast<uint16_t>(a[r] & 0xFFFFu));
          A[row][col + 1] = bf16_bits_to_float(static_cast<uint16_t>(a[r] >> 16));
        }
      }
    } else {
      const Descriptor x = decode(first.desc_a);
      for (int r = 0; r < 64; ++r)
        for (int k = 0; k < 16; ++k) A[r][k] = read(element_address(x, first.trans_a, r, k));
    }
    const Descriptor xb = decode(first.desc_b);
    for (int c = 0; c < n; ++c)
      for (int k = 0; k < 16; ++k)
        B[static_cast<size_t>(c) * 16 + static_cast<size_t>(k)] =
            read(element_address(xb, first.trans_b, c, k));
    const size_t per = static_cast<size_t>(n / 2);
    for (int t = 0; t < kGroupThreads; ++t) {
      const int w = t / 32, l = t % 32;
      float* d = m.lanes[static_cast<size_t>(t)].d;
      for (size_t i = 0; i < per; ++i) {
        const int row = 16 * w + l / 4 + 8 * static_cast<int>((i / 2) % 2);
        const int col = 8 * static_cast<int>(i / 4) + 2 * (l % 4) + static_cast<int>(i % 2);
        float acc = !first.scale_d ? 0.f
                    : m.chained    ? d[i]
                                   : m.d_in[per * static_cast<size_t>(t) + i];
        for (int k = 0; k < 16; ++k)
          acc += A[row][k] * B[static_cast<size_t>(col) * 16 + static_cast<size_t>(k)];
        d[i] = acc;
      }
    }
  }
}

void BlockRunner::check_exit_warpgroup(const Thread& t) {
  const size_t g = static_cast<size_t>(t.linear / kGroupThreads);
  if (g >= async_.warpgroups.size()) return;
  const Warpgroup& wg = async_.warpgroups[g];
  if (wg.arrived > 0)
    fault(cudaErrorLaunchFailure, thread_name(t) + " exited while " + std::to_string(wg.arrived) +
                                      " thread(s) of its warpgroup wait in " + op_name(wg.op) +
                                      " at " + at(wg.site));
  // The first mma_async not retired (committed groups may be empty).
  const PendingMma* first = nullptr;
  for (const std::vector<PendingMma>& grp : wg.groups)
    if (!first && !grp.empty()) first = &grp.front();
  if (!first && !wg.uncommitted.empty()) first = &wg.uncommitted.front();
  if (first)
    fault(cudaErrorLaunchFailure,
          thread_name(t) + " exited with wgmma.mma_async in flight (the first issued at " +
              at(first->site) +
              "): commit and wait_group<0> before the accumulators go out of scope");
}

std::string BlockRunner::warpgroup_waits_report() const {
  std::string out;
  for (size_t g = 0; g < async_.warpgroups.size(); ++g) {
    const Warpgroup& wg = async_.warpgroups[g];
    if (wg.arrived > 0)
      out += "\n  " + std::to_string(wg.arrived) + " thread(s) of warpgroup " +
             std::to_string(g) + " wait in " + op_name(wg.op) + " at " + at(wg.site) +
             " for the rest of its 128";
  }
  return out;
}

}  // namespace gt::emu
