// Environment settings of the emulated device (see config.hpp).
#include "config.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace gt::emu {

namespace {

[[noreturn]] void bad(const char* var, const char* value, const char* expected) {
  std::fprintf(stderr, "gt-emu: fatal: %s=%s: expected %s\n", var, value, expected);
  std::exit(2);
}

bool parse_bool(const char* var, const char* v) {
  if (!std::strcmp(v, "1") || !std::strcmp(v, "true")) return true;
  if (!std::strcmp(v, "0") || !std::strcmp(v, "false")) return false;
  bad(var, v, "0 or 1");
}

long parse_long(const char* var, const char* v, long lo, long hi) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < lo || x > hi) {
    const std::string want = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    bad(var, v, want.c_str());
  }
  return x;
}

// "random" or "random:<seed>" (the seed into *seed): true; anything else false.
bool random_order(const char* var, const char* v, uint64_t* seed) {
  if (std::strncmp(v, "random", 6) != 0 || (v[6] != '\0' && v[6] != ':')) return false;
  if (v[6] == ':') {
    const std::string what = std::string(var) + " seed";
    *seed = static_cast<uint64_t>(parse_long(what.c_str(), v + 7, 0, 1L << 62));
  }
  return true;
}

// CUDA_VISIBLE_DEVICES: a comma list of device indices; the visible devices
// are those listed that exist, up to the first that does not (the runtime's
// rule). Set but empty hides every device.
int visible_devices(int physical) {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v) return physical;
  int n = 0;
  std::stringstream ss(v);
  std::string item;
  std::vector<long> seen;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long d = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || d < 0 || d >= physical) break;
    bool dup = false;
    for (long s : seen) dup = dup || s == d;
    if (dup) break;
    seen.push_back(d);
    ++n;
  }
  return n;
}

Config read_config() {
  Config c;
  int physical = 8;
  if (const char* v = std::getenv("GT_EMU_DEVICES"))
    physical = static_cast<int>(parse_long("GT_EMU_DEVICES", v, 0, 64));
  c.devices = visible_devices(physical);
  if (const char* v = std::getenv("GT_EMU_BLOCK_ORDER")) {
    if (!std::strcmp(v, "forward")) c.block_order = BlockOrder::forward;
    else if (!std::strcmp(v, "reverse")) c.block_order = BlockOrder::reverse;
    else bad("GT_EMU_BLOCK_ORDER", v, "forward or reverse");
  }
  if (const char* v = std::getenv("GT_EMU_THREAD_ORDER")) {
    if (!std::strcmp(v, "block")) c.thread_order = ThreadOrder::block;
    else if (!std::strcmp(v, "forward")) c.thread_order = ThreadOrder::forward;
    else if (!std::strcmp(v, "reverse")) c.thread_order = ThreadOrder::reverse;
    else if (!std::strcmp(v, "warps")) c.thread_order = ThreadOrder::warps;
    else if (random_order("GT_EMU_THREAD_ORDER", v, &c.thread_seed)) c.thread_order = ThreadOrder::random;
    else bad("GT_EMU_THREAD_ORDER", v, "block, forward, reverse, random, random:<seed> or warps");
  }
  if (const char* v = std::getenv("GT_EMU_STREAM_ORDER")) {
    if (!std::strcmp(v, "issue")) c.stream_order = StreamOrder::issue;
    else if (!std::strcmp(v, "reverse")) c.stream_order = StreamOrder::reverse;
    else if (random_order("GT_EMU_STREAM_ORDER", v, &c.stream_seed)) c.stream_order = StreamOrder::random;
    else bad("GT_EMU_STREAM_ORDER", v, "issue, reverse, random or random:<seed>");
  }
  if (const char* v = std::getenv("GT_EMU_PROTECT"))
    c.protect_device_memory = parse_bool("GT_EMU_PROTECT", v);
  if (const char* v = std::getenv("GT_EMU_CUBLASLT_REFUSE_EPILOGUES"))
    c.cublaslt_refuse_epilogues = parse_bool("GT_EMU_CUBLASLT_REFUSE_EPILOGUES", v);
  if (const char* v = std::getenv("GT_EMU_WMMA_LAYOUT"))
    c.wmma_layout_seed = static_cast<uint64_t>(parse_long("GT_EMU_WMMA_LAYOUT", v, 0, 1L << 62));
  if (const char* v = std::getenv("GT_EMU_COMPUTE_CAPABILITY"))
    c.compute_capability =
        static_cast<int>(parse_long("GT_EMU_COMPUTE_CAPABILITY", v, 10, 99));
  if (const char* v = std::getenv("GT_EMU_HANG_TIMEOUT_S"))
    c.hang_timeout_s = static_cast<double>(parse_long("GT_EMU_HANG_TIMEOUT_S", v, 1, 1L << 30));
  return c;
}

}  // namespace

Config& config() {
  static Config c = read_config();
  return c;
}

const char* to_string(BlockOrder o) { return o == BlockOrder::forward ? "forward" : "reverse"; }
const char* to_string(ThreadOrder o) {
  switch (o) {
    case ThreadOrder::block: return "block";
    case ThreadOrder::forward: return "forward";
    case ThreadOrder::reverse: return "reverse";
    case ThreadOrder::random: return "random";
    case ThreadOrder::warps: return "warps";
  }
  return "?";
}

const char* to_string(StreamOrder o) {
  switch (o) {
    case StreamOrder::issue: return "issue";
    case StreamOrder::reverse: return "reverse";
    case StreamOrder::random: return "random";
  }
  return "?";
}

}  // namespace gt::emu
