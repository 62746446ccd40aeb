#include "trainer/plan/dry_run_ops.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "kernels/core/attention_kernels.hpp"
#include "kernels/core/error.hpp"

namespace gt {
namespace {

class DryRunOps final : public Ops {
 public:
  Device device() const override { return Device::cuda; }

  Buffer allocate(size_t bytes) override {
    if (bytes == 0) return {};
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t len = (bytes + page - 1) / page * page;
    void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    GT_CHECK(p != MAP_FAILED, "dry run: reserving ", len, " bytes of address space failed");
    in_use_ += static_cast<int64_t>(bytes);
    peak_ = std::max(peak_, in_use_);
    return Buffer(p, bytes, Device::cuda, [this, len, bytes](void* q) {
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

  void embedding_forward(TensorView, TensorView, TensorView, TensorView) override {}
  void embedding_backward(TensorView, TensorView, TensorView, TensorView) override {}
  void token_embedding_forward(TensorView, TensorView, TensorView, int64_t) override {}
  void token_embedding_backward(TensorView, TensorView, TensorView, int64_t) override {}
  void position_embedding_forward(TensorView, TensorView, int64_t, int) override {}
  void position_embedding_backward(TensorView, TensorView, int64_t, int) override {}
  void layernorm_forward(TensorView, TensorView, TensorView, TensorView, TensorView,
                         TensorView) override {}
  void add_layernorm_forward(TensorView, TensorView, TensorView, TensorView, TensorView, TensorView,
                             TensorView, TensorView) override {}
  void layernorm_backward(TensorView, TensorView, TensorView, TensorView, TensorView, TensorView,
                          TensorView, TensorView, TensorView) override {}
  void matmul_forward(TensorView, TensorView, TensorView, TensorView) override {}
  void matmul_backward(TensorView, TensorView, TensorView, TensorView, TensorView,
                       TensorView) override {}
  void matmul_gelu_forward(TensorView, TensorView, TensorView, TensorView, TensorView) override {}
  void matmul_backward_dgelu(TensorView, TensorView, TensorView, TensorView, TensorView, TensorView,
                             TensorView) override {}
  void add_bias(TensorView, TensorView) override {}
  // CudaOps' sizes (kernels/core/attention_kernels.hpp).
  int64_t attention_saved_elems(int B, int n_head, int T) const override {
    return gt::attention_saved_elems(Device::cuda, B, n_head, T);
  }
  void attention_forward(TensorView, TensorView, TensorView, int) override {}
  int64_t attention_scratch_elems(int B, int n_head, int T) const override {
    return gt::attention_scratch_elems(Device::cuda, B, n_head, T);
  }
  void attention_backward(TensorView, TensorView, TensorView, TensorView, TensorView, TensorView,
                          int) override {}
  void gelu_forward(TensorView, TensorView) override {}
  void gelu_backward(TensorView, TensorView, TensorView) override {}
  void add(TensorView, TensorView, TensorView) override {}
  void accumulate(TensorView, TensorView) override {}
  void zero(TensorView) override {}
  void copy(TensorView, TensorView) override {}
  void cast(TensorView, TensorView) override {}
  void softmax_cross_entropy(TensorView, TensorView, TensorView, TensorView, int64_t,
                             float) override {}
  void cross_entropy_shard_max(TensorView, TensorView, int64_t, int64_t) override {}
  void cross_entropy_shard_sums(TensorView, TensorView, TensorView, TensorView, TensorView, int64_t,
                                int64_t) override {}
  void cross_entropy_shard_finish(TensorView, TensorView, TensorView, TensorView, TensorView,
                                  TensorView, TensorView, int64_t, int64_t, float) override {}
  double sum_squares(TensorView) override { return 0.0; }
  void sum_squares_runs(TensorView, TensorView, const std::vector<AdamWRun>&) override {}
  void clip_scale(TensorView, TensorView, float) override {}
  void adamw_update_runs(TensorView, TensorView, TensorView, TensorView, TensorView, TensorView,
                         const std::vector<AdamWRun>&, const AdamWParams&) override {}

 private:
  int64_t in_use_ = 0, peak_ = 0;
};

}  // namespace

std::unique_ptr<Ops> make_dry_run_ops() { return std::make_unique<DryRunOps>(); }

}  // namespace gt
