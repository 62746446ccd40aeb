// ProfileSession: everything `profile.*` adds to a training run, behind five
// calls from the training loop (trainer.cpp):
//
//   ProfileSession s(cfg, rank);      build(): loads profile.hardware and
//                                     profile.peaks (errors name the key)
//   s.observe(backend);               the profiler observes the backend's ops
//                                     when profile.every > 0
//   s.start(mesh, ops);               collective: observe the mesh's
//                                     communicators, align trace clocks,
//                                     quick bench (profiling without a peaks file)
//   s.begin_step(step) ... s.end_step(record, step_s, tokens)
//                                     per step; adds the metrics fields
//   s.finish(log_dir);                collective: roofline report (rank 0),
//                                     trace_rank{r}.json (every rank)
//
// Metrics added to every metrics.jsonl record:
//   mfu              model FLOPs / (step time x ranks x measured peak); null
//                    without a measured peak (profiling off and no profile.peaks)
//   mfu_datasheet    the same against profile.hardware's peak; null without one
//   mfu_formula      the FLOPs both count: "PaLM 6N+12LTC" (model_flops.hpp)
//   mfu_peak_tflops, mfu_datasheet_peak_tflops
//                    the per-rank peaks they divide by (null where absent)
//   mfu_llmc, mfu_llmc_datasheet
//                    GPT-2 only: the same two by llm.c's 6P+6LCT
//   peak_mem_bytes   this rank's peak memory: the device's when a backend
//                    installs a reader (set_device_peak_memory), else the
//                    process's peak resident set (VmHWM)
//   comm_exposed_ms  time this rank was blocked in communication in the step
// Model FLOPs per step = (6·N + 12·L·T·C) x tokens, model_flops.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/profile/model_flops.hpp"
#include "trainer/profile/peaks.hpp"
#include "trainer/profile/profiler.hpp"

namespace gt {

class DeviceMesh;

// Peak resident set size of this process (VmHWM of /proc/self/status), 0 if
// unreadable.
int64_t host_peak_rss_bytes();

class ProfileSession {
 public:
  // timer: how ops are timed; null = the host steady clock (CPU backend). A
  // GPU backend passes its CUDA-event + NVTX timer (op_timer.hpp).
  ProfileSession(const Config& cfg, int rank, std::unique_ptr<OpTimer> timer = nullptr);
  ~ProfileSession();
  ProfileSession(const ProfileSession&) = delete;
  ProfileSession& operator=(const ProfileSession&) = delete;

  bool profiling() const { return cfg_.profile.every > 0; }
  // When profiling, reports every op of `backend` to the profiler (which
  // records them in profiled steps only); `backend` must outlive the session.
  void observe(Ops& backend);
  void start(DeviceMesh& mesh, Ops& ops);
  void begin_step(int64_t step);
  void end_step(nlohmann::json& record, double step_seconds, int64_t tokens);
  void finish(const std::string& log_dir);

  // A GPU backend's peak allocated bytes (cudaMemGetInfo / its allocator).
  void set_device_peak_memory(std::function<int64_t()> reader) {
    device_peak_ = std::move(reader);
  }
  Profiler& profiler() { return profiler_; }
  const Peaks& measured_peaks() const { return measured_; }

 private:
  Config cfg_;
  int rank_;
  Profiler profiler_;
  ModelFlops model_;
  double llmc_per_token_ = 0;  // llm.c's FLOPs per token (GPT-2), else 0
  Peaks measured_;
  std::optional<HardwareSpec> hardware_;
  Peaks datasheet_;
  DeviceMesh* mesh_ = nullptr;
  std::string device_ = "cpu";
  std::function<int64_t()> device_peak_;
  bool warned_mfu_ = false;
};

}  // namespace gt
