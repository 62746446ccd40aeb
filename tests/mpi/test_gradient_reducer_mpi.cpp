// The gradient reducers (trainer/sharding/gradient_reducer.hpp) on every
// layout of the running world size (1, 2 and 4 ranks), every ZeRO stage, one
// and three micro-batches, driven through the model's hook order: what each
// rank owns after finish() is exactly the sum over the data ranks and the
// micro-batches (and, for tp-partial parameters, over the tp ranks) of what
// backward wrote, with the padding still zero; and each stores exactly its
// part of the ShardedStatePlan. The values are small multiples of 1/4, so
// every sum is exact in fp32 and compared bit for bit. With
// parallel.reduce_dtype=bf16 the same sums hold within bf16's rounding of
// each data rank's contribution and partial sum, and the data axes move
// exactly half the bytes. On a pipeline rank's layout of two chunks
// (interleaved_1f1b), driven in the schedule's order of backwards with
// begin_micro_batch(last) before each, the same sums hold.
#include <functional>

#include "kernels/cpu/cpu_ops.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "trainer/parallelize/pipeline_schedule.hpp"
#include "trainer/sharding/gradient_reducer.hpp"

namespace gt::test {
namespace {

ModelConfig odd_model() {  // odd sizes: padding to 16 floats and to fsdp both matter
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 44;
  m.vocab_size = 100;
  m.block_size = 12;
  return m;
}

// What backward writes at flat element i on data rank d, tp rank t, micro-batch k.
float written(int64_t i, int d, int t, int k) {
  return static_cast<float>(i % 7) + static_cast<float>(d) + 0.25f * static_cast<float>(k) +
         2.f * static_cast<float>(t);
}

TEST(GradientReducerMpi, OwnedGradientsAreTheSumsOverRanksAndMicroBatchesOnEveryLayout) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  const ModelConfig m = odd_model();
  for (const ParallelDims& d : layouts_for(world->size())) {
    if (tp_split_problem(m, d.tp)) continue;  // a layout the config refuses (tp=3 at 3 ranks)
    const DeviceMesh mesh(d, *world);
    const int data_rank = mesh.coord().dp * d.fsdp + mesh.coord().fsdp;
    const int data_ranks = d.dp * d.fsdp;
    const ParameterLayout layout(m, d.tp, mesh.coord().tp, d.fsdp);
    const ShardGeometry geom(layout, d.fsdp, mesh.coord().fsdp);
    const int64_t T = layout.total();
    // tp-partial elements are summed over tp too; padding stays zero.
    std::vector<int> kind(static_cast<size_t>(T), 0);  // 0 padding, 1 plain, 2 tp-partial
    for (const auto& s : layout.specs())
      for (int64_t i = s.offset; i < s.offset + s.numel; ++i)
        kind[static_cast<size_t>(i)] = s.tp_partial_grad ? 2 : 1;

    for (int stage = 1; stage <= 3; ++stage) {
      double data_bytes[2] = {0, 0};  // sent on dp and fsdp, fp32 then bf16 reductions
      for (ComputeDType reduce : {ComputeDType::fp32, ComputeDType::bf16}) {
        const bool bf16 = reduce == ComputeDType::bf16;
        const ShardedStatePlan plan =
            plan_sharded_state(layout, d.fsdp, fsdp_stage_of(stage), false, d.dp, reduce);
        // Buckets of 64 floats: many, so several are started during backward.
        const double bucket_mb = 64.0 * 4 / (1024 * 1024);
        auto reducer = make_gradient_reducer(
            {layout, geom, plan, *ops, mesh.dp(), mesh.fsdp(), mesh.tp(), bucket_mb, reduce});
        EXPECT_EQ(reducer->bytes(), plan.bytes().grads) << d.str() << " stage " << stage;
        const double bytes_before = mesh.dp().bytes_sent() + mesh.fsdp().bytes_sent();

        for (int micro_batches : {1, 3}) {
          const std::string at = d.str() + " stage " + std::to_string(stage) + " micro-batches " +
                                 std::to_string(micro_batches) + " " + to_string(reduce);
          reducer->begin_step();
          for (int k = 0; k < micro_batches; ++k) {
            reducer->begin_micro_batch(k == micro_batches - 1);
            // Backward adds each unit's gradients (the model's order: the tied
            // embedding stays open from the head to the end).
            auto add = [&](int unit) {
              const ParamUnit& u = layout.units()[static_cast<size_t>(unit)];
              float* g = reducer->unit_grads(unit);
              for (int64_t i = u.begin; i < u.end; ++i)
                if (kind[static_cast<size_t>(i)] != 0)
                  g[i - u.begin] += written(i, data_rank, mesh.coord().tp, k);
            };
            const int embed = layout.embed_unit(), head = layout.head_unit();
            reducer->before_backward(embed);
            reducer->before_backward(head);
            add(head);
            reducer->after_backward(head);
            for (int l = m.n_layer - 1; l >= 0; --l) {
              reducer->before_backward(layout.block_unit(l));
              add(layout.block_unit(l));
              reducer->after_backward(layout.block_unit(l));
              reducer->progress();
            }
            add(embed);
            reducer->after_backward(embed);
          }
          reducer->finish();

          auto want_at = [&](int64_t i) {
            const int k_kind = kind[static_cast<size_t>(i)];
            if (k_kind == 0) return 0.f;
            float sum = 0.f;
            for (int t = 0; t < (k_kind == 2 ? d.tp : 1); ++t)
              for (int r = 0; r < data_ranks; ++r)
                for (int k = 0; k < micro_batches; ++k)
                  sum += written(i, r, k_kind == 2 ? t : mesh.coord().tp, k);
            return sum;
          };
          const Buffer& owned = reducer->owned();
          const float* got = owned.f32();
          std::vector<float> g, w;
          for (size_t u = 0; u < layout.units().size(); ++u) {
            const int unit = static_cast<int>(u);
            const int64_t n = geom.shard_size(unit), at_flat = geom.shard_begin(unit),
                          at_owned = d.fsdp == 1 ? at_flat : geom.shard_storage(unit);
            for (int64_t j = 0; j < n; ++j) {
              g.push_back(got[at_owned + j]);
              w.push_back(want_at(at_flat + j));
            }
          }
          if (!bf16) {
            EXPECT_TRUE(exactly(g, w)) << at;
          } else {
            // Everything is >= 0: each data rank's contribution and each
            // partial sum rounded once, at most 2^-8 of the sum each.
            const float rtol = static_cast<float>(data_ranks) * std::ldexp(1.0f, -8);
            EXPECT_TRUE(all_close(g, w, 0.f, rtol)) << at;
          }
        }
        data_bytes[bf16] = mesh.dp().bytes_sent() + mesh.fsdp().bytes_sent() - bytes_before;
      }
      // Ring volumes are (p-1)/p fractions summed in double: at p = 3 the
      // two totals agree to rounding, not to the last bit.
      EXPECT_NEAR(data_bytes[1], 0.5 * data_bytes[0], 1e-12 * data_bytes[0])
          << d.str() << " stage " << stage << ": bf16 reductions send half the bytes";
    }
  }
}

// The units' backward hooks of one chunk's backward, in the model's order
// (gpt.cpp, llama.cpp): the last chunk opens the tied head's embed (or its
// mirror) with the head, blocks from the top, the first chunk ends on embed.
void chunk_backward(GradientReducer& reducer, const ParameterLayout& layout, const StageSpan& c,
                    int n_layer, const std::function<void(int)>& add) {
  const int embed = layout.embed_unit(), head = layout.head_unit();
  const bool embeds = c.first_layer == 0, heads = c.end_layer == n_layer;
  if (heads) {
    reducer.before_backward(embed);
    add(embed);  // the tied LM head's share (a mirror on a rank without block 0)
    reducer.before_backward(head);
    add(head);
    reducer.after_backward(head);
    if (!embeds) reducer.after_backward(embed);
  }
  for (int l = c.end_layer - 1; l >= c.first_layer; --l) {
    reducer.before_backward(layout.block_unit(l));
    add(layout.block_unit(l));
    reducer.after_backward(layout.block_unit(l));
    reducer.progress();
  }
  if (!embeds) return;
  if (!heads) reducer.before_backward(embed);
  add(embed);
  reducer.after_backward(embed);
}

TEST(GradientReducerMpi, ARanksTwoChunksReduceInTheInterleavedScheduleOrder) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  ModelConfig m = odd_model();
  m.n_layer = 4;
  const int p = 2, v = 2, micro_batches = 4;
  const auto schedule =
      build_pipeline_schedule({PipeSchedule::interleaved_1f1b, p, micro_batches, v});
  for (const ParallelDims& d : layouts_for(world->size())) {
    if (tp_split_problem(m, d.tp)) continue;
    const DeviceMesh mesh(d, *world);
    const int data_rank = mesh.coord().dp * d.fsdp + mesh.coord().fsdp;
    const int data_ranks = d.dp * d.fsdp;
    for (int rank = 0; rank < p; ++rank) {  // every data rank plays pipeline rank `rank`
      // Rank r holds stages r and r + p: blocks [r, r+1) and [r+p, r+p+1).
      const ParameterLayout layout(
          m, std::vector<StageSpan>{{rank, rank + 1}, {rank + p, rank + p + 1}}, d.tp,
          mesh.coord().tp, d.fsdp);
      const ShardGeometry geom(layout, d.fsdp, mesh.coord().fsdp);
      std::vector<int> kind(static_cast<size_t>(layout.total()), 0);
      for (const auto& s : layout.specs())
        for (int64_t i = s.offset; i < s.offset + s.numel; ++i)
          kind[static_cast<size_t>(i)] = s.tp_partial_grad ? 2 : 1;
      for (int stage = 1; stage <= 3; ++stage) {
        const std::string at =
            d.str() + " pipeline rank " + std::to_string(rank) + " stage " + std::to_string(stage);
        const ShardedStatePlan plan = plan_sharded_state(layout, d.fsdp, fsdp_stage_of(stage),
                                                         false, d.dp, ComputeDType::fp32);
        auto reducer =
            make_gradient_reducer({layout, geom, plan, *ops, mesh.dp(), mesh.fsdp(), mesh.tp(),
                                   64.0 * 4 / (1024 * 1024), ComputeDType::fp32});
        reducer->begin_step();
        for (const PipeAction& a : schedule[static_cast<size_t>(rank)]) {
          if (a.op != PipeOp::backward) continue;
          reducer->begin_micro_batch(a.micro == micro_batches - 1);
          auto add = [&](int unit) {
            const ParamUnit& u = layout.units()[static_cast<size_t>(unit)];
            float* g = reducer->unit_grads(unit);
            for (int64_t i = u.begin; i < u.end; ++i)
              if (kind[static_cast<size_t>(i)] != 0)
                g[i - u.begin] += written(i, data_rank, mesh.coord().tp, a.micro);
          };
          chunk_backward(*reducer, layout,
                         layout.chunks()[static_cast<size_t>(stage_chunk(a.stage, p))], m.n_layer,
                         add);
        }
        reducer->finish();

        std::vector<float> g, w;
        const float* got = reducer->owned().f32();
        for (size_t u = 0; u < layout.units().size(); ++u) {
          const int unit = static_cast<int>(u);
          const int64_t n = geom.shard_size(unit), at_flat = geom.shard_begin(unit),
                        at_owned = d.fsdp == 1 ? at_flat : geom.shard_storage(unit);
          for (int64_t j = 0; j < n; ++j) {
            const int64_t i = at_flat + j;
            const int k_kind = kind[static_cast<size_t>(i)];
            float sum = 0.f;
            if (k_kind != 0)
              for (int t = 0; t < (k_kind == 2 ? d.tp : 1); ++t)
                for (int r = 0; r < data_ranks; ++r)
                  for (int k = 0; k < micro_batches; ++k)
                    sum += written(i, r, k_kind == 2 ? t : mesh.coord().tp, k);
            g.push_back(got[at_owned + j]);
            w.push_back(sum);
          }
        }
        EXPECT_TRUE(exactly(g, w)) << at;
      }
    }
  }
}

}  // namespace
}  // namespace gt::test
