#include "kernels/cuda/cuda_op_timer.hpp"

#include <chrono>

#include "kernels/cuda/cuda_ops.hpp"

namespace gt {

size_t CudaOpTimer::begin(const char* /*name*/) {
  if (used_ == pool_.size()) pool_.emplace_back();
  if (used_ == 0) host_anchor_ = Clock::now();
  pool_[used_].start.record(stream_);
  return used_++;
}

void CudaOpTimer::end(size_t index) { pool_[index].stop.record(stream_); }

std::vector<OpTimer::Span> CudaOpTimer::collect() {
  std::vector<Span> out;
  if (used_ == 0) return out;
  pool_[used_ - 1].stop.synchronize();  // in stream order: every earlier event is done too
  const cuda::CudaEvent& first = pool_[0].start;
  out.reserve(used_);
  for (size_t i = 0; i < used_; ++i) {
    const double offset_ms = pool_[i].start.elapsed_ms_since(first);
    const auto start = host_anchor_ + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double, std::milli>(offset_ms));
    out.push_back({start, pool_[i].stop.elapsed_ms_since(pool_[i].start) / 1000.0});
  }
  used_ = 0;
  return out;
}

std::unique_ptr<OpTimer> CudaOps::make_op_timer() const {
  return std::make_unique<CudaOpTimer>(stream());
}

}  // namespace gt
