#include "trainer/plan/costs_command.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/core/error.hpp"
#include "parallel/mesh.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/plan/dry_run_mesh.hpp"
#include "trainer/plan/dry_run_ops.hpp"
#include "trainer/plan/hardware.hpp"
#include "trainer/plan/plan_command.hpp"
#include "trainer/profile/model_flops.hpp"
#include "trainer/profile/profiler.hpp"
#include "trainer/runtime/parallelize.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {
namespace {

// The peaks of the three units an op can be bound by, and where they came from.
struct UnitPeaks {
  double tensor_flops = 0;  // bf16 tensor cores, FLOP/s
  // fp8 tensor cores (runtime.fp8's GEMMs), FLOP/s: the datasheet's fp8 peak
  // scaled like the bf16 one (a measured or sustained bf16 rate times the
  // datasheet's fp8/bf16 ratio, an estimate until a GPU measures fp8); 0
  // where the hardware file names none.
  double fp8_flops = 0;
  double fma_flops = 0;     // fp32 FMA (SIMT), FLOP/s
  double hbm_bytes = 0;     // device memory, bytes/s
  std::string source;
};

UnitPeaks unit_peaks(const HardwareSpec& hw) {
  UnitPeaks p;
  p.fma_flops = hw.fp32_tflops * 1e12;
  if (hw.measured_gemm_flops > 0) {
    p.tensor_flops = hw.measured_gemm_flops;
    p.hbm_bytes =
        hw.measured_memcpy_bytes_per_s > 0 ? hw.measured_memcpy_bytes_per_s : hw.hbm_gbps * 1e9;
    p.source = "measured (" + hw.peaks_source + ")";
  } else if (hw.bf16_tflops_sustained > 0 || hw.hbm_gbps_sustained > 0) {
    p.tensor_flops =
        (hw.bf16_tflops_sustained > 0 ? hw.bf16_tflops_sustained : hw.bf16_tflops) * 1e12;
    p.hbm_bytes = (hw.hbm_gbps_sustained > 0 ? hw.hbm_gbps_sustained : hw.hbm_gbps) * 1e9;
    p.source = "sustained (" + hw.source + ")";
  } else {
    p.tensor_flops = hw.bf16_tflops * 1e12;
    p.hbm_bytes = hw.hbm_gbps * 1e9;
    p.source = "datasheet (" + hw.source + ")";
  }
  if (hw.fp8_tflops > 0) p.fp8_flops = p.tensor_flops * hw.fp8_tflops / hw.bf16_tflops;
  return p;
}

struct CostRow {
  std::string cls, name, unit;
  double calls = 0, flops = 0, bytes = 0, floor_s = 0;
};

// The unit an op of class `cls` runs on in the model as it is today. The
// default attention is the SIMT kernels (fp32 math) in either dtype;
// `tc_attention` the tensor-core ones (runtime.attention, bf16), for the
// products: the backward's row dot (context parallelism) is a SIMT kernel
// in either case.
const char* unit_of(const std::string& op, OpClass cls, ComputeDType dtype, bool tc_attention) {
  if (op.rfind("fp8_matmul", 0) == 0) return "tensor fp8";
  if (cls == OpClass::gemm) return dtype == ComputeDType::bf16 ? "tensor bf16" : "fma fp32";
  if (cls == OpClass::attention)
    return tc_attention && op.rfind("attention_row_dot", 0) != 0 ? "tensor bf16" : "fma fp32";
  return "memory";
}

double unit_flops(const std::string& unit, const UnitPeaks& p) {
  if (unit == "tensor fp8") return p.fp8_flops;
  return unit == "tensor bf16" ? p.tensor_flops : p.fma_flops;
}

// What the attention kernels spend beyond the formula, per row of the
// table: the backward's extra bytes (its three kernels; CudaTraffic holds
// them, with the CUDA backend's saved and scratch sizes, B*NH*T each), and
// the tensor-core kernels' repeated products (op_costs.hpp). The shape comes
// back from the profiler's row name.
struct KnownExtra {
  double flops = 0, bytes = 0;
};
KnownExtra known_extra(const OpStat& s, const Ops& ops, ComputeDType dtype, bool tc_attention) {
  // Attention over blocks: the row's FLOPs sum each call's visible pairs,
  // and the tensor-core backward repeats a fixed share of them.
  if (s.name.rfind("attention_block_backward", 0) == 0)
    return {tc_attention ? s.flops * op_cost::kAttentionBlockTcBackwardExtraShare : 0.0, 0.0};
  const bool fwd = s.name.rfind("attention_forward", 0) == 0;
  const bool bwd = s.name.rfind("attention_backward", 0) == 0;
  if (!fwd && !bwd) return {};
  long long B = 0, NH = 0, T = 0, hs = 0;
  const size_t prefix = std::string(fwd ? "attention_forward" : "attention_backward").size();
  if (std::sscanf(s.name.c_str() + prefix, " B=%lld NH=%lld T=%lld hs=%lld", &B, &NH, &T, &hs) != 4)
    fail("costs: cannot read the shape of '", s.name, "'");
  const int b = static_cast<int>(B), nh = static_cast<int>(NH), t = static_cast<int>(T);
  const double n = static_cast<double>(s.count);
  KnownExtra e;
  if (tc_attention) e.flops = n * op_cost::attention_tc_kernel_extra_flops(B, NH, T, hs, bwd);
  if (bwd)
    e.bytes = n * op_cost::attention_backward_kernel_extra_bytes(
                      B, NH, T, hs, ops.attention_saved_elems(b, nh, t),
                      ops.attention_scratch_elems(b, nh, t), dtype == ComputeDType::bf16 ? 2 : 4);
  return e;
}

std::string fixed(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

}  // namespace

int run_costs_command(const CostsArgs& a) {
  if (a.config.empty() || a.hardware.empty()) fail("costs needs --config FILE and --hardware FILE");
  const Config cfg = load_config(a.config, a.overrides);
  HardwareSpec hw = load_hardware(a.hardware);
  if (!a.peaks.empty()) apply_bench_peaks(hw, a.peaks);
  const ParallelConfig& pc = cfg.parallel;
  if (pc.pp * pc.dp * pc.fsdp * pc.tp != 1)
    fail("costs: one data, tensor and pipeline rank only for now (parallel.pp x dp x fsdp x tp = ",
         pc.pp * pc.dp * pc.fsdp * pc.tp,
         "); the table of such a layout is not implemented yet (parallel.cp runs one cp rank)");
  const UnitPeaks peaks = unit_peaks(hw);
  if (cfg.runtime.fp8 != Fp8Recipe::off && !(peaks.fp8_flops > 0))
    fail("costs: runtime.fp8=", to_string(cfg.runtime.fp8), " but ", a.hardware,
         " gives no fp8_tflops: ", hw.name,
         " has no fp8 tensor cores (fp8 GEMMs need sm_89 or newer: Ada, Hopper)");
  const TrainConfig& tc = cfg.train;
  // The trainer's choice of attention kernels (runtime.attention).
  const bool tc_attention = uses_tensor_core_attention(cfg);
  const int B = tc.micro_batch, T = tc.seq_len, accum = cfg.grad_accum_steps();
  // Under context parallelism the table is one cp rank's step: its T / cp
  // rows of each sequence, its attention over blocks and the collectives
  // it would start, on a mesh whose other ranks are not there
  // (dry_run_mesh.hpp). The last cp rank: with balanced chunks every rank
  // does the same work, without them it holds the last chunk, which
  // attends to the most keys (the step waits for it).
  const ParallelDims dims = ParallelDims::validated(1, 1, 1, pc.cp, 1, pc.cp);
  MeshCoord slowest;
  slowest.cp = pc.cp - 1;
  const int cp_rank = slowest.cp, Tl = T / pc.cp;

  // One optimizer step of the real model on the dry-run backend, recorded.
  const std::unique_ptr<Ops> ops = make_dry_run_ops();
  Profiler profiler(ProfileSchedule{1, 1}, false, 0);
  profiler.observe(*ops);  // detached by ~Profiler, before ops goes
  const DeviceMesh mesh = pc.cp == 1 ? DeviceMesh::in_process()
                                     : make_dry_run_mesh(dims, mesh_rank_of(dims, slowest));
  double model_flops_step = 0;
  std::map<std::string, double> comm_bytes;  // per mesh axis, what this rank would send
  {
    const ParallelModel pm =
        parallelize(cfg.model, parallel_plan(cfg), mesh, *ops, {B, T, tc.recompute});
    ShardedParameters& params = *pm.params;
    StepRunner& runner = *pm.runner;
    // Loading leaves the parameters' bf16 copy to be cast once by the first
    // forward; in a steady step AdamW writes it, so that cast stays out of
    // the recorded step.
    params.begin_forward(false);
    for (MeshAxis a : mesh_split_axes(dims)) mesh.axis(a).reset_bytes();
    profiler.begin_step(0);
    // The trainer's step: the micro-batches (token 0 everywhere: the
    // dry run computes nothing), then clipped AdamW, and the loss averaged
    // over the sequence's cp ranks as the trainer does.
    runner.train(
        accum,
        [&](int, int32_t* tokens, int32_t* targets) {
          std::fill_n(tokens, static_cast<size_t>(B) * Tl, 0);
          std::fill_n(targets, static_cast<size_t>(B) * Tl, 0);
        },
        1.f / static_cast<float>(B * T * accum));
    params.clipped_adamw_step(tc, tc.lr, 1, runner.pending_loss_sums());
    const double loss = runner.take_loss();
    if (pc.cp > 1) (void)mesh.cp().all_reduce_f64(loss, ReduceOp::sum);
    profiler.end_step();
    for (MeshAxis a : mesh_split_axes(dims))
      if (mesh.axis(a).bytes_sent() > 0) comm_bytes[mesh_axis_name(a)] = mesh.axis(a).bytes_sent();
    // The model FLOPs of this rank's share of the job (1/cp of it).
    model_flops_step = model_flops(cfg.model, T).per_token() *
                       static_cast<double>(tc.global_batch) * T / pc.cp;
  }

  // Rows, by class in OpClass order, the most expensive first within a class.
  std::vector<CostRow> rows;
  std::map<std::string, CostRow> subtotal;
  double step_s = 0, gemm_flops = 0, non_gemm_bytes = 0, non_gemm_s = 0;
  for (const OpStat& s : profiler.stats().ops) {
    CostRow r;
    r.cls = op_class_name(s.cls);
    r.name = s.name;
    r.unit = unit_of(s.name, s.cls, cfg.runtime.dtype, tc_attention);
    r.calls = static_cast<double>(s.count);
    const KnownExtra extra = known_extra(s, *ops, cfg.runtime.dtype, tc_attention);
    r.flops = s.flops + extra.flops;
    r.bytes = s.bytes + extra.bytes;
    r.floor_s = std::max(r.flops / unit_flops(r.unit, peaks), r.bytes / peaks.hbm_bytes);
    step_s += r.floor_s;
    if (s.cls == OpClass::gemm) {
      gemm_flops += r.flops;
    } else {
      non_gemm_bytes += r.bytes;
      non_gemm_s += r.floor_s;
    }
    CostRow& t = subtotal[r.cls];
    t.cls = r.cls;
    t.name = "= " + r.cls;
    t.calls += r.calls;
    t.flops += r.flops;
    t.bytes += r.bytes;
    t.floor_s += r.floor_s;
    rows.push_back(r);
  }
  std::vector<CostRow> ordered;
  for (int c = 0; c < kNumOpClasses; ++c) {
    const std::string cls = op_class_name(static_cast<OpClass>(c));
    std::vector<CostRow> mine;
    for (const CostRow& r : rows)
      if (r.cls == cls) mine.push_back(r);
    if (mine.empty()) continue;
    std::stable_sort(mine.begin(), mine.end(),
                     [](const CostRow& x, const CostRow& y) { return x.floor_s > y.floor_s; });
    ordered.insert(ordered.end(), mine.begin(), mine.end());
    ordered.push_back(subtotal[cls]);
  }

  std::ostringstream o;
  o << "# costs: " << cfg.source << ", one optimizer step (B=" << B << ", T=" << T << ", " << accum
    << " micro-batch(es), runtime.dtype="
    << (cfg.runtime.dtype == ComputeDType::bf16 ? "bf16" : "fp32")
    << ") as the CUDA backend runs it, on " << hw.name << "\n";
  if (pc.cp > 1) {
    o << "# context parallelism: cp rank " << cp_rank << " of parallel.cp=" << pc.cp << " ("
      << Tl << " of each sequence's " << T << " rows, cp_comm=" << to_string(pc.cp_comm)
      << (pc.cp_load_balance ? ", load-balanced: every cp rank does this work"
                             : ", not load-balanced: the last chunk's rank, the slowest")
      << "); it would send";
    for (const auto& [axis, bytes] : comm_bytes) o << " " << fixed(bytes / 1e9, 3) << " GB on " << axis;
    o << " per step\n";
  }
  o
    << "# peaks, " << peaks.source << ": tensor bf16 " << fixed(peaks.tensor_flops / 1e12, 1)
    << " TFLOP/s, "
    << (peaks.fp8_flops > 0 ? "tensor fp8 " + fixed(peaks.fp8_flops / 1e12, 1) + " TFLOP/s, " : "")
    << "fma fp32 " << fixed(peaks.fma_flops / 1e12, 1) << " TFLOP/s, HBM "
    << fixed(peaks.hbm_bytes / 1e9, 0) << " GB/s\n"
    << "# bytes: trainer/profile/op_costs.hpp's formulas, held to the bytes the kernels move "
       "on the emulated device (CudaTraffic); GEMM bytes at each operand's element size "
       "(cuBLASLt is not counted; they never set a GEMM's floor)\n"
    << "# floor = max(FLOPs / unit peak, bytes / HBM); step floor = the sum (one stream)\n";
  if (cfg.runtime.fp8 != Fp8Recipe::off)
    o << "# fp8 (runtime.fp8=" << to_string(cfg.runtime.fp8)
      << "): each fp8_matmul's bytes include its quantising casts as separate passes (operand "
         "read, fp8 written and read back); its amaxes are the fp8_amax rows\n";
  const bool wgmma_attention = uses_wgmma_attention(cfg);
  o << (wgmma_attention ? "# attention: the sm_90 (wgmma) forward and the tensor-core backward "
                          "(runtime.attention=wgmma), the backward's S and dP computed twice\n"
        : tc_attention  ? "# attention: the tensor-core kernels (runtime.attention), with the "
                          "backward's S and dP products computed twice\n"
                     : "# attention: the SIMT kernels (fp32 math; runtime.attention=simt, or "
                       "fp32, or a head size the tensor-core ones do not take)\n");
  char line[512];
  std::snprintf(line, sizeof line, "%-14s %-52s %6s %11s %10s %-12s %9s %6s\n", "class", "op",
                "calls", "GFLOP", "MB", "unit", "floor ms", "step%");
  o << line;
  for (const CostRow& r : ordered) {
    const std::string name = r.name.size() <= 52 ? r.name : r.name.substr(0, 51) + "~";
    std::snprintf(line, sizeof line, "%-14s %-52s %6.0f %11.2f %10.1f %-12s %9.3f %6.1f\n",
                  r.cls.c_str(), name.c_str(), r.calls, r.flops / 1e9, r.bytes / 1e6,
                  r.name.rfind("= ", 0) == 0 ? "" : r.unit.c_str(), r.floor_s * 1e3,
                  step_s > 0 ? 100.0 * r.floor_s / step_s : 0.0);
    o << line;
  }
  o << "\nstep floor " << fixed(step_s * 1e3, 2) << " ms (" << fixed(gemm_flops / 1e12, 2)
    << " TFLOP of GEMMs, the padded vocabulary's rows included; model FLOPs 6N + 12LTC = "
    << fixed(model_flops_step / 1e12, 2) << " TFLOP" << (pc.cp > 1 ? " of this cp rank's share" : "")
    << "); non-GEMM: " << fixed(non_gemm_bytes / 1e9, 2)
    << " GB of traffic, " << fixed(non_gemm_s * 1e3, 2) << " ms of the floor\n";

  nlohmann::json j;
  j["config"] = cfg.source;
  j["hardware"] = hw.name;
  j["peaks"] = {{"source", peaks.source},
                {"tensor_bf16_flops", peaks.tensor_flops},
                {"tensor_fp8_flops", peaks.fp8_flops},
                {"fma_fp32_flops", peaks.fma_flops},
                {"hbm_bytes_per_s", peaks.hbm_bytes}};
  j["step_floor_ms"] = step_s * 1e3;
  j["gemm_flops"] = gemm_flops;
  j["model_flops"] = model_flops_step;
  j["non_gemm_bytes"] = non_gemm_bytes;
  j["non_gemm_floor_ms"] = non_gemm_s * 1e3;
  j["attention"] = wgmma_attention ? "wgmma" : tc_attention ? "tensor_cores" : "simt";
  j["fp8"] = to_string(cfg.runtime.fp8);
  if (pc.cp > 1) {
    j["cp"] = {{"cp", pc.cp},
               {"rank", cp_rank},
               {"rows", Tl},
               {"cp_comm", to_string(pc.cp_comm)},
               {"cp_load_balance", pc.cp_load_balance}};
    j["comm_bytes"] = comm_bytes;
  }
  j["ops"] = nlohmann::json::array();
  for (const CostRow& r : ordered)
    j["ops"].push_back({{"class", r.cls},
                        {"name", r.name},
                        {"subtotal", r.name.rfind("= ", 0) == 0},
                        {"unit", r.unit},
                        {"calls", r.calls},
                        {"flops", r.flops},
                        {"bytes", r.bytes},
                        {"floor_ms", r.floor_s * 1e3}});
  print_report(o.str(), j, a.json);
  return 0;
}

}  // namespace gt
