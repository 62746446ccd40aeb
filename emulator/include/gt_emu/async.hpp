// Hopper's asynchronous data movement on the emulated device: mbarrier
// objects in shared memory, the tensor memory accelerator's bulk tensor
// copies (cp.async.bulk.tensor, "TMA") that complete on them, and the
// fences between the generic and the async proxy. Kernels reach them
// through kernels/cuda/async_sm90.cuh, which issues the PTX under nvcc.
//
// The model (emulator/src/async_proxy.cpp holds the rules, docs/EMULATOR.md
// lists them with the misuse each catches):
//   * An mbarrier is 8 bytes of shared memory whose state (phase parity,
//     pending arrivals of its count, tx-count in bytes) the emulator keeps
//     aside; the 8 bytes hold a token that an ordinary store over the
//     barrier destroys, and the next operation on it reports that.
//   * A phase completes when its pending arrivals and its tx-count both
//     reach zero: arrive decrements the arrivals, expect_tx raises the
//     tx-count, a landing copy lowers it by the bytes it wrote.
//   * A bulk tensor copy poisons its destination (NaN bytes) when issued
//     and lands only when a thread waits on its mbarrier (or when nothing
//     else can run): a thread that reads the tile without waiting reads
//     poison, and so does one still reading a stage buffer that a copy
//     was issued into.
//   * mbarrier_wait blocks the CUDA thread until the phase of the given
//     parity has completed (PTX's try_wait.parity in a loop).
#pragma once

#include <cuda.h>

#include <cstdint>

#include <cuda_runtime.h>  // the shadow header: NVIDIA's, then gt_emu/device.hpp

namespace gt::emu::detail {

void mbarrier_init(uint64_t* bar, unsigned count, Site site);
// Raises the phase's tx-count by tx_bytes (arrive.expect_tx; 0 for a
// plain arrive), then arrives `count` times. Returns nothing: the kernels
// wait by parity, not by the arrival token.
void mbarrier_arrive(uint64_t* bar, unsigned count, unsigned tx_bytes, Site site);
void mbarrier_expect_tx(uint64_t* bar, unsigned bytes, Site site);
void mbarrier_wait(uint64_t* bar, unsigned parity, Site site);
void mbarrier_inval(uint64_t* bar, Site site);
// fence.proxy.async.shared::cta and fence.mbarrier_init.release.cluster:
// both make this thread's mbarrier inits visible to the async proxy.
void fence_proxy_async(Site site);
// cp.async.bulk.tensor.<rank>d.shared::cluster.global.tile
//   .mbarrier::complete_tx::bytes [dst], [map, {coords}], [bar]
void tma_load(void* dst, const CUtensorMap* map, const int* coords, int rank, uint64_t* bar,
              Site site);
// The shared-window address of p, in dynamic shared memory (what
// __cvta_generic_to_shared gives; descriptors and swizzles use it). The
// dynamic region starts at window address 128 on the emulated device.
uint32_t shared_window_address(const void* p, Site site);

}  // namespace gt::emu::detail

namespace gt::emu {

#define GT_EMU_SITE const char *file = __builtin_FILE(), int line = __builtin_LINE()
inline void mbarrier_init(uint64_t* bar, unsigned count, GT_EMU_SITE) {
  detail::mbarrier_init(bar, count, {file, line});
}
inline void mbarrier_arrive(uint64_t* bar, GT_EMU_SITE) {
  detail::mbarrier_arrive(bar, 1, 0, {file, line});
}
inline void mbarrier_expect_tx(uint64_t* bar, unsigned bytes, GT_EMU_SITE) {
  detail::mbarrier_expect_tx(bar, bytes, {file, line});
}
inline void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes, GT_EMU_SITE) {
  detail::mbarrier_arrive(bar, 1, bytes, {file, line});
}
inline void mbarrier_wait(uint64_t* bar, unsigned parity, GT_EMU_SITE) {
  detail::mbarrier_wait(bar, parity, {file, line});
}
inline void mbarrier_inval(uint64_t* bar, GT_EMU_SITE) { detail::mbarrier_inval(bar, {file, line}); }
inline void fence_proxy_async(GT_EMU_SITE) { detail::fence_proxy_async({file, line}); }
template <int Rank>
inline void tma_load(void* dst, const CUtensorMap* map, const int (&coords)[Rank], uint64_t* bar,
                     GT_EMU_SITE) {
  detail::tma_load(dst, map, coords, Rank, bar, {file, line});
}
#undef GT_EMU_SITE

}  // namespace gt::emu
