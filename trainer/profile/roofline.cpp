// Building, printing and serialising the roofline report (roofline.hpp).
#include "trainer/profile/roofline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace gt {

namespace {

// Time at the roof over the time taken; the limiting roof's name in *bound.
double roof_fraction(double flops, double bytes, double seconds, const Peaks& p,
                     std::string* bound) {
  if (!p.known() || seconds <= 0) return -1;
  const double t_compute = flops / p.flops, t_memory = bytes / p.mem_bw;
  if (bound) *bound = t_compute >= t_memory ? "compute" : "memory";
  return std::max(t_compute, t_memory) / seconds;
}

double peak_busbw(const Peaks& p, CommKind k) {
  return k == CommKind::all_reduce ? p.all_reduce_busbw : p.all_gather_busbw;
}

void fill_op_row(RooflineRow& row, double n_steps, double step_s, double calls, double seconds,
                 double flops, double bytes, const Peaks& measured, const Peaks* sheet) {
  row.calls = calls / n_steps;
  row.ms = seconds / n_steps * 1e3;
  row.share = step_s > 0 ? (seconds / n_steps) / step_s : 0;
  row.flops = flops / n_steps;
  row.bytes = bytes / n_steps;
  row.tflops = seconds > 0 ? flops / seconds / 1e12 : 0;
  row.gbps = seconds > 0 ? bytes / seconds / 1e9 : 0;
  row.intensity = bytes > 0 ? flops / bytes : 0;
  row.roof = roof_fraction(flops, bytes, seconds, measured, &row.bound);
  if (sheet) {
    std::string sheet_bound;
    row.roof_datasheet = roof_fraction(flops, bytes, seconds, *sheet, &sheet_bound);
    if (row.bound.empty()) row.bound = sheet_bound;
  }
}

std::string num(double x) {
  char buf[32];
  const double a = std::fabs(x);
  if (a == 0) return "0";
  if (a >= 100) std::snprintf(buf, sizeof buf, "%.0f", x);
  else if (a >= 10) std::snprintf(buf, sizeof buf, "%.1f", x);
  else if (a >= 1) std::snprintf(buf, sizeof buf, "%.2f", x);
  else std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// Calls per step: whole numbers as such.
std::string calls(double x) {
  if (std::fabs(x - std::round(x)) < 1e-9) return std::to_string(static_cast<long long>(std::round(x)));
  return num(x);
}

std::string pct(double f) {
  if (f < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * f);
  return buf;
}

// The %sheet column: right-aligned under its 8-character header.
std::string sheet_cell(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, " %7s", pct(f).c_str());
  return buf;
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

nlohmann::json maybe(double x) { return x >= 0 ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

RooflineReport build_roofline(const ProfileStats& stats, const Peaks& measured,
                              const Peaks* datasheet, const RooflineContext& ctx) {
  RooflineReport r;
  r.ctx = ctx;
  r.steps = stats.steps;
  r.measured = measured;
  r.has_datasheet = datasheet != nullptr;
  if (datasheet) r.datasheet = *datasheet;
  if (stats.steps == 0) return r;
  const double n = static_cast<double>(stats.steps);
  const double step_s = stats.step_seconds / n;
  r.step_ms = step_s * 1e3;

  for (int c = 0; c < kNumOpClasses; ++c) {
    const OpClass cls = static_cast<OpClass>(c);
    std::vector<RooflineRow> rows;
    double calls = 0, secs = 0, flops = 0, bytes = 0;
    for (const OpStat& s : stats.ops) {
      if (s.cls != cls) continue;
      RooflineRow row;
      row.cls = op_class_name(cls);
      row.name = s.name;
      fill_op_row(row, n, step_s, double(s.count), s.seconds, s.flops, s.bytes, measured,
                  datasheet);
      rows.push_back(row);
      calls += double(s.count);
      secs += s.seconds;
      flops += s.flops;
      bytes += s.bytes;
    }
    if (rows.empty()) continue;
    std::sort(rows.begin(), rows.end(),
              [](const RooflineRow& a, const RooflineRow& b) { return a.ms > b.ms; });
    r.ops.insert(r.ops.end(), rows.begin(), rows.end());
    RooflineRow total;
    total.cls = op_class_name(cls);
    total.name = std::string("= ") + op_class_name(cls);
    total.subtotal = true;
    fill_op_row(total, n, step_s, calls, secs, flops, bytes, measured, datasheet);
    r.ops.push_back(total);
    r.op_ms += total.ms;
    if (!is_model_flops_class(cls)) r.other_flops_per_step += total.flops;
  }

  for (const CommStat& s : stats.comms) {
    RooflineRow row;
    row.cls = "comm";
    row.name = s.axis + " " + comm_kind_name(s.kind);
    row.calls = double(s.count) / n;
    row.bytes = s.bytes / n;
    row.exposed_ms = s.exposed_s / n * 1e3;
    row.ms = row.exposed_ms;
    row.inflight_ms = s.inflight_s / n * 1e3;
    row.share = step_s > 0 ? (s.exposed_s / n) / step_s : 0;
    row.bound = "network";
    // Scalar agreements and barriers are latency, not bandwidth: no busbw.
    const bool latency_only = s.kind == CommKind::scalar_reduce || s.kind == CommKind::barrier;
    if (!latency_only && s.inflight_s > 0 && s.bytes > 0) {
      row.gbps = s.bytes / s.inflight_s / 1e9;
      const double peak = peak_busbw(measured, s.kind);
      if (peak > 0) row.roof = row.gbps * 1e9 / peak;
      if (datasheet && peak_busbw(*datasheet, s.kind) > 0)
        row.roof_datasheet = row.gbps * 1e9 / peak_busbw(*datasheet, s.kind);
    }
    r.exposed_ms += row.exposed_ms;
    r.comms.push_back(row);
  }
  std::sort(r.comms.begin(), r.comms.end(),
            [](const RooflineRow& a, const RooflineRow& b) { return a.ms > b.ms; });
  for (const auto* rows : {&r.ops, &r.comms})
    for (const RooflineRow& row : *rows)
      if (!row.subtotal && row.roof > 1.1)
        (row.bound == "memory" ? r.above_memory_roof : r.above_roof).push_back(row.name);
  r.other_ms = std::max(0.0, r.step_ms - r.op_ms - r.exposed_ms);
  if (r.ctx.recorded_model_flops_per_step <= 0)
    r.ctx.recorded_model_flops_per_step = stats.total_flops(true) / n * ctx.world_size;
  return r;
}

std::string format_roofline(const RooflineReport& r) {
  std::string out;
  char line[512];
  if (r.steps == 0) return "roofline: no step was profiled\n";
  std::snprintf(line, sizeof line,
                "roofline: %lld profiled step(s), %s ms per step (rank %d of %d, %s)\n",
                static_cast<long long>(r.steps), num(r.step_ms).c_str(), r.ctx.rank,
                r.ctx.world_size, r.ctx.device.c_str());
  out += line;
  auto peak_line = [&](const char* what, const Peaks& p) {
    std::snprintf(line, sizeof line,
                  "%s peaks per rank: %s TFLOP/s, %s GB/s memory, busbw %s / %s GB/s "
                  "(all-reduce / all-gather) [%s]\n",
                  what, p.flops > 0 ? num(p.flops / 1e12).c_str() : "?",
                  p.mem_bw > 0 ? num(p.mem_bw / 1e9).c_str() : "?",
                  p.all_reduce_busbw > 0 ? num(p.all_reduce_busbw / 1e9).c_str() : "-",
                  p.all_gather_busbw > 0 ? num(p.all_gather_busbw / 1e9).c_str() : "-",
                  p.source.c_str());
    out += line;
  };
  peak_line("measured", r.measured);
  if (r.has_datasheet) peak_line("datasheet", r.datasheet);

  size_t w = 24;
  for (const auto& row : r.ops) w = std::max(w, row.name.size() + 4);
  for (const auto& row : r.comms) w = std::max(w, row.name.size() + 4);
  w = std::min<size_t>(w, 64);
  const int W = static_cast<int>(w);
  const bool sheet = r.has_datasheet;

  std::snprintf(line, sizeof line, "%-*s %7s %9s %6s %9s %9s %8s %-8s %7s%s\n", W, "op",
                "calls", "ms", "step%", "TFLOP/s", "GB/s", "FLOP/B", "bound", "%roof",
                sheet ? "  %sheet" : "");
  out += line;
  std::string cls;
  for (const auto& row : r.ops) {
    if (row.cls != cls) {
      cls = row.cls;
      out += cls + "\n";
    }
    const std::string name = (row.subtotal ? "  " : "    ") + row.name;
    std::snprintf(line, sizeof line, "%-*s %7s %9s %6s %9s %9s %8s %-8s %7s", W,
                  name.substr(0, w).c_str(), calls(row.calls).c_str(), num(row.ms).c_str(),
                  pct(row.share).c_str(), num(row.tflops).c_str(), num(row.gbps).c_str(),
                  num(row.intensity).c_str(), row.bound.c_str(), pct(row.roof).c_str());
    out += line;
    if (sheet) out += sheet_cell(row.roof_datasheet);
    out += "\n";
  }
  if (!r.comms.empty()) {
    std::snprintf(line, sizeof line,
                  "%-*s %7s %9s %6s %9s %9s %8s %-8s %7s%s\n", W,
                  "comm (rank's view)", "calls", "exposed", "step%", "in-flight", "MB",
                  "busbw", "", "%roof", sheet ? "  %sheet" : "");
    out += line;
    for (const auto& row : r.comms) {
      const std::string name = "    " + row.name;
      std::snprintf(line, sizeof line, "%-*s %7s %9s %6s %9s %9s %8s %-8s %7s", W,
                    name.substr(0, w).c_str(), calls(row.calls).c_str(),
                    num(row.exposed_ms).c_str(), pct(row.share).c_str(),
                    num(row.inflight_ms).c_str(), num(row.bytes / 1e6).c_str(),
                    row.gbps > 0 ? num(row.gbps).c_str() : "-", "", pct(row.roof).c_str());
      out += line;
      if (sheet) out += sheet_cell(row.roof_datasheet);
      out += "\n";
    }
  }
  std::snprintf(line, sizeof line, "%-*s %7s %9s %6s\n", W, "other (no op, no wait)", "",
                num(r.other_ms).c_str(), pct(r.step_ms > 0 ? r.other_ms / r.step_ms : 0).c_str());
  out += line;
  std::snprintf(line, sizeof line,
                "ms = per step; comm: exposed = blocked in wait, in-flight = start to completion "
                "seen (upper bound), busbw = MB / in-flight in GB/s (lower bound)\n");
  out += line;
  const double want = r.ctx.expected_model_flops_per_step;
  const double got = r.ctx.recorded_model_flops_per_step;
  if (want > 0) {
    std::snprintf(line, sizeof line,
                  "model FLOPs per step: %s recorded (gemm + attention, all ranks) vs %s from "
                  "6*N*tokens + 12*L*T*C*tokens: ratio %.4f\n",
                  sci(got).c_str(), sci(want).c_str(), got / want);
    out += line;
  }
  const double here = r.ctx.recorded_model_flops_per_step / std::max(1, r.ctx.world_size);
  std::snprintf(line, sizeof line,
                "other ops' FLOPs per step (this rank): %s (%.2f%% of its gemm + attention)\n",
                sci(r.other_flops_per_step).c_str(),
                here > 0 ? 100.0 * r.other_flops_per_step / here : 0.0);
  out += line;
  if (!r.above_roof.empty()) {
    std::snprintf(line, sizeof line,
                  "warning: %zu row(s) above 110%% of the measured roof (first: %s): the peaks "
                  "[%s] are too low for this machine; measure them with `trainer bench --out "
                  "FILE` on a quiet machine and pass --peaks FILE\n",
                  r.above_roof.size(), r.above_roof.front().c_str(), r.measured.source.c_str());
    out += line;
  }
  if (!r.above_memory_roof.empty()) {
    std::snprintf(line, sizeof line,
                  "note: %zu memory-bound row(s) above 110%% of the measured bandwidth (first: "
                  "%s): their working sets fit in cache; the bench measures memory with large "
                  "arrays\n",
                  r.above_memory_roof.size(), r.above_memory_roof.front().c_str());
    out += line;
  }
  return out;
}

nlohmann::json roofline_json(const RooflineReport& r) {
  using nlohmann::json;
  auto row_json = [&](const RooflineRow& row) {
    json j = {{"class", row.cls},
              {"name", row.name},
              {"subtotal", row.subtotal},
              {"calls_per_step", row.calls},
              {"ms_per_step", row.ms},
              {"step_share", row.share},
              {"flops_per_step", row.flops},
              {"bytes_per_step", row.bytes},
              {"tflops", row.tflops},
              {"gbps", row.gbps},
              {"flop_per_byte", row.intensity},
              {"bound", row.bound},
              {"fraction_of_roofline", maybe(row.roof)},
              {"fraction_of_datasheet", r.has_datasheet ? maybe(row.roof_datasheet) : json()}};
    if (row.cls == "comm") {
      j["exposed_ms_per_step"] = row.exposed_ms;
      j["in_flight_ms_per_step"] = row.inflight_ms;
      j["overlapped_ms_per_step_upper_bound"] = std::max(0.0, row.inflight_ms - row.exposed_ms);
      j["busbw_gbps_lower_bound"] = row.gbps;
    }
    return j;
  };
  json ops = json::array(), comms = json::array();
  for (const auto& row : r.ops) ops.push_back(row_json(row));
  for (const auto& row : r.comms) comms.push_back(row_json(row));
  return {{"rank", r.ctx.rank},
          {"world_size", r.ctx.world_size},
          {"device", r.ctx.device},
          {"profiled_steps", r.steps},
          {"step_ms", r.step_ms},
          {"op_ms_per_step", r.op_ms},
          {"comm_exposed_ms_per_step", r.exposed_ms},
          {"other_ms_per_step", r.other_ms},
          {"peaks", r.measured.to_json()},
          {"datasheet", r.has_datasheet ? r.datasheet.to_json() : json()},
          {"ops", ops},
          {"comms", comms},
          {"model_flops_per_step",
           {{"recorded_all_ranks", r.ctx.recorded_model_flops_per_step},
            {"expected", r.ctx.expected_model_flops_per_step},
            {"formula", "6*N*tokens + 12*L*T*C*tokens, N = matmul weights incl. the LM head"}}},
          {"other_flops_per_step_this_rank", r.other_flops_per_step},
          {"rows_above_measured_roof", r.above_roof},
          {"memory_rows_above_measured_bandwidth", r.above_memory_roof},
          {"notes",
           "ops and collectives are rank " + std::to_string(r.ctx.rank) +
               "'s; collective time is the exposed (blocked) part, in-flight an upper bound"}};
}

}  // namespace gt
