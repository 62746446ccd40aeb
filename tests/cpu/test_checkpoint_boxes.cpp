// Checkpoints of tensor pieces: saved in one decomposition and loaded in
// another (whole, row bands, column bands, boxes spanning several saved
// pieces), 1-D tensors as (N, 1), the exactly-once check at save, coverage
// at load, and loads that read only the files they need. Several ranks are
// threads here, over a small thread communicator (the same protocol code as
// under MPI, whose tests are in tests/mpi/test_checkpoint_mpi.cpp).
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint_test_util.hpp"
#include "kernels/core/error.hpp"
#include "parallel/communicator.hpp"
#include "parallel/in_process_communicator.hpp"
#include "test_util.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/io/safetensors.hpp"

namespace gt {
namespace {

namespace fs = std::filesystem;
using test::GlobalTensor;
using test::PieceSet;
using test::TempDir;

const char* kSig = "n_layer=2,n_embd=8";

#define EXPECT_HAS(msg, part) \
  EXPECT_NE(std::string(msg).find(part), std::string::npos) << "message: " << (msg)

// ---- Ranks as threads --------------------------------------------------------

// The integer all-reduce and barrier the checkpoint protocol uses, for ranks
// that are threads of this process. Other collectives are not needed here.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), values_(static_cast<size_t>(size)) {}
  int size() const { return size_; }

  int64_t all_reduce(int rank, int64_t v, ReduceOp op) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = generation_;
    values_[static_cast<size_t>(rank)] = v;
    if (++arrived_ < size_) {
      // result_ of this generation stays put until every rank (this one
      // included) has arrived again, which it cannot do before returning.
      cv_.wait(lock, [&] { return generation_ != gen; });
      return result_;
    }
    int64_t r = values_[0];
    for (int i = 1; i < size_; ++i) {
      const int64_t x = values_[static_cast<size_t>(i)];
      r = op == ReduceOp::sum ? r + x : op == ReduceOp::max ? std::max(r, x) : std::min(r, x);
    }
    result_ = r;
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return r;
  }

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> values_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  int64_t result_ = 0;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  const std::string& name() const override { return name_; }

 protected:
  CommHandle do_all_reduce(float*, int64_t, ReduceOp) override { unsupported(); }
  CommHandle do_reduce_scatter_sum(const float*, float*, int64_t) override { unsupported(); }
  CommHandle do_all_reduce_sum_bf16(uint16_t*, int64_t) override { unsupported(); }
  CommHandle do_reduce_scatter_sum_bf16(const uint16_t*, uint16_t*, int64_t) override {
    unsupported();
  }
  CommHandle do_all_gather(const float*, float*, int64_t) override { unsupported(); }
  CommHandle do_broadcast(float*, int64_t, int) override { unsupported(); }
  CommHandle do_send(const float*, int64_t, int, int) override { unsupported(); }
  CommHandle do_recv(float*, int64_t, int, int) override { unsupported(); }
  double do_all_reduce_f64(double, ReduceOp) override { unsupported(); }
  int64_t do_all_reduce_i64(int64_t v, ReduceOp op) override {
    return group_.all_reduce(rank_, v, op);
  }
  void do_barrier() override { group_.all_reduce(rank_, 0, ReduceOp::sum); }

 private:
  [[noreturn]] static void unsupported() { fail("ThreadCommunicator: not needed by these tests"); }
  ThreadGroup& group_;
  const int rank_;
  const std::string name_ = "threads";
};

// Runs fn(world) on `size` thread ranks; returns each rank's error ("" = none).
std::vector<std::string> run_ranks(int size, const std::function<void(Communicator&)>& fn) {
  ThreadGroup group(size);
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      ThreadCommunicator world(group, r);
      try {
        fn(world);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// ---- Fixtures -----------------------------------------------------------------

const GlobalTensor kA{"param.a", {12, 10}, 1};  // saved in row bands
const GlobalTensor kB{"param.b", {17}, 2};      // 1-D, saved in two runs of elements
const GlobalTensor kC{"adam_m.c", {6, 9}, 3};   // saved in column bands

CheckpointMeta meta_for(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.model_signature = kSig;
  m.layout = "test";
  return m;
}

std::string save_one_rank(const std::string& root, int64_t step, PieceSet& pieces) {
  InProcessCommunicator world("world");
  return save_checkpoint(root, meta_for(step), pieces.pieces(), 0, world);
}

// A, B and C split as above, all on one rank.
PieceSet split_pieces() {
  PieceSet s;
  s.add_filled(kA, {0, 5, 0, 10});
  s.add_filled(kA, {5, 4, 0, 10});
  s.add_filled(kA, {9, 3, 0, 10});
  s.add_filled(kB, {0, 7, 0, 1});
  s.add_filled(kB, {7, 10, 0, 1});
  s.add_filled(kC, {0, 6, 0, 4});
  s.add_filled(kC, {0, 6, 4, 5});
  return s;
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void flip_last_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(-1, std::ios::end);
  f.write(&c, 1);
  ASSERT_TRUE(f.good());
}

// ---- One rank -------------------------------------------------------------------

TEST(CheckpointBoxes, SavedInPiecesLoadedAsOtherBoxes) {
  TempDir tmp;
  PieceSet saved = split_pieces();
  const std::string dir = save_one_rank(tmp.path(), 3, saved);

  PieceSet want;
  want.add_blank(kA, test::col_band(kA, 0, 3));  // column bands across three row bands
  want.add_blank(kA, test::col_band(kA, 1, 3));
  want.add_blank(kA, test::col_band(kA, 2, 3));
  want.add_blank(kA, {3, 8, 2, 7});               // spans all three saved pieces
  want.add_blank(kA, {5, 4, 0, 10});              // exactly one saved piece
  want.add_blank(kB, {5, 8, 0, 1});               // across the two saved runs
  want.add_blank(kC, test::row_band(kC, 0, 2));   // row bands across column bands
  want.add_blank(kC, test::row_band(kC, 1, 2));
  want.add_blank(kC, {2, 1, 3, 2});               // one row, straddling the column cut
  PieceSet whole;
  for (const GlobalTensor& t : {kA, kB, kC}) whole.add_blank(t, whole_box(t.shape));

  const CheckpointMeta got = load_checkpoint(dir, kSig, want.pieces());
  EXPECT_EQ(got.step, 3);
  EXPECT_EQ(got.layout, "test");
  EXPECT_TRUE(want.all_exact());
  load_checkpoint(dir, kSig, whole.pieces());
  EXPECT_TRUE(whole.all_exact());

  // The index lists every saved piece with its entry and box.
  std::ifstream in(dir + "/manifest.json");
  const auto j = nlohmann::json::parse(in);
  const auto& a = j["tensors"]["param.a"];
  EXPECT_EQ(a["shape"], nlohmann::json({12, 10}));
  ASSERT_EQ(a["pieces"].size(), 3u);
  EXPECT_EQ(a["pieces"][1]["entry"], "param.a@5,4,0,10");
  EXPECT_EQ(a["pieces"][1]["box"], nlohmann::json({5, 4, 0, 10}));
  EXPECT_EQ(j["tensors"]["adam_m.c"]["pieces"][1]["entry"], "adam_m.c@0,6,4,5");
}

// A 1-D tensor of N elements is the (N, 1) view: its entries stay 1-D in the
// file, and a box with any other column range is rejected.
TEST(CheckpointBoxes, OneDimensionalTensorIsNByOne) {
  TempDir tmp;
  PieceSet saved = split_pieces();
  const std::string dir = save_one_rank(tmp.path(), 1, saved);
  const SafetensorsReader shard(dir + "/rank_00000.safetensors");
  EXPECT_EQ(shard.info("param.b@7,10,0,1").shape, std::vector<int64_t>{10});
  EXPECT_EQ(whole_box({17}), (TensorBox{0, 17, 0, 1}));

  std::vector<float> buf(34);
  const std::string msg = test::error_message(
      [&] { load_checkpoint(dir, kSig, {{"param.b", {17}, {0, 17, 0, 2}, buf.data()}}); });
  EXPECT_HAS(msg, "load_checkpoint: tensor param.b (shape [17]): box rows [0, 17) x cols [0, 2)");
  EXPECT_HAS(msg, "is not inside it");

  PieceSet bad;
  bad.add_filled(kB, {0, 17, 1, 1});
  EXPECT_HAS(test::error_message([&] { save_one_rank(tmp.path(), 2, bad); }),
             "save_checkpoint: tensor param.b (shape [17]): box rows [0, 17) x cols [1, 2)");
}

TEST(CheckpointBoxes, GapRejectedAtSaveNamingTensorAndRectangle) {
  TempDir tmp;
  PieceSet s;
  s.add_filled(kA, {0, 5, 0, 10});
  s.add_filled(kA, {9, 3, 0, 10});  // rows [5, 9) are missing
  s.add_filled(kB, {0, 7, 0, 1});   // elements [7, 17) are missing
  const std::string msg = test::error_message([&] { save_one_rank(tmp.path(), 4, s); });
  // Tensors are checked in name order: param.a first.
  EXPECT_EQ(msg, "checkpoint step 4: tensor param.a (shape [12, 10]): rows [5, 9) x cols [0, 10) "
                 "is in no rank's pieces; the pieces must cover every tensor exactly once");
  EXPECT_TRUE(dir_entries(tmp.path()).empty()) << "nothing committed, staging removed";

  PieceSet only_b;
  only_b.add_filled(kB, {0, 7, 0, 1});
  EXPECT_HAS(test::error_message([&] { save_one_rank(tmp.path(), 4, only_b); }),
             "tensor param.b (shape [17]): elements [7, 17) is in no rank's pieces");
}

TEST(CheckpointBoxes, OverlapRejectedAtSaveNamingTensorAndPieces) {
  TempDir tmp;
  PieceSet s;
  s.add_filled(kC, {0, 6, 0, 5});
  s.add_filled(kC, {0, 6, 4, 5});  // column 4 twice
  const std::string msg = test::error_message([&] { save_one_rank(tmp.path(), 5, s); });
  EXPECT_EQ(msg, "checkpoint step 5: tensor adam_m.c (shape [6, 9]): rows [0, 6) x cols [4, 5) "
                 "is in more than one piece: rank 0's rows [0, 6) x cols [0, 5) and rank 0's "
                 "rows [0, 6) x cols [4, 9); each element must be saved by exactly one rank "
                 "(data-parallel replicas save once)");
  EXPECT_TRUE(dir_entries(tmp.path()).empty());
}

// The manifest is what a load trusts for coverage: a piece missing from it
// leaves a hole that is reported with the tensor and the rectangle, only
// when a wanted box falls in it.
TEST(CheckpointBoxes, UncoveredWantedBoxNamesTensorAndRectangle) {
  TempDir tmp;
  PieceSet saved = split_pieces();
  const std::string dir = save_one_rank(tmp.path(), 6, saved);
  nlohmann::json j;
  {
    std::ifstream in(dir + "/manifest.json");
    j = nlohmann::json::parse(in);
  }
  auto& pieces = j["tensors"]["param.a"]["pieces"];
  pieces.erase(1);  // rows [5, 9)
  std::ofstream(dir + "/manifest.json") << j.dump();

  PieceSet top;
  top.add_blank(kA, {0, 5, 0, 10});
  load_checkpoint(dir, kSig, top.pieces());
  EXPECT_TRUE(top.all_exact());

  PieceSet box;
  box.add_blank(kA, {4, 6, 3, 4});
  EXPECT_EQ(test::error_message([&] { load_checkpoint(dir, kSig, box.pieces()); }),
            "tensor param.a (shape [12, 10]): rows [5, 9) x cols [3, 7) of the wanted rows "
            "[4, 10) x cols [3, 7) is not in checkpoint " + dir);
}

TEST(CheckpointBoxes, BadWantedPiecesRejected) {
  TempDir tmp;
  PieceSet saved = split_pieces();
  const std::string dir = save_one_rank(tmp.path(), 7, saved);
  std::vector<float> buf(120);
  EXPECT_HAS(test::error_message(
                 [&] { load_checkpoint(dir, kSig, {{"param.a", {12, 10}, {0, 2, 0, 10}}}); }),
             "load_checkpoint: tensor param.a piece rows [0, 2) x cols [0, 10) has no data");
  EXPECT_HAS(test::error_message([&] {
               load_checkpoint(dir, kSig, {{"param.a", {12, 10}, {10, 3, 0, 10}, buf.data()}});
             }),
             "box rows [10, 13) x cols [0, 10) is not inside it");
  EXPECT_EQ(test::error_message([&] {
              load_checkpoint(dir, kSig, {{"param.a", {12, 11}, {0, 1, 0, 1}, buf.data()}});
            }),
            "tensor param.a in checkpoint " + dir + ": expected shape [12, 11], got [12, 10]");
  EXPECT_HAS(test::error_message([&] {
               load_checkpoint(dir, kSig, {{"param.x", {3, 3, 1}, {0, 1, 0, 1}, buf.data()}});
             }),
             "tensor param.x has shape [3, 3, 1]; checkpoint tensors are 1-D or 2-D");
  // An empty box wants nothing, not even a buffer.
  load_checkpoint(dir, kSig, {{"param.a", {12, 10}, {4, 0, 0, 10}, nullptr}});
}

// A checkpoint written before the vocabulary's padding was left out holds
// param.a's 12 rows where the model now wants 9 real ones: a piece marked
// vocab_rows reads the first 9 and skips the rest; an unmarked one is a
// shape error as before.
TEST(CheckpointBoxes, VocabularyRowsReadFromAnOlderPaddedCheckpoint) {
  TempDir tmp;
  PieceSet saved = split_pieces();
  const std::string dir = save_one_rank(tmp.path(), 5, saved);
  const GlobalTensor real{"param.a", {9, 10}, kA.id};
  PieceSet want;
  want.add_blank(real, {0, 9, 0, 10});
  std::vector<TensorPiece> pieces = want.pieces();
  EXPECT_HAS(test::error_message([&] { load_checkpoint(dir, kSig, pieces); }),
             "expected shape [9, 10], got [12, 10]");
  pieces[0].vocab_rows = true;
  load_checkpoint(dir, kSig, pieces);
  EXPECT_TRUE(want.all_exact());
}

// ---- Several ranks (threads) ------------------------------------------------------

// Rank 0 saves A rows [0, 6) and B; rank 1 A rows [6, 12) and C. A load
// that wants nothing of rank 1's pieces neither checks nor reads its file,
// so that file can be corrupt or gone; one that does names the file.
TEST(CheckpointThreads, LoadReadsOnlyTheFilesItNeeds) {
  TempDir tmp;
  std::vector<std::string> dirs(2);
  const auto errors = run_ranks(2, [&](Communicator& world) {
    PieceSet mine;
    if (world.rank() == 0) {
      mine.add_filled(kA, test::row_band(kA, 0, 2));
      mine.add_filled(kB, whole_box(kB.shape));
    } else {
      mine.add_filled(kA, test::row_band(kA, 1, 2));
      mine.add_filled(kC, whole_box(kC.shape));
    }
    dirs[static_cast<size_t>(world.rank())] =
        save_checkpoint(tmp.path(), meta_for(8), mine.pieces(), 0, world);
  });
  ASSERT_EQ(errors, (std::vector<std::string>{"", ""}));
  const std::string dir = dirs[0];
  EXPECT_EQ(dirs[1], dir);
  EXPECT_EQ(dir_entries(dir), (std::vector<std::string>{"manifest.json", "rank_00000.safetensors",
                                                        "rank_00001.safetensors"}));

  auto rank0_only = [] {
    PieceSet s;
    s.add_blank(kA, {1, 4, 2, 5});
    s.add_blank(kB, {3, 9, 0, 1});
    return s;
  };
  auto straddling = [] {
    PieceSet s;
    s.add_blank(kA, {4, 4, 0, 10});  // rows [4, 8): both files
    return s;
  };
  {
    PieceSet s = straddling();
    load_checkpoint(dir, kSig, s.pieces());
    EXPECT_TRUE(s.all_exact());
  }

  flip_last_byte(dir + "/rank_00001.safetensors");
  PieceSet ok = rank0_only();
  load_checkpoint(dir, kSig, ok.pieces());
  EXPECT_TRUE(ok.all_exact());
  PieceSet bad = straddling();
  EXPECT_HAS(test::error_message([&] { load_checkpoint(dir, kSig, bad.pieces()); }),
             "checksum mismatch (" + dir + "/rank_00001.safetensors)");

  fs::remove(dir + "/rank_00001.safetensors");
  PieceSet ok2 = rank0_only();
  load_checkpoint(dir, kSig, ok2.pieces());
  EXPECT_TRUE(ok2.all_exact());
  PieceSet c;
  c.add_blank(kC, {0, 1, 0, 1});
  EXPECT_HAS(test::error_message([&] { load_checkpoint(dir, kSig, c.pieces()); }),
             "checkpoint file missing (" + dir + "/rank_00001.safetensors)");
}

// Ranks that own nothing write no shard; the manifest lists the others.
TEST(CheckpointThreads, RankWithoutPiecesWritesNoFile) {
  TempDir tmp;
  const auto errors = run_ranks(3, [&](Communicator& world) {
    PieceSet mine;
    if (world.rank() < 2) mine.add_filled(kC, test::col_band(kC, world.rank(), 2));
    if (world.rank() == 2) mine.add_filled(kC, {0, 6, 9, 0});  // an empty box owns nothing
    save_checkpoint(tmp.path(), meta_for(9), mine.pieces(), 0, world);
  });
  ASSERT_EQ(errors, (std::vector<std::string>{"", "", ""}));
  const std::string dir = tmp.file("step_00000009");
  EXPECT_EQ(dir_entries(dir), (std::vector<std::string>{"manifest.json", "rank_00000.safetensors",
                                                        "rank_00001.safetensors"}));

  // But a tensor whose every piece is empty is not silently dropped: it is
  // declared (with its shape) and reported as uncovered.
  const auto dropped = run_ranks(2, [&](Communicator& world) {
    PieceSet mine;
    mine.add_filled(kC, test::col_band(kC, world.rank(), 2));
    mine.add_filled(kA, {0, 0, 0, 10});
    save_checkpoint(tmp.path(), meta_for(10), mine.pieces(), 0, world);
  });
  EXPECT_EQ(dropped[0], "checkpoint step 10: tensor param.a (shape [12, 10]): rows [0, 12) x cols "
                        "[0, 10) is in no rank's pieces; the pieces must cover every tensor "
                        "exactly once");
  EXPECT_EQ(dropped[1], "checkpoint step 10 was not saved: rank 0 failed while committing (its "
                        "error is in its own output)");
}

// One rank's bad piece (null data) becomes an error on every rank, with
// nothing committed and no staging directory left behind; the next save of
// the same step then succeeds.
TEST(CheckpointThreads, FailureOnOneRankThrowsOnEveryRank) {
  TempDir tmp;
  const auto errors = run_ranks(3, [&](Communicator& world) {
    PieceSet mine;
    mine.add_filled(kA, test::row_band(kA, world.rank(), 3));
    std::vector<TensorPiece> pieces = mine.pieces();
    if (world.rank() == 1) pieces[0].data = nullptr;
    save_checkpoint(tmp.path(), meta_for(10), pieces, 0, world);
  });
  EXPECT_EQ(errors[1], "save_checkpoint: tensor param.a piece rows [4, 8) x cols [0, 10) has no "
                       "data (null pointer)");
  for (int r : {0, 2})
    EXPECT_EQ(errors[static_cast<size_t>(r)],
              "checkpoint step 10 was not saved: rank 1 failed while writing its shard (its "
              "error is in its own output)");
  EXPECT_TRUE(dir_entries(tmp.path()).empty());

  const auto retry = run_ranks(3, [&](Communicator& world) {
    PieceSet mine;
    mine.add_filled(kA, test::row_band(kA, world.rank(), 3));
    save_checkpoint(tmp.path(), meta_for(10), mine.pieces(), 0, world);
  });
  EXPECT_EQ(retry, (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(dir_entries(tmp.path()), std::vector<std::string>{"step_00000010"});
}

// Ranks that disagree on the step all throw before anything is written.
TEST(CheckpointThreads, DifferentStepsOnRanksRejected) {
  TempDir tmp;
  const auto errors = run_ranks(2, [&](Communicator& world) {
    PieceSet mine;
    mine.add_filled(kA, test::row_band(kA, world.rank(), 2));
    save_checkpoint(tmp.path(), meta_for(11 + world.rank()), mine.pieces(), 0, world);
  });
  for (const std::string& e : errors)
    EXPECT_EQ(e, "save_checkpoint: the ranks pass different steps (11 to 12); every rank must "
                 "pass the same meta");
  EXPECT_TRUE(dir_entries(tmp.path()).empty());
}

}  // namespace
}  // namespace gt
