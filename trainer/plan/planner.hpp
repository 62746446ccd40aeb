// Planner: for a model, a training config and a device count, every layout
// pp x dp x fsdp x cp x tp (x FSDP stage x micro-batch, for pp > 1 the 1f1b
// schedule and interleaved_1f1b over 2 virtual stages, and for cp > 1 both
// parallel.cp_comm modes at the config's cp_load_balance) with its predicted
// memory per device and step time, the ones that do not fit flagged, the
// rest ranked by step time, and a paragraph on the choice.
//
// Step time = compute + memory-bound work + exposed communication:
//   compute      the step's FLOPs (step_model.hpp), with the forward work
//                train.recompute repeats in backward (recompute_flops), / the
//                FLOP/s a rank's matmuls reach (HardwareSpec::achieved_flops);
//   memory-bound AdamW (28 bytes per owned parameter: read p, g, m, v, write
//                p, m, v) plus three passes over the activation buffers per
//                micro-batch (written in forward, read and their gradients
//                written in backward), at the device memory bandwidth;
//   comm         each axis' ring volume / the bus bandwidth of its link: an
//                axis whose group spans at most one node (tp innermost, then
//                cp, fsdp, dp) uses the intra-node figure, else inter-node.
//   overlap      the dp bucket all-reduces and the HSDP shard all-reduce
//                hide under the last micro-batch's backward, except the last
//                bucket; FSDP reduce-scatters under the backward they follow
//                (stage 1: the last micro-batch only); stage 3's prefetched
//                gathers under forward and backward; the stage 1/2 parameter
//                all-gather after the optimizer is exposed; tp is hidden
//                under the linear layers' matmuls with tp_overlap, else exposed;
//                cp's ring hops under the attention they feed, its all-gathers
//                and reduce-scatters exposed (Megatron's all_gather mode does
//                not overlap them either).
//                Each is hidden up to the compute time it runs under.
//   context      (cp > 1) a cp rank holds T / cp rows of each sequence: its
//                activations (the same activation plans, plus the cp
//                attention's scratch) and its matmuls are 1/cp, its attention
//                the causal pairs of its chunks (step_model.hpp: 1/cp when
//                balanced, the last rank's when not); the parameters are
//                replicated over cp, so the gradients reduce over groups
//                that fold cp in (data_parallel_groups.hpp), and each layer's
//                keys and values cross the cp group (cp_bytes_per_step).
//   pipeline     (pp > 1; pipeline_model.hpp) each rank holds its stages'
//                units and activations, the memory is the heaviest rank's;
//                compute, activation traffic and tp are the slowest stage's,
//                AdamW and the dp/fsdp reductions the largest stage's; the
//                bubble adds (p - 1) / v of the slowest stage's micro-batch
//                time (pipeline_bubble_fraction b of the pipelined work W:
//                W / (1 - b) in all); the point-to-point messages between
//                stages (and a tied embedding's gradient all-reduce) go over
//                the inter-node link once the pipeline spans nodes, counted
//                whole (exposed).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/config/config.hpp"
#include "trainer/plan/hardware.hpp"
#include "trainer/plan/memory_model.hpp"
#include "trainer/plan/step_model.hpp"

namespace gt {

struct PlanCluster {
  int devices = 1;
  int devices_per_node = 1;  // ranks sharing a node (min(devices, hardware gpus_per_node) or devices/nodes)
  int nodes() const { return (devices + devices_per_node - 1) / devices_per_node; }
};

struct Prediction {
  PlanLayout layout;
  std::string invalid;       // non-empty: the layout cannot run this config (why)
  int accum = 0;             // micro-batches per optimizer step
  // Memory per device, bytes.
  StateBytes state;
  int64_t activations = 0, comm_workspace = 0, baseline = 0;
  int64_t total_bytes() const { return state.total() + activations + comm_workspace + baseline; }
  bool fits = false;
  // Time per optimizer step, ms.
  double compute_ms = 0, memory_ms = 0;
  double adamw_ms = 0;       // AdamW's part of memory_ms (the rest: activation passes)
  double dp_ms = 0, fsdp_ms = 0, tp_ms = 0, pp_ms = 0, cp_ms = 0, ep_ms = 0,
         edp_ms = 0;  // each axis' whole time
  bool dp_inter = false, fsdp_inter = false, tp_inter = false, pp_inter = false,
       cp_inter = false, ep_inter = false, edp_inter = false;  // crosses nodes
  double exposed_ms = 0;     // communication not hidden under compute (the sum of:)
  double dp_exposed_ms = 0, fsdp_exposed_ms = 0, tp_exposed_ms = 0, pp_exposed_ms = 0,
         cp_exposed_ms = 0, ep_exposed_ms = 0, edp_exposed_ms = 0;
  // The step's attention (forward, backward, recomputed) on the slowest
  // rank, ms: what the cp ring hides under, and part of compute_ms.
  double attention_ms = 0;
  // The pipeline (pp > 1): idle fraction of the pipelined work
  // (pipeline_bubble_fraction) and the time it adds; blocks per chunk; the
  // rank whose memory is reported and the one whose micro-batch is slowest.
  double bubble = 0, bubble_ms = 0;
  std::vector<int> stage_layers;
  int heaviest_rank = 0, slowest_rank = 0;
  double step_ms = 0, tokens_per_s = 0, mfu = 0;
  CommBytes bytes;
};

// Predicts one layout (never throws for a layout the config cannot run: it
// sets `invalid`).
Prediction predict(const Config& cfg, const HardwareSpec& hw, const PlanCluster& cluster,
                   const PlanLayout& layout);

struct Plan {
  PlanCluster cluster;
  std::vector<Prediction> ranked;    // valid and fitting, fastest first
  std::vector<Prediction> too_big;   // valid, over the device memory, smallest first
  std::vector<Prediction> invalid;   // with the reason
  std::string explanation;           // one paragraph
};

// Every layout of `cluster.devices` (FSDP stages 1-3 when fsdp > 1; each of
// `micro_batches`, or train.micro_batch when empty; pp over the divisors of
// the devices, each pp > 1 as 1f1b and as interleaved_1f1b with 2 virtual
// stages; cp over the divisors too, each cp > 1 as allgather and as ring,
// load-balanced as parallel.cp_load_balance says).
Plan make_plan(const Config& cfg, const HardwareSpec& hw, const PlanCluster& cluster,
               const std::vector<int>& micro_batches);

// The table and the paragraph, for a terminal.
// top > 0: only the `top` best layouts, then a line counting the others.
std::string format_plan(const Plan& plan, const Config& cfg, const HardwareSpec& hw, int top = 0);
nlohmann::json plan_json(const Plan& plan, const Config& cfg, const HardwareSpec& hw);

}  // namespace gt
