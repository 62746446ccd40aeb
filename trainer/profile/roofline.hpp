// The roofline report: one function from recorded statistics (ProfileStats)
// and peaks to a table, printed as text and written as JSON. Any backend's
// check script can call it with its own stats and peaks.
//
// Per op row (per profiled step, this rank):
//   calls, ms            how often and how long
//   step%                ms over the mean profiled step time
//   TFLOP/s, GB/s        achieved: FLOPs / time, minimum bytes / time
//   FLOP/B               arithmetic intensity, FLOPs / bytes
//   bound                which roof limits the op at its intensity: compute
//                        when FLOPs / peak FLOP/s >= bytes / peak bandwidth,
//                        else memory
//   %roof                fraction of the roofline reached:
//                        max(FLOPs / peak FLOP/s, bytes / peak B/s) / time,
//                        i.e. the time the op would take at the roof over the
//                        time it took (100% = at the roof)
//   %sheet               the same against the datasheet peaks (with a hardware file)
// Per collective row (axis + kind): calls, MB sent (ring volume), exposed ms
// (blocked in wait) and its step%, in-flight ms (start to completion seen: an
// upper bound on the duration, so busbw = MB / in-flight is a lower bound),
// %roof = that busbw over the bench's busbw (all-reduce against the bench's
// all-reduce, every other kind against its all-gather; none for the scalar
// agreements and barriers, which are latency). Collectives are this rank's view.
// "other" is step time spent in no op and no wait (host work between ops).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/profile/peaks.hpp"
#include "trainer/profile/profiler.hpp"

namespace gt {

struct RooflineContext {
  std::string device = "cpu fp32";
  int rank = 0;
  int world_size = 1;
  // FLOPs of one step over all ranks from model_flops() (0 = no check), and
  // what the GEMM + attention ops recorded, summed over the ranks (0 = this
  // rank's figure times world_size).
  double expected_model_flops_per_step = 0;
  double recorded_model_flops_per_step = 0;
};

struct RooflineRow {
  std::string cls;   // op class name, or "comm"
  std::string name;  // op + shape, "= gemm" for a class subtotal, or "dp all_reduce"
  bool subtotal = false;
  double calls = 0, ms = 0, share = 0;  // per profiled step
  double flops = 0, bytes = 0;          // per profiled step
  double tflops = 0, gbps = 0, intensity = 0;
  std::string bound;         // compute | memory | network
  double roof = -1;          // fraction of the measured roofline; < 0: unknown
  double roof_datasheet = -1;
  double exposed_ms = 0, inflight_ms = 0;  // collectives
};

struct RooflineReport {
  RooflineContext ctx;
  int64_t steps = 0;
  double step_ms = 0;  // mean profiled step
  Peaks measured;
  bool has_datasheet = false;
  Peaks datasheet;
  std::vector<RooflineRow> ops;    // classes in OpClass order, subtotal last in each
  std::vector<RooflineRow> comms;
  double op_ms = 0, exposed_ms = 0, other_ms = 0;
  double other_flops_per_step = 0;  // recorded FLOPs outside GEMM + attention (this rank)
  // Rows above 110% of the measured roof. Compute-bound: the FLOP/s peak is
  // too low for this machine (a quick bench in a busy moment). Memory-bound:
  // usually a working set small enough to run from cache, which the bench's
  // large arrays do not measure.
  std::vector<std::string> above_roof;          // compute-bound rows
  std::vector<std::string> above_memory_roof;   // memory-bound rows
};

RooflineReport build_roofline(const ProfileStats& stats, const Peaks& measured,
                              const Peaks* datasheet, const RooflineContext& ctx);
std::string format_roofline(const RooflineReport& r);
nlohmann::json roofline_json(const RooflineReport& r);

}  // namespace gt
