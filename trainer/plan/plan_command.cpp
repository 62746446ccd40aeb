#include "trainer/plan/plan_command.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "kernels/core/error.hpp"
#include "trainer/config/config.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/plan/planner.hpp"

namespace gt {

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 1)
      fail("--", flag, " ", text, ": expected a comma-separated list of positive integers");
    out.push_back(v);
  }
  if (out.empty()) fail("--", flag, ": expected at least one value");
  return out;
}

int run_plan_command(const PlanArgs& a) {
  if (a.config.empty() || a.hardware.empty() || a.gpus.empty())
    fail("plan needs --config FILE, --hardware FILE and --gpus N[,N...]");
  const Config cfg = load_config(a.config, a.overrides);
  HardwareSpec hw = load_hardware(a.hardware);
  if (!a.peaks.empty()) apply_bench_peaks(hw, a.peaks);
  if (cfg.runtime.fp8 != Fp8Recipe::off &&
      (hw.backend != PlanBackend::cuda || !(hw.fp8_tflops > 0)))
    fail("plan: runtime.fp8=", to_string(cfg.runtime.fp8), " but ", a.hardware, " (", hw.name,
         ") ", hw.backend != PlanBackend::cuda
                   ? "is a CPU: its fp8 path is the reference, not a speed-up, and is not planned"
                   : "gives no fp8_tflops: it has no fp8 tensor cores (fp8 GEMMs need sm_89 or "
                     "newer: Ada, Hopper)");
  if (!a.baseline_mib.empty()) {
    // The per-process memory of the binary in use (the sweep measures it:
    // a build with CUDA maps its libraries even into a CPU run).
    char* end = nullptr;
    const double mib = std::strtod(a.baseline_mib.c_str(), &end);
    if (end == a.baseline_mib.c_str() || *end != '\0' || !(mib >= 0) || !std::isfinite(mib))
      fail("--baseline-mib ", a.baseline_mib, ": expected a non-negative number of MiB");
    hw.baseline_mib = mib;
    hw.baseline_source = "measured, --baseline-mib";
  }
  const std::vector<int> gpus = parse_int_list(a.gpus, "gpus");
  std::vector<int> nodes;
  if (!a.nodes.empty()) {
    nodes = parse_int_list(a.nodes, "nodes");
    if (nodes.size() != gpus.size())
      fail("--nodes has ", nodes.size(), " value(s) for ", gpus.size(), " --gpus value(s)");
  }
  const std::vector<int> mbs =
      a.micro_batch.empty() ? std::vector<int>{} : parse_int_list(a.micro_batch, "micro-batch");
  // --top: one count of layouts; 0 (or absent) lists every one.
  int top = 0;
  if (!a.top.empty()) {
    size_t used = 0;
    try {
      top = std::stoi(a.top, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != a.top.size() || top < 0)
      fail("--top ", a.top, ": expected a number of layouts >= 0 (0 lists every one)");
  }

  nlohmann::json all = nlohmann::json::array();
  std::ostringstream text;
  const ModelConfig& m = cfg.model;
  // GPT-2's line is as it always was; another family names itself and the
  // widths that are not GPT-2's rules.
  const bool llama = m.llama_family();
  text << "# plan: " << cfg.source << " ("
       << (llama ? std::string(to_string(m.arch)) + ": " : std::string()) << m.n_layer
       << " layers, "
       << m.n_head << " heads";
  if (llama) text << " sharing " << m.kv_heads() << " key/value heads";
  text << ", " << m.n_embd << " embd";
  if (llama)
    text << (m.moe() ? detail::concat(", ", m.n_experts, " experts (top ", m.experts_per_token,
                                       ") of MLP ")
                     : std::string(", MLP "))
         << m.ffn_width() << (m.tied_embeddings() ? ", tied head" : ", untied head");
  text << ", vocab " << m.vocab_size << ", seq " << cfg.train.seq_len << ", global batch "
       << cfg.train.global_batch << ") on " << hw.name << " [" << hw.source << "], "
       << hw.efficiency_note() << "\n";
  if (cfg.runtime.fp8 != Fp8Recipe::off)
    text << "# fp8: runtime.fp8=" << to_string(cfg.runtime.fp8)
         << ", the blocks' linear GEMMs (each dimension >= fp8_min_dim="
         << cfg.runtime.fp8_min_dim << ") at " << hw.fp8_tflops / hw.bf16_tflops
         << "x the bf16 rate (fp8_tflops " << hw.fp8_tflops
         << "), their amax and cast passes as memory traffic, their amaxes' tp and cp "
            "reductions"
         << (cfg.runtime.fp8 == Fp8Recipe::tensorwise &&
                     cfg.parallel.fp8_allgather != Fp8AllGather::off
                 ? "; ZeRO-3 layouts gather the blocks' fp8 weights as codes "
                   "(parallel.fp8_allgather)"
                 : "")
         << "; MFU stays against the bf16 peak\n";
  for (size_t i = 0; i < gpus.size(); ++i) {
    PlanCluster c;
    c.devices = gpus[i];
    if (!nodes.empty()) {
      if (gpus[i] % nodes[i])
        fail("--gpus ", gpus[i], " does not split evenly over --nodes ", nodes[i]);
      c.devices_per_node = gpus[i] / nodes[i];
    } else {
      c.devices_per_node = hw.gpus_per_node;
    }
    const Plan plan = make_plan(cfg, hw, c, mbs);
    text << "\n" << format_plan(plan, cfg, hw, top);
    all.push_back(plan_json(plan, cfg, hw));
  }
  print_report(text.str(), all, a.json);
  return 0;
}

void print_report(const std::string& text, const nlohmann::json& json,
                  const std::string& json_flag) {
  if (json_flag == "-") {
    std::cout << json.dump(2) << std::endl;
    return;
  }
  std::cout << text << std::flush;
  if (json_flag.empty()) return;
  make_parent_dir(json_flag, "--json");
  write_file_atomic(json_flag, json.dump(2) + "\n");
}

}  // namespace gt
