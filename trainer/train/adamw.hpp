// AdamW over the model's flat parameters: owns the two moment buffers
// (same layout as the parameters) and applies torch.optim.AdamW per
// parameter, with weight decay only where ParamSpec::decay says so.
#pragma once

#include <cstdint>

#include "kernels/core/tensor.hpp"
#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/parameter_layout.hpp"

namespace gt {

class AdamW {
 public:
  AdamW(const TrainConfig& cfg, const ParameterLayout& layout);

  // One update with learning rate lr; grads are multiplied by grad_scale
  // (the clip_grad_norm_ coefficient) on the way in. `t` counts from 1.
  void step(Ops& ops, float* params, float* grads, double lr, float grad_scale, int64_t t);

  float* m() { return m_.f32(); }
  float* v() { return v_.f32(); }

 private:
  TrainConfig cfg_;
  const ParameterLayout& layout_;
  HostBuffer m_, v_;
};

}  // namespace gt
