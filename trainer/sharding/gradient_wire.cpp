#include "trainer/sharding/gradient_wire.hpp"

#include "kernels/core/error.hpp"

namespace gt {

WireArena::WireArena(Ops& ops, int64_t elems) : capacity_(elems) {
  GT_CHECK(elems >= 0, "wire elements ", elems);
  if (elems > 0) buf_ = ops.allocate(static_cast<size_t>(elems) * dtype_size(DType::bf16));
}

uint16_t* WireArena::take(int64_t elems) {
  GT_CHECK(elems >= 0 && taken_ + elems <= capacity_, "the gradient reducer's bf16 wire copies ",
           "need more than the state plan's ", capacity_, " elements (", taken_, " taken, ", elems,
           " more asked)");
  uint16_t* p = static_cast<uint16_t*>(buf_.data()) + taken_;
  taken_ += elems;
  return p;
}

TensorView GradientWire::bf16_view(uint16_t* p, int64_t n) const {
  return make_view(p, DType::bf16, ops_->device(), {n});
}

TensorView GradientWire::f32_view(float* p, int64_t n) const {
  return make_view(p, DType::f32, ops_->device(), {n});
}

void GradientWire::all_reduce(Communicator& comm, float* buf, int64_t n) {
  GT_CHECK(h_.done() && result_ == nullptr, "a gradient wire started again before it completed");
  if (!is_bf16()) {
    h_ = comm.all_reduce_sum(buf, n);
    return;
  }
  if (n == 0) return;
  ops_->cast(bf16_view(wire_in_, n), f32_view(buf, n));
  h_ = comm.all_reduce_sum_bf16(wire_in_, n);
  result_ = wire_in_;
  dst_ = buf;
  n_ = n;
  if (h_.done()) widen();
}

void GradientWire::reduce_scatter(Communicator& comm, const float* in, float* out, int64_t n) {
  GT_CHECK(h_.done() && result_ == nullptr, "a gradient wire started again before it completed");
  if (!is_bf16()) {
    h_ = comm.reduce_scatter_sum(in, out, n);
    return;
  }
  GT_CHECK(wire_out_ != nullptr, "a bf16 gradient wire without an output copy reduce-scatters");
  if (n == 0) return;
  const int64_t total = n * comm.size();
  ops_->cast(bf16_view(wire_in_, total), f32_view(const_cast<float*>(in), total));
  h_ = comm.reduce_scatter_sum_bf16(wire_in_, wire_out_, n);
  result_ = wire_out_;
  dst_ = out;
  n_ = n;
  if (h_.done()) widen();
}

void GradientWire::widen() {
  if (result_ == nullptr) return;
  ops_->cast(f32_view(dst_, n_), bf16_view(const_cast<uint16_t*>(result_), n_));
  result_ = nullptr;
}

void GradientWire::wait() {
  h_.wait();
  widen();
}

bool GradientWire::test() {
  if (!h_.test()) return false;
  widen();
  return true;
}

}  // namespace gt
