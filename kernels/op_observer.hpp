// OpCall and OpObserver: what an observer (the profiler) sees of an Ops call.
// The Ops base class builds one OpCall in each public entry point and hands
// it to the observer, so every backend is observed the same way and no
// backend code knows about it (Communicator and CommObserver's shape).
//
// An OpCall is generic on purpose: the op's name, its class, every tensor it
// reads and writes (named as in the Ops method) and its scalar arguments. An
// observer that knows an op can read its views by name; one that does not can
// still count what the call moves: a new op is observed without code of its
// own anywhere above kernels/.
//
// Invariants: an OpCall lives on the stack of the entry point for the length
// of the call and points at that entry's own arguments (see Ops::begin_op for
// who may change them); observers must not keep pointers into it.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/core/tensor.hpp"

namespace gt {

// What kind of work an op is: the classes the profiler's table and roofline
// group rows by.
enum class OpClass {
  gemm,
  attention,
  layernorm,
  gelu,
  cross_entropy,
  embedding,
  elementwise,
  optimizer,
};
constexpr int kNumOpClasses = 8;
const char* op_class_name(OpClass c);  // "gemm", "attention", ...

// How an op uses one of its tensors.
enum class Access {
  read,
  write,       // assigned (=)
  accumulate,  // read and written (+=)
};

struct OpTensor {
  const char* name = "";  // the Ops method's parameter name: "inp", "dweight"
  Access access = Access::read;
  TensorView* view = nullptr;  // the entry's argument; empty() for an absent optional tensor
};

struct OpScalar {
  const char* name = "";  // "n_head", "vocab_start", ...
  double value = 0;       // integers up to 2^53 are exact
};

class OpCall {
 public:
  // The most tensors and scalars one op takes (layernorm_backward: 10
  // tensors, with its fp8 row amaxes; one spare).
  static constexpr int kMaxTensors = 11;
  static constexpr int kMaxScalars = 6;

  // name: a string literal (the profiler keeps the pointer).
  OpCall(const char* name, OpClass cls) : name_(name), cls_(cls) {}
  OpCall(const OpCall&) = delete;
  OpCall& operator=(const OpCall&) = delete;

  // Built by the entry point, one line per argument.
  OpCall& read(const char* name, TensorView& v) { return add(name, Access::read, v); }
  OpCall& write(const char* name, TensorView& v) { return add(name, Access::write, v); }
  OpCall& accumulate(const char* name, TensorView& v) { return add(name, Access::accumulate, v); }
  OpCall& scalar(const char* name, double value);

  // The name the trace, the cost table and a GPU timer's NVTX range share:
  // the Ops method's ("matmul_forward").
  const char* name() const { return name_; }
  OpClass cls() const { return cls_; }
  int num_tensors() const { return num_tensors_; }
  const OpTensor& tensor(int i) const { return tensors_[static_cast<size_t>(i)]; }
  int num_scalars() const { return num_scalars_; }
  const OpScalar& scalar_at(int i) const { return scalars_[static_cast<size_t>(i)]; }

  // The view or scalar of that name; throws gt::Error when the op has none
  // (a misspelt name in an observer is a bug, not a zero).
  const TensorView& view(const char* name) const;
  double scalar(const char* name) const;

 private:
  OpCall& add(const char* name, Access access, TensorView& v);

  const char* name_;
  OpClass cls_;
  std::array<OpTensor, kMaxTensors> tensors_{};
  std::array<OpScalar, kMaxScalars> scalars_{};
  int num_tensors_ = 0;
  int num_scalars_ = 0;
};

// The bytes a call moves by the views it names: every tensor read or written
// once, an accumulated one read and written (empty views count nothing).
// The cost of an op nobody wrote a formula for.
double op_call_bytes(const OpCall& call);
// Elements the call writes (written or accumulated views): one FLOP each is
// the generic estimate for an element-wise op.
double op_call_written_elems(const OpCall& call);

// Invariants: callbacks run on the thread that calls the ops, after the
// entry's argument checks passed; on_begin returns a token (0 = not
// interested) that the matching on_end receives; on_end is called exactly
// once per on_begin, also when the op throws. Ops do not nest: an op never
// calls another op's public entry. The observer is not owned: it is detached
// (Ops::set_observer(nullptr)) or outlives the Ops it observes.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // Just before the backend runs the op.
  virtual uint64_t on_begin(const OpCall& call) = 0;
  // Once the backend's call has returned (on a GPU: once it is enqueued).
  virtual void on_end(uint64_t token, const OpCall& call) = 0;
};

}  // namespace gt
