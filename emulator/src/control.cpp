// Test controls of the emulated device (see gt_emu/control.hpp).
#include "gt_emu/control.hpp"

#include <cuda_runtime_api.h>

#include "config.hpp"
#include "diagnostics.hpp"
#include "emulator.hpp"

namespace gt::emu {

std::string describe_device() {
  const Config& c = config();
  const std::string threads =
      c.thread_order == ThreadOrder::random
          ? "threads random:" + std::to_string(c.thread_seed)
          : std::string("threads ") + to_string(c.thread_order);
  return "gt-emu emulated CUDA device (" + std::to_string(c.devices) + " device(s); blocks " +
         to_string(c.block_order) + ", " + threads + ", streams in " + to_string(c.stream_order) +
         " order, wmma layout seed " + std::to_string(c.wmma_layout_seed) + ")";
}

bool set_block_order(const std::string& order) {
  Lock lock(Emulator::get().mu);
  if (order == "forward") config().block_order = BlockOrder::forward;
  else if (order == "reverse") config().block_order = BlockOrder::reverse;
  else return false;
  return true;
}

bool set_thread_order(const std::string& order) {
  Lock lock(Emulator::get().mu);
  Config& c = config();
  if (order == "block") c.thread_order = ThreadOrder::block;
  else if (order == "forward") c.thread_order = ThreadOrder::forward;
  else if (order == "reverse") c.thread_order = ThreadOrder::reverse;
  else if (order == "warps") c.thread_order = ThreadOrder::warps;
  else if (order.rfind("random:", 0) == 0 && order.size() > 7 && order.size() <= 7 + 18 &&
           order.find_first_not_of("0123456789", 7) == std::string::npos) {
    c.thread_order = ThreadOrder::random;
    c.thread_seed = std::stoull(order.substr(7));
  } else {
    return false;
  }
  return true;
}

std::string block_order() {
  Lock lock(Emulator::get().mu);
  return to_string(config().block_order);
}

bool set_stream_order(const std::string& order) {
  Lock lock(Emulator::get().mu);
  if (order == "issue") config().stream_order = StreamOrder::issue;
  else if (order == "reverse") config().stream_order = StreamOrder::reverse;
  else if (order == "random") config().stream_order = StreamOrder::random;
  else return false;
  return true;
}

void set_visible_devices(int n) {
  Lock lock(Emulator::get().mu);
  config().devices = n < 0 ? 0 : n;
}

void set_compute_capability(int major_minor) {
  Lock lock(Emulator::get().mu);
  config().compute_capability = major_minor;
}

void set_cublaslt_refuse_epilogues(bool refuse) {
  Lock lock(Emulator::get().mu);
  config().cublaslt_refuse_epilogues = refuse;
}

void set_traffic_counting(bool on) {
  Emulator& e = Emulator::get();
  Lock lock(e.mu);
  e.traffic.set_enabled(on);
}

std::vector<KernelTraffic> take_traffic() {
  Emulator& e = Emulator::get();
  Lock lock(e.mu);
  return e.traffic.take();
}

std::string fault_message() {
  const cudaError_t e = sticky_error();
  return e == cudaSuccess ? "" : error_string(e);
}

}  // namespace gt::emu
