// Profiler: schedule, per-step bookkeeping, aggregation of op and collective
// records, and the Chrome trace.
#include "trainer/profile/profiler.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kernels/core/error.hpp"
#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/profile/op_descriptions.hpp"

namespace gt {

namespace {
constexpr int kComputeTid = 1;
constexpr int kFirstCommTid = 2;
// The pipeline schedule's blocks sort after the comm tracks.
constexpr int kPipelineTid = 1000;

double seconds_between(OpTimer::Clock::time_point a, OpTimer::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Elementwise and optimizer ops run on many sizes (every parameter segment):
// one row per op; the others one row per shape.
bool keyed_by_shape(OpClass c) { return c != OpClass::elementwise && c != OpClass::optimizer; }
}  // namespace

std::string ProfileSchedule::describe() const {
  if (every <= 0) return "off";
  if (steps == every) return "every step";
  char buf[96];
  if (steps == 1)
    std::snprintf(buf, sizeof buf, "step %d of every %d (steps %d, %d, ...)", every - 1, every,
                  every - 1, 2 * every - 1);
  else
    std::snprintf(buf, sizeof buf, "the last %d of every %d steps (steps %d-%d, %d-%d, ...)",
                  steps, every, every - steps, every - 1, 2 * every - steps, 2 * every - 1);
  return buf;
}

double ProfileStats::total_flops(bool model_classes_only) const {
  double sum = 0;
  for (const OpStat& s : ops)
    if (!model_classes_only || is_model_flops_class(s.cls)) sum += s.flops;
  return sum;
}

Profiler::Profiler(ProfileSchedule schedule, bool trace, int rank,
                   std::unique_ptr<OpTimer> timer)
    : schedule_(schedule),
      trace_(trace),
      rank_(rank),
      timer_(timer ? std::move(timer) : std::make_unique<SteadyOpTimer>()),
      epoch_(Clock::now()) {}

Profiler::~Profiler() {
  for (Communicator* c : observed_)
    if (c->observer() == this) c->set_observer(nullptr);
  for (Ops* o : observed_ops_)
    if (o->observer() == this) o->set_observer(nullptr);
}

void Profiler::observe(Communicator& comm) {
  comm.set_observer(this);
  observed_.push_back(&comm);
}

void Profiler::observe(Ops& ops) {
  ops.set_observer(this);
  observed_ops_.push_back(&ops);
}

double Profiler::us(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - epoch_).count();
}

int Profiler::tid_of(const Communicator* comm) {
  const std::string& axis = comm->name();
  auto it = comm_tids_.find(axis);
  if (it != comm_tids_.end()) return it->second;
  const int tid = kFirstCommTid + static_cast<int>(comm_tids_.size());
  comm_tids_.emplace(axis, tid);
  return tid;
}

void Profiler::begin_step(int64_t step) {
  step_ = step;
  step_exposed_s_ = 0;
  recording_ = schedule_.profiled(step);
  pending_ops_.clear();
  step_start_ = Clock::now();
}

Profiler::StepResult Profiler::end_step() {
  const auto end = Clock::now();
  StepResult r;
  r.profiled = recording_;
  r.seconds = seconds_between(step_start_, end);
  r.comm_exposed_s = step_exposed_s_;
  if (!recording_) return r;
  recording_ = false;

  const std::vector<OpTimer::Span> spans = timer_->collect();
  for (PendingOpRecord& p : pending_ops_) {
    GT_CHECK(p.index < spans.size(), "profiler: op ", p.op, " has no timed span");
    const OpTimer::Span& span = spans[p.index];
    std::string key = keyed_by_shape(p.cls) ? std::string(p.op) + " " + p.shape : p.op;
    auto [it, fresh] = op_index_.emplace(key, stats_.ops.size());
    if (fresh) {
      OpStat s;
      s.cls = p.cls;
      s.name = key;
      stats_.ops.push_back(std::move(s));
    }
    OpStat& s = stats_.ops[it->second];
    ++s.count;
    s.seconds += span.seconds;
    s.flops += p.cost.flops;
    s.bytes += p.cost.bytes;
    if (trace_)
      events_.push_back({p.op, op_class_name(p.cls), 'X', kComputeTid, us(span.start),
                         span.seconds * 1e6, 0, p.cost.flops, p.cost.bytes, std::move(p.shape)});
  }
  pending_ops_.clear();
  ++stats_.steps;
  stats_.step_seconds += r.seconds;
  if (trace_)
    events_.push_back({"step " + std::to_string(step_), "step", 'X', kComputeTid,
                       us(step_start_), r.seconds * 1e6, 0, -1, -1, ""});
  return r;
}

uint64_t Profiler::on_begin(const OpCall& call) {
  if (!recording_) return 0;
  OpDescription d = describe_op(call);
  const size_t index = timer_->begin(call.name());
  pending_ops_.push_back({index, call.cls(), call.name(), std::move(d.shape), d.cost});
  return pending_ops_.size();  // its place + 1: 0 stays "not recorded"
}

void Profiler::on_end(uint64_t token, const OpCall&) {
  if (token == 0) return;
  timer_->end(pending_ops_[token - 1].index);
}

CommStat& Profiler::comm_stat(const CommOp& op) {
  const std::string key = op.comm->name() + "/" + comm_kind_name(op.kind);
  auto [it, fresh] = comm_index_.emplace(key, stats_.comms.size());
  if (fresh) {
    CommStat s;
    s.axis = op.comm->name();
    s.kind = op.kind;
    s.group_size = op.comm->size();
    stats_.comms.push_back(s);
  }
  return stats_.comms[it->second];
}

uint64_t Profiler::on_start(const CommOp& op, Clock::time_point t) {
  if (!recording_) return 0;
  CommStat& s = comm_stat(op);
  ++s.count;
  s.bytes += op.ring_bytes;
  const uint64_t token = next_token_++;
  inflight_.emplace(token, InFlight{t, op});
  return token;
}

void Profiler::on_wait(uint64_t token, const CommOp& op, Clock::time_point begin,
                       Clock::time_point end) {
  const double s = seconds_between(begin, end);
  step_exposed_s_ += s;
  if (!recording_ || token == 0) return;
  comm_stat(op).exposed_s += s;
  if (trace_)
    events_.push_back({std::string("wait ") + comm_kind_name(op.kind), "comm", 'X',
                       tid_of(op.comm), us(begin), s * 1e6, 0, -1, op.ring_bytes,
                       std::to_string(op.elems) + " elements"});
}

void Profiler::on_complete(uint64_t token, const CommOp& op, Clock::time_point t) {
  if (token == 0) return;
  auto it = inflight_.find(token);
  if (it == inflight_.end()) return;
  const InFlight f = it->second;
  inflight_.erase(it);
  comm_stat(op).inflight_s += seconds_between(f.start, t);
  if (trace_) {
    const int tid = tid_of(op.comm);
    const std::string name = std::string(comm_kind_name(op.kind)) + " " + op.comm->name();
    events_.push_back({name, "comm_in_flight", 'b', tid, us(f.start), 0, token, -1,
                       op.ring_bytes, std::to_string(op.elems) + " elements"});
    events_.push_back({name, "comm_in_flight", 'e', tid, us(t), 0, token, -1, -1, ""});
  }
}

void Profiler::record_block(const std::string& name, Clock::time_point begin,
                            Clock::time_point end) {
  if (!recording_ || !trace_) return;
  has_pipeline_blocks_ = true;
  events_.push_back({name, "pipeline", 'X', kPipelineTid, us(begin),
                     std::chrono::duration<double, std::micro>(end - begin).count(), 0, -1, -1,
                     ""});
}

nlohmann::json Profiler::trace_json() const {
  using nlohmann::json;
  json ev = json::array();
  auto meta = [&](const char* what, int tid, json args) {
    ev.push_back({{"name", what}, {"ph", "M"}, {"pid", rank_}, {"tid", tid}, {"args", args}});
  };
  meta("process_name", 0, {{"name", "rank " + std::to_string(rank_)}});
  meta("process_sort_index", 0, {{"sort_index", rank_}});
  meta("thread_name", kComputeTid, {{"name", "compute"}});
  meta("thread_sort_index", kComputeTid, {{"sort_index", kComputeTid}});
  for (const auto& [axis, tid] : comm_tids_) {
    meta("thread_name", tid, {{"name", "comm " + axis}});
    meta("thread_sort_index", tid, {{"sort_index", tid}});
  }
  if (has_pipeline_blocks_) {
    meta("thread_name", kPipelineTid, {{"name", "pipeline schedule"}});
    meta("thread_sort_index", kPipelineTid, {{"sort_index", kPipelineTid}});
  }
  for (const TraceEvent& e : events_) {
    json j = {{"name", e.name}, {"cat", e.cat},   {"ph", std::string(1, e.ph)},
              {"pid", rank_},   {"tid", e.tid},   {"ts", e.ts_us}};
    if (e.ph == 'X') j["dur"] = e.dur_us;
    // Async ids are global in the JSON format: the rank in the high bits keeps
    // them unique in a merged trace.
    if (e.ph == 'b' || e.ph == 'e') j["id"] = (static_cast<uint64_t>(rank_) << 32) + e.id;
    json args = json::object();
    if (e.flops >= 0) args["flops"] = e.flops;
    if (e.bytes >= 0) args["bytes"] = e.bytes;
    if (!e.detail.empty()) args[e.cat == std::string("comm") ||
                                        e.cat == std::string("comm_in_flight")
                                    ? "size"
                                    : "shape"] = e.detail;
    if (!args.empty()) j["args"] = std::move(args);
    ev.push_back(std::move(j));
  }
  return {{"traceEvents", std::move(ev)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"rank", rank_}, {"time_origin", "barrier at profiler start"}}}};
}

void Profiler::write_trace(const std::string& path) const {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << trace_json().dump() << "\n";
    if (!f) fail("cannot write trace file '", tmp, "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("cannot rename '", tmp, "' to '", path, "'");
}

}  // namespace gt
