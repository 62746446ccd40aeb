// ProfileSession: the glue between the training loop and the profiler,
// peaks, bench, roofline report and traces (profile_session.hpp).
#include "trainer/profile/profile_session.hpp"

#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "kernels/core/error.hpp"
#include "parallel/mesh.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/metrics_log.hpp"
#include "trainer/profile/bench.hpp"
#include "trainer/profile/roofline.hpp"
#include "trainer/runtime/run_environment.hpp"

namespace gt {

int64_t host_peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream in(line.substr(6));
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
  return 0;
}

ProfileSession::ProfileSession(const Config& cfg, int rank, std::unique_ptr<OpTimer> timer)
    : cfg_(cfg),
      rank_(rank),
      profiler_(ProfileSchedule{cfg.profile.every, cfg.profile.steps},
                cfg.profile.every > 0 && cfg.profile.trace, rank, std::move(timer)),
      model_(model_flops(cfg.model, cfg.train.seq_len)),
      llmc_per_token_(cfg.model.arch == ModelArch::gpt2
                          ? mfu_flops_per_token(cfg.model, cfg.train.seq_len, MfuFormula::llmc)
                          : 0.0) {
  if (!cfg.profile.hardware.empty()) hardware_ = load_hardware(cfg.profile.hardware);
  if (!cfg.profile.peaks.empty()) measured_ = load_peaks_file(cfg.profile.peaks);
}

ProfileSession::~ProfileSession() = default;

void ProfileSession::observe(Ops& backend) {
  if (profiling()) profiler_.observe(backend);
}

void ProfileSession::start(DeviceMesh& mesh, Ops& ops) {
  mesh_ = &mesh;
  device_ = device_name(ops.device());
  // Observed always: comm_exposed_ms is a metric of every step.
  // (Axes of one rank have nothing to wait for.)
  for (MeshAxis a : mesh_split_axes(mesh.dims()))
    if (mesh.axis(a).size() > 1) profiler_.observe(mesh.axis(a));
  if (mesh.world().size() > 1) profiler_.observe(mesh.world());
  const int world = mesh.dims().world_size();
  if (hardware_)
    datasheet_ = hardware_->peaks(cfg_.runtime.dtype,
                                  detect_run_environment().local_size < world);
  if (!profiling()) return;

  if (!measured_.known()) {
    BenchOptions bo;
    bo.quick = true;
    bo.gemm_dtype = cfg_.runtime.dtype == ComputeDType::bf16 ? DType::bf16 : DType::f32;
    const nlohmann::json b = run_bench(ops, &mesh.world(), bo);
    measured_ = peaks_from_bench_json(b, "quick bench at start");
    if (rank_ == 0)
      spdlog::info("profile: quick bench at start ({:.1f} s); `trainer bench --out FILE` and "
                   "profile.peaks=FILE measure more thoroughly",
                   b.value("seconds", 0.0));
  }
  // The trace's time origin: every rank leaves the barrier at about the same time.
  mesh.world().barrier();
  profiler_.set_epoch(Profiler::Clock::now());
  if (rank_ == 0) {
    spdlog::info("profile: {}{}; peaks per rank: {:.4g} TFLOP/s, {:.4g} GB/s [{}]",
                 profiler_.schedule().describe(),
                 profiler_.tracing() ? ", trace on" : "", measured_.flops / 1e12,
                 measured_.mem_bw / 1e9, measured_.source);
    if (hardware_)
      spdlog::info("profile: datasheet {} ({}): {:.4g} TFLOP/s {}, {:.4g} GB/s", hardware_->name,
                   hardware_->path, datasheet_.flops / 1e12, to_string(cfg_.runtime.dtype),
                   datasheet_.mem_bw / 1e9);
  }
}

void ProfileSession::begin_step(int64_t step) { profiler_.begin_step(step); }

void ProfileSession::end_step(nlohmann::json& rec, double step_seconds, int64_t tokens) {
  const Profiler::StepResult r = profiler_.end_step();
  const int world = mesh_ ? mesh_->dims().world_size() : 1;
  const double flops = model_.per_token() * static_cast<double>(tokens);
  auto mfu = [&](const Peaks& p) -> nlohmann::json {
    if (p.flops <= 0 || step_seconds <= 0) return nullptr;
    return flops / (step_seconds * world * p.flops);
  };
  rec["mfu"] = mfu(measured_);
  rec["mfu_datasheet"] = hardware_ ? mfu(datasheet_) : nlohmann::json(nullptr);
  // What the two MFUs divide: the formula and each peak (TFLOP/s per rank).
  auto tflops = [](const Peaks& p) -> nlohmann::json {
    return p.flops > 0 ? nlohmann::json(p.flops / 1e12) : nlohmann::json(nullptr);
  };
  rec["mfu_formula"] = mfu_formula_name(MfuFormula::palm);
  rec["mfu_peak_tflops"] = tflops(measured_);
  rec["mfu_datasheet_peak_tflops"] = hardware_ ? tflops(datasheet_) : nlohmann::json(nullptr);
  if (llmc_per_token_ > 0) {  // GPT-2: llm.c's formula beside it, the same peaks
    const double ratio = llmc_per_token_ / model_.per_token();
    auto scaled = [&](const nlohmann::json& v) -> nlohmann::json {
      return v.is_number() ? nlohmann::json(v.get<double>() * ratio) : nlohmann::json(nullptr);
    };
    rec["mfu_llmc"] = scaled(rec["mfu"]);
    rec["mfu_llmc_datasheet"] = scaled(rec["mfu_datasheet"]);
  }
  rec["peak_mem_bytes"] = device_peak_ ? device_peak_() : host_peak_rss_bytes();
  rec["comm_exposed_ms"] = r.comm_exposed_s * 1e3;
  if (rank_ == 0 && !warned_mfu_ && rec["mfu"].is_number() && rec["mfu"].get<double>() > 1.0) {
    warned_mfu_ = true;
    spdlog::warn("mfu {:.2f} > 1 at step {}: the measured peak ({}) is too low for this "
                 "machine; re-run `trainer bench`", rec["mfu"].get<double>(),
                 rec.value("step", int64_t{-1}), measured_.source);
  }
}

void ProfileSession::finish(const std::string& log_dir) {
  if (!profiling() || !mesh_) return;
  const ProfileStats& stats = profiler_.stats();
  // One collective, on every rank: the GEMM + attention FLOPs of all ranks.
  const double mine = stats.steps > 0 ? stats.total_flops(true) / double(stats.steps) : 0.0;
  const double all = mesh_->world().all_reduce_f64(mine, ReduceOp::sum);
  if (profiler_.tracing())
    profiler_.write_trace(log_dir + "/trace_rank" + std::to_string(rank_) + ".json");
  if (rank_ != 0) return;
  if (stats.steps == 0) {
    spdlog::warn("profile: no step was profiled (train.steps={}, profile.every={}, "
                 "profile.steps={}): no roofline report",
                 cfg_.train.steps, cfg_.profile.every, cfg_.profile.steps);
    return;
  }
  if (profiler_.tracing())
    spdlog::info("profile: traces in {}/trace_rank*.json (one per rank; Perfetto opens them)",
                 log_dir);
  if (!cfg_.profile.report) return;
  RooflineContext ctx;
  ctx.device = device_ + " " + to_string(cfg_.runtime.dtype);
  ctx.rank = rank_;
  ctx.world_size = mesh_->dims().world_size();
  ctx.expected_model_flops_per_step =
      model_.per_token() * double(cfg_.train.global_batch) * cfg_.train.seq_len;
  ctx.recorded_model_flops_per_step = all;
  const RooflineReport report =
      build_roofline(stats, measured_, hardware_ ? &datasheet_ : nullptr, ctx);
  std::cout << format_roofline(report) << std::flush;
  write_file_atomic(log_dir + "/roofline.json", roofline_json(report).dump(2) + "\n");
  spdlog::info("profile: roofline report written to {}/roofline.json", log_dir);
}

}  // namespace gt
