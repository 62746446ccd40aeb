// Process-wide state of the emulated device, kernel launches and the fault
// handler (see emulator.hpp).
#include "emulator.hpp"

#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "block_scheduler.hpp"
#include "config.hpp"
#include "diagnostics.hpp"

namespace gt::emu {

namespace {

thread_local int t_device = 0;

struct sigaction g_previous_segv;
struct sigaction g_previous_bus;

// Explains a fault address (device memory from host code, a guard page,
// shared memory, a fiber stack), then lets the previous handler (a
// sanitizer's, or the default) end the process.
void on_fault(int sig, siginfo_t* info, void* ctx) {
  Emulator& e = Emulator::get();  // constructed before the handler is installed
  const void* addr = info->si_addr;
  // A counted kernel's first touch of a page (traffic.hpp): recorded, the
  // page opened, the instruction retried. x86-64's error code says whether
  // the access was a store (bit 1).
  const bool write =
      sig == SIGSEGV && ctx && (static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
  if (sig == SIGSEGV && e.traffic.on_fault(addr, write, e.memory)) return;
  bool guard = false;
  const std::string mem = e.memory.describe(addr, &guard);
  BlockRunner& r = block_runner();
  const std::string shared = r.running() ? r.describe_address(addr) : "";
  std::string msg;
  if (!shared.empty()) {
    msg = "illegal address " + address(addr) + ": " + shared +
          "\n  in " + r.describe_running();
  } else if (!mem.empty()) {
    if (r.running())
      msg = "illegal address: " + mem + "\n  in " + r.describe_running();
    else if (!e.memory.in_device_phase())
      msg = "host code touched device memory: " + mem +
            " (a GPU would fault here too; copy it with cudaMemcpy first)";
    else
      msg = "illegal address during a queued copy or library call: " + mem;
  }
  if (!msg.empty()) report("fatal", msg);
  struct sigaction& prev = sig == SIGBUS ? g_previous_bus : g_previous_segv;
  sigaction(sig, &prev, nullptr);
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, ctx);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler) {
    prev.sa_handler(sig);
  }
  // Returning re-executes the faulting instruction under the previous handler.
}

void install_fault_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = &on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous_segv);
  sigaction(SIGBUS, &sa, &g_previous_bus);
}

}  // namespace

Emulator::Emulator() {
  streams.set_device_phase = [this](bool on) {
    if (config().protect_device_memory) memory.set_device_phase(on);
  };
  if (!config().protect_device_memory) memory.set_device_phase(true);
}

Emulator& Emulator::get() {
  static Emulator* e = [] {
    auto* em = new Emulator;  // never destroyed: RAII owners may free at exit
    install_fault_handler();
    return em;
  }();
  return *e;
}

int Emulator::device_count() const { return config().devices; }

cudaError_t Emulator::synchronize_all() {
  if (!streams.run_until([this] { return streams.all_idle(); }, StreamScheduler::Mode::block))
    return sticky_error() != cudaSuccess ? sticky_error() : cudaErrorLaunchFailure;
  return cudaSuccess;
}

int current_device() { return t_device; }
void set_current_device(int d) { t_device = d; }

CUstream_st* stream_for(cudaStream_t s, const char* api) {
  CUstream_st* st = Emulator::get().streams.resolve(s, current_device());
  if (!st) fail(cudaErrorInvalidResourceHandle, std::string(api) + ": not a live stream");
  return st;
}

const Allocation* device_range(const void* p, size_t bytes) {
  return Emulator::get().memory.find_device_range(p, bytes);
}

// ---- kernel launches (the target of gt_emu/device.hpp's launch_kernel) ----------

namespace detail {

cudaError_t submit_launch(const void* kernel, const LaunchConfig& c, const PointerArg* pointers,
                          int n_pointers, std::shared_ptr<const KernelBody> body) {
  Emulator& e = Emulator::get();
  Lock lock(e.mu);
  if (cudaError_t st = sticky_error()) return st;
  const std::string at = std::string(c.site.file) + ":" + std::to_string(c.site.line);
  const std::string name = "kernel launched at " + at;
  if (e.device_count() == 0) return fail(cudaErrorNoDevice, name + ": no device is visible");
  CUstream_st* s = stream_for(c.stream, name.c_str());
  if (!s) return cudaErrorInvalidResourceHandle;

  const dim3 b = c.block, g = c.grid;
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
      threads > kMaxThreadsPerBlock)
    return fail(cudaErrorInvalidConfiguration,
                name + ": block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," +
                    std::to_string(b.z) + ") breaks the limits (x, y <= 1024, z <= 64, at most " +
                    std::to_string(kMaxThreadsPerBlock) + " threads, none 0)");
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
    return fail(cudaErrorInvalidConfiguration,
                name + ": grid (" + std::to_string(g.x) + "," + std::to_string(g.y) + "," +
                    std::to_string(g.z) + ") breaks the limits (x < 2^31, y, z <= 65535, none 0)");
  if (c.dynamic_smem_bytes > static_cast<size_t>(kMaxSharedPerBlockOptin))
    return fail(cudaErrorInvalidValue,
                name + ": " + std::to_string(c.dynamic_smem_bytes) +
                    " bytes of dynamic shared memory exceed the device's " +
                    std::to_string(kMaxSharedPerBlockOptin) + " per block");
  if (c.dynamic_smem_bytes > static_cast<size_t>(kDefaultSharedPerBlock)) {
    auto it = e.max_dynamic_smem.find(kernel);
    const int allowed = it == e.max_dynamic_smem.end() ? kDefaultSharedPerBlock : it->second;
    if (c.dynamic_smem_bytes > static_cast<size_t>(allowed))
      return fail(cudaErrorInvalidValue,
                  name + ": " + std::to_string(c.dynamic_smem_bytes) +
                      " bytes of dynamic shared memory need cudaFuncSetAttribute("
                      "cudaFuncAttributeMaxDynamicSharedMemorySize) >= that first (the kernel "
                      "allows " + std::to_string(allowed) + ")");
  }
  for (int i = 0; i < n_pointers; ++i) {
    const void* p = pointers[i].value;
    if (!p) continue;
    const Allocation* a = e.memory.find(p);
    if (!a || a->pinned)
      return fail(cudaErrorInvalidValue,
                  name + ": pointer argument " + std::to_string(pointers[i].index) + " (" +
                      address(p) + ") lies in no device allocation (host memory, or freed)");
    if (a->device != s->device)
      return fail(cudaErrorInvalidValue,
                  name + ": pointer argument " + std::to_string(pointers[i].index) +
                      " lies in memory of device " + std::to_string(a->device) +
                      " but the kernel runs on device " + std::to_string(s->device));
  }

  auto grid = std::make_shared<GridLaunch>();
  grid->name = name;
  grid->grid = g;
  grid->block = b;
  grid->dynamic_smem = c.dynamic_smem_bytes;
  grid->body = std::move(body);
  e.streams.enqueue_task(s, name, [grid] {
    Emulator& em = Emulator::get();
    em.traffic.begin_kernel(grid->name, em.memory);
    block_runner().run_grid(*grid);
    em.traffic.end_kernel(em.memory);
  });
  return cudaSuccess;
}

}  // namespace detail

}  // namespace gt::emu
