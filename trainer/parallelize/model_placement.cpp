#include "trainer/parallelize/model_placement.hpp"

#include "kernels/core/error.hpp"
#include "trainer/parallelize/gpt2_placement.hpp"
#include "trainer/parallelize/llama_placement.hpp"

namespace gt {

std::vector<PlacedUnit> model_placement(const ModelConfig& m) {
  switch (m.arch) {
    case ModelArch::gpt2:
      return gpt2_placement(m);
    case ModelArch::llama:
      return llama_placement(m);
    case ModelArch::mixtral:
      return mixtral_placement(m);
  }
  fail("model.arch: unknown family ", static_cast<int>(m.arch));
}

}  // namespace gt
