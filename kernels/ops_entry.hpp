// Private to kernels/ops*.cpp, the Ops entry points: the shape checks of the
// backend-neutral contract (every message starts "<backend>::<op>: " and
// names the tensor, the form CudaOps' own checks use) and the scope that runs
// one op between the observer's and the backend's hooks.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "kernels/core/error.hpp"
#include "kernels/ops.hpp"

namespace gt {

// Shape checks for one op of one backend.
struct Contract {
  const Ops& ops;
  const char* op;

  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    gt::fail(ops.backend_name(), "::", op, ": ", std::forward<Args>(args)...);
  }
  // t has n dimensions; layout names them for the message: "(B, T, C)".
  void ndim(const TensorView& t, const char* what, int n, const char* layout) const {
    if (t.ndim != n) fail(what, " must be ", layout, ", got ", t.shape_str());
  }
  // t has exactly `shape`.
  void shape(const TensorView& t, const char* what, std::initializer_list<int64_t> shape) const {
    bool same = t.ndim == static_cast<int>(shape.size());
    int i = 0;
    for (int64_t s : shape) same = same && t.shape[static_cast<size_t>(i++)] == s;
    if (same) return;
    std::string want = "(";
    i = 0;
    for (int64_t s : shape) want += (i++ ? ", " : "") + std::to_string(s);
    fail(what, " must be ", want, "), got ", t.shape_str());
  }
  // An optional tensor: `shape` unless it is empty().
  void shape_if_given(const TensorView& t, const char* what,
                      std::initializer_list<int64_t> shape) const {
    if (!t.empty()) this->shape(t, what, shape);
  }
  // An op's optional row amaxes (Ops: "Row amaxes for an fp8 GEMM's
  // input"): (rows) fp32 unless empty().
  void row_amax(const TensorView& t, int64_t rows) const {
    if (t.empty()) return;
    shape(t, "row_amax", {rows});
    if (t.dtype != DType::f32) fail("row_amax must be fp32, got ", dtype_name(t.dtype));
  }
  static bool same_shapes(const TensorView& a, const TensorView& b) {
    bool same = a.ndim == b.ndim;
    for (int i = 0; same && i < a.ndim; ++i)
      same = a.shape[static_cast<size_t>(i)] == b.shape[static_cast<size_t>(i)];
    return same;
  }
  void same_shape(const TensorView& a, const TensorView& b, const char* wa, const char* wb) const {
    if (!same_shapes(a, b))
      fail(wa, " ", a.shape_str(), " and ", wb, " ", b.shape_str(), " must have the same shape");
  }
};

// One op between its hooks: the observer's on_begin and the backend's
// begin_op on construction, end_op and on_end on destruction, so both pairs
// close when the backend's call throws. run(): whether to call do_<op>.
class Ops::Scope {
 public:
  Scope(Ops& ops, OpCall& call) : ops_(ops), call_(call), observer_(ops.observer_) {
    if (observer_) token_ = observer_->on_begin(call_);
    try {
      run_ = ops_.begin_op(call_);
    } catch (...) {
      // begin_op leaves nothing open when it throws; the observer's pair closes.
      if (observer_) observer_->on_end(token_, call_);
      throw;
    }
  }
  ~Scope() {
    ops_.end_op(call_);
    if (observer_) observer_->on_end(token_, call_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  bool run() const { return run_; }

 private:
  Ops& ops_;
  OpCall& call_;
  OpObserver* observer_;  // the one told on_begin is told on_end
  uint64_t token_ = 0;
  bool run_ = false;
};

}  // namespace gt
