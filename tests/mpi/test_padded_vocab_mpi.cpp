// The padded vocabulary under tensor parallelism. A vocabulary of 61 tokens
// is stored as 128 rows (ModelConfig::padded_vocab_size at vocab_pad_tp 1),
// which tp = 2 and 4 divide although 61 is prime: at tp = 4 rank 1's shard
// ends in padding and ranks 2 and 3 hold padding only (their cross-entropy
// row max is -inf). The tp layout of the running world size trains like one
// rank (losses and grad norms, and each rank's box of every parameter within
// the layout matrix's tolerance, tests/layouts/layout_matrix.py); the
// checkpoint pieces hold the 61 real rows only, and wte's padding rows stay
// exactly zero.
#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"

namespace gt::test {
namespace {

StepOptions options() {
  StepOptions o;
  o.model.n_layer = 2;
  o.model.n_head = 4;
  o.model.n_embd = 32;
  o.model.vocab_size = 61;
  o.model.block_size = 8;
  o.steps = 3;
  o.init_seed = 5;
  return o;
}

TEST(PaddedVocabMpi, TensorParallelTrainsLikeOneRankWhenTpDoesNotDivideTheVocabulary) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  const StepOptions solo_options = options();
  const StepTrace want = train_steps(*ops, solo_options);  // one rank, in-process
  std::map<std::string, size_t> whole;                     // piece name -> index in want
  for (size_t i = 0; i < want.piece_names.size(); ++i) whole[want.piece_names[i]] = i;

  // tp = the world size: 3 ranks cannot split the 4 heads (the config
  // refuses it; this test is about the vocabulary).
  if (tp_split_problem(solo_options.model, world->size()))
    GTEST_SKIP() << "tp=" << world->size() << " does not split the model's heads";
  const ParallelDims d{1, 1, world->size()};
  const DeviceMesh mesh(d, *world);
  StepOptions o = options();
  o.mesh = &mesh;
  const StepTrace got = train_steps(*ops, o);
  const std::string what = d.str();
  EXPECT_TRUE(all_close(got.losses, want.losses, 1e-6f, 1e-5f)) << what << " losses";
  ASSERT_EQ(got.norms.size(), want.norms.size());
  for (size_t i = 0; i < got.norms.size(); ++i)
    EXPECT_NEAR(got.norms[i], want.norms[i], 1e-5 * want.norms[i]) << what << " step " << i;

  const int64_t V = o.model.vocab_size, Vp = o.model.padded_vocab_size();
  ASSERT_EQ(Vp, 128);
  for (size_t i = 0; i < got.pieces.size(); ++i) {
    const std::string& name = got.piece_names[i];
    const TensorBox& b = got.piece_boxes[i];
    const auto it = whole.find(name);
    ASSERT_NE(it, whole.end()) << name;
    const TensorBox& w = want.piece_boxes[it->second];
    const std::vector<float>& all = want.pieces[it->second];
    std::vector<float> expected;
    for (int64_t r = b.row0; r < b.row0 + b.rows; ++r)
      for (int64_t c = b.col0; c < b.col0 + b.cols; ++c) expected.push_back(all[r * w.cols + c]);
    // AdamW turns the last bits of a gradient into whole updates, so the
    // parameters compare like the layout matrix's: |a - b| <= 1e-4 max(1, |b|).
    if (name.rfind("param.", 0) == 0) {
      EXPECT_TRUE(all_close(got.pieces[i], expected, 1e-4f, 1e-4f)) << what << " " << name;
    }
    if (name.find("wte.weight") == std::string::npos) continue;
    ASSERT_EQ(w.rows, V) << name;  // the checkpoint holds the real rows only
    EXPECT_LE(b.row0 + b.rows, V) << what << " " << name;
  }
  // The padding rows this rank holds (at tp = 4 ranks 2 and 3 hold only
  // padding) stay exactly zero: masked in the loss, so no gradient moves them.
  const int64_t local_rows = Vp / world->size();
  const int64_t first = mesh.coord().tp * local_rows;
  const int64_t padding = std::max<int64_t>(0, first + local_rows - std::max(first, V));
  ASSERT_EQ(got.vocab_padding.size(), static_cast<size_t>(padding * o.model.n_embd)) << what;
  for (size_t i = 0; i < got.vocab_padding.size(); ++i)
    ASSERT_EQ(got.vocab_padding[i], 0.f) << what << " padding element " << i;
}

}  // namespace
}  // namespace gt::test
