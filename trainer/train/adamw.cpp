#include "trainer/train/adamw.hpp"

namespace gt {

AdamW::AdamW(const TrainConfig& cfg, const ParameterLayout& layout)
    : cfg_(cfg),
      layout_(layout),
      m_(static_cast<size_t>(layout.total()) * sizeof(float)),
      v_(static_cast<size_t>(layout.total()) * sizeof(float)) {}

void AdamW::step(Ops& ops, float* params, float* grads, double lr, float grad_scale, int64_t t) {
  for (const auto& s : layout_.specs()) {
    Ops::AdamWParams p{static_cast<float>(lr),
                       static_cast<float>(cfg_.beta1),
                       static_cast<float>(cfg_.beta2),
                       static_cast<float>(cfg_.eps),
                       s.decay ? static_cast<float>(cfg_.weight_decay) : 0.f,
                       grad_scale,
                       t};
    ops.adamw_update(cpu_f32(params + s.offset, {s.numel}), cpu_f32(grads + s.offset, {s.numel}),
                     cpu_f32(m_.f32() + s.offset, {s.numel}),
                     cpu_f32(v_.f32() + s.offset, {s.numel}), p);
  }
}

}  // namespace gt
