// The planner's model of a pipeline-parallel layout (pp > 1): which part of
// the model each pipeline rank holds, the activations it keeps at its peak,
// and what it sends to its neighbours. predict() (planner.hpp) turns these
// into a prediction; with pp = 1 the one rank holds the whole model and
// none of this applies.
//
//   stages       pipeline_layer_split (trainer/parallelize/pipeline_stages.hpp):
//                parallel.pp_layers when the layout is the config's own pp
//                and pp_virtual_stages, else the balanced split. Rank r holds
//                chunks r, r + p, ...; rank 0 the embedding, rank p - 1 the
//                head (and a copy of a tied embedding).
//   activations  walked along the rank's own action list
//                (build_pipeline_schedule): a forward of (micro-batch, stage
//                s) adds what s keeps for backward, its backward frees it;
//                the peak is the rank's. What stage s keeps per micro-batch:
//                its blocks' per_block (predict_activation_parts), its input
//                (the embedding's on stage 0, else the received (R/tp, C)
//                rows) and, on the last stage, the head's. Plus `shared` once.
//                This reproduces Megatron's figures: 1F1B keeps min(p - r, m)
//                micro-batches on rank r, gpipe m, interleaving p (1 + (p -
//                1) / (p v)) stages' worth on rank 0 (Korthikanti et al.
//                2022, section 4.2.3).
//   p2p          each boundary carries, per micro-batch, the activations
//                forward ((R/tp, C): sequence parallelism splits the rows
//                over tp, at the activation dtype) and their gradient back
//                (fp32, the residual stream's gradient): 2 x m messages per
//                boundary per step. A rank sends from each of its chunks but
//                the last stage forward and but stage 0 backward; the figure
//                is the busiest rank's. With a tied embedding (GPT-2) the
//                first and last ranks all-reduce its gradient once per step
//                (2 ranks: the gradient once, of the fsdp shard when fsdp >
//                1, at parallel.reduce_dtype). Under context parallelism
//                a rank's rows are its seq_len / cp of each sequence, and
//                the embedding is sharded over fsdp x cp.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/config/config.hpp"
#include "trainer/parallelize/pipeline_schedule.hpp"
#include "trainer/plan/memory_model.hpp"
#include "trainer/plan/step_model.hpp"

namespace gt {

struct PipelineShape {
  std::vector<int> split;         // blocks per chunk, in stage order (p * v)
  std::vector<ModelShare> ranks;  // what each pipeline rank holds
};

// `pp_layers`: parallel.pp_layers, used when l.pp and l.virtual_stages are
// `config_pp` and `config_v` (the config's own pipeline), ignored otherwise.
PipelineShape pipeline_shape(const ModelConfig& m, const PlanLayout& l,
                             const std::vector<int>& pp_layers, int config_pp, int config_v);

// What one stage keeps per micro-batch in flight: its blocks', its input's
// and (last stage) the head's activations. boundary: the received rows'
// bytes, (R/tp) x C at the activation dtype.
int64_t stage_activation_bytes(const PipelineShape& shape, int stage, const ActivationParts& parts,
                               int64_t boundary);

// Each pipeline rank's activation bytes at its peak (shared included) over
// one step of `micro_batches` under the layout's schedule.
std::vector<int64_t> pipeline_activation_peaks(const PipelineShape& shape, const PlanLayout& l,
                                               int micro_batches, const ActivationParts& parts,
                                               int64_t boundary);

// Bytes of one boundary message for one micro-batch: activations forward
// (act_bytes per element) and the gradient back (fp32). seq_len: the rows
// of each sequence a rank holds (a cp rank's seq_len / cp).
struct BoundaryBytes {
  double forward = 0, backward = 0;
};
BoundaryBytes boundary_bytes(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                             int act_bytes);

// The busiest pipeline rank's sends per step: activations and gradients
// over m micro-batches, plus the tied embedding's gradient all-reduce
// (embed_unit_floats: the embedding unit of one tp rank).
double pipeline_p2p_bytes(const ModelConfig& m, const PlanLayout& l, int micro_batches,
                          const BoundaryBytes& b, double embed_unit_floats);

// The schedule's spec for a layout and its micro-batches per step.
PipeScheduleSpec pipeline_spec(const PlanLayout& l, int micro_batches);

}  // namespace gt
