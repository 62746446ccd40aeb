// The microbenchmarks of bench.hpp. Timing loops run a fixed or time-bounded
// number of repetitions after one warm-up call (which also first-touches the
// buffers); per-call times are the best repetition for local kernels and the
// slowest rank's mean for collectives (every rank runs the same iteration
// count, so no rank waits in a collective the others skipped).
#include "trainer/profile/bench.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kernels/core/bf16.hpp"
#include "kernels/core/error.hpp"
#include "parallel/communicator.hpp"

namespace gt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Backend memory (device memory on a GPU) filled with `value`, in `dtype`
// (fp32, or bf16 for the GEMM operands of a bf16 run).
struct Floats {
  Buffer buf;
  TensorView view;
  DType dtype;
  Floats(Ops& ops, int64_t n, float value, DType type = DType::f32)
      : buf(ops.allocate(static_cast<size_t>(n) * dtype_size(type))), dtype(type) {
    view = as({n});
    if (type == DType::bf16) {
      // Rounded as the backend's own casts round.
      ops.upload(view, std::vector<uint16_t>(static_cast<size_t>(n), bf16_from_float(value)).data());
    } else {
      ops.upload(view, std::vector<float>(static_cast<size_t>(n), value).data());
    }
  }
  TensorView as(std::initializer_list<int64_t> shape) const {
    return make_view(buf.data(), dtype, buf.device(), shape);
  }
};

// Best seconds per call of `fn` over repetitions until `min_time` or
// `max_reps`; each call waits for the backend (a GPU's ops are asynchronous).
template <typename F>
double best_time(Ops& ops, F&& fn, double min_time, int max_reps) {
  fn();  // warm-up
  ops.synchronize();
  double best = 1e30, total = 0;
  for (int rep = 0; rep < max_reps && (rep < 2 || total < min_time); ++rep) {
    const auto t0 = Clock::now();
    fn();
    ops.synchronize();
    const double s = seconds_since(t0);
    best = std::min(best, s);
    total += s;
  }
  return best;
}

// Mean over the world's ranks (per-rank figures measured concurrently).
double world_mean(Communicator* world, double x) {
  if (!world || world->size() == 1) return x;
  return world->all_reduce_f64(x, ReduceOp::sum) / world->size();
}

nlohmann::json bench_gemm(Ops& ops, Communicator* world, const BenchOptions& opt,
                          double* peak) {
  nlohmann::json rows = nlohmann::json::array();
  // Quick: two mid-size shapes, many short repetitions, so that the best one
  // likely falls in a quiet moment of a shared machine (a peak measured too
  // low makes ops look faster than the roof).
  // A GPU's peak needs large shapes (and costs milliseconds): its quick set
  // starts where a CPU's full set does.
  const bool gpu = ops.device() != Device::cpu;
  const std::vector<int64_t> sizes =
      opt.quick ? (gpu ? std::vector<int64_t>{2048, 4096} : std::vector<int64_t>{512, 1024})
                : std::vector<int64_t>{1024, 2048, 4096, 8192};
  const double min_time = opt.quick ? 0.25 : 0.5;
  double last_call = 0;
  bool skip = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    // Every rank decides alike: a shape runs only if the previous one's
    // slowest call, scaled by 8x the work, stays under a second.
    if (i > 0) {
      const double predicted = 8.0 * last_call;
      skip = (world && world->size() > 1 ? world->all_reduce_f64(predicted, ReduceOp::max)
                                         : predicted) > 1.0;
    }
    if (skip) break;
    Floats a(ops, n * n, 0.01f, opt.gemm_dtype), w(ops, n * n, 0.02f, opt.gemm_dtype);
    Floats out(ops, n * n, 0.f);
    const TensorView none;
    const double s = best_time(
        ops, [&] { ops.matmul_forward(out.as({n, n}), a.as({n, n}), w.as({n, n}), none); },
        min_time, opt.quick ? 50 : 20);
    last_call = s;
    const double tflops = world_mean(world, 2.0 * n * n * n / s / 1e12);
    rows.push_back({{"m", n}, {"n", n}, {"k", n}, {"seconds", s}, {"tflops", tflops}});
    *peak = std::max(*peak, tflops);
  }
  return rows;
}

nlohmann::json bench_memory(Ops& ops, Communicator* world, const BenchOptions& opt,
                            double* peak) {
  nlohmann::json rows = nlohmann::json::array();
  const int64_t n = opt.quick ? (int64_t{8} << 20) : (int64_t{32} << 20);  // floats
  const double min_time = opt.quick ? 0.1 : 0.5;
  Floats a(ops, n, 1.f), b(ops, n, 2.f), c(ops, n, 0.f);
  const double copy_s = best_time(ops, [&] { ops.copy(c.view, a.view); }, min_time, 20);
  const double add_s = best_time(ops, [&] { ops.add(c.view, a.view, b.view); }, min_time, 20);
  const double bytes = 4.0 * static_cast<double>(n);
  const double copy_gbps = world_mean(world, 2.0 * bytes / copy_s / 1e9);
  const double add_gbps = world_mean(world, 3.0 * bytes / add_s / 1e9);
  rows.push_back({{"kernel", "copy"}, {"bytes", bytes}, {"seconds", copy_s}, {"gbps", copy_gbps}});
  rows.push_back({{"kernel", "add"}, {"bytes", bytes}, {"seconds", add_s}, {"gbps", add_gbps}});
  *peak = std::max(copy_gbps, add_gbps);
  return rows;
}

nlohmann::json bench_collectives(Ops& ops, Communicator& world, const BenchOptions& opt,
                                 double* ar_peak, double* ag_peak) {
  nlohmann::json rows = nlohmann::json::array();
  const int p = world.size();
  struct Size {
    int64_t bytes;
    int iters;
  };
  const std::vector<Size> sizes = opt.quick ? std::vector<Size>{{int64_t{4} << 20, 3}}
                                            : std::vector<Size>{{int64_t{1} << 20, 10},
                                                                {int64_t{16} << 20, 5},
                                                                {int64_t{64} << 20, 3}};
  for (const Size& sz : sizes) {
    // all_reduce of `bytes`; all_gather whose gathered total is `bytes`.
    const int64_t n = sz.bytes / 4, block = n / p;
    Floats buf(ops, n, 1.f);  // backend memory: what the trainer's collectives move
    for (int op = 0; op < 2; ++op) {
      const bool reduce = op == 0;
      auto once = [&] {
        if (reduce) world.all_reduce_sum(buf.buf.f32(), n).wait();
        else world.all_gather(buf.buf.f32() + world.rank() * block, buf.buf.f32(), block).wait();
        world.drain();  // a device backend's wait() returns at once: time the transfer itself
      };
      once();  // warm-up (connection set-up, first touch)
      world.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < sz.iters; ++i) once();
      const double mine = seconds_since(t0) / sz.iters;
      const double s = world.all_reduce_f64(mine, ReduceOp::max);
      const double size = 4.0 * static_cast<double>(reduce ? n : block * p);
      const double algbw = size / s;
      const double busbw = algbw * (reduce ? 2.0 * (p - 1) / p : double(p - 1) / p);
      rows.push_back({{"op", reduce ? "all_reduce" : "all_gather"},
                      {"bytes", size},
                      {"seconds", s},
                      {"algbw_gbps", algbw / 1e9},
                      {"busbw_gbps", busbw / 1e9}});
      double& peak = reduce ? *ar_peak : *ag_peak;
      peak = std::max(peak, busbw / 1e9);
    }
  }
  return rows;
}

std::string num(double x) {
  char buf[32];
  if (x >= 100) std::snprintf(buf, sizeof buf, "%.0f", x);
  else if (x >= 10) std::snprintf(buf, sizeof buf, "%.1f", x);
  else if (x >= 1) std::snprintf(buf, sizeof buf, "%.2f", x);
  else std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

std::string mib(double bytes) { return num(bytes / (1 << 20)) + " MiB"; }

}  // namespace

nlohmann::json run_bench(Ops& ops, Communicator* world, const BenchOptions& opt) {
  if (world && world->size() == 1) world = nullptr;
  const auto t0 = Clock::now();
  double gemm_peak = 0, mem_peak = 0, ar_peak = 0, ag_peak = 0;
  nlohmann::json r;
  r["format"] = "gpt-trainer-bench";
  r["version"] = 1;
  r["device"] = device_name(ops.device());
  r["dtype"] = dtype_name(opt.gemm_dtype);
  r["threads"] = omp_get_max_threads();
  r["world_size"] = world ? world->size() : 1;
  r["quick"] = opt.quick;
  r["gemm"] = bench_gemm(ops, world, opt, &gemm_peak);
  r["memory"] = bench_memory(ops, world, opt, &mem_peak);
  r["collectives"] = world ? bench_collectives(ops, *world, opt, &ar_peak, &ag_peak)
                           : nlohmann::json::array();
  auto or_null = [](double x) { return x > 0 ? nlohmann::json(x) : nlohmann::json(nullptr); };
  r["peaks"] = {{"gemm_tflops", gemm_peak},
                {"mem_gbps", mem_peak},
                {"all_reduce_busbw_gbps", or_null(ar_peak)},
                {"all_gather_busbw_gbps", or_null(ag_peak)}};
  r["seconds"] = seconds_since(t0);
  return r;
}

std::string format_bench(const nlohmann::json& r) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "bench: %s %s, %d thread(s) per rank, %d rank(s)%s, %.1f s\n",
                r.value("device", "?").c_str(), r.value("dtype", "?").c_str(),
                r.value("threads", 0), r.value("world_size", 1),
                r.value("quick", false) ? " (quick)" : "", r.value("seconds", 0.0));
  out += line;
  for (const auto& g : r["gemm"]) {
    std::snprintf(line, sizeof line, "  gemm %5lldx%lldx%-5lld  %10s TFLOP/s  (%s ms per call)\n",
                  g["m"].get<long long>(), g["n"].get<long long>(), g["k"].get<long long>(),
                  num(g["tflops"].get<double>()).c_str(),
                  num(g["seconds"].get<double>() * 1e3).c_str());
    out += line;
  }
  for (const auto& m : r["memory"]) {
    std::snprintf(line, sizeof line, "  memory %-4s %9s  %10s GB/s\n",
                  m["kernel"].get<std::string>().c_str(), mib(m["bytes"].get<double>()).c_str(),
                  num(m["gbps"].get<double>()).c_str());
    out += line;
  }
  for (const auto& c : r["collectives"]) {
    std::snprintf(line, sizeof line, "  %-10s %9s  algbw %8s GB/s  busbw %8s GB/s\n",
                  c["op"].get<std::string>().c_str(), mib(c["bytes"].get<double>()).c_str(),
                  num(c["algbw_gbps"].get<double>()).c_str(),
                  num(c["busbw_gbps"].get<double>()).c_str());
    out += line;
  }
  const auto& p = r["peaks"];
  auto opt_num = [](const nlohmann::json& x) {
    return x.is_number() ? num(x.get<double>()) + " GB/s" : std::string("n/a (1 rank)");
  };
  std::snprintf(line, sizeof line,
                "peaks per rank: GEMM %s TFLOP/s, memory %s GB/s, all-reduce busbw %s, "
                "all-gather busbw %s\n",
                num(p["gemm_tflops"].get<double>()).c_str(),
                num(p["mem_gbps"].get<double>()).c_str(),
                opt_num(p["all_reduce_busbw_gbps"]).c_str(),
                opt_num(p["all_gather_busbw_gbps"]).c_str());
  out += line;
  return out;
}

}  // namespace gt
