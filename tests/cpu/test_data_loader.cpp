// The data-order contract: with shuffle off, global row b of step s starts
// at token (s*global_batch + b)*seq_len and the stream wraps across shards;
// with shuffle on, each epoch is a seeded permutation of the windows.
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "test_util.hpp"
#include "trainer/data/data_loader.hpp"

namespace gt {
namespace {

// Tokens equal to (base + position) so every token tells where it came from.
std::vector<uint16_t> positional(int n, int base) {
  std::vector<uint16_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(base + i);
  return t;
}

TEST(DataLoader, SequentialOrderFollowsTheContract) {
  test::TempDir dir;
  test::write_shard(dir.file("a_0.bin"), positional(100, 0));
  test::write_shard(dir.file("a_1.bin"), positional(50, 1000));
  const int seq = 8, global_batch = 3;
  DataLoader loader({dir.file("a_*.bin")}, "data.train", 65536, seq, false, 1);
  ASSERT_EQ(loader.num_windows(), 99 / 8 + 49 / 8);  // 12 + 6
  std::vector<int32_t> in(seq), tgt(seq);
  for (int step = 0; step < 10; ++step) {
    for (int b = 0; b < global_batch; ++b) {
      const int64_t g = int64_t(step) * global_batch + b;
      loader.fill(g, 1, in.data(), tgt.data());
      const int64_t w = g % 18;
      const int expect0 = w < 12 ? int(w * seq) : 1000 + int((w - 12) * seq);
      if (g < 12) {
        EXPECT_EQ(expect0, int(g * seq));  // the contract's formula in shard 0
      }
      for (int t = 0; t < seq; ++t) {
        ASSERT_EQ(in[t], expect0 + t) << "step " << step << " row " << b;
        ASSERT_EQ(tgt[t], expect0 + t + 1) << "step " << step << " row " << b;
      }
    }
  }
}

TEST(DataLoader, FillOfManyRowsEqualsRowByRow) {
  test::TempDir dir;
  test::write_shard(dir.file("s.bin"), positional(300, 0));
  for (bool shuffle : {false, true}) {
    DataLoader loader({dir.file("s.bin")}, "data.train", 65536, 7, shuffle, 5);
    std::vector<int32_t> in(4 * 7), tgt(4 * 7), in1(7), tgt1(7);
    loader.fill(40, 4, in.data(), tgt.data());
    for (int r = 0; r < 4; ++r) {
      loader.fill(40 + r, 1, in1.data(), tgt1.data());
      for (int t = 0; t < 7; ++t) ASSERT_EQ(in[r * 7 + t], in1[t]);
    }
  }
}

TEST(DataLoader, ShuffleIsASeededPermutationPerEpoch) {
  test::TempDir dir;
  test::write_shard(dir.file("s.bin"), positional(401, 0));  // 100 windows of 4
  const int seq = 4;
  DataLoader a({dir.file("s.bin")}, "data.train", 65536, seq, true, 42);
  DataLoader b({dir.file("s.bin")}, "data.train", 65536, seq, true, 42);
  DataLoader c({dir.file("s.bin")}, "data.train", 65536, seq, true, 43);
  std::vector<int32_t> in(seq), tgt(seq);
  std::vector<int> order_a, order_b, order_c;
  for (int64_t g = 0; g < 200; ++g) {
    a.fill(g, 1, in.data(), tgt.data());
    order_a.push_back(in[0]);
    b.fill(g, 1, in.data(), tgt.data());
    order_b.push_back(in[0]);
    c.fill(g, 1, in.data(), tgt.data());
    order_c.push_back(in[0]);
  }
  EXPECT_EQ(order_a, order_b);
  EXPECT_NE(order_a, order_c);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<int> starts(order_a.begin() + epoch * 100, order_a.begin() + (epoch + 1) * 100);
    EXPECT_EQ(starts.size(), 100u) << "epoch " << epoch << " repeats a window";
    EXPECT_EQ(*starts.begin(), 0);
    EXPECT_EQ(*starts.rbegin(), 99 * seq);
  }
  EXPECT_NE(std::vector<int>(order_a.begin(), order_a.begin() + 100),
            std::vector<int>(order_a.begin() + 100, order_a.end()))
      << "two epochs in the same order";
  // Random access (a resumed run) sees the same sample as the sequential pass.
  DataLoader d({dir.file("s.bin")}, "data.train", 65536, seq, true, 42);
  d.fill(157, 1, in.data(), tgt.data());
  EXPECT_EQ(in[0], order_a[157]);
}

using test::error_message;

TEST(DataLoader, RejectsBadShardsByName) {
  test::TempDir dir;
  EXPECT_NE(error_message([&] { DataLoader({dir.file("missing_*.bin")}, "data.train", 256, 4, false, 0); })
                .find("data.train (" + dir.file("missing_*.bin") + "): expected a file or a glob matching one"),
            std::string::npos);

  test::write_shard(dir.file("big.bin"), {1, 2, 300, 4, 5, 6});
  EXPECT_NE(error_message([&] { DataLoader({dir.file("big.bin")}, "data.train", 256, 2, false, 0); })
                .find("expected tokens < model.vocab_size=256, got token 300 at position 2"),
            std::string::npos);

  {  // headerless raw uint16 file
    std::ofstream f(dir.file("raw.bin"), std::ios::binary);
    std::vector<uint16_t> t(2000, 7);
    f.write(reinterpret_cast<const char*>(t.data()), 4000);
  }
  EXPECT_NE(error_message([&] { DataLoader({dir.file("raw.bin")}, "data.train", 256, 2, false, 0); })
                .find("bad magic"),
            std::string::npos);

  test::write_shard(dir.file("trunc.bin"), std::vector<uint16_t>(100, 1));
  std::filesystem::resize_file(dir.file("trunc.bin"), 1024 + 150);
  EXPECT_NE(error_message([&] { DataLoader({dir.file("trunc.bin")}, "data.train", 256, 2, false, 0); })
                .find("expected 1224 bytes (the header says 100 tokens), got 1174 bytes"),
            std::string::npos);

  test::write_shard(dir.file("short.bin"), std::vector<uint16_t>(5, 1));
  EXPECT_NE(error_message([&] { DataLoader({dir.file("short.bin")}, "data.val", 256, 8, false, 0); })
                .find("data shard too short (" + dir.file("short.bin") +
                      ", data.val): expected at least seq_len+1=9 tokens, got 5"),
            std::string::npos);
}

// llm.c's uint32 format (magic 20240801, version 7: Llama 3's vocabulary)
// reads like the uint16 one, tokens past 65535 included; header int 3, the
// tokenizer's vocabulary, may not exceed model.vocab_size.
void write_u32_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                     int32_t vocab = 0, int32_t version = 7) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = vocab;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()),
          static_cast<std::streamsize>(tokens.size() * 4));
}

TEST(DataLoader, Uint32ShardsCarryTokensPast65535) {
  test::TempDir dir;
  std::vector<uint32_t> toks(40);
  for (int i = 0; i < 40; ++i) toks[static_cast<size_t>(i)] = 128000u + static_cast<uint32_t>(i);
  write_u32_shard(dir.file("wide.bin"), toks, 128256);
  DataLoader loader({dir.file("wide.bin")}, "data.train", 128256, 8, false, 0);
  std::vector<int32_t> in(8), tgt(8);
  loader.fill(2, 1, in.data(), tgt.data());
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(in[static_cast<size_t>(t)], 128016 + t);
    EXPECT_EQ(tgt[static_cast<size_t>(t)], 128017 + t);
  }
  using test::error_message;
  // A Llama 3 tokenizer's shard under a GPT-2 sized vocabulary: named by the header.
  EXPECT_NE(
      error_message([&] { DataLoader({dir.file("wide.bin")}, "data.train", 50257, 8, false, 0); })
          .find("written by a tokenizer of 128256 tokens (header int 3), expected at most "
                "model.vocab_size=50257"),
      std::string::npos);
  write_u32_shard(dir.file("unrecorded.bin"), toks);  // vocab not recorded: the tokens say it
  EXPECT_NE(error_message([&] {
              DataLoader({dir.file("unrecorded.bin")}, "data.train", 128010, 8, false, 0);
            }).find("expected tokens < model.vocab_size=128010, got token 128010 at position 10"),
            std::string::npos);
  write_u32_shard(dir.file("v1.bin"), toks, 0, 1);
  EXPECT_NE(error_message([&] {
              DataLoader({dir.file("v1.bin")}, "data.train", 128256, 8, false, 0);
            }).find("expected version 7 with magic 20240801, got version 1"),
            std::string::npos);
}

}  // namespace
}  // namespace gt
