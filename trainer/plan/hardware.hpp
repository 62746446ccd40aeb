// HardwareSpec: what the planner knows about one device kind and how devices
// are wired, read from configs/hardware/<name>.yaml (datasheet figures), and
// optionally corrected by what `trainer bench --out peaks.json` measured.
//
// The figures are per device. Compute the matmuls reach = peak x
// compute_efficiency, unless a bench JSON gives `gemm_flops`, which then
// replaces that product (it is what a real matmul reached). Ring collectives
// reach link bandwidth x comm_efficiency inside a node (or the measured
// `all_reduce_busbw` / `all_gather_busbw`, which replace it) and
// inter_node_gbps x comm_efficiency between nodes.
//
// Unknown keys are errors, like the run config: a typo must not silently fall
// back to a default.
#pragma once

#include <string>

namespace gt {

enum class PlanBackend { cpu, cuda };
const char* to_string(PlanBackend b);

struct HardwareSpec {
  std::string name;          // "NVIDIA H100 SXM5 80GB"
  std::string source;        // the file it came from, for messages
  PlanBackend backend = PlanBackend::cuda;
  double bf16_tflops = 0;    // dense, without sparsity
  double fp8_tflops = 0;     // dense e4m3/e5m2 tensor cores; 0 = none (before sm_89)
  double fp32_tflops = 0;
  double hbm_gbps = 0;       // device memory bandwidth, GB/s (1e9 bytes)
  // Optional: what such a device sustains as read on one (0 = not given):
  // `trainer costs` takes its floors from these before the datasheet's.
  double bf16_tflops_sustained = 0;
  double hbm_gbps_sustained = 0;
  double memory_gib = 0;     // device memory a process can use, GiB (2^30 bytes)
  double intra_node_gbps = 0;  // per device, one direction (NVLink; shared memory on a CPU)
  double inter_node_gbps = 0;  // per device, one direction (400 Gb/s NDR = 50 GB/s)
  int gpus_per_node = 8;     // devices (ranks) per node
  // Assumptions, documented in configs/hardware/README.md.
  double compute_efficiency = 0.5;  // fraction of the peak that the matmuls reach
  double comm_efficiency = 0.8;     // fraction of the link bandwidth that a ring reaches
  double baseline_mib = 0;          // per-process memory before any model buffer
  std::string baseline_source = "assumed in the hardware file";  // or measured
  bool shared_compute = false;      // cpu: the ranks on a node share its cores (peaks are per node)

  // From a bench JSON (0 = not measured).
  double measured_gemm_flops = 0;       // FLOP/s
  double measured_memcpy_bytes_per_s = 0;
  double measured_all_reduce_busbw = 0;  // bytes/s
  double measured_all_gather_busbw = 0;  // bytes/s
  std::string peaks_source;

  // The datasheet peak the MFU is quoted against: bf16 on cuda, fp32 on cpu.
  double peak_flops() const;
  const char* peak_dtype() const { return backend == PlanBackend::cuda ? "bf16" : "fp32"; }
  // FLOP/s one rank's matmuls reach with `ranks_per_node` ranks on its node.
  double achieved_flops(int ranks_per_node) const;
  // Device memory bandwidth one rank gets, bytes/s.
  double memory_bytes_per_s(int ranks_per_node) const;
  // Bus bandwidth of a ring on one link kind, bytes/s (all-gather/reduce-scatter
  // use the all-gather figure, all-reduce its own when measured).
  double intra_busbw(bool all_reduce) const;
  double inter_busbw() const;
  double memory_bytes() const { return memory_gib * 1073741824.0; }
  double baseline_bytes() const { return baseline_mib * 1048576.0; }
  // What the matmuls are assumed to reach: "50% of 989.4 TFLOP/s bf16
  // (compute_efficiency assumed in FILE)" or "612.0 TFLOP/s as measured by bench (FILE)".
  std::string efficiency_note() const;
};

HardwareSpec load_hardware(const std::string& path);
// Adds the bench measurements (keys gemm_flops, memcpy_bytes_per_s,
// all_reduce_busbw, all_gather_busbw; others ignored) to `hw`.
void apply_bench_peaks(HardwareSpec& hw, const std::string& json_path);

}  // namespace gt
