// Reading peaks: hardware tables (YAML) and bench results (JSON), each
// checked key by key with messages that name the config key and the file.
#include "trainer/profile/peaks.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "kernels/core/error.hpp"

namespace gt {

nlohmann::json Peaks::to_json() const {
  auto num = [](double x) { return x > 0 ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"source", source},
          {"gemm_tflops", num(flops / 1e12)},
          {"mem_gbps", num(mem_bw / 1e9)},
          {"all_reduce_busbw_gbps", num(all_reduce_busbw / 1e9)},
          {"all_gather_busbw_gbps", num(all_gather_busbw / 1e9)}};
}

Peaks HardwareSpec::peaks(ComputeDType dtype, bool multi_node) const {
  Peaks p;
  p.source = path + " (" + name + " datasheet)";
  p.flops = (dtype == ComputeDType::bf16 ? bf16_tflops : fp32_tflops) * 1e12;
  p.mem_bw = hbm_gbps * 1e9;
  p.all_reduce_busbw = p.all_gather_busbw = (multi_node ? inter_node_gbps : intra_node_gbps) * 1e9;
  return p;
}

HardwareSpec load_hardware(const std::string& path, const std::string& key) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail(key, "='", path, "': cannot read the hardware file");
  } catch (const YAML::Exception& e) {
    fail(key, "='", path, "': not valid YAML: ", e.what());
  }
  if (!root.IsMap()) fail(key, "='", path, "': expected a map of hardware figures");
  HardwareSpec h;
  h.path = path;
  auto number = [&](const char* k, double* out) {
    const YAML::Node n = root[k];
    if (!n) fail(key, "='", path, "': missing key '", k, "'");
    double v = 0;
    try {
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      fail(key, "='", path, "': ", k, ": expected a number");
    }
    if (!std::isfinite(v) || v <= 0) fail(key, "='", path, "': ", k, "=", v, ": expected > 0");
    *out = v;
  };
  const YAML::Node name = root["name"];
  if (!name || !name.IsScalar()) fail(key, "='", path, "': missing key 'name'");
  h.name = name.Scalar();
  number("bf16_tflops", &h.bf16_tflops);
  number("fp32_tflops", &h.fp32_tflops);
  number("hbm_gbps", &h.hbm_gbps);
  number("intra_node_gbps", &h.intra_node_gbps);
  number("inter_node_gbps", &h.inter_node_gbps);
  number("memory_gib", &h.memory_gib);
  return h;
}

Peaks peaks_from_bench_json(const nlohmann::json& bench, const std::string& source) {
  if (!bench.is_object() || !bench.contains("peaks") || !bench["peaks"].is_object())
    fail(source, ": not a `trainer bench` result (no \"peaks\" object)");
  const nlohmann::json& j = bench["peaks"];
  auto get = [&](const char* k, double scale, bool required) {
    if (!j.contains(k) || j[k].is_null()) {
      if (required) fail(source, ": peaks.", k, " is missing");
      return 0.0;
    }
    if (!j[k].is_number() || !(j[k].get<double>() > 0))
      fail(source, ": peaks.", k, ": expected a number > 0");
    return j[k].get<double>() * scale;
  };
  Peaks p;
  p.source = source;
  p.flops = get("gemm_tflops", 1e12, true);
  p.mem_bw = get("mem_gbps", 1e9, true);
  p.all_reduce_busbw = get("all_reduce_busbw_gbps", 1e9, false);
  p.all_gather_busbw = get("all_gather_busbw_gbps", 1e9, false);
  return p;
}

Peaks load_peaks_file(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  if (!f) fail(key, "='", path, "': cannot read the peaks file (write one with `trainer bench --out`)");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) fail(key, "='", path, "': not valid JSON");
  return peaks_from_bench_json(j, path);
}

}  // namespace gt
