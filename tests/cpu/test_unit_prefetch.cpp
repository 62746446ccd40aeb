// Stage 3's prefetch order (forward_prefetch, backward_prefetch in
// trainer/sharding/unit_parameters.hpp), a pure function of the layout: on
// the whole model exactly the order it always had (so its gathers, and the
// layout matrix's byte counts, are unchanged), and on every pipeline stage
// of GPT-2 and Llama (tied or not) only ever a unit the same pass asks for,
// as the families' hook order has it (trainer/model/gpt.cpp, llama.cpp):
// never past the stage's ends, where the next pass may go either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model_steps.hpp"
#include "trainer/sharding/unit_parameters.hpp"

namespace gt {
namespace {

TEST(UnitPrefetch, TheWholeModelKeepsItsOrder) {
  ModelConfig m = test::tiny_gpt();
  m.n_layer = 3;
  const ParameterLayout layout(m);
  const int embed = layout.embed_unit(), head = layout.head_unit();
  ASSERT_EQ(embed, 0);
  ASSERT_EQ(head, m.n_layer + 1);
  // Forward: embed, block 0 .. the last block, head, then nothing.
  for (int u = embed; u < head; ++u) EXPECT_EQ(forward_prefetch(layout, u), u + 1) << u;
  EXPECT_EQ(forward_prefetch(layout, head), -1);
  // Backward: embed -> head -> the last block .. block 0, which names embed
  // (in use since the backward's start: resident, no gather).
  EXPECT_EQ(backward_prefetch(layout, embed), head);
  for (int u = head; u > 1; --u) EXPECT_EQ(backward_prefetch(layout, u), u - 1) << u;
  EXPECT_EQ(backward_prefetch(layout, layout.block_unit(0)), embed);
}

// The units a family's pass asks for (before_forward / before_backward), in
// order, on `chunk` of `layout` (a stage's one span, or one of a rank's chunks).
std::vector<int> pass_units(const ModelConfig& m, const ParameterLayout& layout, StageSpan chunk,
                            bool forward) {
  const bool embeds = chunk.first_layer == 0, heads = chunk.end_layer == m.n_layer;
  const bool gpt = m.arch == ModelArch::gpt2, tied = m.tied_embeddings();
  const int embed = layout.embed_unit(), head = layout.head_unit();
  std::vector<int> blocks;
  for (int l = chunk.first_layer; l < chunk.end_layer; ++l) blocks.push_back(layout.block_unit(l));
  std::vector<int> out;
  if (forward) {
    if (embeds) out.push_back(embed);
    out.insert(out.end(), blocks.begin(), blocks.end());
    if (heads && !embeds && tied && !gpt) out.push_back(embed);  // Llama: the mirror first
    if (heads) out.push_back(head);
    if (heads && !embeds && gpt) out.push_back(embed);  // GPT: the LM head after ln_f
    return out;
  }
  if (heads && (gpt || embeds || tied)) out.push_back(embed);
  if (heads) out.push_back(head);
  out.insert(out.end(), blocks.rbegin(), blocks.rend());
  if (embeds && !heads) out.push_back(embed);
  return out;
}

TEST(UnitPrefetch, StagesPrefetchOnlyWhatTheirPassAsksFor) {
  struct Family {
    ModelArch arch;
    bool tie;
  };
  for (const Family f : {Family{ModelArch::gpt2, true}, Family{ModelArch::llama, false},
                         Family{ModelArch::llama, true}}) {
    ModelConfig m = f.arch == ModelArch::gpt2 ? test::tiny_gpt() : test::tiny_llama();
    m.n_layer = 4;
    m.tie_embeddings = f.tie;
    // Stages of one span, and (interleaved_1f1b) ranks of two chunks.
    using Chunks = std::vector<StageSpan>;
    for (const Chunks& chunks :
         {Chunks{{0, 4}}, Chunks{{0, 1}}, Chunks{{0, 2}}, Chunks{{1, 3}}, Chunks{{2, 3}},
          Chunks{{2, 4}}, Chunks{{3, 4}}, Chunks{{0, 1}, {2, 3}}, Chunks{{1, 2}, {3, 4}}}) {
      const ParameterLayout layout(m, chunks);
      const int n = static_cast<int>(layout.units().size());
      int asked_in_backward = 0;
      for (const StageSpan span : chunks) {
        const std::string at = std::string(to_string(f.arch)) + (f.tie ? " tied" : "") +
                               " blocks [" + std::to_string(span.first_layer) + ", " +
                               std::to_string(span.end_layer) + ") of " +
                               std::to_string(chunks.size()) + " chunk(s)";
        for (const bool forward : {true, false}) {
          const std::vector<int> asked = pass_units(m, layout, span, forward);
          if (!forward) asked_in_backward += static_cast<int>(asked.size());
          for (size_t i = 0; i < asked.size(); ++i) {
            const int u = asked[i];
            ASSERT_TRUE(u >= 0 && u < n) << at << " unit " << u;
            const int next = forward ? forward_prefetch(layout, u) : backward_prefetch(layout, u);
            if (next < 0) continue;
            EXPECT_LT(next, n) << at;
            EXPECT_NE(std::find(asked.begin(), asked.end(), next), asked.end())
                << at << (forward ? " forward" : " backward") << ": unit "
                << layout.units()[static_cast<size_t>(u)].name << " prefetches "
                << layout.units()[static_cast<size_t>(next)].name
                << ", which the pass never asks for";
          }
        }
      }
      // The chunks' backwards together ask for every unit of the rank.
      EXPECT_EQ(asked_in_backward, n) << to_string(f.arch) << " " << chunks.size() << " chunks";
    }
  }
}

}  // namespace
}  // namespace gt
