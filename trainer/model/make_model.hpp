// The model family a config names (model.arch), built as a CausalLM: GPT for
// gpt2, Llama for llama. The trainer, the sampler and the cost command call
// these and never name a family.
#pragma once

#include <memory>
#include <optional>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/causal_lm.hpp"
#include "trainer/parallelize/expert_exchange.hpp"

namespace gt {

// One rank owning its parameters.
std::unique_ptr<CausalLM> make_model(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
                                     Recompute recompute = Recompute::none,
                                     ComputeDType dtype = ComputeDType::fp32);
// One tensor-parallel rank over `store` (the constructors' second form);
// `chunk`: the pipeline chunk of the layout this instance runs.
std::unique_ptr<CausalLM> make_model(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
                                     const ParameterLayout& layout, ParameterStore& store,
                                     const TensorParallelGroup& group, Recompute recompute,
                                     ComputeDType dtype,
                                     std::optional<StageSpan> chunk = std::nullopt,
                                     const ContextParallelGroup& cp = {},
                                     const ExpertParallelGroup& ep = {});

}  // namespace gt
