// The PipelineExecutor on its own (no trainer): every rank of the world a
// pipeline stage (pp = world size), each schedule, both families, GPT-2's
// tied embedding and Llama's untied head. One step of m micro-batches leaves
// each stage's reduced gradients equal to the whole model accumulating the
// same micro-batches on one process, and take_loss() its mean loss on every
// stage. Bit for bit, except where the order of additions must differ: a
// tied wte's gradient (the pipeline sums the embedding's micro-batches, then
// the head's; one process alternates them) and the loss (summed per model
// instance): those to fp32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "pipeline_test_support.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/runtime/parallelize.hpp"

namespace gt::test {
namespace {

struct Case {
  PipeSchedule schedule;
  int virtual_stages;
};

TEST(PipelineExecutorMpi, OneStepGivesTheWholeModelsGradientsOnEveryStage) {
  auto world = test_world();
  const int p = world->size();
  if (p < 2) GTEST_SKIP() << "a pipeline needs 2 ranks or more";
  auto ops = make_cpu_ops(1);
  const ParallelDims dims = ParallelDims::validated(1, 1, 1, p, p);
  const DeviceMesh mesh(dims, *world);
  const int B = 2, T = 8, m = 2 * p;  // interleaving needs a multiple of p
  const float scale = 1.f / static_cast<float>(B * T * m);
  for (const FamilyCase family :
       {FamilyCase{"gpt2", ModelArch::gpt2, false}, FamilyCase{"llama", ModelArch::llama, false}}) {
    for (const Case c : {Case{PipeSchedule::gpipe, 1}, Case{PipeSchedule::one_f_one_b, 1},
                         Case{PipeSchedule::interleaved_1f1b, 2}}) {
      ModelConfig model = family.arch == ModelArch::gpt2 ? tiny_gpt() : tiny_llama();
      model.n_layer = 2 * p * c.virtual_stages;
      const std::string at =
          std::string(family.name) + " " + to_string(c.schedule) + " at pp=" + std::to_string(p);
      auto tokens = [&](int k) { return random_ints(B * T, 100 + k, 0, model.vocab_size); };
      auto targets = [&](int k) { return random_ints(B * T, 200 + k, 0, model.vocab_size); };

      // The whole model on this process, the m micro-batches accumulated.
      const ParameterLayout whole_layout(model);
      LocalParameters whole(whole_layout, *ops);
      fill_initial(model, whole_layout, whole, *ops, 3);
      auto one = make_model(model, *ops, B, T, whole_layout, whole, TensorParallelGroup{},
                            Recompute::none, ComputeDType::fp32);
      for (int k = 0; k < m; ++k) {
        one->forward_train(tokens(k).data(), targets(k).data(), B, T, scale);
        one->backward();
      }
      const double want_loss = one->take_loss();

      // This rank's stage, run by the executor.
      ParallelPlan plan;
      plan.pp_schedule = c.schedule;
      plan.pp_virtual_stages = c.virtual_stages;
      ParallelModel pm = parallelize(model, plan, mesh, *ops, {B, T, Recompute::none, m});
      load_every_initial(model, *pm.params, 3);
      pm.runner->train(
          m,
          [&](int k, int32_t* x, int32_t* y) {
            const auto xs = tokens(k), ys = targets(k);
            std::copy(xs.begin(), xs.end(), x);
            std::copy(ys.begin(), ys.end(), y);
          },
          scale);
      (void)pm.runner->pending_loss_sums();
      const double got_loss = pm.runner->take_loss();
      EXPECT_NEAR(got_loss, want_loss, 1e-6 * std::abs(want_loss)) << at;

      const ParameterLayout& layout = *pm.layout;
      for (const ParamSpec& s : layout.specs()) {
        const ParamUnit& unit = layout.units()[static_cast<size_t>(s.unit)];
        const float* got = pm.params->owned_unit_grads(s.unit).f32() + (s.offset - unit.begin);
        const float* want = whole.grads() + whole_layout.at(s.name).offset;
        const bool tied = s.name == "wte.weight" ||
                          (s.name == "model.embed_tokens.weight" && model.tied_embeddings());
        if (!tied) {
          EXPECT_EQ(std::vector<float>(got, got + s.numel),
                    std::vector<float>(want, want + s.numel))
              << at << ": " << s.name;
          continue;
        }
        // Both copies of a tied wte (the first stage's and the last's
        // mirror) end with the whole gradient.
        double worst = 0.0;
        for (int64_t i = 0; i < s.numel; ++i)
          worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) /
                                      std::max(1e-3, std::abs(static_cast<double>(want[i]))));
        EXPECT_LT(worst, 1e-5) << at << ": " << s.name << (s.mirror ? " (mirror)" : "");
      }
    }
  }
}

}  // namespace
}  // namespace gt::test
