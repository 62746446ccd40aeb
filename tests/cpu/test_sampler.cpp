// Sampling (trainer/sample/sampler.hpp) through the CausalLM interface, for
// both families: greedy decoding is the argmax of the model's own logits
// over the cropped window, and temperature/top-k sampling is deterministic
// in the seed and stays inside the top k.
#include <algorithm>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "test_util.hpp"
#include "trainer/sample/sampler.hpp"

namespace gt {
namespace {

std::unique_ptr<CausalLM> seeded_model(const ModelConfig& m, Ops& ops) {
  auto model = make_model(m, ops, 1, m.block_size);
  for_each_initial_parameter(m, 3, [&](const ParamSpec& s, const float* data) {
    std::copy(data, data + s.numel, model->params() + s.offset);
  });
  return model;
}

class Sampler : public ::testing::TestWithParam<ModelArch> {
 protected:
  ModelConfig config() const {
    return GetParam() == ModelArch::llama ? test::tiny_llama() : test::tiny_gpt();
  }
};

TEST_P(Sampler, GreedyIsTheArgmaxOfTheLastPositionsLogits) {
  const ModelConfig m = config();
  auto ops = make_cpu_ops(1);
  auto model = seeded_model(m, *ops);
  SampleOptions opt;
  opt.temperature = 0.0;
  opt.new_tokens = 12;  // past block_size (8): the window is cropped
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> got = sample_tokens(*model, prompt, opt);
  ASSERT_EQ(got.size(), 12u);
  std::vector<int32_t> context = prompt;
  for (int32_t next : got) {
    const int T = std::min<int>(static_cast<int>(context.size()), m.block_size);
    model->forward(context.data() + context.size() - T, nullptr, 1, T, 0.f);
    const float* last = model->logits() + static_cast<int64_t>(T - 1) * m.vocab_size;
    EXPECT_EQ(next, std::max_element(last, last + m.vocab_size) - last);
    context.push_back(next);
  }
}

TEST_P(Sampler, TopKSamplingIsDeterministicInTheSeedAndStaysInTheTopK) {
  const ModelConfig m = config();
  auto ops = make_cpu_ops(1);
  auto model = seeded_model(m, *ops);
  SampleOptions opt;
  opt.top_k = 3;
  opt.temperature = 1.0;
  opt.new_tokens = 6;
  const std::vector<int32_t> prompt = {5};
  const auto a = sample_tokens(*model, prompt, opt), b = sample_tokens(*model, prompt, opt);
  EXPECT_EQ(a, b);
  std::vector<int32_t> context = prompt;
  for (int32_t next : a) {
    const int T = std::min<int>(static_cast<int>(context.size()), m.block_size);
    model->forward(context.data() + context.size() - T, nullptr, 1, T, 0.f);
    std::vector<float> last(model->logits() + static_cast<int64_t>(T - 1) * m.vocab_size,
                            model->logits() + static_cast<int64_t>(T) * m.vocab_size);
    const float chosen = last[static_cast<size_t>(next)];
    EXPECT_LE(std::count_if(last.begin(), last.end(), [&](float v) { return v > chosen; }), 2);
    context.push_back(next);
  }
}

INSTANTIATE_TEST_SUITE_P(BothFamilies, Sampler,
                         ::testing::Values(ModelArch::gpt2, ModelArch::llama),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace gt
