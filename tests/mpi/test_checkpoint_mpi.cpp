// Checkpoints across real ranks (1, 2 or 4 under mpirun): every rank saves
// its own slice of the global tensors, then every rank loads a different
// decomposition and checks exact values; a failure on one rank becomes an
// error on every rank instead of a hang. Values are the closed form of
// checkpoint_test_util.hpp, so no rank needs another rank's data to check.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_test_util.hpp"
#include "kernels/core/error.hpp"
#include "mpi_test_util.hpp"
#include "trainer/checkpoint/checkpoint.hpp"

namespace gt::test {
namespace {

namespace fs = std::filesystem;

const char* kSig = "n_layer=1,n_embd=16";

// A directory every rank sees: named from rank 0's pid (shared with an
// all-reduce), created by rank 0, removed by rank 0 once every rank is done.
class SharedDir {
 public:
  SharedDir(Communicator& world, const std::string& tag) : world_(world) {
    const int64_t pid0 =
        world.all_reduce_i64(world.rank() == 0 ? static_cast<int64_t>(::getpid()) : 0,
                             ReduceOp::sum);
    path_ = (fs::temp_directory_path() /
             ("gt_ckpt_mpi_" + std::to_string(pid0) + "_" + tag))
                .string();
    if (world.rank() == 0) {
      fs::remove_all(path_);
      fs::create_directories(path_);
    }
    world.barrier();
  }
  ~SharedDir() {
    try {
      world_.barrier();
      if (world_.rank() == 0) fs::remove_all(path_);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "SharedDir cleanup: " << e.what();
    }
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  Communicator& world_;
  std::string path_;
};

CheckpointMeta meta_for(int64_t step, int world_size) {
  CheckpointMeta m;
  m.step = step;
  m.sample_position = step * 8;
  m.seed = 5;
  m.optimizer_step = step - 1;
  m.model_signature = kSig;
  m.layout = "test x " + std::to_string(world_size) + " ranks";
  return m;
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

const GlobalTensor kA{"param.h.0.attn.c_attn.weight", {13, 18}, 1};  // row bands
const GlobalTensor kB{"param.h.0.mlp.c_proj.weight", {10, 11}, 2};   // column bands
const GlobalTensor kC{"param.ln_f.bias", {23}, 3};                   // 1-D, element bands
const GlobalTensor kD{"adam_m.wpe.weight", {5, 7}, 4};               // whole, last rank
const GlobalTensor kE{"adam_v.wte.weight", {9, 12}, 5};              // a 2-D grid of boxes

// Rank r's cell of a (gr x gc) grid over E, with gr * gc == p.
TensorBox grid_box(int r, int p) {
  const int gr = p % 2 == 0 ? 2 : 1, gc = p / gr;
  const TensorBox rows = row_band(kE, r / gc, gr), cols = col_band(kE, r % gc, gc);
  return TensorBox{rows.row0, rows.rows, cols.col0, cols.cols};
}

PieceSet saved_slice(int r, int p) {
  PieceSet s;
  s.add_filled(kA, row_band(kA, r, p));
  s.add_filled(kB, col_band(kB, r, p));
  s.add_filled(kC, row_band(kC, r, p));
  if (r == p - 1) s.add_filled(kD, whole_box(kD.shape));
  s.add_filled(kE, grid_box(r, p));
  return s;
}

TEST(CheckpointMpi, SaveInOneLayoutLoadInAnother) {
  auto world = test_world();
  const int p = world->size(), r = world->rank();
  SharedDir root(*world, "layouts");
  PieceSet mine = saved_slice(r, p);
  const std::string dir = save_checkpoint(root.path(), meta_for(7, p), mine.pieces(), 2, *world);
  EXPECT_EQ(dir, root.path() + "/step_00000007");

  if (r == 0) {
    std::vector<std::string> want = {"manifest.json"};
    for (int k = 0; k < p; ++k) {
      char name[32];
      std::snprintf(name, sizeof name, "rank_%05d.safetensors", k);
      want.push_back(name);
    }
    EXPECT_EQ(dir_entries(dir), want);
    std::ifstream in(dir + "/manifest.json");
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["format_version"], 2);
    EXPECT_EQ(j["files"].size(), static_cast<size_t>(p));
    EXPECT_EQ(j["tensors"][kA.name]["pieces"].size(), static_cast<size_t>(p));
    EXPECT_EQ(j["tensors"][kD.name]["pieces"].size(), 1u);
  }
  world->barrier();  // rank 0 has looked before anyone reads

  // A different decomposition on every rank: A in column bands in reverse
  // rank order, B in row bands shifted by one, C and E whole plus a box
  // across every saved piece of E, D in row bands.
  PieceSet want;
  want.add_blank(kA, col_band(kA, p - 1 - r, p));
  want.add_blank(kB, row_band(kB, (r + 1) % p, p));
  want.add_blank(kC, whole_box(kC.shape));
  want.add_blank(kD, row_band(kD, r, p));
  want.add_blank(kE, whole_box(kE.shape));
  want.add_blank(kE, TensorBox{1, 7, 2, 9});
  const CheckpointMeta got = load_checkpoint(dir, kSig, want.pieces());
  EXPECT_TRUE(want.all_exact());
  EXPECT_EQ(got.step, 7);
  EXPECT_EQ(got.sample_position, 56);
  EXPECT_EQ(got.optimizer_step, 6);
  EXPECT_EQ(got.layout, "test x " + std::to_string(p) + " ranks");
}

// The last rank hands over a piece without data: every rank throws (that
// rank its own message), nothing is committed, and the same save then works.
TEST(CheckpointMpi, FailureOnOneRankThrowsOnEveryRank) {
  auto world = test_world();
  const int p = world->size(), r = world->rank();
  SharedDir root(*world, "failure");
  PieceSet mine = saved_slice(r, p);
  std::vector<TensorPiece> pieces = mine.pieces();
  if (r == p - 1) pieces[0].data = nullptr;
  const std::string msg =
      error_message([&] { save_checkpoint(root.path(), meta_for(3, p), pieces, 0, *world); });
  if (r == p - 1) {
    EXPECT_NE(msg.find("tensor " + kA.name + " piece rows ["), std::string::npos) << msg;
    EXPECT_NE(msg.find("has no data (null pointer)"), std::string::npos) << msg;
  } else {
    EXPECT_EQ(msg, "checkpoint step 3 was not saved: rank " + std::to_string(p - 1) +
                       " failed while writing its shard (its error is in its own output)");
  }
  world->barrier();
  if (r == 0) {
    EXPECT_TRUE(dir_entries(root.path()).empty()) << "nothing committed or staged";
  }

  const std::string dir =
      save_checkpoint(root.path(), meta_for(3, p), mine.pieces(), 0, *world);
  PieceSet whole;
  whole.add_blank(kA, whole_box(kA.shape));
  load_checkpoint(dir, kSig, whole.pieces());
  EXPECT_TRUE(whole.all_exact());
}

// The ranks' pieces leave the last rows of A unsaved: rank 0 finds it while
// committing, names the tensor and rows, and every other rank throws too.
TEST(CheckpointMpi, GapBetweenRanksRejectedOnEveryRank) {
  auto world = test_world();
  const int p = world->size(), r = world->rank();
  SharedDir root(*world, "gap");
  PieceSet mine;
  mine.add_filled(kA, row_band(kA, r, p + 1));  // band p of p + 1 is nobody's
  const std::string msg = error_message(
      [&] { save_checkpoint(root.path(), meta_for(4, p), mine.pieces(), 0, *world); });
  if (r == 0) {
    const TensorBox gap = row_band(kA, p, p + 1);
    EXPECT_EQ(msg, "checkpoint step 4: tensor " + kA.name + " (shape [13, 18]): rows [" +
                       std::to_string(gap.row0) + ", 13) x cols [0, 18) is in no rank's pieces; "
                       "the pieces must cover every tensor exactly once");
  } else {
    EXPECT_EQ(msg, "checkpoint step 4 was not saved: rank 0 failed while committing (its error "
                   "is in its own output)");
  }
  world->barrier();
  if (r == 0) {
    EXPECT_TRUE(dir_entries(root.path()).empty());
  }
}

}  // namespace
}  // namespace gt::test
