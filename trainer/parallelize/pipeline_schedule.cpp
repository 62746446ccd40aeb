#include "trainer/parallelize/pipeline_schedule.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

const char* to_string(PipeOp op) {
  switch (op) {
    case PipeOp::forward:
      return "forward";
    case PipeOp::backward:
      return "backward";
    case PipeOp::send_act:
      return "send_act";
    case PipeOp::recv_act:
      return "recv_act";
    case PipeOp::send_grad:
      return "send_grad";
    case PipeOp::recv_grad:
      return "recv_grad";
  }
  return "?";
}

std::string PipeAction::str() const {
  const std::string at = std::to_string(micro) + "@s" + std::to_string(stage);
  switch (op) {
    case PipeOp::forward:
      return "F" + at;
    case PipeOp::backward:
      return "B" + at;
    case PipeOp::send_act:
    case PipeOp::send_grad:
      return std::string(to_string(op)) + " " + at + " to " + std::to_string(peer);
    case PipeOp::recv_act:
    case PipeOp::recv_grad:
      return std::string(to_string(op)) + " " + at + " from " + std::to_string(peer);
  }
  return "?";
}

namespace {

// One compute step of a rank, before communication is added.
struct Compute {
  bool forward;
  int micro, chunk;
};

void check_spec(const PipeScheduleSpec& s) {
  if (s.stages < 1) fail("pipeline schedule: parallel.pp=", s.stages, " must be >= 1");
  if (s.micro_batches < 1)
    fail("pipeline schedule: ", s.micro_batches, " micro-batches per step; expected >= 1");
  if (s.virtual_stages < 1)
    fail("pipeline schedule: parallel.pp_virtual_stages=", s.virtual_stages, " must be >= 1");
  if (s.kind != PipeSchedule::interleaved_1f1b && s.virtual_stages != 1)
    fail("pipeline schedule: parallel.pp_virtual_stages=", s.virtual_stages, " applies to ",
         "interleaved_1f1b only, got parallel.pp_schedule=", to_string(s.kind));
  if (s.kind == PipeSchedule::interleaved_1f1b && s.micro_batches % s.stages != 0)
    fail("pipeline schedule: interleaved_1f1b runs micro-batches in groups of parallel.pp=",
         s.stages, "; got ", s.micro_batches, " micro-batches per step, not a multiple of it");
}

// The order of a rank's compute steps under each schedule.
std::vector<Compute> compute_order(const PipeScheduleSpec& s, int rank) {
  const int p = s.stages, m = s.micro_batches, v = s.virtual_stages;
  std::vector<Compute> out;
  switch (s.kind) {
    case PipeSchedule::gpipe:
      for (int j = 0; j < m; ++j) out.push_back({true, j, 0});
      for (int j = 0; j < m; ++j) out.push_back({false, j, 0});
      break;
    case PipeSchedule::one_f_one_b: {
      const int warmup = std::min(p - rank - 1, m);
      for (int j = 0; j < warmup; ++j) out.push_back({true, j, 0});
      for (int i = 0; i < m - warmup; ++i) {
        out.push_back({true, warmup + i, 0});
        out.push_back({false, i, 0});
      }
      for (int j = m - warmup; j < m; ++j) out.push_back({false, j, 0});
      break;
    }
    case PipeSchedule::interleaved_1f1b: {
      // The k-th forward (backward) runs micro (k / (p v)) p + k % p on chunk
      // (k / p) % v (chunk v - 1 - (k / p) % v): groups of p micro-batches
      // sweep the chunks forward, and backward in the reverse chunk order.
      const int K = m * v;
      auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
      auto fchunk = [&](int k) { return (k / p) % v; };
      auto bchunk = [&](int k) { return v - 1 - (k / p) % v; };
      const int warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, K);
      for (int k = 0; k < warmup; ++k) out.push_back({true, micro(k), fchunk(k)});
      for (int i = 0; i < K - warmup; ++i) {
        out.push_back({true, micro(warmup + i), fchunk(warmup + i)});
        out.push_back({false, micro(i), bchunk(i)});
      }
      for (int k = K - warmup; k < K; ++k) out.push_back({false, micro(k), bchunk(k)});
      break;
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<PipeAction>> build_pipeline_schedule(const PipeScheduleSpec& spec) {
  check_spec(spec);
  const int p = spec.stages, S = p * spec.virtual_stages;
  std::vector<std::vector<PipeAction>> lists(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& list = lists[static_cast<size_t>(r)];
    for (const Compute& c : compute_order(spec, r)) {
      const int s = c.chunk * p + r;
      if (c.forward) {
        if (s > 0) list.push_back({PipeOp::recv_act, c.micro, s, stage_rank(s - 1, p)});
        list.push_back({PipeOp::forward, c.micro, s, -1});
        if (s < S - 1) list.push_back({PipeOp::send_act, c.micro, s + 1, stage_rank(s + 1, p)});
      } else {
        if (s < S - 1) list.push_back({PipeOp::recv_grad, c.micro, s, stage_rank(s + 1, p)});
        list.push_back({PipeOp::backward, c.micro, s, -1});
        if (s > 0) list.push_back({PipeOp::send_grad, c.micro, s - 1, stage_rank(s - 1, p)});
      }
    }
  }
  return lists;
}

double pipeline_bubble_fraction(const PipeScheduleSpec& spec) {
  check_spec(spec);
  const double p = spec.stages, m = spec.micro_batches;
  const double v = spec.kind == PipeSchedule::interleaved_1f1b ? spec.virtual_stages : 1;
  const double idle = (p - 1) / v;
  return idle / (m + idle);
}

}  // namespace gt
