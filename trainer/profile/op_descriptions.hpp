// What the profiler records of one Ops call (kernels/op_observer.hpp): the
// shape it is keyed by in the table and trace, and its FLOPs and bytes.
//
// Every op of kernels/ops.hpp that op_costs.hpp has a formula for is
// described by it, with the shape the op's rows have always had ("M=.. N=..
// K=.." for a GEMM, "n=.." for an element-wise op). An op it does not know
// (one added to Ops since) is described generically from the views its call
// names: bytes = every view read once, written once, an accumulated one read
// and written (op_call_bytes); FLOPs = one per element written; shape = its
// first output's. Right for an element-wise op; a new op of another kind
// earns a formula in op_costs.hpp and a line in op_descriptions.cpp.
#pragma once

#include <string>

#include "kernels/op_observer.hpp"
#include "trainer/profile/op_costs.hpp"

namespace gt {

struct OpDescription {
  std::string shape;  // "M=1024 N=384 K=128", "B=4 T=64 C=128", "n=4096"
  OpCost cost;
};

OpDescription describe_op(const OpCall& call);

// True when describe_op has a formula for `op` (an OpCall name).
bool has_op_formula(const char* op);

}  // namespace gt
