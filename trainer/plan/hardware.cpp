#include "trainer/plan/hardware.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "kernels/core/error.hpp"

namespace gt {

const char* to_string(PlanBackend b) { return b == PlanBackend::cuda ? "cuda" : "cpu"; }

double HardwareSpec::peak_flops() const {
  return (backend == PlanBackend::cuda ? bf16_tflops : fp32_tflops) * 1e12;
}

double HardwareSpec::achieved_flops(int ranks_per_node) const {
  const double per = measured_gemm_flops > 0 ? measured_gemm_flops : peak_flops() * compute_efficiency;
  return shared_compute ? per / std::max(1, ranks_per_node) : per;
}

double HardwareSpec::memory_bytes_per_s(int ranks_per_node) const {
  const double bw = measured_memcpy_bytes_per_s > 0 ? measured_memcpy_bytes_per_s : hbm_gbps * 1e9;
  return shared_compute ? bw / std::max(1, ranks_per_node) : bw;
}

double HardwareSpec::intra_busbw(bool all_reduce) const {
  const double measured = all_reduce ? measured_all_reduce_busbw : measured_all_gather_busbw;
  if (measured > 0) return measured;
  return intra_node_gbps * 1e9 * comm_efficiency;
}

double HardwareSpec::inter_busbw() const { return inter_node_gbps * 1e9 * comm_efficiency; }

std::string HardwareSpec::efficiency_note() const {
  char buf[256];
  if (measured_gemm_flops > 0)
    std::snprintf(buf, sizeof buf, "%.1f TFLOP/s as measured by bench (%s)",
                  measured_gemm_flops / 1e12, peaks_source.c_str());
  else
    std::snprintf(buf, sizeof buf, "%.0f%% of %.4g TFLOP/s %s (compute_efficiency assumed in %s)",
                  compute_efficiency * 100, peak_flops() / 1e12, peak_dtype(), source.c_str());
  return buf;
}

namespace {

double number(const YAML::Node& n, const std::string& key, const std::string& src) {
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    fail(src, ": ", key, ": expected a number");
  }
}

}  // namespace

HardwareSpec load_hardware(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail("cannot read hardware file '", path, "'");
  } catch (const YAML::Exception& e) {
    fail(path, ": ", e.what());
  }
  if (!root.IsMap()) fail(path, ": expected a map of hardware figures");
  HardwareSpec hw;
  hw.source = path;
  const std::set<std::string> required = {"name", "bf16_tflops", "fp32_tflops", "hbm_gbps",
                                          "memory_gib", "intra_node_gbps", "inter_node_gbps",
                                          "gpus_per_node"};
  std::set<std::string> seen;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    seen.insert(key);
    if (key == "name") hw.name = v.as<std::string>();
    else if (key == "backend") {
      const std::string b = v.as<std::string>();
      if (b == "cuda") hw.backend = PlanBackend::cuda;
      else if (b == "cpu") hw.backend = PlanBackend::cpu;
      else fail(path, ": backend: expected cuda or cpu, got '", b, "'");
    } else if (key == "bf16_tflops") hw.bf16_tflops = number(v, key, path);
    else if (key == "fp32_tflops") hw.fp32_tflops = number(v, key, path);
    else if (key == "fp8_tflops") hw.fp8_tflops = number(v, key, path);
    else if (key == "hbm_gbps") hw.hbm_gbps = number(v, key, path);
    else if (key == "bf16_tflops_sustained") hw.bf16_tflops_sustained = number(v, key, path);
    else if (key == "hbm_gbps_sustained") hw.hbm_gbps_sustained = number(v, key, path);
    else if (key == "memory_gib") hw.memory_gib = number(v, key, path);
    else if (key == "intra_node_gbps") hw.intra_node_gbps = number(v, key, path);
    else if (key == "inter_node_gbps") hw.inter_node_gbps = number(v, key, path);
    else if (key == "gpus_per_node") hw.gpus_per_node = static_cast<int>(number(v, key, path));
    else if (key == "compute_efficiency") hw.compute_efficiency = number(v, key, path);
    else if (key == "comm_efficiency") hw.comm_efficiency = number(v, key, path);
    else if (key == "baseline_mib") hw.baseline_mib = number(v, key, path);
    else if (key == "shared_compute") hw.shared_compute = v.as<bool>();
    else
      fail(path, ": unknown key '", key, "' (known: name, backend, bf16_tflops, fp32_tflops, fp8_tflops, "
           "hbm_gbps, bf16_tflops_sustained, hbm_gbps_sustained, memory_gib, intra_node_gbps, "
           "inter_node_gbps, gpus_per_node, "
           "compute_efficiency, comm_efficiency, baseline_mib, shared_compute)");
  }
  for (const auto& k : required)
    if (!seen.count(k)) fail(path, ": missing key '", k, "'");
  if (hw.gpus_per_node < 1) fail(path, ": gpus_per_node must be >= 1");
  if (hw.fp8_tflops < 0) fail(path, ": fp8_tflops must be >= 0 (0: no fp8 tensor cores)");
  if (hw.bf16_tflops_sustained < 0 || hw.hbm_gbps_sustained < 0)
    fail(path, ": bf16_tflops_sustained and hbm_gbps_sustained must be >= 0");
  if (!(hw.peak_flops() > 0)) fail(path, ": the ", hw.peak_dtype(), " peak must be > 0");
  if (!(hw.memory_gib > 0) || !(hw.intra_node_gbps > 0) || !(hw.inter_node_gbps > 0))
    fail(path, ": memory_gib, intra_node_gbps and inter_node_gbps must be > 0");
  if (!(hw.compute_efficiency > 0 && hw.compute_efficiency <= 1) ||
      !(hw.comm_efficiency > 0 && hw.comm_efficiency <= 1))
    fail(path, ": compute_efficiency and comm_efficiency must be in (0, 1]");
  return hw;
}

void apply_bench_peaks(HardwareSpec& hw, const std::string& json_path) {
  std::ifstream f(json_path);
  if (!f) fail("cannot read bench peaks '", json_path, "'");
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object()) fail(json_path, ": expected a JSON object (trainer bench --out)");
  auto get = [&](const char* key, double& out) {
    if (!j.contains(key)) return;
    if (!j[key].is_number() || !(j[key].get<double>() > 0))
      fail(json_path, ": ", key, ": expected a positive number");
    out = j[key].get<double>();
  };
  get("gemm_flops", hw.measured_gemm_flops);
  get("memcpy_bytes_per_s", hw.measured_memcpy_bytes_per_s);
  get("all_reduce_busbw", hw.measured_all_reduce_busbw);
  get("all_gather_busbw", hw.measured_all_gather_busbw);
  if (hw.measured_all_gather_busbw == 0) hw.measured_all_gather_busbw = hw.measured_all_reduce_busbw;
  if (hw.measured_all_reduce_busbw == 0) hw.measured_all_reduce_busbw = hw.measured_all_gather_busbw;
  hw.peaks_source = json_path;
}

}  // namespace gt
