// UnitParameters (trainer/sharding/unit_parameters.hpp) on every layout of the
// running world size, driven through the model's hook order for a forward
// with backward and one without: every unit reads exactly the whole flat
// parameters' values of that unit (gathered from the fsdp shards at stage 3,
// read in place otherwise), a unit outside its hooks is refused with an error
// naming it at stage 3, and the slots take the plan's bytes.
#include "kernels/cpu/cpu_ops.hpp"
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
      auto units = make_unit_parameters(layout, geom, plan, params, *ops, mesh.fsdp());
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

}  // namespace
}  // namespace gt::test
