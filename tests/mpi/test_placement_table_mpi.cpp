// The placement table of docs/ARCHITECTURE.md, written from the code: one
// GPT-2 and one Llama micro-batch (forward and backward) on 4 ranks as tp 2
// x cp 2 (all-gather mode), every placement the layers check or give
// recorded (PlacementLog), block 0's rows kept, in call order. The test
// fails when the doc's table differs from this run's; run it with
// GT_UPDATE_DOCS=1 to rewrite the doc's table (rank 0 writes it):
//   GT_UPDATE_DOCS=1 mpirun -np 4 --oversubscribe build/tests/mpi/gt_mpi_tests \
//       --gtest_filter='PlacementTable*'
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"

namespace gt::test {
namespace {

// Rows "| layer | role | tensor | tp | cp |" of the tensors of block 0
// (named h.0. / layers.0., or their gradients d(h.0. ...), each distinct row
// once, in the order first recorded.
class TableLog final : public PlacementLog {
 public:
  explicit TableLog(std::string block) : block_(std::move(block)) {}
  void record(const std::string& layer, const char* role, const Activation& a) override {
    if (a.name.find(block_) == std::string::npos) return;
    const std::string row = "| " + layer + " | " + role + " | `" + a.name + "` | " +
                            a.placement.tp.str() + " | " + a.placement.cp.str() + " |";
    for (const std::string& r : rows_)
      if (r == row) return;
    rows_.push_back(row);
  }
  std::string table() const {
    std::string out = "| layer | role | tensor | tp | cp |\n| --- | --- | --- | --- | --- |\n";
    for (const std::string& r : rows_) out += r + "\n";
    return out;
  }

 private:
  std::string block_;
  std::vector<std::string> rows_;
};

// One micro-batch of `m` at tp 2 x cp 2 with every placement recorded.
std::string block_table(const ModelConfig& m, const DeviceMesh& mesh, const std::string& block) {
  auto ops = make_cpu_ops(1);
  const ParallelDims& d = mesh.dims();
  const ParameterLayout layout(m, d.tp, mesh.coord().tp, shard_degree(d));
  ShardedParameters params(layout, mesh, FsdpStage::parameters, 25.0, *ops, false);
  for_each_initial_parameter(m, 7, [&](const ParamSpec& s, const float* data) {
    params.load_global(s.name, data);
  });
  const int B = 2, T = m.block_size / d.cp;
  auto model =
      make_model(m, *ops, B, T, layout, params, TensorParallelGroup{&mesh.tp(), true},
                 Recompute::none, ComputeDType::fp32, std::nullopt,
                 ContextParallelGroup{&mesh.cp(), CpComm::allgather, true});
  TableLog log(block);
  model->set_placement_log(&log);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<size_t>(m.vocab_size));
    targets[i] = static_cast<int32_t>((i * 3 + 2) % static_cast<size_t>(m.vocab_size));
  }
  params.begin_step();
  params.begin_micro_batch(true);
  model->forward(tokens.data(), targets.data(), B, T, 1.f / (B * T * d.cp));
  model->backward();
  params.finish_gradients();
  return log.table();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text between "<!-- placements:KEY begin -->\n" and "<!-- placements:KEY end -->".
struct Section {
  size_t begin = std::string::npos, end = std::string::npos;
};
Section find_section(const std::string& doc, const std::string& key) {
  const std::string open = "<!-- placements:" + key + " begin -->\n";
  const std::string close = "<!-- placements:" + key + " end -->";
  Section s;
  const size_t b = doc.find(open);
  if (b == std::string::npos) return s;
  s.begin = b + open.size();
  s.end = doc.find(close, s.begin);
  return s;
}

TEST(PlacementTable, DocsArchitectureHoldsTheTablesOfOneGpt2AndOneLlamaBlock) {
  auto world = test_world("placement-table");
  if (world->size() != 4) GTEST_SKIP() << "the table is of tp 2 x cp 2: 4 ranks";
  const ParallelDims dims{1, 1, 2, 1, 2};
  DeviceMesh mesh(dims, *world);
  ModelConfig gpt = tiny_gpt();
  ModelConfig llama = tiny_llama();
  const std::string tables[2] = {block_table(gpt, mesh, "h.0."),
                                 block_table(llama, mesh, "layers.0.")};
  if (world->rank() != 0) return;
  const std::string path = std::string(GT_SOURCE_DIR) + "/docs/ARCHITECTURE.md";
  std::string doc = read_file(path);
  const char* keys[2] = {"gpt2", "llama"};
  const bool update = std::getenv("GT_UPDATE_DOCS") != nullptr;
  for (int i = 0; i < 2; ++i) {
    const Section s = find_section(doc, keys[i]);
    ASSERT_NE(s.begin, std::string::npos) << path << " has no <!-- placements:" << keys[i]
                                          << " begin --> marker";
    ASSERT_NE(s.end, std::string::npos) << path << ": the " << keys[i] << " table has no end";
    if (update) {
      doc.replace(s.begin, s.end - s.begin, tables[i]);
    } else {
      EXPECT_EQ(doc.substr(s.begin, s.end - s.begin), tables[i])
          << "docs/ARCHITECTURE.md's " << keys[i]
          << " placement table differs from the code's; regenerate it: GT_UPDATE_DOCS=1 mpirun "
             "-np 4 --oversubscribe build/tests/mpi/gt_mpi_tests "
             "--gtest_filter='PlacementTable*'";
    }
  }
  if (update) {
    std::ofstream out(path);
    out << doc;
  }
}

}  // namespace
}  // namespace gt::test
