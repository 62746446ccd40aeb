// HF weights in and out for both families (trainer/model/hf_weights.hpp,
// hf_config.hpp): names, orientation and padding round-trip exactly; a
// sharded export is read back through its index and through its folder; a
// file of the other family, and every missing or misshapen tensor, is
// named in one error; config.json carries the dimensions transformers reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "kernels/core/error.hpp"
#include "test_util.hpp"
#include "trainer/io/safetensors.hpp"
#include "trainer/model/hf_config.hpp"
#include "trainer/model/hf_weights.hpp"

namespace gt {
namespace {

using test::TempDir;

ModelConfig tiny_llama() {
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 32;
  m.ffn_hidden = 48;
  m.vocab_size = 200;  // padded to 256 rows here, 200 in the file
  m.block_size = 16;
  return m;
}

ModelConfig tiny_gpt2() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 32;
  m.vocab_size = 200;
  m.block_size = 16;
  return m;
}

// Distinct values everywhere but the padding rows, which stay zero.
std::vector<float> distinct_params(const ParameterLayout& layout) {
  std::vector<float> p(static_cast<size_t>(layout.total()), 0.f);
  for (const auto& s : layout.specs()) {
    const int64_t real = s.real_rows() * (s.numel / s.shape[0]);
    for (int64_t i = 0; i < real; ++i)
      p[static_cast<size_t>(s.offset + i)] = 0.001f * static_cast<float>(s.offset + i) - 3.f;
  }
  return p;
}

// What for_each_hf_tensor reads back, in the layout.
std::vector<float> read_back(const std::string& path, const ModelConfig& m) {
  const ParameterLayout layout(m);
  std::vector<float> p(static_cast<size_t>(layout.total()), 0.f);
  for_each_hf_tensor(path, m, [&](const ParamSpec& s, const float* data) {
    std::copy(data, data + s.numel, p.begin() + s.offset);
  });
  return p;
}

TEST(HfWeights, BothFamiliesRoundTripWithTheirNames) {
  TempDir dir;
  for (const ModelConfig& m : {tiny_gpt2(), tiny_llama()}) {
    SCOPED_TRACE(to_string(m.arch));
    const ParameterLayout layout(m);
    const std::vector<float> params = distinct_params(layout);
    const std::string path = dir.file(std::string(to_string(m.arch)) + ".safetensors");
    EXPECT_EQ(save_hf_weights(path, m, layout, params.data(), {{"k", "v"}}),
              std::vector<std::string>{path});
    EXPECT_EQ(read_back(path, m), params);
    const SafetensorsReader r(path);
    EXPECT_EQ(r.metadata().at("k"), "v");
    if (m.arch == ModelArch::llama) {
      EXPECT_TRUE(r.has("model.embed_tokens.weight"));
      EXPECT_TRUE(r.has("model.layers.1.self_attn.k_proj.weight"));
      EXPECT_TRUE(r.has("model.norm.weight"));
      EXPECT_TRUE(r.has("lm_head.weight"));  // untied, never prefixed
      EXPECT_EQ(r.info("model.embed_tokens.weight").shape, (std::vector<int64_t>{200, 32}));
      EXPECT_EQ(r.info("model.layers.0.self_attn.k_proj.weight").shape,
                (std::vector<int64_t>{16, 32}));  // 2 kv heads of 8
      EXPECT_EQ(r.info("model.layers.0.mlp.down_proj.weight").shape,
                (std::vector<int64_t>{32, 48}));
    } else {
      EXPECT_TRUE(r.has("h.0.attn.c_attn.weight"));
      EXPECT_EQ(r.info("h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{32, 96}));  // Conv1D
      EXPECT_FALSE(r.has("lm_head.weight"));
    }
  }
}

TEST(HfWeights, ShardedExportReadsBackThroughItsIndexAndItsFolder) {
  TempDir dir;
  const ModelConfig m = tiny_llama();
  const ParameterLayout layout(m);
  const std::vector<float> params = distinct_params(layout);
  // 30 KB shards: the embedding and the head alone take 25.6 KB each.
  const auto files =
      save_hf_weights(dir.file("model.safetensors"), m, layout, params.data(), {}, 30'000);
  ASSERT_GT(files.size(), 3u);
  EXPECT_EQ(files.back(), dir.file("model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.safetensors")));
  std::ifstream in(files.back());
  const nlohmann::json index = nlohmann::json::parse(in);
  const size_t n = files.size() - 1;
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"],
            "model-00001-of-0000" + std::to_string(n) + ".safetensors");
  int64_t total = 0;
  for (const auto& s : layout.specs()) total += s.real_rows() * (s.numel / s.shape[0]) * 4;
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_EQ(read_back(files.back(), m), params);
  EXPECT_EQ(read_back(dir.path(), m), params);
}

TEST(HfWeights, AnotherFamilysFileIsNamedAsSuch) {
  TempDir dir;
  const ModelConfig gpt = tiny_gpt2(), llama = tiny_llama();
  const ParameterLayout gl(gpt), ll(llama);
  save_hf_weights(dir.file("gpt2.safetensors"), gpt, gl, distinct_params(gl).data(), {});
  save_hf_weights(dir.file("llama.safetensors"), llama, ll, distinct_params(ll).data(), {});
  EXPECT_NE(test::error_message([&] {
              read_back(dir.file("gpt2.safetensors"), llama);
            }).find("gpt2.safetensors): hold GPT-2 tensors (wte.weight), but model.arch=llama"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] {
              read_back(dir.file("llama.safetensors"), gpt);
            }).find("hold Llama tensors (model.embed_tokens.weight), but model.arch=gpt2"),
            std::string::npos);
}

TEST(HfWeights, EveryOffendingTensorIsListedInOneError) {
  TempDir dir;
  const ModelConfig m = tiny_llama();
  const ParameterLayout layout(m);
  const std::vector<float> params = distinct_params(layout);
  // Another config's file: 64 MLP columns instead of 48, and one layer fewer.
  ModelConfig other = m;
  other.ffn_hidden = 64;
  other.n_layer = 1;
  const ParameterLayout ol(other);
  save_hf_weights(dir.file("other.safetensors"), other, ol, distinct_params(ol).data(), {});
  const std::string msg = test::error_message([&] { read_back(dir.file("other.safetensors"), m); });
  EXPECT_NE(msg.find("tensors do not match the model: model.layers.0.mlp.gate_proj.weight: "
                     "expected shape [48, 32], got [64, 32]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("model.layers.0.mlp.down_proj.weight: expected shape [32, 48], got [32, 64]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("model.layers.1.input_layernorm.weight (not found)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("more"), std::string::npos) << msg;  // 12 problems: 8 listed
}

TEST(HfWeights, ATiedLlamasLmHeadMustEqualItsEmbedding) {
  TempDir dir;
  ModelConfig m = tiny_llama();
  const ParameterLayout untied_layout(m);
  std::vector<float> untied = distinct_params(untied_layout);
  // An untied export read as tied: lm_head differs from embed_tokens.
  save_hf_weights(dir.file("untied.safetensors"), m, untied_layout, untied.data(), {});
  m.tie_embeddings = true;
  EXPECT_NE(test::error_message([&] {
              read_back(dir.file("untied.safetensors"), m);
            }).find("lm_head.weight differs from model.embed_tokens.weight"),
            std::string::npos);
  // Equal, it loads; and a tied export writes no lm_head.
  const ParameterLayout tied_layout(m);
  const std::vector<float> tied = distinct_params(tied_layout);
  save_hf_weights(dir.file("tied.safetensors"), m, tied_layout, tied.data(), {});
  EXPECT_FALSE(SafetensorsReader(dir.file("tied.safetensors")).has("lm_head.weight"));
  EXPECT_EQ(read_back(dir.file("tied.safetensors"), m), tied);
}

TEST(HfConfig, CarriesTheDimensionsTransformersReads) {
  ModelConfig m = tiny_llama();
  m.rope_scaling.factor = 8;
  const nlohmann::json j = hf_config_json(m);
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["hidden_size"], 32);
  EXPECT_EQ(j["intermediate_size"], 48);
  EXPECT_EQ(j["num_attention_heads"], 4);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["vocab_size"], 200);
  EXPECT_EQ(j["max_position_embeddings"], 16);
  EXPECT_EQ(j["rope_theta"], 500000.0);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["factor"], 8.0);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  const nlohmann::json g = hf_config_json(tiny_gpt2());
  EXPECT_EQ(g["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(g["n_embd"], 32);
  EXPECT_EQ(g["n_positions"], 16);
  EXPECT_EQ(g["activation_function"], "gelu_new");
  TempDir dir;
  std::ifstream in(write_hf_config(dir.path(), m));
  EXPECT_EQ(nlohmann::json::parse(in), j);
}

}  // namespace
}  // namespace gt
