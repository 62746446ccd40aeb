#include "trainer/model/make_model.hpp"

#include "kernels/core/error.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/llama.hpp"

namespace gt {

std::unique_ptr<CausalLM> make_model(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
                                     Recompute recompute, ComputeDType dtype) {
  switch (cfg.arch) {
    case ModelArch::gpt2:
      return std::make_unique<GPT>(cfg, ops, max_rows, max_seq, recompute, dtype);
    case ModelArch::llama:
    case ModelArch::mixtral:  // Llama with sparse MLPs (llama.hpp)
      return std::make_unique<Llama>(cfg, ops, max_rows, max_seq, recompute, dtype);
  }
  fail("model.arch=", to_string(cfg.arch), ": no model of that family");
}

std::unique_ptr<CausalLM> make_model(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
                                     const ParameterLayout& layout, ParameterStore& store,
                                     const TensorParallelGroup& group, Recompute recompute,
                                     ComputeDType dtype, std::optional<StageSpan> chunk,
                                     const ContextParallelGroup& cp,
                                     const ExpertParallelGroup& ep) {
  switch (cfg.arch) {
    case ModelArch::gpt2:
      GT_CHECK(ep.size() == 1, "model.arch=gpt2 has no experts to split over parallel.ep");
      return std::make_unique<GPT>(cfg, ops, max_rows, max_seq, layout, store, group, recompute,
                                   dtype, chunk, cp);
    case ModelArch::llama:
    case ModelArch::mixtral:  // Llama with sparse MLPs (llama.hpp)
      return std::make_unique<Llama>(cfg, ops, max_rows, max_seq, layout, store, group, recompute,
                                     dtype, chunk, cp, ep);
  }
  fail("model.arch=", to_string(cfg.arch), ": no model of that family");
}

}  // namespace gt
