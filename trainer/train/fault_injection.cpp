// TRAINER_FAULT parsing and the faults themselves; the grammar is in the header.
#include "trainer/train/fault_injection.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"

namespace gt {

namespace {

constexpr const char* kGrammar =
    "kill|hang:rank=R:step=S, nan:rank=R:step=S[:count=N] or "
    "kill_in_save:rank=R:step=S:phase=shard|manifest (comma-separated)";

[[noreturn]] void bad(const std::string& item, const std::string& why) {
  fail("TRAINER_FAULT (environment): expected ", kGrammar, ", got '", item, "': ", why);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

int64_t parse_int(const std::string& item, const std::string& key, const std::string& v,
                  int64_t lo) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 12)
    bad(item, key + " must be a non-negative integer, got '" + v + "'");
  const int64_t x = std::stoll(v);
  if (x < lo) bad(item, key + " must be >= " + std::to_string(lo) + ", got " + v);
  return x;
}

Fault parse_one(const std::string& item) {
  const std::vector<std::string> parts = split(item, ':');
  Fault f;
  const std::string& kind = parts[0];
  if (kind == "kill") f.kind = FaultKind::kill;
  else if (kind == "hang") f.kind = FaultKind::hang;
  else if (kind == "nan") f.kind = FaultKind::nan;
  else if (kind == "kill_in_save") f.kind = FaultKind::kill_in_save;
  else bad(item, "unknown fault '" + kind + "'");

  std::map<std::string, std::string> kv;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == std::string::npos || eq == 0) bad(item, "'" + parts[i] + "' is not key=value");
    const std::string key = parts[i].substr(0, eq);
    if (!kv.emplace(key, parts[i].substr(eq + 1)).second)
      bad(item, "key '" + key + "' is given twice");
  }
  std::vector<std::string> allowed = {"rank", "step"};
  if (f.kind == FaultKind::nan) allowed.push_back("count");
  if (f.kind == FaultKind::kill_in_save) allowed.push_back("phase");
  for (const auto& [key, value] : kv) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == key;
    if (!ok) bad(item, "unknown key '" + key + "' for " + kind);
  }
  for (const char* required : {"rank", "step"})
    if (!kv.count(required)) bad(item, std::string("missing ") + required + "=");
  f.rank = static_cast<int>(parse_int(item, "rank", kv["rank"], 0));
  f.step = parse_int(item, "step", kv["step"], 0);
  if (kv.count("count")) f.count = parse_int(item, "count", kv["count"], 1);
  if (f.kind == FaultKind::kill_in_save) {
    if (!kv.count("phase")) bad(item, "missing phase=shard|manifest");
    f.phase = kv["phase"];
    if (f.phase != "shard" && f.phase != "manifest")
      bad(item, "phase must be shard or manifest, got '" + f.phase + "'");
    if (f.phase == "manifest" && f.rank != 0)
      bad(item, "phase=manifest needs rank=0 (only rank 0 writes the manifest)");
  }
  return f;
}

// Says what is about to happen (the test reads it), then does it.
[[noreturn]] void kill_self(int rank, const std::string& what) {
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "[rank %d] fault injection (TRAINER_FAULT): %s: kill -9 of pid %ld\n",
               rank, what.c_str(), static_cast<long>(::getpid()));
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  std::abort();  // not reached
}

}  // namespace

FaultInjector FaultInjector::parse(const std::string& spec) {
  FaultInjector out;
  if (spec.empty()) return out;
  for (const std::string& item : split(spec, ',')) {
    if (item.empty()) bad(spec, "empty fault in the list");
    out.faults_.push_back(parse_one(item));
  }
  return out;
}

FaultInjector FaultInjector::from_env() {
  const char* v = std::getenv("TRAINER_FAULT");
  return parse(v ? v : "");
}

void FaultInjector::at_step_start(int rank, int64_t step) const {
  for (const Fault& f : faults_) {
    if (f.rank != rank || f.step != step) continue;
    if (f.kind == FaultKind::kill) kill_self(rank, "step " + std::to_string(step));
    if (f.kind == FaultKind::hang) {
      spdlog::default_logger()->flush();
      std::fprintf(stderr, "[rank %d] fault injection (TRAINER_FAULT): hanging at step %lld\n",
                   rank, static_cast<long long>(step));
      std::fflush(stderr);
      for (;;) ::pause();  // a signal handler returning does not end the hang
    }
  }
}

bool FaultInjector::poison_gradients(int rank, int64_t step) const {
  for (const Fault& f : faults_)
    if (f.kind == FaultKind::nan && f.rank == rank && step >= f.step && step < f.step + f.count)
      return true;
  return false;
}

void FaultInjector::in_save(int rank, int64_t step, const char* phase) const {
  for (const Fault& f : faults_)
    if (f.kind == FaultKind::kill_in_save && f.rank == rank && f.step == step && f.phase == phase)
      kill_self(rank, "saving checkpoint step " + std::to_string(step) + ", phase " + phase);
}

}  // namespace gt
