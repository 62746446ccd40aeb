// GradientWire: one gradient reduction on a data axis (dp or fsdp) at the
// precision parallel.reduce_dtype asks for.
//   fp32  the collective runs on the caller's fp32 buffers.
//   bf16  start rounds the fp32 input into the wire's bf16 copy (Ops::cast,
//         nearest even), the collective sums bf16 (Communicator::*_bf16: half
//         the bytes, each addition rounded), and completion widens the bf16
//         result into the caller's fp32 output (exact).
// So a bf16 reduction rounds each rank's contribution once and each partial
// sum once; accumulation across micro-batches and the optimizer stay fp32.
//
// Invariants: the fp32 output holds the result once wait() returned or
// test() returned true, never before (a bf16 wire widens exactly once, on
// the first of them). The wire copies belong to one reduction at a time:
// start again only after it has completed. The caller's buffers and the
// copies outlive the reduction.
#pragma once

#include <cstdint>

#include "kernels/core/buffer.hpp"
#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/config/config.hpp"

namespace gt {

// Where the bf16 wire copies of a reducer come from: one allocation of the
// state plan's wire_bf16 elements, cut into consecutive pieces at
// construction. The reducer checks that it took exactly the plan's total,
// so the planner's figure is what is allocated.
class WireArena {
 public:
  WireArena(Ops& ops, int64_t elems);
  uint16_t* take(int64_t elems);  // throws past the plan's total
  int64_t taken() const { return taken_; }
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const { return static_cast<int64_t>(buf_.bytes()); }

 private:
  Buffer buf_;
  int64_t capacity_ = 0, taken_ = 0;
};

class GradientWire {
 public:
  // fp32: no copies. bf16: `in` holds the largest input this wire reduces
  // (elements), `out` its largest reduce-scatter output (null when it only
  // all-reduces, in place in `in`).
  GradientWire() = default;
  static GradientWire fp32(Ops& ops) { return GradientWire(ops, nullptr, nullptr); }
  static GradientWire bf16(Ops& ops, uint16_t* in, uint16_t* out) {
    return GradientWire(ops, in, out);
  }

  // buf (n) becomes the sum over `comm`'s ranks.
  void all_reduce(Communicator& comm, float* buf, int64_t n);
  // in (n * comm.size()) summed over the ranks; out (n) gets this rank's block.
  void reduce_scatter(Communicator& comm, const float* in, float* out, int64_t n);
  // Completes: the result is in the fp32 output.
  void wait();
  // Never blocks; true once completed.
  bool test();
  bool is_bf16() const { return wire_in_ != nullptr; }

 private:
  GradientWire(Ops& ops, uint16_t* in, uint16_t* out) : ops_(&ops), wire_in_(in), wire_out_(out) {}
  TensorView bf16_view(uint16_t* p, int64_t n) const;
  TensorView f32_view(float* p, int64_t n) const;
  void widen();  // the bf16 result into the fp32 output, once

  Ops* ops_ = nullptr;
  uint16_t* wire_in_ = nullptr;
  uint16_t* wire_out_ = nullptr;
  const uint16_t* result_ = nullptr;  // the bf16 result, while one waits to be widened
  float* dst_ = nullptr;
  int64_t n_ = 0;
  CommHandle h_;
};

}  // namespace gt
