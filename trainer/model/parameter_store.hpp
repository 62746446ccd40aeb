// ParameterStore: where the model finds its parameters and gradients, unit by
// unit (ParameterLayout::units()), and the hooks it calls around each unit's
// use so that an owner can move them: FSDP gathers a unit's shards before
// before_forward/before_backward returns and reduce-scatters its gradients
// after after_backward; data parallelism starts its gradient buckets there.
// The model holds no data parallelism itself (torchtitan's rule; tensor
// parallelism lives in the tp layers it calls, trainer/parallelize/); it only
// keeps to the call order below, which owners rely on:
//
//   begin_forward(backward_follows)
//   before_forward(embed) ... embedding
//   for each block l:   before_forward(l) ... after_forward(l)
//   before_forward(head) ... ln_f ... after_forward(head)
//   LM head (wte again) ... after_forward(embed)
//   -- backward, only when backward_follows --
//   before_backward(embed) ... LM head
//   before_backward(head) ... ln_f ... after_backward(head)
//   for each block l, last to first:   before_backward(l) ... after_backward(l)
//   embedding ... after_backward(embed)
//
// Parameter `s` of unit u lives at unit_params(u) + (s.offset - units[u].begin),
// its gradient likewise in unit_grads(u); both are valid between the unit's
// before_* and after_* calls. Gradients ACCUMULATE (the model never zeroes them).
//
// A store may also keep a bf16 copy of the parameters for bf16 GEMMs
// (keeps_bf16_params()): unit_params_bf16(u) has the same layout as
// unit_params(u), every element the parameter rounded to nearest even, and
// is current whenever unit_params(u) may be read (the store refreshes it in
// begin_forward after anything wrote the parameters). The model then casts
// no weight; a store without one returns nullptr.
#pragma once

#include "kernels/core/tensor.hpp"
#include "kernels/ops.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/parallelize/fp8_weight_source.hpp"

namespace gt {

// An Fp8WeightSource too: a store may hold weights in fp8 form
// (parallel.fp8_allgather); by default it holds none.
class ParameterStore : public Fp8WeightSource {
 public:
  virtual ~ParameterStore() = default;
  virtual float* unit_params(int unit) = 0;
  virtual float* unit_grads(int unit) = 0;
  virtual bool keeps_bf16_params() const { return false; }
  virtual const uint16_t* unit_params_bf16(int /*unit*/) { return nullptr; }
  virtual void begin_forward(bool /*backward_follows*/) {}
  virtual void before_forward(int /*unit*/) {}
  virtual void after_forward(int /*unit*/) {}
  virtual void before_backward(int /*unit*/) {}
  virtual void after_backward(int /*unit*/) {}
};

// One rank holding everything: flat parameter and gradient buffers in layout
// order; the hooks do nothing.
class LocalParameters final : public ParameterStore {
 public:
  LocalParameters(const ParameterLayout& layout, Ops& ops);
  float* unit_params(int unit) override { return params_.f32() + begin(unit); }
  float* unit_grads(int unit) override { return grads_.f32() + begin(unit); }
  float* params() { return params_.f32(); }
  float* grads() { return grads_.f32(); }

 private:
  int64_t begin(int unit) const;
  const std::vector<ParamUnit> units_;
  Buffer params_, grads_;  // the backend's memory
};

}  // namespace gt
