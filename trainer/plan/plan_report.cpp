// The planner's output: a terminal table plus the paragraph, and the same
// figures as JSON (scripts/sweep.py reads it to put predictions beside the
// measurements).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "trainer/plan/planner.hpp"
#include "trainer/profile/model_flops.hpp"

namespace gt {

namespace {

std::string cell(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

struct Unit {
  double div;
  const char* name;
};

// The pipeline's schedule in a column: "-" without one, "1f1b", "gpipe",
// "int1f1b:2" (interleaved over 2 virtual stages).
std::string schedule_cell(const PlanLayout& l) {
  if (l.pp == 1) return "-";
  switch (l.schedule) {
    case PipeSchedule::gpipe:
      return "gpipe";
    case PipeSchedule::one_f_one_b:
      return "1f1b";
    case PipeSchedule::interleaved_1f1b:
      return "int1f1b:" + std::to_string(l.virtual_stages);
  }
  return "?";
}

// Context parallelism in a column: "1" without it, "8:ring", "8:ag"
// (parallel.cp_comm allgather).
std::string cp_cell(const PlanLayout& l) {
  if (l.cp == 1) return "1";
  return std::to_string(l.cp) + (l.cp_comm == CpComm::ring ? ":ring" : ":ag");
}

// show_ep: a mixture's table, with an ep column after tp.
void row(std::ostringstream& os, const Prediction& p, int rank, const Unit& u, bool show_mb,
         bool show_ep) {
  const PlanLayout& l = p.layout;
  char buf[512];
  auto m = [&](int64_t b) { return static_cast<double>(b) / u.div; };
  std::snprintf(buf, sizeof buf, "%4s %3d %9s %4d %5d %7s %4d %5s",
                rank > 0 ? std::to_string(rank).c_str() : "-", l.pp, schedule_cell(l).c_str(), l.dp,
                l.fsdp, cp_cell(l).c_str(), l.tp, l.fsdp > 1 ? std::to_string(l.stage).c_str() : "-");
  os << buf;
  if (show_ep) {
    std::snprintf(buf, sizeof buf, " %3d", l.ep);
    os << buf;
  }
  if (show_mb) {
    std::snprintf(buf, sizeof buf, " %4d %5d", l.micro_batch, p.accum);
    os << buf;
  }
  std::snprintf(buf, sizeof buf,
                " %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %4s %9.1f %9.1f %6s %10s %6.1f%%\n",
                m(p.state.params), m(p.state.grads), m(p.state.optimizer), m(p.activations),
                m(p.comm_workspace), m(p.total_bytes()), p.fits ? "yes" : "NO", p.step_ms,
                p.exposed_ms, l.pp > 1 ? cell("%.1f%%", p.bubble * 100).c_str() : "-",
                p.tokens_per_s >= 1e6 ? cell("%.2fM", p.tokens_per_s / 1e6).c_str()
                                      : cell("%.0f", p.tokens_per_s).c_str(),
                p.mfu * 100);
  os << buf;
}

}  // namespace

std::string format_plan(const Plan& plan, const Config& cfg, const HardwareSpec& hw, int top) {
  std::ostringstream os;
  const PlanCluster& c = plan.cluster;
  os << "== " << c.devices << " x " << hw.name << ", " << c.nodes() << " node(s) of "
     << std::min(c.devices, c.devices_per_node) << " ==\n";
  const Unit u = hw.memory_gib >= 40 ? Unit{1073741824.0, "GiB"} : Unit{1048576.0, "MiB"};
  bool show_mb = false;
  for (const auto* list : {&plan.ranked, &plan.too_big})
    for (const auto& p : *list) show_mb = show_mb || p.layout.micro_batch != cfg.train.micro_batch;
  show_mb = true;  // the accumulation count is worth seeing in every table
  os << "memory per device in " << u.name << " (baseline " << cell("%.0f", hw.baseline_mib)
     << " MiB, " << hw.baseline_source << ", included in total; capacity "
     << cell("%.1f", hw.memory_bytes() / u.div) << " " << u.name
     << "); step time per optimizer step; pp > 1: the heaviest pipeline rank's memory, "
        "the bubble's idle share of the pipelined work; cp: degree:cp_comm (ag = allgather)"
     << (cfg.parallel.cp_load_balance ? "" : ", chunks not load-balanced") << "; MFU: "
     << mfu_formula_name(MfuFormula::palm) << " FLOPs over the hardware file's "
     << cell("%.4g", hw.peak_flops() / 1e12) << " TFLOP/s " << hw.peak_dtype() << " per device\n";
  const bool show_ep = cfg.model.moe();
  os << "rank  pp     sched   dp  fsdp      cp   tp stage";
  if (show_ep) os << "  ep";
  if (show_mb) os << "   mb accum";
  os << "   params    grads    optim   activ  commbuf    total fits   step_ms exposed_ms "
        "bubble   tokens/s    MFU\n";
  int k = 0;
  const size_t shown =
      top > 0 ? std::min(plan.ranked.size(), static_cast<size_t>(top)) : plan.ranked.size();
  for (size_t i = 0; i < shown; ++i) row(os, plan.ranked[i], ++k, u, show_mb, show_ep);
  if (top > 0) {
    const size_t more = plan.ranked.size() - shown;
    if (more + plan.too_big.size() > 0)
      os << "(" << more << " more layout" << (more == 1 ? "" : "s") << " that fit and "
         << plan.too_big.size() << " that do not: --top 0 lists every one)\n";
  } else {
    for (const auto& p : plan.too_big) row(os, p, 0, u, show_mb, show_ep);
  }
  if (!plan.invalid.empty()) {
    // One line per reason: a 25-head model rules out every tp > 1 at every stage.
    std::vector<std::pair<std::string, int>> reasons;
    for (const auto& p : plan.invalid) {
      auto it = std::find_if(reasons.begin(), reasons.end(),
                             [&](const auto& r) { return r.first == p.invalid; });
      if (it == reasons.end()) reasons.emplace_back(p.invalid, 1);
      else ++it->second;
    }
    os << "not possible with this config:\n";
    for (const auto& [why, n] : reasons)
      os << "  " << why << " (" << n << (n == 1 ? " layout" : " layouts") << ")\n";
  }
  os << "\n" << plan.explanation << "\n";
  return os.str();
}

nlohmann::json plan_json(const Plan& plan, const Config& cfg, const HardwareSpec& hw) {
  nlohmann::json layouts = nlohmann::json::array();
  auto add = [&](const Prediction& p, int rank) {
    const PlanLayout& l = p.layout;
    nlohmann::json j;
    j["pp"] = l.pp;
    if (l.pp > 1) {
      j["pp_schedule"] = to_string(l.schedule);
      j["pp_virtual_stages"] = l.virtual_stages;
    }
    j["dp"] = l.dp;
    j["fsdp"] = l.fsdp;
    j["cp"] = l.cp;
    if (l.cp > 1) {
      j["cp_comm"] = to_string(l.cp_comm);
      j["cp_load_balance"] = l.cp_load_balance;
    }
    j["tp"] = l.tp;
    if (l.ep > 1) j["ep"] = l.ep;  // parallel.ep (mixtures only)
    j["stage"] = l.fsdp > 1 ? nlohmann::json(l.stage) : nlohmann::json(nullptr);
    j["micro_batch"] = l.micro_batch;
    j["tp_overlap"] = l.tp_overlap;
    if (!p.invalid.empty()) {
      j["invalid"] = p.invalid;
      layouts.push_back(j);
      return;
    }
    j["rank"] = rank > 0 ? nlohmann::json(rank) : nlohmann::json(nullptr);
    j["accum"] = p.accum;
    j["fits"] = p.fits;
    j["memory_bytes"] = {{"params", p.state.params},       {"grads", p.state.grads},
                         {"optimizer", p.state.optimizer}, {"activations", p.activations},
                         {"comm_workspace", p.comm_workspace},
                         {"baseline", p.baseline},         {"total", p.total_bytes()}};
    j["step_ms"] = p.step_ms;
    j["compute_ms"] = p.compute_ms;
    j["memory_bound_ms"] = p.memory_ms;
    // Under the names metrics.jsonl's comm_bytes uses: the gradients'
    // reductions on dp_cp / fsdp_cp where cp folds into them (dp and fsdp
    // then carry nothing, as the trainer logs them).
    nlohmann::json bytes = {{"dp", 0.0}, {"fsdp", 0.0}, {"tp", p.bytes.tp}, {"pp", p.bytes.pp}};
    nlohmann::json ms = {{"dp", 0.0}, {"fsdp", 0.0}, {"tp", p.tp_ms}, {"pp", p.pp_ms}};
    if (l.cp > 1) {
      bytes["dp_cp"] = bytes["fsdp_cp"] = ms["dp_cp"] = ms["fsdp_cp"] = 0.0;
      bytes["cp"] = p.bytes.cp;
      ms["cp"] = p.cp_ms;
    }
    if (l.ep > 1) {  // a balanced router's estimate (step_model.hpp ep_bytes_per_step)
      bytes["ep"] = p.bytes.ep;
      ms["ep"] = p.ep_ms;
      bytes["edp"] = p.bytes.edp;  // the experts' own gradient reductions and gathers
      ms["edp"] = p.edp_ms;
    }
    bytes[replica_key(l)] = p.bytes.dp;
    bytes[shard_key(l)] = p.bytes.fsdp;
    ms[replica_key(l)] = p.dp_ms;
    ms[shard_key(l)] = p.fsdp_ms;
    j["comm_ms"] = ms;
    j["comm_bytes"] = bytes;
    if (l.cp > 1) {
      j["cp_exposed_ms"] = p.cp_exposed_ms;
      j["attention_ms"] = p.attention_ms;
    }
    if (l.pp > 1) {
      j["pp_ms"] = p.pp_ms;
      j["bubble"] = p.bubble;
      j["bubble_ms"] = p.bubble_ms;
      j["pp_layers"] = p.stage_layers;
      j["heaviest_pp_rank"] = p.heaviest_rank;
    }
    j["exposed_comm_ms"] = p.exposed_ms;
    j["tokens_per_s"] = p.tokens_per_s;
    j["mfu"] = p.mfu;  // by out["mfu"]'s formula and peak
    layouts.push_back(j);
  };
  int k = 0;
  for (const auto& p : plan.ranked) add(p, ++k);
  for (const auto& p : plan.too_big) add(p, 0);
  for (const auto& p : plan.invalid) add(p, 0);
  nlohmann::json out;
  out["devices"] = plan.cluster.devices;
  out["nodes"] = plan.cluster.nodes();
  out["devices_per_node"] = std::min(plan.cluster.devices, plan.cluster.devices_per_node);
  out["hardware"] = {{"name", hw.name},
                     {"source", hw.source},
                     {"backend", to_string(hw.backend)},
                     {"peak_flops", hw.peak_flops()},
                     {"memory_bytes", hw.memory_bytes()},
                     {"baseline_bytes", hw.baseline_bytes()},
                     {"baseline_source", hw.baseline_source},
                     {"efficiency", hw.efficiency_note()}};
  out["model"] = {{"n_layer", cfg.model.n_layer}, {"n_head", cfg.model.n_head},
                  {"n_embd", cfg.model.n_embd},   {"vocab_size", cfg.model.vocab_size},
                  {"seq_len", cfg.train.seq_len}, {"global_batch", cfg.train.global_batch}};
  // GPT-2's object is as it always was; another family adds its name and widths.
  if (cfg.model.arch != ModelArch::gpt2) {
    out["model"]["arch"] = to_string(cfg.model.arch);
    out["model"]["n_kv_head"] = cfg.model.kv_heads();
    out["model"]["ffn_width"] = cfg.model.ffn_width();
    out["model"]["tie_embeddings"] = cfg.model.tied_embeddings();
  }
  out["config"] = {{"source", cfg.source},
                   {"micro_batch", cfg.train.micro_batch},
                   {"fsdp_stage", stage_number(cfg.parallel.fsdp_stage)},
                   {"cp_comm", to_string(cfg.parallel.cp_comm)},
                   {"cp_load_balance", cfg.parallel.cp_load_balance},
                   {"tp_overlap", cfg.parallel.tp_overlap},
                   {"reduce_dtype", to_string(cfg.parallel.reduce_dtype)}};
  out["mfu"] = {{"formula", mfu_formula_name(MfuFormula::palm)},
                {"peak_tflops", hw.peak_flops() / 1e12},
                {"peak", std::string("the hardware file's ") + hw.peak_dtype()}};
  out["layouts"] = layouts;
  out["explanation"] = plan.explanation;
  return out;
}

}  // namespace gt
