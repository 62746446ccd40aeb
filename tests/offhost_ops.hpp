// OffHostOps: a test backend whose memory the host cannot touch, so the CPU
// suite can prove that the model, the parameter store and the checkpoint path
// would run on a GPU: they may reach a Buffer's data only through the
// backend's ops and its upload/download, exactly the rule device memory
// imposes.
//
// It is CpuOps with memory of its own: every Buffer is its own mmap'd region
// kept PROT_NONE; an op (Ops::begin_op/end_op, around every op at once) or a
// transfer opens every region for the duration of the call and closes them
// again, so a host read or write from anywhere else dies with
// SIGSEGV at the offending line. It reports Device::cuda, so the code under
// test takes its device paths (host staging of checkpoint pieces, uploads),
// and every view handed to an op must say cuda (a view still labelled cpu is
// a bug the GPU would find). Regions are counted for the figures tests check.
//
// Header-only, test-only; one thread.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/ops.hpp"

namespace gt::test {

class OffHostOps final : public CpuOps {
 public:
  OffHostOps() { set_cpu_threads(1); }
  ~OffHostOps() override { GT_CHECK(regions_.empty(), "OffHostOps destroyed before its Buffers"); }

  Device device() const override { return Device::cuda; }
  const char* backend_name() const override { return "OffHostOps"; }

  Buffer allocate(size_t bytes) override {
    if (bytes == 0) return {};
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t len = (bytes + page - 1) / page * page;
    void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    GT_CHECK(p != MAP_FAILED, "OffHostOps: mmap of ", len, " bytes failed");
    regions_[p] = len;  // anonymous pages read as zero once opened: allocate() zero-fills
    bytes_in_use_ += static_cast<int64_t>(bytes);
    peak_ = std::max(peak_, bytes_in_use_);
    return Buffer(p, bytes, Device::cuda, [this, bytes](void* q) {
      munmap(q, regions_.at(q));
      regions_.erase(q);
      bytes_in_use_ -= static_cast<int64_t>(bytes);
    });
  }
  void upload(TensorView dst, const void* host) override {
    Open o(*this);
    const TensorView d = h(dst, "upload dst");
    std::memcpy(d.data, host, static_cast<size_t>(d.numel()) * dtype_size(d.dtype));
    ++transfers_;
  }
  void download(void* host, TensorView src) override {
    Open o(*this);
    const TensorView s = h(src, "download src");
    std::memcpy(host, s.data, static_cast<size_t>(s.numel()) * dtype_size(s.dtype));
    ++transfers_;
  }
  int64_t device_bytes_in_use() const override { return bytes_in_use_; }
  int64_t device_bytes_peak() const override { return peak_; }
  int64_t transfers() const { return transfers_; }
  int64_t open_calls() const { return opens_; }

  // Opens every region for a raw-pointer consumer that stands for a device
  // peer (a communicator in a test), for the lifetime of the returned guard.
  class Open {
   public:
    explicit Open(OffHostOps& o) : o_(o) { o_.protect(PROT_READ | PROT_WRITE); }
    ~Open() { o_.protect(PROT_NONE); }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;

   private:
    OffHostOps& o_;
  };

 protected:
  // Around every op (Ops::begin_op): each view of the call must be labelled
  // cuda and lie in our memory; then every region opens for the op and the
  // CPU kernels get the same views labelled cpu. No op is listed here: an op
  // added to Ops runs on OffHostOps with these checks and nothing else.
  bool begin_op(OpCall& call) override {
    for (int i = 0; i < call.num_tensors(); ++i)
      check_view(*call.tensor(i).view, call.tensor(i).name);
    protect(PROT_READ | PROT_WRITE);
    for (int i = 0; i < call.num_tensors(); ++i) {
      TensorView& v = *call.tensor(i).view;
      if (!v.empty()) v.device = Device::cpu;
    }
    return true;
  }
  // A failing mprotect here terminates (noexcept): memory left open would
  // hide the very faults this backend exists to show.
  void end_op(const OpCall&) noexcept override { protect(PROT_NONE); }

 private:
  // A "device" tensor: labelled cuda (unless empty) and inside one of our regions.
  void check_view(const TensorView& v, const char* what) const {
    if (v.empty()) return;
    GT_CHECK(v.device == Device::cuda, "OffHostOps: ", what, " ", v.shape_str(),
             " is labelled ", device_name(v.device), ", expected the backend's device (cuda)");
    GT_CHECK(owns(v.data), "OffHostOps: ", what, " ", v.shape_str(),
             " does not point into memory from allocate()");
  }
  // The host's view of a "device" tensor, for a transfer.
  TensorView h(TensorView v, const char* what) const {
    check_view(v, what);
    v.device = Device::cpu;
    return v;
  }
  bool owns(const void* p) const {
    auto it = regions_.upper_bound(const_cast<void*>(p));
    if (it == regions_.begin()) return false;
    --it;
    const char* base = static_cast<const char*>(it->first);
    return static_cast<const char*>(p) < base + it->second;
  }
  void protect(int prot) {
    if (prot != PROT_NONE) ++opens_;
    for (const auto& [p, len] : regions_)
      GT_CHECK(mprotect(p, len, prot) == 0, "OffHostOps: mprotect failed");
  }

  std::map<void*, size_t> regions_;
  int64_t bytes_in_use_ = 0, peak_ = 0, transfers_ = 0, opens_ = 0;
};

}  // namespace gt::test
