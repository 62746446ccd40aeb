// OffHostOps: a test backend whose memory the host cannot touch, so the CPU
// suite can prove that the model, the parameter store and the checkpoint path
// would run on a GPU: they may reach a Buffer's data only through the
// backend's ops and its upload/download, exactly the rule device memory
// imposes.
//
// It wraps CpuOps. Every Buffer is its own mmap'd region kept PROT_NONE; an
// op (or a transfer) opens every region for the duration of the call and
// closes them again, so a host read or write from anywhere else dies with
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

class OffHostOps final : public Ops {
 public:
  OffHostOps() : inner_(make_cpu_ops(1)) {}
  ~OffHostOps() override { GT_CHECK(regions_.empty(), "OffHostOps destroyed before its Buffers"); }

  Device device() const override { return Device::cuda; }

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

#define GT_OFFHOST_VIEW(v) h(v, #v)
  void embedding_forward(TensorView out, TensorView tokens, TensorView wte, TensorView wpe) override {
    Open o(*this);
    inner_->embedding_forward(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(tokens), GT_OFFHOST_VIEW(wte), GT_OFFHOST_VIEW(wpe));
  }
  void embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout, TensorView tokens) override {
    Open o(*this);
    inner_->embedding_backward(GT_OFFHOST_VIEW(dwte), GT_OFFHOST_VIEW(dwpe), GT_OFFHOST_VIEW(dout), GT_OFFHOST_VIEW(tokens));
  }
  void token_embedding_forward(TensorView out, TensorView tokens, TensorView wte, int64_t vocab_start) override {
    Open o(*this);
    inner_->token_embedding_forward(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(tokens), GT_OFFHOST_VIEW(wte), vocab_start);
  }
  void token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens, int64_t vocab_start) override {
    Open o(*this);
    inner_->token_embedding_backward(GT_OFFHOST_VIEW(dwte), GT_OFFHOST_VIEW(dout), GT_OFFHOST_VIEW(tokens), vocab_start);
  }
  void position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row, int T) override {
    Open o(*this);
    inner_->position_embedding_forward(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(wpe), first_row, T);
  }
  void position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row, int T) override {
    Open o(*this);
    inner_->position_embedding_backward(GT_OFFHOST_VIEW(dwpe), GT_OFFHOST_VIEW(dout), first_row, T);
  }
  void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                         TensorView weight, TensorView bias) override {
    Open o(*this);
    inner_->layernorm_forward(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(mean), GT_OFFHOST_VIEW(rstd), GT_OFFHOST_VIEW(inp),
                              GT_OFFHOST_VIEW(weight), GT_OFFHOST_VIEW(bias));
  }
  void add_layernorm_forward(TensorView res, TensorView out, TensorView mean, TensorView rstd,
                             TensorView a, TensorView b, TensorView weight,
                             TensorView bias) override {
    Open o(*this);
    inner_->add_layernorm_forward(GT_OFFHOST_VIEW(res), GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(mean),
                                  GT_OFFHOST_VIEW(rstd), GT_OFFHOST_VIEW(a), GT_OFFHOST_VIEW(b),
                                  GT_OFFHOST_VIEW(weight), GT_OFFHOST_VIEW(bias));
  }
  void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView weight, TensorView mean, TensorView rstd,
                          TensorView dinp_bf16) override {
    Open o(*this);
    inner_->layernorm_backward(GT_OFFHOST_VIEW(dinp), GT_OFFHOST_VIEW(dweight),
                               GT_OFFHOST_VIEW(dbias), GT_OFFHOST_VIEW(dout), GT_OFFHOST_VIEW(inp),
                               GT_OFFHOST_VIEW(weight), GT_OFFHOST_VIEW(mean),
                               GT_OFFHOST_VIEW(rstd), GT_OFFHOST_VIEW(dinp_bf16));
  }
  void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) override {
    Open o(*this);
    inner_->matmul_forward(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(inp), GT_OFFHOST_VIEW(weight), GT_OFFHOST_VIEW(bias));
  }
  void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                       TensorView inp, TensorView weight) override {
    Open o(*this);
    inner_->matmul_backward(GT_OFFHOST_VIEW(dinp), GT_OFFHOST_VIEW(dweight), GT_OFFHOST_VIEW(dbias), GT_OFFHOST_VIEW(dout),
                            GT_OFFHOST_VIEW(inp), GT_OFFHOST_VIEW(weight));
  }
  void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                           TensorView bias) override {
    Open o(*this);
    inner_->matmul_gelu_forward(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(pre), GT_OFFHOST_VIEW(inp),
                                GT_OFFHOST_VIEW(weight), GT_OFFHOST_VIEW(bias));
  }
  void matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                             TensorView inp, TensorView weight, TensorView pre) override {
    Open o(*this);
    inner_->matmul_backward_dgelu(
        GT_OFFHOST_VIEW(dinp), GT_OFFHOST_VIEW(dweight), GT_OFFHOST_VIEW(dbias),
        GT_OFFHOST_VIEW(dout), GT_OFFHOST_VIEW(inp), GT_OFFHOST_VIEW(weight), GT_OFFHOST_VIEW(pre));
  }
  void add_bias(TensorView out, TensorView bias) override {
    Open o(*this);
    inner_->add_bias(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(bias));
  }
  int64_t attention_saved_elems(int B, int n_head, int T) const override {
    return inner_->attention_saved_elems(B, n_head, T);
  }
  void attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head) override {
    Open o(*this);
    inner_->attention_forward(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(saved), GT_OFFHOST_VIEW(qkv), n_head);
  }
  int64_t attention_scratch_elems(int B, int n_head, int T) const override {
    return inner_->attention_scratch_elems(B, n_head, T);
  }
  void attention_backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                          TensorView out, TensorView saved, int n_head) override {
    Open o(*this);
    inner_->attention_backward(GT_OFFHOST_VIEW(dqkv), GT_OFFHOST_VIEW(scratch), GT_OFFHOST_VIEW(dout), GT_OFFHOST_VIEW(qkv),
                               GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(saved), n_head);
  }
  void gelu_forward(TensorView out, TensorView inp) override {
    Open o(*this);
    inner_->gelu_forward(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(inp));
  }
  void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) override {
    Open o(*this);
    inner_->gelu_backward(GT_OFFHOST_VIEW(dinp), GT_OFFHOST_VIEW(inp), GT_OFFHOST_VIEW(dout));
  }
  void add(TensorView out, TensorView a, TensorView b) override {
    Open o(*this);
    inner_->add(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(a), GT_OFFHOST_VIEW(b));
  }
  void accumulate(TensorView acc, TensorView x) override {
    Open o(*this);
    inner_->accumulate(GT_OFFHOST_VIEW(acc), GT_OFFHOST_VIEW(x));
  }
  void zero(TensorView t) override {
    Open o(*this);
    inner_->zero(GT_OFFHOST_VIEW(t));
  }
  void copy(TensorView dst, TensorView src) override {
    Open o(*this);
    inner_->copy(GT_OFFHOST_VIEW(dst), GT_OFFHOST_VIEW(src));
  }
  void cast(TensorView dst, TensorView src) override {
    Open o(*this);
    inner_->cast(GT_OFFHOST_VIEW(dst), GT_OFFHOST_VIEW(src));
  }
  void softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                             TensorView targets, int64_t vocab_size, float grad_scale) override {
    Open o(*this);
    inner_->softmax_cross_entropy(GT_OFFHOST_VIEW(losses), GT_OFFHOST_VIEW(dlogits),
                                  GT_OFFHOST_VIEW(logits), GT_OFFHOST_VIEW(targets), vocab_size,
                                  grad_scale);
  }
  void cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                               int64_t vocab_size) override {
    Open o(*this);
    inner_->cross_entropy_shard_max(GT_OFFHOST_VIEW(row_max), GT_OFFHOST_VIEW(logits), vocab_start,
                                    vocab_size);
  }
  void cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                                TensorView targets, TensorView row_max, int64_t vocab_start,
                                int64_t vocab_size) override {
    Open o(*this);
    inner_->cross_entropy_shard_sums(GT_OFFHOST_VIEW(sumexp), GT_OFFHOST_VIEW(target_logit),
                                     GT_OFFHOST_VIEW(logits), GT_OFFHOST_VIEW(targets),
                                     GT_OFFHOST_VIEW(row_max), vocab_start, vocab_size);
  }
  void cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                  TensorView targets, TensorView row_max, TensorView sumexp,
                                  TensorView target_logit, int64_t vocab_start, int64_t vocab_size,
                                  float grad_scale) override {
    Open o(*this);
    inner_->cross_entropy_shard_finish(
        GT_OFFHOST_VIEW(losses), GT_OFFHOST_VIEW(dlogits), GT_OFFHOST_VIEW(logits),
        GT_OFFHOST_VIEW(targets), GT_OFFHOST_VIEW(row_max), GT_OFFHOST_VIEW(sumexp),
        GT_OFFHOST_VIEW(target_logit), vocab_start, vocab_size, grad_scale);
  }
  double sum_squares(TensorView t) override {
    Open o(*this);
    return inner_->sum_squares(GT_OFFHOST_VIEW(t));
  }
  void sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs) override {
    Open o(*this);
    inner_->sum_squares_runs(GT_OFFHOST_VIEW(out), GT_OFFHOST_VIEW(x), runs);
  }
  void clip_scale(TensorView scale, TensorView stats, float max_norm) override {
    Open o(*this);
    inner_->clip_scale(GT_OFFHOST_VIEW(scale), GT_OFFHOST_VIEW(stats), max_norm);
  }
  void adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                         TensorView param_bf16, TensorView scale, const std::vector<AdamWRun>& runs,
                         const AdamWParams& p) override {
    Open o(*this);
    inner_->adamw_update_runs(GT_OFFHOST_VIEW(param), GT_OFFHOST_VIEW(grad), GT_OFFHOST_VIEW(m),
                              GT_OFFHOST_VIEW(v), GT_OFFHOST_VIEW(param_bf16),
                              GT_OFFHOST_VIEW(scale), runs, p);
  }
#undef GT_OFFHOST_VIEW

 private:
  // The CPU kernel's view of a "device" tensor: it must be labelled cuda
  // (unless empty) and lie inside one of our regions.
  TensorView h(TensorView v, const char* what) const {
    if (v.empty()) return v;
    GT_CHECK(v.device == Device::cuda, "OffHostOps: ", what, " ", v.shape_str(),
             " is labelled ", device_name(v.device), ", expected the backend's device (cuda)");
    GT_CHECK(owns(v.data), "OffHostOps: ", what, " ", v.shape_str(),
             " does not point into memory from allocate()");
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

  std::unique_ptr<Ops> inner_;
  std::map<void*, size_t> regions_;
  int64_t bytes_in_use_ = 0, peak_ = 0, transfers_ = 0, opens_ = 0;
};

}  // namespace gt::test
