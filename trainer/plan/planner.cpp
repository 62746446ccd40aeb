#include "trainer/plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "kernels/core/error.hpp"
#include "trainer/profile/model_flops.hpp"

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

std::string micro_batches(int n) {
  return std::to_string(n) + (n == 1 ? " micro-batch" : " micro-batches");
}

std::string describe_layout(const PlanLayout& l) {
  std::ostringstream os;
  // The mesh as the trainer's banner prints it (ParallelDims::str: "pp=2 x
  // dp=2 x fsdp=1 x cp=2 x tp=2"), without its count of ranks.
  const std::string mesh = l.dims().str();
  os << mesh.substr(0, mesh.rfind(" ("));
  std::vector<std::string> notes;
  if (l.fsdp > 1) notes.push_back("ZeRO-" + std::to_string(l.stage));
  if (l.cp > 1)
    notes.push_back(std::string("cp_comm=") + to_string(l.cp_comm) +
                    (l.cp_load_balance ? "" : ", unbalanced"));
  for (size_t i = 0; i < notes.size(); ++i) os << (i ? ", " : " (") << notes[i];
  if (!notes.empty()) os << ")";
  if (l.pp > 1) {
    os << " " << to_string(l.schedule);
    if (l.virtual_stages > 1) os << " over " << l.virtual_stages << " virtual stages";
  }
  return os.str();
}

bool same_shape(const PlanLayout& a, const PlanLayout& b) {
  return a.pp == b.pp && a.dp == b.dp && a.fsdp == b.fsdp && a.tp == b.tp && a.cp == b.cp &&
         a.ep == b.ep &&
         (a.cp == 1 || a.cp_comm == b.cp_comm) && (a.fsdp == 1 || a.stage == b.stage) &&
         (a.pp == 1 || (a.schedule == b.schedule && a.virtual_stages == b.virtual_stages));
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
  AxisCost axes[] = {
      {"the dp all-reduce", p.dp_exposed_ms, p.dp_ms, p.bytes.dp, p.dp_inter},
      {"the fsdp gathers and reduce-scatters", p.fsdp_exposed_ms, p.fsdp_ms, p.bytes.fsdp,
       p.fsdp_inter},
      {"the tp activation collectives", p.tp_exposed_ms, p.tp_ms, p.bytes.tp, p.tp_inter},
      {"the pipeline's activation messages", p.pp_exposed_ms, p.pp_ms, p.bytes.pp, p.pp_inter},
      {"the cp keys and values", p.cp_exposed_ms, p.cp_ms, p.bytes.cp, p.cp_inter},
      {"the ep token exchange", p.ep_exposed_ms, p.ep_ms, p.bytes.ep, p.ep_inter},
      {"the experts' edp reductions", p.edp_exposed_ms, p.edp_ms, p.bytes.edp, p.edp_inter}};
  return *std::max_element(std::begin(axes), std::end(axes),
                           [](const AxisCost& a, const AxisCost& b) { return a.exposed < b.exposed; });
}

// What makes `r` slower than `w`: the part of the step that grows the
// most (bubble, exposed communication, memory-bound work or compute), with
// its figures; ends with ". ".
std::string why_slower(const Prediction& r, const Prediction& w, const HardwareSpec& hw) {
  std::ostringstream os;
  const double d_exposed = r.exposed_ms - w.exposed_ms, d_memory = r.memory_ms - w.memory_ms,
               d_compute = r.compute_ms - w.compute_ms, d_bubble = r.bubble_ms - w.bubble_ms;
  if (d_bubble > d_exposed && d_bubble > d_memory && d_bubble > d_compute) {
    os << "its pipeline bubble idles " << fmt("%.0f", r.bubble_ms) << " ms ("
       << fmt("%.0f", r.bubble * 100) << "% of the pipelined work at " << micro_batches(r.accum)
       << " per step). ";
  } else if (d_exposed >= d_memory && d_exposed >= d_compute) {
    const AxisCost a = worst_axis(r);
    os << a.name << " (" << gb(a.bytes) << " per step over the " << link_name(a.inter, hw)
       << " links, " << fmt("%.0f", a.total) << " ms) leaves " << fmt("%.0f", r.exposed_ms)
       << " ms exposed against " << fmt("%.0f", w.exposed_ms) << " ms. ";
  } else if (d_memory >= d_compute) {
    // Which of the two memory-bound parts grew: AdamW over the owned state,
    // or the passes over the activations (larger per rank: gathered tp rows,
    // whole sequences without cp).
    os << "its memory-bound work takes " << fmt("%.0f", r.memory_ms) << " ms against "
       << fmt("%.0f", w.memory_ms) << " ms (AdamW over " << (r.layout.fsdp > 1 ? "a" : "an unsharded")
       << " copy of the state " << fmt("%.0f", r.adamw_ms) << " against "
       << fmt("%.0f", w.adamw_ms) << " ms; the passes over its activations "
       << fmt("%.0f", r.memory_ms - r.adamw_ms) << " against "
       << fmt("%.0f", w.memory_ms - w.adamw_ms) << " ms). ";
  } else {
    os << "it computes " << fmt("%.0f", r.compute_ms) << " ms per step against "
       << fmt("%.0f", w.compute_ms) << " ms. ";
  }
  return os.str();
}

// What the picked pipeline buys and costs: its heaviest stage's state, the
// traffic that crosses between stages, the bubble.
std::string explain_pipeline(const Prediction& w, const Config& cfg, const HardwareSpec& hw) {
  const PlanLayout& l = w.layout;
  std::ostringstream os;
  const int blocks = [&] {
    int n = 0;
    for (size_t c = static_cast<size_t>(w.heaviest_rank); c < w.stage_layers.size();
         c += static_cast<size_t>(l.pp))
      n += w.stage_layers[c];
    return n;
  }();
  os << "pp=" << l.pp << " keeps the weights, gradients and AdamW state at "
     << gib(static_cast<double>(w.state.total())) << " GiB per device (pipeline rank "
     << w.heaviest_rank << ", the heaviest: " << blocks << " of " << cfg.model.n_layer << " blocks"
     << (w.heaviest_rank == 0 ? " and the embedding" : "")
     << (w.heaviest_rank == l.pp - 1 ? " and the head" : "") << ") and "
     << (w.pp_inter ? "crosses nodes" : "moves between stages") << " with only activations ("
     << gb(w.bytes.pp) << " per step, " << fmt("%.0f", w.pp_ms) << " ms over the "
     << link_name(w.pp_inter, hw) << " links); bubble " << fmt("%.1f", w.bubble * 100) << "% ("
     << fmt("%.0f", w.bubble_ms) << " ms at " << micro_batches(w.accum) << " per step).";
  return os.str();
}

// The largest tp that splits the model (tp_split_problem: heads, key/value
// heads, channels, vocabulary and MLP width).
int tp_limit(const ModelConfig& m) {
  int best = 1;
  for (int t = 2; t <= m.n_head; ++t)
    if (!tp_split_problem(m, t)) best = t;
  return best;
}

// Why the picked layout cuts its sequences over cp ranks: what the layouts
// without cp lack (none fits, or they are slower), how much of the step is
// attention, and what the keys and values cost on their link.
std::string explain_context(const Plan& plan, const Prediction& w, const Config& cfg,
                            const HardwareSpec& hw) {
  const PlanLayout& l = w.layout;
  const ModelConfig& m = cfg.model;
  const int T = cfg.train.seq_len;
  std::ostringstream os;
  os << "cp=" << l.cp << " cuts each " << T << "-token sequence into " << l.cp << " x " << T / l.cp
     << " rows per device" << (l.cp_load_balance ? " (two balanced chunks each)" : "") << ": ";
  auto without_cp = [](const std::vector<Prediction>& list) {
    return std::find_if(list.begin(), list.end(),
                        [](const Prediction& p) { return p.layout.cp == 1; });
  };
  const auto ranked = without_cp(plan.ranked);
  const auto too_big = without_cp(plan.too_big);
  if (ranked == plan.ranked.end()) {
    os << "without it no layout fits";
    if (too_big != plan.too_big.end())
      os << " (the smallest, " << describe_layout(too_big->layout) << " at micro-batch "
         << too_big->layout.micro_batch << ", needs " << gib(static_cast<double>(too_big->total_bytes()))
         << " GiB, " << gib(static_cast<double>(too_big->activations))
         << " of it the activations of one micro-batch of whole sequences)";
    os << ", and cp divides the activations of one sequence where fsdp, tp and pp do not "
          "(they split weights, rows of the residual stream or blocks, never the sequence "
          "every attention layer keeps whole). ";
  } else {
    os << "the fastest layout without it, " << describe_layout(ranked->layout) << " at micro-batch "
       << ranked->layout.micro_batch << ", takes " << fmt("%.0f", ranked->step_ms) << " ms ("
       << fmt("%+.1f", (ranked->step_ms / w.step_ms - 1) * 100) << "%, "
       << gib(static_cast<double>(ranked->total_bytes())) << " GiB per device): "
       << why_slower(*ranked, w, hw);
  }
  // A batch of few long sequences feeds few data ranks: the rest of the
  // devices must split each sequence's work (tp, pp or cp).
  const int data_ranks = cfg.train.global_batch / l.micro_batch;
  if (data_ranks < plan.cluster.devices)
    os << "train.global_batch=" << cfg.train.global_batch << " sequences feed at most "
       << data_ranks << " data ranks at micro-batch " << l.micro_batch << ", so the other "
       << plan.cluster.devices / data_ranks << "-fold of the devices must split each sequence's "
       << "work: tp (at most " << tp_limit(m) << " here), pp (a bubble at so few micro-batches) "
       << "or cp. ";
  const double share = w.compute_ms > 0 ? w.attention_ms / w.compute_ms : 0;
  os << "Attention is " << fmt("%.0f", share * 100) << "% of its compute at this length ("
     << fmt("%.0f", w.attention_ms) << " of " << fmt("%.0f", w.compute_ms)
     << " ms: its causal pairs grow with T^2, the matmuls with T)";
  if (l.cp_comm == CpComm::ring)
    os << ", and the ring's " << gb(w.bytes.cp) << " of key/value hops per step ("
       << fmt("%.0f", w.cp_ms) << " ms over the " << link_name(w.cp_inter, hw)
       << " links) hide under it"
       << (w.cp_exposed_ms > 0 ? " but for " + fmt("%.0f", w.cp_exposed_ms) + " ms" : "");
  else
    os << "; its " << gb(w.bytes.cp) << " of key/value all-gathers and reduce-scatters per step ("
       << fmt("%.0f", w.cp_ms) << " ms over the " << link_name(w.cp_inter, hw)
       << " links) are exposed: the all-gather mode does not overlap them";
  if (m.kv_heads() < m.n_head)
    os << "; grouped-query attention keeps them small: " << m.kv_heads() << " key/value heads of "
       << m.n_head << ", " << 2 * m.kv_heads() << "/" << m.n_head + 2 * m.kv_heads()
       << " of each row's q|k|v";
  os << ".";
  // The other cp_comm mode of the same mesh, when it fits.
  for (const Prediction& p : plan.ranked)
    if (p.layout.cp == l.cp && p.layout.cp_comm != l.cp_comm && p.layout.pp == l.pp &&
        p.layout.dp == l.dp && p.layout.fsdp == l.fsdp && p.layout.tp == l.tp &&
        p.layout.stage == l.stage && p.layout.micro_batch == l.micro_batch &&
        p.layout.schedule == l.schedule && p.layout.virtual_stages == l.virtual_stages) {
      os << " With cp_comm=" << to_string(p.layout.cp_comm) << " it takes "
         << fmt("%.0f", p.step_ms) << " ms (" << fmt("%+.1f", (p.step_ms / w.step_ms - 1) * 100)
         << "%, " << fmt("%.0f", p.cp_exposed_ms) << " ms of cp traffic exposed).";
      break;
    }
  return os.str();
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
         << " GiB. Add devices, shard further (fsdp, ZeRO-3, tp, cp) or lower train.micro_batch.";
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
  const double comm_ms = w.dp_ms + w.fsdp_ms + w.tp_ms + w.pp_ms + w.cp_ms + w.ep_ms;
  os << "the planner picks " << describe_layout(w.layout) << " at micro-batch "
     << w.layout.micro_batch << " (" << micro_batches(w.accum)
     << " per step): " << fmt("%.0f", w.step_ms) << " ms per step, " << human_rate(w.tokens_per_s)
     << " tokens/s, MFU " << fmt("%.0f", w.mfu * 100) << "% (" << mfu_formula_name(MfuFormula::palm)
     << " over the hardware file's " << fmt("%.4g", hw.peak_flops() / 1e12) << " TFLOP/s "
     << hw.peak_dtype() << "), "
     << gib(static_cast<double>(w.total_bytes())) << " of " << gib(hw.memory_bytes())
     << " GiB per device. ";
  const double busy = w.compute_ms + w.memory_ms + w.bubble_ms;
  if (w.bubble_ms > w.compute_ms && w.bubble_ms > w.exposed_ms) {
    os << "It is bound by the pipeline's bubble: at " << micro_batches(w.accum) << " per step its "
       << w.layout.pp << " stages idle " << fmt("%.0f", w.bubble * 100)
       << "% of the pipelined work (" << fmt("%.0f", w.bubble_ms) << " ms beside "
       << fmt("%.0f", w.compute_ms)
       << " ms of matmuls); more micro-batches per step or virtual stages would shrink it. ";
  } else if (w.exposed_ms < busy) {
    os << "It is bound by compute: " << fmt("%.0f", w.compute_ms) << " ms of matmuls at "
       << hw.efficiency_note() << " and " << fmt("%.0f", w.memory_ms)
       << " ms of memory-bound work (AdamW, activations); of its " << fmt("%.0f", comm_ms)
       << " ms of communication " << fmt("%.0f", w.exposed_ms) << " ms is exposed";
    std::vector<std::string> links;
    auto on = [&](bool inter) { return std::string(inter ? " crosses the " : " stays on the ") + link_name(inter, hw) + " links"; };
    if (w.layout.fsdp > 1) links.push_back(gb(w.bytes.fsdp) + " of fsdp gathers and reduce-scatters" + on(w.fsdp_inter));
    if (w.layout.dp > 1) links.push_back("the " + gb(w.bytes.dp) + " dp all-reduce" + on(w.dp_inter));
    if (w.layout.tp > 1) links.push_back(gb(w.bytes.tp) + " of tp collectives" + on(w.tp_inter));
    if (w.layout.pp > 1) links.push_back(gb(w.bytes.pp) + " of pipeline messages" + on(w.pp_inter));
    if (w.layout.cp > 1) links.push_back(gb(w.bytes.cp) + " of cp keys and values" + on(w.cp_inter));
    if (w.layout.ep > 1)
      links.push_back(gb(w.bytes.ep) + " of ep token exchange (a balanced router's)" + on(w.ep_inter));
    if (w.bytes.edp > 0)
      links.push_back(gb(w.bytes.edp) + " of the experts' edp reductions" + on(w.edp_inter));
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
  if (w.layout.pp > 1) os << explain_pipeline(w, cfg, hw) << " ";
  if (w.layout.cp > 1) os << explain_context(plan, w, cfg, hw) << " ";
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
    os << why_slower(*r, w, hw);
    if (r->step_ms < 1.05 * w.step_ms)
      os << "A margin under 5% is within this model's error: measure both before committing. ";
  }
  // Whether a pipeline would pay: the best one's figures, when it lost.
  if (w.layout.pp == 1) {
    const auto best_pp = std::find_if(plan.ranked.begin(), plan.ranked.end(),
                                      [](const Prediction& p) { return p.layout.pp > 1; });
    if (best_pp != plan.ranked.end() && &*best_pp != r)
      os << "The fastest pipeline, " << describe_layout(best_pp->layout) << " at micro-batch "
         << best_pp->layout.micro_batch << ", takes " << fmt("%.0f", best_pp->step_ms) << " ms ("
         << fmt("%+.0f", (best_pp->step_ms / w.step_ms - 1) * 100) << "%): its bubble idles "
         << fmt("%.0f", best_pp->bubble_ms) << " ms (" << fmt("%.0f", best_pp->bubble * 100)
         << "% of the pipelined work) and " << fmt("%.0f", best_pp->exposed_ms)
         << " ms of its communication is exposed. ";
  }
  // Whether context parallelism would pay: the best cp layout's figures, when it lost.
  if (w.layout.cp == 1) {
    const auto best_cp = std::find_if(plan.ranked.begin(), plan.ranked.end(),
                                      [](const Prediction& p) { return p.layout.cp > 1; });
    if (best_cp != plan.ranked.end() && &*best_cp != r)
      os << "The fastest context-parallel layout, " << describe_layout(best_cp->layout)
         << " at micro-batch " << best_cp->layout.micro_batch << ", takes "
         << fmt("%.0f", best_cp->step_ms) << " ms ("
         << fmt("%+.0f", (best_cp->step_ms / w.step_ms - 1) * 100) << "%): at "
         << cfg.train.seq_len << " tokens attention is "
         << fmt("%.0f", best_cp->compute_ms > 0 ? best_cp->attention_ms / best_cp->compute_ms * 100 : 0)
         << "% of its compute and one sequence's activations fit without it; the "
         << gb(best_cp->bytes.cp) << " of keys and values it moves per step leave "
         << fmt("%.0f", best_cp->cp_exposed_ms) << " ms exposed. ";
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
  // The pipelines tried: 1f1b, and interleaved over two virtual stages.
  struct Pipe {
    PipeSchedule schedule;
    int virtual_stages;
  };
  const Pipe pipes[] = {{PipeSchedule::one_f_one_b, 1}, {PipeSchedule::interleaved_1f1b, 2}};
  const int n = cluster.devices;
  // pp = 1 first: its layouts keep their order among themselves (ties rank
  // in enumeration order).
  for (int pp = 1; pp <= n; ++pp) {
    if (n % pp) continue;
    for (const Pipe& pipe : pipes) {
      if (pp == 1 && pipe.virtual_stages > 1) continue;
      const int n_pp = n / pp;  // ranks per pipeline stage
      for (int tp = 1; tp <= n_pp; ++tp) {
        if (n_pp % tp) continue;
        // cp = 1 first, so the layouts without it keep their order too.
        for (int cp = 1; cp <= n_pp / tp; ++cp) {
          if ((n_pp / tp) % cp) continue;
          const int n_data = n_pp / tp / cp;  // dp x fsdp
          for (const CpComm comm : {CpComm::allgather, CpComm::ring}) {
            // The mode only matters with cp; without it, the config's.
            if (cp == 1 && comm != cfg.parallel.cp_comm) continue;
            for (int fsdp = 1; fsdp <= n_data; ++fsdp) {
              if (n_data % fsdp) continue;
              const int dp = n_data / fsdp;
              for (int stage = 1; stage <= 3; ++stage) {
                if (fsdp == 1 && stage != 3) continue;  // the stage only matters with fsdp
                // Expert parallelism (a mixture only): every ep that divides
                // the data ranks and the experts, ep = 1 first.
                std::vector<int> eps{1};
                for (int ep = 2; cfg.model.moe() && ep <= n_data; ++ep)
                  if (n_data % ep == 0 && cfg.model.n_experts % ep == 0) eps.push_back(ep);
                for (int ep : eps)
                for (int mb : mbs) {
                  PlanLayout l;
                  l.ep = ep;
                  l.pp = pp;
                  l.schedule = pipe.schedule;
                  l.virtual_stages = pipe.virtual_stages;
                  l.dp = dp;
                  l.fsdp = fsdp;
                  l.tp = tp;
                  l.cp = cp;
                  l.cp_comm = comm;
                  l.cp_load_balance = cfg.parallel.cp_load_balance;
                  l.stage = fsdp > 1 ? stage : stage_number(cfg.parallel.fsdp_stage);
                  l.micro_batch = mb;
                  l.tp_overlap = cfg.parallel.tp_overlap;
                  l.reduce_dtype = cfg.parallel.reduce_dtype;
                  l.fp8 = cfg.runtime.fp8;
                  l.fp8_min_dim = cfg.runtime.fp8_min_dim;
                  l.fp8_allgather = cfg.parallel.fp8_allgather != Fp8AllGather::off;
                  Prediction p = predict(cfg, hw, cluster, l);
                  if (!p.invalid.empty())
                    plan.invalid.push_back(std::move(p));
                  else if (p.fits)
                    plan.ranked.push_back(std::move(p));
                  else
                    plan.too_big.push_back(std::move(p));
                }
              }
            }
          }
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
