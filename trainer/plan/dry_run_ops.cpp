// DryRunOps: CpuOps for its op implementations, none of which it runs (see
// dry_run_ops.hpp); what it replaces is the memory, the device and the hook
// around every op.
#include "trainer/plan/dry_run_ops.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "kernels/core/attention_kernels.hpp"
#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace gt {
namespace {

// Deriving from CpuOps gives an implementation of every op (Ops' do_
// methods are pure virtual) without listing one here; begin_op() returning
// false means none of them is ever called, so the CPU's view of memory never
// meets these PROT_NONE "device" buffers.
class DryRunOps final : public CpuOps {
 public:
  explicit DryRunOps(Device device) : device_(device) {}
  Device device() const override { return device_; }
  const char* backend_name() const override { return "DryRunOps"; }

  Buffer allocate(size_t bytes) override {
    if (bytes == 0) return {};
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t len = (bytes + page - 1) / page * page;
    void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    GT_CHECK(p != MAP_FAILED, "dry run: reserving ", len, " bytes of address space failed");
    in_use_ += static_cast<int64_t>(bytes);
    peak_ = std::max(peak_, in_use_);
    return Buffer(p, bytes, device_, [this, len, bytes](void* q) {
      munmap(q, len);
      in_use_ -= static_cast<int64_t>(bytes);
    });
  }
  void upload(TensorView, const void*) override {}
  void download(void* host, TensorView src) override {
    std::memset(host, 0, static_cast<size_t>(src.numel()) * dtype_size(src.dtype));
  }
  int64_t device_bytes_in_use() const override { return in_use_; }
  int64_t device_bytes_peak() const override { return peak_; }

  // The device's sizes (kernels/core/attention_kernels.hpp: CudaOps' on
  // cuda), so the model allocates what a run on that backend allocates.
  int64_t attention_saved_elems(int B, int n_head, int T) const override {
    return gt::attention_saved_elems(device_, B, n_head, T);
  }
  int64_t attention_scratch_elems(int B, int n_head, int T) const override {
    return gt::attention_scratch_elems(device_, B, n_head, T);
  }
  int64_t attention_block_scratch_elems(int B, int n_head, int Tq, int Tk) const override {
    return gt::attention_block_scratch_elems(device_, B, n_head, Tq, Tk);
  }

 protected:
  // The dry run: every op's shapes are checked and the observer (the
  // profiler) sees the call, then the op is skipped.
  bool begin_op(OpCall&) override { return false; }

 private:
  Device device_;
  int64_t in_use_ = 0, peak_ = 0;
};

}  // namespace

std::unique_ptr<Ops> make_dry_run_ops(Device device) { return std::make_unique<DryRunOps>(device); }

}  // namespace gt
