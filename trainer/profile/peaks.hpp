// Peaks: the denominators of the roofline and of MFU, per rank, in SI units
// (FLOP/s, bytes/s). Two sources:
//   * measured: `trainer bench` (written as JSON, read back with --peaks FILE
//     or profile.peaks), or the quick bench a profiled run does at start;
//   * datasheet: a hardware table configs/hardware/<name>.yaml selected with
//     profile.hardware, with the keys agreed with the planner
//     (`trainer plan`): name, bf16_tflops, fp32_tflops, hbm_gbps,
//     intra_node_gbps, inter_node_gbps, memory_gib (others are ignored).
// A measured peak can only be exceeded by noise; a datasheet peak can be
// wrong for the machine at hand, so metrics carry MFU against both.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "trainer/config/config.hpp"

namespace gt {

struct Peaks {
  std::string source;          // for the report: "bench at start", a file path, ...
  double flops = 0;            // GEMM FLOP/s of the compute dtype, one rank; 0 = unknown
  double mem_bw = 0;           // bytes/s, one rank; 0 = unknown
  double all_reduce_busbw = 0; // bytes/s over the job's ranks; 0 = unknown
  double all_gather_busbw = 0; // bytes/s (also used for reduce-scatter, broadcast, send/recv)
  bool known() const { return flops > 0 && mem_bw > 0; }
  nlohmann::json to_json() const;
};

struct HardwareSpec {
  std::string path;
  std::string name;
  double bf16_tflops = 0, fp32_tflops = 0, hbm_gbps = 0;
  double intra_node_gbps = 0, inter_node_gbps = 0, memory_gib = 0;
  // The datasheet peaks for `dtype`; links: intra-node bandwidth when every
  // rank is on one host, inter-node otherwise (as busbw).
  Peaks peaks(ComputeDType dtype, bool multi_node) const;
};

// Throws gt::Error naming `key` (the config key it came from) and the file.
HardwareSpec load_hardware(const std::string& path, const std::string& key = "profile.hardware");

// The "peaks" object of a `trainer bench` JSON file.
Peaks peaks_from_bench_json(const nlohmann::json& bench, const std::string& source);
Peaks load_peaks_file(const std::string& path, const std::string& key = "profile.peaks");

}  // namespace gt
