// StagingPool: the host buffers a StagedCommunicator stages through. Each
// operation leases its own buffer for as long as it is pending, so several
// operations (DP buckets, a TP all-reduce under an FSDP gather) can be in
// flight at once; a finished operation's buffer goes back to the pool and is
// reused by the next one that fits.
//
// Invariants
// - A leased buffer is never freed or handed out again before its Lease is
//   destroyed (the pending op owns the Lease, so that is after completion; an
//   op abandoned after a deadline leaks its Lease with it, on purpose).
// - The pool grows as needed: when no idle buffer is large enough, the
//   largest idle one (too small anyway) is freed and a new one allocated, so
//   the pool holds at most as many buffers as operations were ever in flight.
// - A Lease keeps the pool (and so the HostStaging) alive: destroying the
//   communicator before a lease comes back does not free under it.
// - Used from one thread at a time, like the Communicator that owns it.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "parallel/host_staging.hpp"

namespace gt {

class StagingPool : public std::enable_shared_from_this<StagingPool> {
  struct BlockFree {
    HostStaging* staging;
    void operator()(void* p) const noexcept { staging->free_host(p); }
  };
  using Block = std::unique_ptr<void, BlockFree>;
  struct Buffer {
    Block block;
    size_t bytes = 0;
  };

 public:
  // Always held by a shared_ptr (leases share it): construct with create().
  static std::shared_ptr<StagingPool> create(std::shared_ptr<HostStaging> staging);
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // One operation's buffer; returns it to the pool when destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { give_back(); }

    float* floats() const { return static_cast<float*>(buf_.block.get()); }
    size_t bytes() const { return buf_.bytes; }

   private:
    friend class StagingPool;
    Lease(std::shared_ptr<StagingPool> pool, Buffer buf) : pool_(std::move(pool)), buf_(std::move(buf)) {}
    void give_back() noexcept;
    std::shared_ptr<StagingPool> pool_;
    Buffer buf_;
  };

  // A buffer of at least `bytes` (0: an empty lease, no allocation).
  Lease acquire(size_t bytes);

  HostStaging& staging() const { return *staging_; }
  size_t idle_buffers() const { return idle_.size(); }

 private:
  explicit StagingPool(std::shared_ptr<HostStaging> staging) : staging_(std::move(staging)) {}
  std::shared_ptr<HostStaging> staging_;  // declared first: outlives the buffers it frees
  std::vector<Buffer> idle_;
};

}  // namespace gt
