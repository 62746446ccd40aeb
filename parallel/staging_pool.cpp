#include "parallel/staging_pool.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

std::shared_ptr<StagingPool> StagingPool::create(std::shared_ptr<HostStaging> staging) {
  if (!staging) fail("StagingPool: a HostStaging is required");
  return std::shared_ptr<StagingPool>(new StagingPool(std::move(staging)));
}

StagingPool::Lease& StagingPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    give_back();
    pool_ = std::move(other.pool_);
    buf_ = std::move(other.buf_);
  }
  return *this;
}

void StagingPool::Lease::give_back() noexcept {
  if (!pool_ || !buf_.block) return;
  try {
    pool_->idle_.push_back(std::move(buf_));
  } catch (...) {
    // No room to remember it: the Block frees it (it is no longer leased).
  }
  buf_ = Buffer{};
  pool_.reset();
}

StagingPool::Lease StagingPool::acquire(size_t bytes) {
  if (bytes == 0) return Lease{};
  // The smallest idle buffer that fits, so big ones stay for big operations.
  size_t best = idle_.size();
  for (size_t i = 0; i < idle_.size(); ++i)
    if (idle_[i].bytes >= bytes && (best == idle_.size() || idle_[i].bytes < idle_[best].bytes))
      best = i;
  Buffer buf;
  if (best < idle_.size()) {
    buf = std::move(idle_[best]);
    idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(best));
  } else {
    // None fits: the largest idle buffer is too small for this op; replace it.
    if (!idle_.empty())
      idle_.erase(std::max_element(idle_.begin(), idle_.end(), [](const Buffer& a, const Buffer& b) {
        return a.bytes < b.bytes;
      }));
    buf.block = Block(staging_->allocate_host(bytes), BlockFree{staging_.get()});
    buf.bytes = bytes;
    if (!buf.block) fail("StagingPool: allocating ", bytes, " bytes of host staging memory failed");
  }
  return Lease(shared_from_this(), std::move(buf));
}

}  // namespace gt
