#include "trainer/model/parameter_layout.hpp"

#include <cmath>
#include <random>

#include "kernels/core/error.hpp"

namespace gt {

ParameterLayout::ParameterLayout(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, P = m.block_size;
  add("wte.weight", {V, C}, true, false, -1);
  add("wpe.weight", {P, C}, true, false, -1);
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, false, false, l);
    add(h + "ln_1.bias", {C}, false, false, l);
    add(h + "attn.c_attn.weight", {3 * C, C}, true, true, l);
    add(h + "attn.c_attn.bias", {3 * C}, false, false, l);
    add(h + "attn.c_proj.weight", {C, C}, true, true, l);
    add(h + "attn.c_proj.bias", {C}, false, false, l);
    add(h + "ln_2.weight", {C}, false, false, l);
    add(h + "ln_2.bias", {C}, false, false, l);
    add(h + "mlp.c_fc.weight", {4 * C, C}, true, true, l);
    add(h + "mlp.c_fc.bias", {4 * C}, false, false, l);
    add(h + "mlp.c_proj.weight", {C, 4 * C}, true, true, l);
    add(h + "mlp.c_proj.bias", {C}, false, false, l);
  }
  add("ln_f.weight", {C}, false, false, -1);
  add("ln_f.bias", {C}, false, false, -1);
}

void ParameterLayout::add(const std::string& name, std::vector<int64_t> shape, bool decay,
                          bool hf_transposed, int layer) {
  ParamSpec s;
  s.name = name;
  s.numel = 1;
  for (int64_t d : shape) s.numel *= d;
  s.shape = std::move(shape);
  s.offset = total_;
  s.decay = decay;
  s.hf_transposed = hf_transposed;
  s.layer = layer;
  // 16-element (64-byte) alignment of every tensor keeps vector loads aligned.
  total_ += (s.numel + 15) / 16 * 16;
  index_[s.name] = specs_.size();
  specs_.push_back(std::move(s));
}

const ParamSpec* ParameterLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &specs_[it->second];
}

const ParamSpec& ParameterLayout::at(const std::string& name) const {
  const ParamSpec* s = find(name);
  if (!s) fail("unknown parameter '", name, "'");
  return *s;
}

void init_gpt2_parameters(const ParameterLayout& layout, int n_layer, uint64_t seed,
                          float* params) {
  std::mt19937_64 rng(seed);
  // Box-Muller on 53-bit uniforms: std::normal_distribution differs between
  // standard libraries, and a seed must mean the same weights everywhere.
  auto uniform = [&rng]() { return ((rng() >> 11) + 0.5) * 0x1.0p-53; };
  auto normal = [&]() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  };
  const double residual_std = 0.02 / std::sqrt(2.0 * n_layer);
  for (const auto& s : layout.specs()) {
    float* p = params + s.offset;
    const bool is_ln = s.name.find(".ln_") != std::string::npos || s.name.rfind("ln_f.", 0) == 0;
    if (s.shape.size() == 1) {
      const bool ln_weight = is_ln && s.name.size() >= 7 &&
                             s.name.compare(s.name.size() - 7, 7, ".weight") == 0;
      for (int64_t i = 0; i < s.numel; ++i) p[i] = ln_weight ? 1.f : 0.f;
      continue;
    }
    const bool residual_proj = s.name.find("c_proj.weight") != std::string::npos;
    const double std = residual_proj ? residual_std : 0.02;
    for (int64_t i = 0; i < s.numel; ++i) p[i] = static_cast<float>(normal() * std);
  }
}

}  // namespace gt
