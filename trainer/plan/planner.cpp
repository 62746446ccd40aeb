#include "trainer/plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "kernels/core/error.hpp"

namespace gt {

namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string human_rate(double x) {
  if (x >= 1e6) return fmt("%.2fM", x / 1e6);
  if (x >= 1e3) return fmt("%.1fk", x / 1e3);
  return fmt("%.0f", x);
}

std::string gib(double bytes) { return fmt("%.1f", bytes / 1073741824.0); }

std::string gb(double bytes) {
  if (bytes >= 1e9) return fmt("%.2f GB", bytes / 1e9);
  return fmt("%.1f MB", bytes / 1e6);
}

std::string describe_layout(const PlanLayout& l) {
  std::ostringstream os;
  os << "dp=" << l.dp << " x fsdp=" << l.fsdp << " x tp=" << l.tp;
  if (l.fsdp > 1) os << " (ZeRO-" << l.stage << ")";
  return os.str();
}

// Why a layout cannot run this config at all ("" = it can).
std::string invalid_reason(const Config& cfg, const PlanCluster& c, const PlanLayout& l) {
  const auto& m = cfg.model;
  const auto& t = cfg.train;
  std::ostringstream os;
  if (l.world() != c.devices)
    os << "dp x fsdp x tp = " << l.world() << " is not " << c.devices << " devices";
  else if (const auto problem = tp_split_problem(m, l.tp))
    os << "tp=" << l.tp << " does not divide " << problem->what << "=" << problem->value;
  else if (l.micro_batch < 1 || t.global_batch % (l.micro_batch * l.dp * l.fsdp))
    os << "train.global_batch=" << t.global_batch << " is not a multiple of micro_batch x dp x fsdp = "
       << l.micro_batch * l.dp * l.fsdp;
  else if ((static_cast<int64_t>(l.micro_batch) * t.seq_len) % l.tp)
    os << "micro_batch x seq_len is not a multiple of tp=" << l.tp;
  else if (l.fsdp > 1 && !fsdp_stage_numbered(l.stage))
    os << "fsdp_stage=" << l.stage << " is not 1, 2 or 3";
  return os.str();
}

}  // namespace

Prediction predict(const Config& cfg, const HardwareSpec& hw, const PlanCluster& cluster,
                   const PlanLayout& layout) {
  Prediction p;
  p.layout = layout;
  p.invalid = invalid_reason(cfg, cluster, layout);
  if (!p.invalid.empty()) return p;
  const auto& m = cfg.model;
  const auto& t = cfg.train;
  const PlanLayout& l = layout;
  const int stage = l.fsdp > 1 ? l.stage : 3;
  p.accum = t.global_batch / (l.micro_batch * l.dp * l.fsdp);
  const double A = p.accum;

  // Memory per device.
  // The GPU plan is the bf16 model (the hardware files' peaks are bf16's).
  const ComputeDType dtype =
      hw.backend == PlanBackend::cuda ? ComputeDType::bf16 : ComputeDType::fp32;
  const bool bf16 = dtype == ComputeDType::bf16;
  p.state = predict_state_bytes(m, l.fsdp, l.tp, stage, bf16, l.dp, l.reduce_dtype);
  p.activations = predict_activation_bytes(m, l.micro_batch, t.seq_len, l.tp, l.tp_overlap,
                                           hw.backend, t.recompute, dtype,
                                           keeps_bf16_params(l.fsdp, fsdp_stage_of(stage), bf16));
  p.comm_workspace = predict_comm_workspace_bytes(m, l, t.seq_len, hw.backend);
  p.baseline = static_cast<int64_t>(hw.baseline_bytes());
  p.fits = static_cast<double>(p.total_bytes()) <= hw.memory_bytes();

  // Compute and memory-bound work.
  const int per_node = std::min(cluster.devices, cluster.devices_per_node);
  const double flops_per_s = hw.achieved_flops(per_node);
  const MicroBatchFlops f = micro_batch_flops(m, l.micro_batch, t.seq_len, l.tp);
  // Recomputation's forward work runs inside backward: it lengthens backward.
  const MicroBatchFlops rf = recompute_flops(m, l.micro_batch, t.seq_len, l.tp, t.recompute);
  const double fwd_ms = f.total() / flops_per_s * 1e3;
  const double bwd_ms = 2 * fwd_ms + rf.total() / flops_per_s * 1e3;
  p.compute_ms = A * (fwd_ms + bwd_ms);
  const double owned_params = static_cast<double>(p.state.optimizer) / 8.0;  // m + v, fp32
  // Activation traffic is what the step writes and reads, whatever it keeps:
  // recomputation writes the dropped tensors again (into one block's slot).
  const double traffic = static_cast<double>(predict_activation_bytes(
      m, l.micro_batch, t.seq_len, l.tp, l.tp_overlap, hw.backend, Recompute::none, dtype));
  const double mem_bytes = owned_params * 28.0 + 3.0 * A * traffic;
  p.memory_ms = mem_bytes / hw.memory_bytes_per_s(per_node) * 1e3;

  // Communication: each axis over its link.
  p.bytes = comm_bytes_per_step(m, t, l, hw.backend);
  p.tp_inter = l.tp > cluster.devices_per_node;
  p.fsdp_inter = l.tp * l.fsdp > cluster.devices_per_node;
  p.dp_inter = l.world() > cluster.devices_per_node;
  auto bw = [&](bool inter, bool all_reduce) {
    return inter ? hw.inter_busbw() : hw.intra_busbw(all_reduce);
  };
  p.tp_ms = p.bytes.tp / bw(p.tp_inter, false) * 1e3;
  p.fsdp_ms = p.bytes.fsdp / bw(p.fsdp_inter, false) * 1e3;
  p.dp_ms = p.bytes.dp / bw(p.dp_inter, true) * 1e3;

  // Overlap: each part hidden up to the compute it runs under.
  if (l.tp > 1) {
    const double linear_ms = A * (3.0 * f.linear + rf.linear) / flops_per_s * 1e3;
    p.tp_exposed_ms = l.tp_overlap ? std::max(0.0, p.tp_ms - linear_ms) : p.tp_ms;
  }
  if (l.fsdp > 1) {
    const double hidden_part = p.bytes.fsdp > 0 ? p.bytes.fsdp_overlapped / p.bytes.fsdp : 0;
    const double ov = p.fsdp_ms * hidden_part, exposed = p.fsdp_ms - ov;
    const double window = stage == 1 ? bwd_ms : stage == 2 ? A * bwd_ms : p.compute_ms;
    p.fsdp_exposed_ms = exposed + std::max(0.0, ov - window);
  }
  if (l.dp > 1) {
    const UnitSizes u = unit_sizes(m, l.tp, l.fsdp);
    // The part that can only start once backward is over: the last bucket
    // (dp) or the last unit, embed (HSDP).
    double tail;
    if (l.fsdp == 1) {
      const double bucket = cfg.parallel.bucket_mb * 1048576.0;
      tail = std::min(1.0, bucket / (4.0 * static_cast<double>(u.total)));
    } else {
      tail = static_cast<double>(u.embed) / static_cast<double>(u.total);
    }
    p.dp_exposed_ms = std::max(p.dp_ms * tail, p.dp_ms - bwd_ms);
  }
  p.exposed_ms = p.tp_exposed_ms + p.fsdp_exposed_ms + p.dp_exposed_ms;
  p.step_ms = p.compute_ms + p.memory_ms + p.exposed_ms;
  const double tokens = static_cast<double>(t.global_batch) * t.seq_len;
  p.tokens_per_s = tokens / (p.step_ms / 1e3);
  p.mfu = model_flops_per_step(m, t) / (p.step_ms / 1e3 * cluster.devices * hw.peak_flops());
  return p;
}

namespace {

bool same_shape(const PlanLayout& a, const PlanLayout& b) {
  return a.dp == b.dp && a.fsdp == b.fsdp && a.tp == b.tp && (a.fsdp == 1 || a.stage == b.stage);
}

std::string link_name(bool inter, const HardwareSpec& hw) {
  return inter ? fmt("%.0f GB/s inter-node", hw.inter_node_gbps)
               : fmt("%.0f GB/s intra-node", hw.intra_node_gbps);
}

// The axis with the most exposed time: name, exposed ms, bytes, link.
struct AxisCost {
  const char* name;
  double exposed, total, bytes;
  bool inter;
};
AxisCost worst_axis(const Prediction& p) {
  AxisCost axes[] = {{"the dp all-reduce", p.dp_exposed_ms, p.dp_ms, p.bytes.dp, p.dp_inter},
                     {"the fsdp gathers and reduce-scatters", p.fsdp_exposed_ms, p.fsdp_ms,
                      p.bytes.fsdp, p.fsdp_inter},
                     {"the tp activation collectives", p.tp_exposed_ms, p.tp_ms, p.bytes.tp,
                      p.tp_inter}};
  return *std::max_element(std::begin(axes), std::end(axes),
                           [](const AxisCost& a, const AxisCost& b) { return a.exposed < b.exposed; });
}

std::string explain(const Plan& plan, const Config& cfg, const HardwareSpec& hw) {
  const PlanCluster& c = plan.cluster;
  std::ostringstream os;
  os << c.devices << " x " << hw.name << " (" << c.nodes() << (c.nodes() == 1 ? " node" : " nodes")
     << " of " << std::min(c.devices, c.devices_per_node) << "): ";
  if (plan.ranked.empty()) {
    if (!plan.too_big.empty()) {
      os << "no layout fits in " << gib(hw.memory_bytes()) << " GiB per device";
      os << "; the smallest, " << describe_layout(plan.too_big.front().layout) << " at micro-batch "
         << plan.too_big.front().layout.micro_batch << ", needs "
         << gib(static_cast<double>(plan.too_big.front().total_bytes()))
         << " GiB. Add devices, shard further (fsdp, ZeRO-3, tp) or lower train.micro_batch.";
    }
    else {
      os << "no layout can run this config (";
      std::vector<std::string> seen;
      for (const auto& p : plan.invalid)
        if (std::find(seen.begin(), seen.end(), p.invalid) == seen.end() && seen.size() < 3)
          seen.push_back(p.invalid);
      for (size_t i = 0; i < seen.size(); ++i) os << (i ? "; " : "") << seen[i];
      os << (plan.invalid.size() > seen.size() ? "; ..." : "") << ")";
      if (cfg.train.global_batch < c.devices * cfg.train.micro_batch)
        os << ". train.global_batch=" << cfg.train.global_batch << " rows cannot feed "
           << c.devices << " devices at micro-batch " << cfg.train.micro_batch
           << ": raise it, or plan with --micro-batch 1";
      os << ".";
    }
    return os.str();
  }
  const Prediction& w = plan.ranked.front();
  const double comm_ms = w.dp_ms + w.fsdp_ms + w.tp_ms;
  os << "the planner picks " << describe_layout(w.layout) << " at micro-batch "
     << w.layout.micro_batch << " (" << w.accum
     << (w.accum == 1 ? " micro-batch" : " micro-batches") << " per step): " << fmt("%.0f", w.step_ms)
     << " ms per step, " << human_rate(w.tokens_per_s) << " tokens/s, MFU "
     << fmt("%.0f", w.mfu * 100) << "%, " << gib(static_cast<double>(w.total_bytes())) << " of "
     << gib(hw.memory_bytes()) << " GiB per device. ";
  const double busy = w.compute_ms + w.memory_ms;
  if (w.exposed_ms < busy) {
    os << "It is bound by compute: " << fmt("%.0f", w.compute_ms) << " ms of matmuls at "
       << hw.efficiency_note() << " and " << fmt("%.0f", w.memory_ms)
       << " ms of memory-bound work (AdamW, activations); of its " << fmt("%.0f", comm_ms)
       << " ms of communication " << fmt("%.0f", w.exposed_ms) << " ms is exposed";
    std::vector<std::string> links;
    auto on = [&](bool inter) { return std::string(inter ? " crosses the " : " stays on the ") + link_name(inter, hw) + " links"; };
    if (w.layout.fsdp > 1) links.push_back(gb(w.bytes.fsdp) + " of fsdp gathers and reduce-scatters" + on(w.fsdp_inter));
    if (w.layout.dp > 1) links.push_back("the " + gb(w.bytes.dp) + " dp all-reduce" + on(w.dp_inter));
    if (w.layout.tp > 1) links.push_back(gb(w.bytes.tp) + " of tp collectives" + on(w.tp_inter));
    if (!links.empty()) {
      os << " (";
      for (size_t i = 0; i < links.size(); ++i) os << (i ? "; " : "") << links[i];
      os << ")";
    }
    os << ". ";
  } else {
    const AxisCost a = worst_axis(w);
    os << "It is bound by communication: " << a.name << " moves " << gb(a.bytes)
       << " per device per step over the " << link_name(a.inter, hw) << " links, "
       << fmt("%.0f", a.exposed) << " ms of it exposed beside " << fmt("%.0f", busy)
       << " ms of compute; no layout that fits hides more of it. ";
  }
  const Prediction* r = nullptr;
  for (const auto& p : plan.ranked)
    if (!same_shape(p.layout, w.layout)) {
      r = &p;
      break;
    }
  if (r) {
    os << "The runner-up, " << describe_layout(r->layout) << " at micro-batch "
       << r->layout.micro_batch << ", takes " << fmt("%.0f", r->step_ms) << " ms ("
       << fmt("%+.0f", (r->step_ms / w.step_ms - 1) * 100) << "%): ";
    const double d_exposed = r->exposed_ms - w.exposed_ms, d_memory = r->memory_ms - w.memory_ms,
                 d_compute = r->compute_ms - w.compute_ms;
    if (d_exposed >= d_memory && d_exposed >= d_compute) {
      const AxisCost a = worst_axis(*r);
      os << a.name << " (" << gb(a.bytes) << " per step over the " << link_name(a.inter, hw)
         << " links, " << fmt("%.0f", a.total) << " ms) leaves " << fmt("%.0f", r->exposed_ms)
         << " ms exposed against " << fmt("%.0f", w.exposed_ms) << " ms. ";
    } else if (d_memory >= d_compute) {
      os << "its memory-bound work takes " << fmt("%.0f", r->memory_ms) << " ms against "
         << fmt("%.0f", w.memory_ms) << " ms (AdamW over " << (r->layout.fsdp > 1 ? "a" : "an unsharded")
         << " copy of the state, more activation traffic). ";
    } else {
      os << "it computes " << fmt("%.0f", r->compute_ms) << " ms per step against "
         << fmt("%.0f", w.compute_ms) << " ms. ";
    }
    if (r->step_ms < 1.05 * w.step_ms)
      os << "A margin under 5% is within this model's error: measure both before committing. ";
  }
  if (!plan.too_big.empty())
    os << plan.too_big.size() << " layout" << (plan.too_big.size() == 1 ? " does" : "s do")
       << " not fit (the closest, " << describe_layout(plan.too_big.front().layout)
       << " at micro-batch " << plan.too_big.front().layout.micro_batch << ", needs "
       << gib(static_cast<double>(plan.too_big.front().total_bytes())) << " GiB). ";
  // "tp=2, 4, 8 do not divide model.n_head=25", one sentence per model dimension.
  std::map<std::string, std::vector<int>> ruled_out;
  for (const auto& p : plan.invalid) {
    const size_t at = p.invalid.find(" does not divide ");
    if (at == std::string::npos) continue;
    auto& tps = ruled_out[p.invalid.substr(at + 17)];
    if (std::find(tps.begin(), tps.end(), p.layout.tp) == tps.end()) tps.push_back(p.layout.tp);
  }
  for (const auto& [what, tps] : ruled_out) {
    os << "Tensor parallelism is ruled out at tp=";
    for (size_t i = 0; i < tps.size(); ++i) os << (i ? ", " : "") << tps[i];
    os << ": " << (tps.size() == 1 ? "it does" : "they do") << " not divide " << what << ". ";
  }
  std::string s = os.str();
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

Plan make_plan(const Config& cfg, const HardwareSpec& hw, const PlanCluster& cluster,
               const std::vector<int>& micro_batches) {
  Plan plan;
  plan.cluster = cluster;
  const std::vector<int> mbs =
      micro_batches.empty() ? std::vector<int>{cfg.train.micro_batch} : micro_batches;
  const int n = cluster.devices;
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp) continue;
    for (int fsdp = 1; fsdp <= n / tp; ++fsdp) {
      if ((n / tp) % fsdp) continue;
      const int dp = n / tp / fsdp;
      for (int stage = 1; stage <= 3; ++stage) {
        if (fsdp == 1 && stage != 3) continue;  // the stage only matters with fsdp
        for (int mb : mbs) {
          PlanLayout l;
          l.dp = dp;
          l.fsdp = fsdp;
          l.tp = tp;
          l.stage = fsdp > 1 ? stage : stage_number(cfg.parallel.fsdp_stage);
          l.micro_batch = mb;
          l.tp_overlap = cfg.parallel.tp_overlap;
          l.reduce_dtype = cfg.parallel.reduce_dtype;
          Prediction p = predict(cfg, hw, cluster, l);
          if (!p.invalid.empty()) plan.invalid.push_back(std::move(p));
          else if (p.fits) plan.ranked.push_back(std::move(p));
          else plan.too_big.push_back(std::move(p));
        }
      }
    }
  }
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(), [](const Prediction& a, const Prediction& b) {
    if (a.step_ms != b.step_ms) return a.step_ms < b.step_ms;
    return a.total_bytes() < b.total_bytes();
  });
  std::stable_sort(plan.too_big.begin(), plan.too_big.end(), [](const Prediction& a, const Prediction& b) {
    return a.total_bytes() < b.total_bytes();
  });
  plan.explanation = explain(plan, cfg, hw);
  return plan;
}

}  // namespace gt
