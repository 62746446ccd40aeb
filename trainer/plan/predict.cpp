// predict(): one layout's memory per device and step time (planner.hpp has
// the model; pipeline_model.hpp what a pipeline adds). Without a pipeline
// the one rank holds the whole model; with one, every pipeline rank is
// sized and the figures are its heaviest's: memory of the rank that holds
// the most, compute and activation traffic of the slowest stage (whose
// micro-batch takes longest), AdamW and the dp/fsdp reductions of the rank
// with the most parameters.
#include <algorithm>
#include <sstream>

#include "trainer/plan/pipeline_model.hpp"
#include "trainer/plan/planner.hpp"
#include "trainer/sharding/data_parallel_groups.hpp"

namespace gt {

namespace {

// Why a layout cannot run this config at all ("" = it can).
std::string invalid_reason(const Config& cfg, const PlanCluster& c, const PlanLayout& l) {
  const auto& m = cfg.model;
  const auto& t = cfg.train;
  std::ostringstream os;
  const int chunks = l.pp * l.virtual_stages;
  const int rows = l.micro_batch * l.dp * l.fsdp;
  // Context parallelism cuts each row into cp chunks, or 2 cp balanced ones
  // (the config's rule, trainer/config/config.cpp).
  const int cp_chunks = l.cp_load_balance ? 2 * l.cp : l.cp;
  const int64_t cp_rows = static_cast<int64_t>(l.micro_batch) * (t.seq_len / std::max(1, l.cp));
  if (l.world() != c.devices)
    os << (l.pp > 1 ? "pp x " : "") << "dp x fsdp x " << (l.cp > 1 ? "cp x " : "")
       << "tp = " << l.world() << " is not " << c.devices << " devices";
  else if (const auto problem = tp_split_problem(m, l.tp))
    os << "tp=" << l.tp << " does not divide " << problem->what << "=" << problem->value;
  else if (l.pp < 1 || l.virtual_stages < 1)
    os << "pp=" << l.pp << " with " << l.virtual_stages << " virtual stages is not a pipeline";
  else if (l.virtual_stages > 1 && l.schedule != PipeSchedule::interleaved_1f1b)
    os << "virtual stages need pp_schedule=interleaved_1f1b, not " << to_string(l.schedule);
  else if (chunks > m.n_layer)
    os << "pp=" << l.pp << " x v=" << l.virtual_stages << " = " << chunks
       << " chunks of at least one block need model.n_layer >= " << chunks << " (it is "
       << m.n_layer << ")";
  else if (l.micro_batch < 1 || t.global_batch % rows)
    os << "train.global_batch=" << t.global_batch
       << " is not a multiple of micro_batch x dp x fsdp = " << rows;
  else if (l.cp < 1 || (l.cp > 1 && t.seq_len % cp_chunks))
    os << "cp=" << l.cp << " needs train.seq_len a multiple of "
       << (l.cp_load_balance ? "2 x cp = " : "cp = ") << cp_chunks << " (it is " << t.seq_len
       << (l.cp_load_balance ? "; parallel.cp_load_balance cuts each row into 2 cp chunks)"
                             : ")");
  else if (cp_rows % l.tp)
    os << (l.cp > 1 ? "micro_batch x seq_len / cp" : "micro_batch x seq_len") << " = " << cp_rows
       << " rows" << (l.cp > 1 ? " per cp rank" : "") << " is not a multiple of tp=" << l.tp;
  else if (l.fsdp > 1 && !fsdp_stage_numbered(l.stage))
    os << "fsdp_stage=" << l.stage << " is not 1, 2 or 3";
  else if (l.pp > 1 && l.schedule == PipeSchedule::interleaved_1f1b &&
           (t.global_batch / rows) % l.pp)
    os << "interleaved_1f1b needs the micro-batches per step a multiple of pp=" << l.pp;
  // What the trainer refuses for a mixture today (config.cpp's not_yet).
  else if (l.ep > 1 && !m.moe())
    os << "ep=" << l.ep << ": model.arch=" << to_string(m.arch) << " has no experts to split";
  else if (l.ep < 1 || (l.dp * l.fsdp) % l.ep || (m.moe() && m.n_experts % l.ep))
    os << "ep=" << l.ep << " must divide the data ranks dp x fsdp = " << l.dp * l.fsdp
       << " and model.n_experts=" << m.n_experts;
  return os.str();
}

template <class T, class Key>
size_t argmax(const std::vector<T>& xs, Key key) {
  size_t best = 0;
  for (size_t i = 1; i < xs.size(); ++i)
    if (key(xs[i]) > key(xs[best])) best = i;
  return best;
}

}  // namespace

Prediction predict(const Config& cfg, const HardwareSpec& hw, const PlanCluster& cluster,
                   const PlanLayout& layout) {
  Prediction p;
  p.layout = layout;
  p.invalid = invalid_reason(cfg, cluster, layout);
  if (!p.invalid.empty()) return p;
  // The vocabulary padded as a run at this tp pads it.
  const ModelConfig m = padded_for_tp(cfg.model, layout.tp);
  const auto& t = cfg.train;
  const PlanLayout& l = layout;
  const int stage = l.fsdp > 1 ? l.stage : 3;
  p.accum = t.global_batch / (l.micro_batch * l.dp * l.fsdp);
  const double A = p.accum;
  const int P = l.pp;
  // The gradients' groups: the state shards over f = fsdp x cp (fsdp > 1)
  // and its replicas are d (dp x cp at fsdp = 1): data_parallel_groups.hpp.
  const int f = shard_degree(l.dims()), d = replica_degree(l.dims());
  const PlanCp cp = l.context();
  const int Tl = t.seq_len / l.cp;  // the rows of each sequence a cp rank holds

  // The GPU plan is the bf16 model (the hardware files' peaks are bf16's).
  const ComputeDType dtype =
      hw.backend == PlanBackend::cuda ? ComputeDType::bf16 : ComputeDType::fp32;
  const bool bf16 = dtype == ComputeDType::bf16;
  const bool keeps = keeps_bf16_params(f, fsdp_stage_of(stage), bf16);
  const int act_bytes = bf16 ? 2 : 4;

  // The pipeline ranks, each with its share of the model (one rank, all of
  // it, without a pipeline).
  PipelineShape shape;
  if (P > 1) {
    shape = pipeline_shape(m, l, cfg.parallel.pp_layers, cfg.parallel.pp,
                           cfg.parallel.pp_virtual_stages);
    p.bubble = pipeline_bubble_fraction(pipeline_spec(l, p.accum));
  } else {
    shape.split = {m.n_layer};
    shape.ranks = {whole_model(m)};
  }
  p.stage_layers = shape.split;
  const BoundaryBytes boundary = boundary_bytes(m, l.micro_batch, Tl, l.tp, act_bytes);

  // Memory per device: the heaviest rank's.
  std::vector<int64_t> activations;
  if (P == 1) {
    activations = {predict_activation_bytes(m, l.micro_batch, t.seq_len, l.tp, l.tp_overlap,
                                            hw.backend, t.recompute, dtype, keeps, cp, l.ep)};
  } else {
    const ActivationParts parts =
        predict_activation_parts(m, l.micro_batch, t.seq_len, l.tp, l.tp_overlap, hw.backend,
                                 t.recompute, dtype, keeps, cp, l.ep);
    activations =
        pipeline_activation_peaks(shape, l, p.accum, parts, static_cast<int64_t>(boundary.forward));
  }
  const UnitSizes whole = unit_sizes(m, l.tp, f);
  std::vector<UnitSizes> units;  // the dense part's (the whole model's at ep = 1)
  std::vector<StateBytes> states;
  std::vector<int64_t> workspaces, totals;
  p.baseline = static_cast<int64_t>(hw.baseline_bytes());
  for (int r = 0; r < P; ++r) {
    // At ep > 1 the experts are a part of their own (sharded_parameters.hpp).
    const StateUnits su = state_units(m, l, shape.ranks[static_cast<size_t>(r)]);
    units.push_back(su.dense);
    states.push_back(predict_state_bytes(su, l, bf16));
    workspaces.push_back(
        predict_comm_workspace_bytes(m, su.dense, l, t.seq_len, hw.backend) +
        predict_expert_workspace_bytes(su.experts, su.expert_fsdp, su.expert_dp, l, hw.backend));
    totals.push_back(states.back().total() + activations[static_cast<size_t>(r)] +
                     workspaces.back() + p.baseline);
  }
  const size_t heavy = argmax(totals, [](int64_t x) { return x; });
  p.heaviest_rank = static_cast<int>(heavy);
  p.state = states[heavy];
  p.activations = activations[heavy];
  p.comm_workspace = workspaces[heavy];
  p.fits = static_cast<double>(p.total_bytes()) <= hw.memory_bytes();

  // Compute and memory-bound work, per rank and micro-batch.
  const int per_node = std::min(cluster.devices, cluster.devices_per_node);
  const double flops_per_s = hw.achieved_flops(per_node);
  const double mem_bw = hw.memory_bytes_per_s(per_node);
  // runtime.fp8: the fp8 share of the blocks' linear FLOPs runs at the fp8
  // rate (the bf16 one times the datasheet's fp8/bf16 ratio) and the casts
  // add their traffic (step_model.hpp's fp8_work); the plan command has
  // checked that the hardware has an fp8 peak.
  const bool fp8 = cfg.runtime.fp8 != Fp8Recipe::off && hw.fp8_tflops > 0;
  const Fp8Work f8 = fp8 ? fp8_work(m, l.micro_batch, t.seq_len, l.tp, cfg.runtime.fp8_min_dim,
                                    cp, cfg.runtime.fp8 == Fp8Recipe::rowwise)
                         : Fp8Work{};
  const double fp8_speedup = fp8 ? hw.fp8_tflops / hw.bf16_tflops : 1.0;
  // The time of `x`'s FLOPs, its fp8 share at the fp8 rate.
  auto flops_ms = [&](const MicroBatchFlops& x) {
    const double lin8 = x.linear * f8.linear_share;
    return (x.total() - lin8 + lin8 / fp8_speedup) / flops_per_s * 1e3;
  };
  // Activation traffic is what the step writes and reads, whatever it keeps:
  // recomputation writes the dropped tensors again (into one block's slot).
  std::vector<double> traffic;
  if (P == 1) {
    traffic = {static_cast<double>(predict_activation_bytes(m, l.micro_batch, t.seq_len, l.tp,
                                                            l.tp_overlap, hw.backend,
                                                            Recompute::none, dtype, false, cp,
                                                            l.ep))};
  } else {
    const ActivationParts none =
        predict_activation_parts(m, l.micro_batch, t.seq_len, l.tp, l.tp_overlap, hw.backend,
                                 Recompute::none, dtype, false, cp);
    traffic.assign(static_cast<size_t>(P), static_cast<double>(none.shared));
    for (int s = 0; s < static_cast<int>(shape.split.size()); ++s)
      traffic[static_cast<size_t>(s % P)] += static_cast<double>(
          stage_activation_bytes(shape, s, none, static_cast<int64_t>(boundary.forward)));
  }
  struct Work {
    MicroBatchFlops f, rf;
    double fwd_ms = 0, bwd_ms = 0, slot_ms = 0;
    double cast_bytes = 0;  // runtime.fp8's amax and cast passes, per micro-batch
  };
  std::vector<Work> work;
  for (int r = 0; r < P; ++r) {
    const ModelShare& share = shape.ranks[static_cast<size_t>(r)];
    Work w;
    w.f = micro_batch_flops(m, l.micro_batch, t.seq_len, l.tp, share, cp);
    // Recomputation's forward work runs inside backward: it lengthens backward.
    w.rf = recompute_flops(m, l.micro_batch, t.seq_len, l.tp, t.recompute, share, cp);
    w.fwd_ms = flops_ms(w.f);
    w.bwd_ms = 2 * w.fwd_ms + flops_ms(w.rf);
    w.cast_bytes = f8.cast_bytes * share.blocks / m.n_layer;
    w.slot_ms = w.fwd_ms + w.bwd_ms +
                (3.0 * traffic[static_cast<size_t>(r)] + w.cast_bytes) / mem_bw * 1e3;
    work.push_back(w);
  }
  const size_t slow = argmax(work, [](const Work& w) { return w.slot_ms; });
  // The rank holding the most state (at ep > 1 the experts weigh in: a
  // stage with fewer dense units may hold more of them).
  const size_t big = argmax(states, [](const StateBytes& b) { return b.total(); });
  p.slowest_rank = static_cast<int>(slow);
  const Work& w = work[slow];
  p.compute_ms = A * (w.fwd_ms + w.bwd_ms);
  const double owned_params = static_cast<double>(states[big].optimizer) / 8.0;  // m + v, fp32
  const double mem_bytes = owned_params * 28.0 + A * (3.0 * traffic[slow] + w.cast_bytes);
  p.memory_ms = mem_bytes / mem_bw * 1e3;
  p.adamw_ms = owned_params * 28.0 / mem_bw * 1e3;
  // The pipeline's fill and drain: (p - 1) / v slots of the slowest stage
  // idle on top of the m it computes, i.e. the work / (1 - bubble).
  if (P > 1) p.bubble_ms = p.bubble / (1.0 - p.bubble) * A * w.slot_ms;

  // Communication: each axis over its link. A stage reduces its own
  // parameters over dp and fsdp (the largest stage's bytes); tp follows the
  // blocks (the slowest stage's).
  p.bytes = comm_bytes_per_step(m, t, l, hw.backend, shape.ranks[big]);
  if (slow != big) {
    const CommBytes slowest = comm_bytes_per_step(m, t, l, hw.backend, shape.ranks[slow]);
    p.bytes.tp = slowest.tp;
    p.bytes.cp = slowest.cp;
    p.bytes.ep = slowest.ep;
  }
  p.bytes.pp = pipeline_p2p_bytes(m, l, p.accum, boundary, static_cast<double>(whole.embed));
  // The mesh is pp x dp x fsdp x cp x tp, tp innermost: an axis' group
  // spans the product of it and the axes inside it (cp's group the tp*cp
  // ranks around it; the gradients' groups, which fold cp in, as far as
  // fsdp's or dp's).
  p.tp_inter = l.tp > cluster.devices_per_node;
  p.cp_inter = l.tp * l.cp > cluster.devices_per_node;
  p.fsdp_inter = l.tp * l.cp * l.fsdp > cluster.devices_per_node;
  p.dp_inter = l.tp * l.cp * l.fsdp * l.dp > cluster.devices_per_node;
  p.pp_inter = P > 1 && l.world() > cluster.devices_per_node;
  // ep's group: ep consecutive data ranks, each tp x cp ranks apart; edp's
  // the data ranks ep apart, spanning the data axes as dp's does.
  p.ep_inter = l.tp * l.cp * l.ep > cluster.devices_per_node;
  p.edp_inter = expert_data_degree(l.dims()) > 1 && (p.dp_inter || p.fsdp_inter);
  auto bw = [&](bool inter, bool all_reduce) {
    return inter ? hw.inter_busbw() : hw.intra_busbw(all_reduce);
  };
  p.tp_ms = p.bytes.tp / bw(p.tp_inter, false) * 1e3;
  p.fsdp_ms = p.bytes.fsdp / bw(p.fsdp_inter, false) * 1e3;
  p.dp_ms = p.bytes.dp / bw(p.dp_inter, true) * 1e3;
  p.pp_ms = p.bytes.pp / bw(p.pp_inter, false) * 1e3;
  p.cp_ms = p.bytes.cp / bw(p.cp_inter, false) * 1e3;
  p.ep_ms = p.bytes.ep / bw(p.ep_inter, false) * 1e3;
  p.edp_ms = p.bytes.edp / bw(p.edp_inter, f == 1) * 1e3;

  // Overlap: each part hidden up to the compute it runs under.
  if (l.tp > 1) {
    const double linear_ms = A * (3.0 * w.f.linear + w.rf.linear) *
                             (1.0 - f8.linear_share + f8.linear_share / fp8_speedup) /
                             flops_per_s * 1e3;
    p.tp_exposed_ms = l.tp_overlap ? std::max(0.0, p.tp_ms - linear_ms) : p.tp_ms;
  }
  if (l.fsdp > 1) {
    const double hidden_part = p.bytes.fsdp > 0 ? p.bytes.fsdp_overlapped / p.bytes.fsdp : 0;
    const double ov = p.fsdp_ms * hidden_part, exposed = p.fsdp_ms - ov;
    const double window = stage == 1 ? w.bwd_ms : stage == 2 ? A * w.bwd_ms : p.compute_ms;
    p.fsdp_exposed_ms = exposed + std::max(0.0, ov - window);
  }
  if (d > 1) {
    const UnitSizes& u = units[big];
    // The part that can only start once backward is over: the last bucket
    // (dp) or the last unit, the embedding or a stage's first block (HSDP).
    double tail;
    if (f == 1) {
      const double bucket = cfg.parallel.bucket_mb * 1048576.0;
      tail = std::min(1.0, bucket / (4.0 * static_cast<double>(u.total)));
    } else {
      tail = static_cast<double>(u.embed > 0 ? u.embed : u.block) / static_cast<double>(u.total);
    }
    p.dp_exposed_ms = std::max(p.dp_ms * tail, p.dp_ms - w.bwd_ms);
  }
  // A stage waits for its input: the pipeline's messages are counted whole.
  p.pp_exposed_ms = p.pp_ms;
  // Context parallelism: the ring passes each K|V block on while attention
  // works on the one at hand, so its hops hide under the step's attention
  // (forward, backward, recomputed) up to that time; the all-gather mode
  // gathers before attention starts and reduce-scatters after it ends
  // (Megatron's all_gather is not overlapped): exposed whole.
  p.attention_ms = A * (3.0 * w.f.attention + w.rf.attention) / flops_per_s * 1e3;
  if (l.cp > 1)
    p.cp_exposed_ms = l.cp_comm == CpComm::ring ? std::max(0.0, p.cp_ms - p.attention_ms) : p.cp_ms;
  // The token exchange sits between a block's router and its experts, and
  // between the experts and the combine: nothing runs under it (Megatron
  // overlaps it with another micro-batch's compute; we do not yet).
  p.ep_exposed_ms = p.ep_ms;
  // The experts' reductions (and at fsdp > 1 gathers) over edp: what runs
  // under compute hides up to the window the dense part's have (the
  // stage's), the rest (stages 1-2: the gather after AdamW) is exposed.
  if (p.bytes.edp > 0) {
    const double ov = p.edp_ms * p.bytes.edp_overlapped / p.bytes.edp, exposed = p.edp_ms - ov;
    const double window = f == 1 || stage == 1 ? w.bwd_ms
                          : stage == 2         ? A * w.bwd_ms
                                               : p.compute_ms;
    p.edp_exposed_ms = exposed + std::max(0.0, ov - window);
  }
  p.exposed_ms = p.tp_exposed_ms + p.fsdp_exposed_ms + p.dp_exposed_ms + p.pp_exposed_ms +
                 p.cp_exposed_ms + p.ep_exposed_ms + p.edp_exposed_ms;
  p.step_ms = p.compute_ms + p.bubble_ms + p.memory_ms + p.exposed_ms;
  const double tokens = static_cast<double>(t.global_batch) * t.seq_len;
  p.tokens_per_s = tokens / (p.step_ms / 1e3);
  p.mfu = model_flops_per_step(m, t) / (p.step_ms / 1e3 * cluster.devices * hw.peak_flops());
  return p;
}

}  // namespace gt
