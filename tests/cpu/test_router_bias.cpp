// RouterBias (trainer/runtime/router_bias.hpp): DeepSeek-V3's update by
// hand (an expert above the mean load loses the rate, one below gains it,
// one at the mean keeps its bias), only the rank's blocks move, the
// checkpoint pieces (one saving rank), a load round trip onto the backend,
// and the bias changing which experts a Mixtral block chooses but not its
// combine weights' formula.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "layout_matrix_models.hpp"
#include "parallel/in_process_communicator.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/runtime/router_bias.hpp"

namespace gt {
namespace {

ModelConfig biased_mixtral(int layers, double rate) {
  ModelConfig m = test::matrix_mixtral();
  m.n_layer = layers;
  m.router_bias_update_rate = rate;
  return m;
}

TEST(RouterBias, MovesEachBiasAgainstItsExpertsLoadError) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = biased_mixtral(3, 0.25);
  ASSERT_EQ(m.n_experts, 4);
  RouterBias bias(*ops, m, {1, 2});  // a stage holding blocks 1 and 2
  InProcessCommunicator data("data");
  MoeStepStats s;
  s.experts = 4;
  s.layers = {1, 2};
  // Block 1: mean 10; expert 0 over, 1 under, 2 at the mean, 3 under.
  // Block 2: all at the mean (a balanced router keeps its biases).
  s.counts = {16, 4, 10, 10, /* block 2 */ 8, 8, 8, 8};
  bias.update(s, data);
  const std::vector<float> after_one = bias.host();
  const std::vector<float> want = {0, 0, 0, 0, -0.25f, 0.25f, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(after_one, want);
  // Twice: the moves add; block 0 (not this rank's) never moves.
  bias.update(s, data);
  EXPECT_FLOAT_EQ(bias.host()[4], -0.5f);
  EXPECT_FLOAT_EQ(bias.host()[5], 0.5f);
  EXPECT_FLOAT_EQ(bias.host()[0], 0.f);
  // The backend's table is what the host holds.
  std::vector<float> table(12);
  ops->download(table.data(), bias.table());
  EXPECT_EQ(table, bias.host());
  // Counts of a block the rank does not run are a caller's bug.
  s.layers = {0, 1};
  EXPECT_THROW(bias.update(s, data), Error);
}

TEST(RouterBias, CheckpointPiecesComeFromOneRankAndLoadOntoTheBackend) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = biased_mixtral(3, 0.1);
  RouterBias bias(*ops, m, {0, 2});
  const std::vector<TensorPiece> saved = bias.pieces_to_save(MeshCoord{});
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].name, "router_bias.model.layers.0.block_sparse_moe.gate");
  EXPECT_EQ(saved[1].name, "router_bias.model.layers.2.block_sparse_moe.gate");
  EXPECT_EQ(saved[1].global_shape, std::vector<int64_t>{4});
  MeshCoord replica;
  replica.dp = 1;  // a data replica holds the same biases and saves none
  EXPECT_TRUE(bias.pieces_to_save(replica).empty());
  replica = MeshCoord{};
  replica.tp = 1;
  EXPECT_TRUE(bias.pieces_to_save(replica).empty());
  // Loading fills the host rows through the pieces, then the backend.
  std::vector<TensorPiece> load = bias.pieces_to_load();
  for (int e = 0; e < 4; ++e) load[1].data[e] = 0.5f * static_cast<float>(e);
  bias.finish_load();
  std::vector<float> table(12);
  ops->download(table.data(), bias.table());
  EXPECT_FLOAT_EQ(table[8 + 3], 1.5f);
  EXPECT_FLOAT_EQ(table[0], 0.f);
}

// A large bias on one expert makes every row choose it, and the step's
// counts say so; without the table the same model's choice differs.
TEST(RouterBias, TheBiasChangesWhichExpertsAModelChooses) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = biased_mixtral(1, 0.1);
  const int B = 2, T = 8;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[static_cast<size_t>(i)] = (7 * i + 3) % m.vocab_size;
    targets[static_cast<size_t>(i)] = (5 * i + 1) % m.vocab_size;
  }
  auto counts_with = [&](bool biased) {
    auto model = make_model(m, *ops, B, T);
    RouterBias bias(*ops, m, {0});
    if (biased) {
      std::vector<TensorPiece> p = bias.pieces_to_load();
      p[0].data[3] = 10.f;  // expert 3 wins every row's first choice
      bias.finish_load();
      model->set_router_bias(bias.table());
    }
    model->forward_train(tokens.data(), targets.data(), B, T, 1.f / (B * T));
    model->backward();
    return model->take_moe_stats().counts;
  };
  const std::vector<float> plain = counts_with(false), biased = counts_with(true);
  ASSERT_EQ(biased.size(), 4u);
  EXPECT_FLOAT_EQ(biased[3], static_cast<float>(B * T));  // every row, once
  EXPECT_NE(plain, biased);
  // A dense model has no routers to bias.
  auto dense = make_model(test::matrix_llama(), *ops, B, T);
  RouterBias table(*ops, m, {0});
  EXPECT_THROW(dense->set_router_bias(table.table()), Error);
}

}  // namespace
}  // namespace gt
