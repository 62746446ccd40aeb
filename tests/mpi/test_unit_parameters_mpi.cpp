// UnitParameters (trainer/sharding/unit_parameters.hpp) on every layout of the
// running world size, driven through the model's hook order for a forward
// with backward and one without: every unit reads exactly the whole flat
// parameters' values of that unit (gathered from the fsdp shards at stage 3,
// read in place otherwise), a unit outside its hooks is refused with an error
// naming it at stage 3, and the slots take the plan's bytes.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/fp8_kernels.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "trainer/sharding/unit_parameters.hpp"

namespace gt::test {
namespace {

float value_at(int64_t flat) { return 0.5f * static_cast<float>(flat % 1000); }

TEST(UnitParametersMpi, EveryUnitReadsItsWholeValuesInTheModelsHookOrder) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  ModelConfig m;  // odd sizes: padding to fsdp matters
  m.n_layer = 3;
  m.n_head = 4;
  m.n_embd = 44;
  m.vocab_size = 100;
  m.block_size = 12;
  for (const ParallelDims& d : layouts_for(world->size())) {
    if (tp_split_problem(m, d.tp)) continue;  // tp = 3 at 3 ranks: a layout the config refuses
    const DeviceMesh mesh(d, *world);
    const ParameterLayout layout(m, d.tp, mesh.coord().tp, d.fsdp);
    const ShardGeometry geom(layout, d.fsdp, mesh.coord().fsdp);
    for (int stage = 1; stage <= 3; ++stage) {
      const std::string at = d.str() + " stage " + std::to_string(stage);
      const ShardedStatePlan plan = plan_sharded_state(layout, d.fsdp, fsdp_stage_of(stage), false);
      Buffer params = ops->allocate(static_cast<size_t>(plan.params) * sizeof(float));
      float* p = params.f32();
      if (plan.full_params) {
        for (int64_t i = 0; i < layout.total(); ++i) p[i] = value_at(i);
      } else {
        for (size_t u = 0; u < layout.units().size(); ++u) {
          const int unit = static_cast<int>(u);
          for (int64_t j = 0; j < geom.shard_size(unit); ++j)
            p[geom.shard_storage(unit) + j] = value_at(geom.shard_begin(unit) + j);
        }
      }
      auto units = make_unit_parameters(layout, geom, plan, params, *ops, mesh.fsdp(), mesh.tp());
      int64_t slots = 0;
      for (int i = 0; i < kUnitSlots; ++i)
        slots += plan.param_slots ? plan.slot_size[i] * static_cast<int64_t>(sizeof(float)) : 0;
      EXPECT_EQ(units->slot_bytes(), slots) << at;

      int checked = 0;
      auto expect_whole = [&](int unit) {
        const ParamUnit& u = layout.units()[static_cast<size_t>(unit)];
        const float* got = units->unit_params(unit);
        std::vector<float> g(got, got + u.size()), w;
        for (int64_t i = u.begin; i < u.end; ++i) w.push_back(value_at(i));
        EXPECT_TRUE(exactly(g, w)) << at << " unit " << u.name;
        ++checked;
      };
      const int embed = layout.embed_unit(), head = layout.head_unit();
      for (bool backward : {true, false}) {
        units->begin_forward(backward);
        for (int unit = embed; unit <= head; ++unit) {
          units->before_forward(unit);
          expect_whole(unit);
          units->after_forward(unit);
          units->progress();
        }
        if (!backward) continue;
        units->before_backward(embed);
        units->before_backward(head);
        expect_whole(head);
        units->after_backward(head);
        for (int l = m.n_layer - 1; l >= 0; --l) {
          units->before_backward(layout.block_unit(l));
          expect_whole(layout.block_unit(l));
          units->after_backward(layout.block_unit(l));
        }
        expect_whole(embed);
        units->after_backward(embed);
        if (!plan.full_params) {  // released after its backward: reading it is an error
          const std::string msg = error_message([&] { units->unit_params(embed); });
          EXPECT_NE(msg.find("unit embed used while not gathered"), std::string::npos) << msg;
        }
      }
      EXPECT_EQ(checked, 2 * (m.n_layer + 2) + (m.n_layer + 2)) << at;
    }
  }
}

// parallel.fp8_allgather at stage 3: every parameter that is not an fp8
// weight reads its exact fp32 value; every fp8 weight (found by the pointer
// and size a layer passes) reads as the codes of its bf16 rounding under
// the scale of the whole weight's amax (over every fsdp shard and tp piece),
// computed here from the whole tensors by the CPU twin; a pointer inside a
// weight, or a wrong size, is refused by name.
TEST(UnitParametersMpi, Fp8GatheredWeightsAreTheWholeWeightsCodes) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  ModelConfig m;
  m.arch = ModelArch::llama;  // q|k|v and gate|up fused: runs of column weights
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 32;
  m.ffn_hidden = 48;
  m.vocab_size = 64;
  m.block_size = 8;
  // Values over several binades, so that scales and codes differ per weight.
  auto value = [](int64_t flat) { return 0.01f * static_cast<float>((flat * 37) % 201 - 100); };
  int layouts = 0;
  for (const ParallelDims& d : layouts_for(world->size())) {
    if (d.fsdp < 2 || tp_split_problem(m, d.tp)) continue;
    ++layouts;
    const DeviceMesh mesh(d, *world);
    // The whole model's values: every tp rank's layout, so that amaxes over
    // tp pieces can be formed here.
    std::vector<ParameterLayout> tp_layouts;
    for (int t = 0; t < d.tp; ++t) tp_layouts.emplace_back(m, d.tp, t, 4 * d.fsdp);
    const ParameterLayout& layout = tp_layouts[static_cast<size_t>(mesh.coord().tp)];
    const ShardGeometry geom(layout, d.fsdp, mesh.coord().fsdp);
    const ShardedStatePlan plan = plan_sharded_state(layout, d.fsdp, FsdpStage::parameters, false);
    Buffer params = ops->allocate(static_cast<size_t>(plan.params) * sizeof(float));
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const int unit = static_cast<int>(u);
      for (int64_t j = 0; j < geom.shard_size(unit); ++j)
        params.f32()[geom.shard_storage(unit) + j] = value(geom.shard_begin(unit) + j);
    }
    auto units = make_unit_parameters(layout, geom, plan, params, *ops, mesh.fsdp(), mesh.tp(),
                                      Fp8GatherOptions{true, 0});
    const auto weights = fp8_gathered_weights(layout, 0);
    units->begin_forward(false);
    int fp8_checked = 0;
    for (int l = 0; l < m.n_layer; ++l) {
      const int unit = layout.block_unit(l);
      const ParamUnit& pu = layout.units()[static_cast<size_t>(unit)];
      units->before_forward(unit);
      const float* slot = units->unit_params(unit);
      const auto& ws = weights[static_cast<size_t>(unit)];
      ASSERT_EQ(ws.size(), 4u) << "q|k|v, o, gate|up, down";
      auto in_weight = [&](int64_t i) {
        for (const auto& w : ws)
          if (i >= w.begin && i < w.begin + w.size) return true;
        return false;
      };
      for (int64_t i = 0; i < pu.size(); ++i)
        if (!in_weight(i)) ASSERT_EQ(slot[i], value(pu.begin + i)) << d.str() << " element " << i;
      for (const auto& w : ws) {
        // The whole weight's amax: its bf16 values on every tp rank.
        float amax = 0.f;
        for (const ParameterLayout& tl : tp_layouts)
          for (int64_t i = 0; i < w.size; ++i)
            amax = std::max(amax, std::abs(round_to_bf16({value(tl.units()[static_cast<size_t>(unit)].begin + w.begin + i)})[0]));
        const float scale = cpu::fp8_scale_from_amax(amax, Fp8Format::e4m3, false);
        TensorView codes, s;
        ASSERT_TRUE(units->fp8_weight(slot + w.begin, w.size, &codes, &s)) << d.str();
        EXPECT_EQ(s.f32()[0], scale) << d.str() << " weight at " << w.begin;
        std::vector<float> mine(static_cast<size_t>(w.size));
        for (int64_t i = 0; i < w.size; ++i) mine[static_cast<size_t>(i)] = value(pu.begin + w.begin + i);
        const std::vector<float> b = round_to_bf16(mine);
        std::vector<uint8_t> want(static_cast<size_t>(w.size));
        cpu::fp8_quantize(b.data(), w.size, scale, Fp8Format::e4m3, want.data());
        const auto* got = static_cast<const uint8_t*>(codes.data);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got)) << d.str() << " weight at " << w.begin;
        ++fp8_checked;
      }
      // A pointer inside a weight, or its start with another size: refused.
      TensorView codes, sc;
      std::string msg = error_message([&] { units->fp8_weight(slot + ws[0].begin + 16, 16, &codes, &sc); });
      EXPECT_NE(msg.find("is not the gathered fp8 weight"), std::string::npos) << msg;
      msg = error_message([&] { units->fp8_weight(slot + ws[0].begin, ws[0].size - 1, &codes, &sc); });
      EXPECT_NE(msg.find("is not the gathered fp8 weight"), std::string::npos) << msg;
      units->after_forward(unit);
    }
    EXPECT_EQ(fp8_checked, 4 * m.n_layer) << d.str();
  }
  if (world->size() > 1) EXPECT_GT(layouts, 0) << "no layout with fsdp > 1 at this world size";
}

}  // namespace
}  // namespace gt::test
