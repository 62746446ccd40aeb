// Grouped-query attention in the CPU kernels (kernels/cpu/attention.cpp with
// n_kv_head < n_head): equal to multi-head attention with each key/value
// head repeated for its group of query heads (HF's repeat_kv), forward and
// backward, whose dK and dV are the group's sums; fp32, odd sizes, two row
// blocks; deterministic.
#include "kernels/cpu/cpu_kernels.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

struct Gqa {
  int B = 2, T = 150, NH = 6, KV = 2, hs = 5;  // T > 128: two row blocks
  int group() const { return NH / KV; }
  int64_t ld_gqa() const { return static_cast<int64_t>(NH + 2 * KV) * hs; }
  int64_t ld_mha() const { return static_cast<int64_t>(3 * NH) * hs; }
  // The multi-head qkv with kv head h / group repeated at head h.
  std::vector<float> expand(const std::vector<float>& g) const {
    std::vector<float> m(static_cast<size_t>(B * T * ld_mha()));
    for (int bt = 0; bt < B * T; ++bt)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < hs; ++i) {
          const float* src = &g[static_cast<size_t>(bt * ld_gqa())];
          float* dst = &m[static_cast<size_t>(bt * ld_mha())];
          const int kv = h / group();
          dst[h * hs + i] = src[h * hs + i];
          dst[(NH + h) * hs + i] = src[(NH + kv) * hs + i];
          dst[(2 * NH + h) * hs + i] = src[(NH + KV + kv) * hs + i];
        }
    return m;
  }
};

TEST(CpuAttentionGqa, EqualsMultiHeadWithRepeatedKeyValueHeads) {
  const Gqa g;
  const int64_t B = g.B, T = g.T, NH = g.NH, C = NH * g.hs;
  std::vector<float> qkv = random_vector(B * T * g.ld_gqa(), 81), qkv_m = g.expand(qkv);
  std::vector<float> out(B * T * C), out_m(B * T * C), att(B * NH * T * T), att_m(att.size());
  cpu::attention_forward(f32(out, {B, T, C}), f32(att, {B, NH, T, T}), f32(qkv, {B, T, g.ld_gqa()}),
                         g.NH, g.KV);
  cpu::attention_forward(f32(out_m, {B, T, C}), f32(att_m, {B, NH, T, T}),
                         f32(qkv_m, {B, T, g.ld_mha()}), g.NH);
  EXPECT_TRUE(all_close(out, out_m, 1e-6f, 1e-5f));

  std::vector<float> dout = random_vector(B * T * C, 82), dqkv(qkv.size(), 7.f),
                     dqkv_m(qkv_m.size()), scr(att.size()), scr_m(att.size());
  cpu::attention_backward(f32(dqkv, {B, T, g.ld_gqa()}), f32(scr, {B, NH, T, T}),
                          f32(dout, {B, T, C}), f32(qkv, {B, T, g.ld_gqa()}), f32(out, {B, T, C}),
                          f32(att, {B, NH, T, T}), g.NH, g.KV);
  cpu::attention_backward(f32(dqkv_m, {B, T, g.ld_mha()}), f32(scr_m, {B, NH, T, T}),
                          f32(dout, {B, T, C}), f32(qkv_m, {B, T, g.ld_mha()}),
                          f32(out_m, {B, T, C}), f32(att_m, {B, NH, T, T}), g.NH);
  // dQ per head; dK, dV of a kv head = the sum over its group's heads.
  std::vector<float> want(qkv.size(), 0.f);
  for (int bt = 0; bt < B * T; ++bt)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < g.hs; ++i) {
        const float* src = &dqkv_m[static_cast<size_t>(bt * g.ld_mha())];
        float* dst = &want[static_cast<size_t>(bt * g.ld_gqa())];
        const int kv = h / g.group();
        dst[h * g.hs + i] = src[h * g.hs + i];
        dst[(NH + kv) * g.hs + i] += src[(NH + h) * g.hs + i];
        dst[(NH + g.KV + kv) * g.hs + i] += src[(2 * NH + h) * g.hs + i];
      }
  EXPECT_TRUE(all_close(dqkv, want, 1e-5f, 1e-4f));  // every element assigned (no 7s left)

  // Deterministic: the same call again gives the same bits.
  std::vector<float> again(qkv.size());
  cpu::attention_backward(f32(again, {B, T, g.ld_gqa()}), f32(scr, {B, NH, T, T}),
                          f32(dout, {B, T, C}), f32(qkv, {B, T, g.ld_gqa()}), f32(out, {B, T, C}),
                          f32(att, {B, NH, T, T}), g.NH, g.KV);
  EXPECT_EQ(again, dqkv);
}

TEST(CpuAttentionGqa, RejectsKvHeadsThatDoNotDivideTheHeads) {
  std::vector<float> qkv(2 * 3 * 40), out(2 * 3 * 20), att(2 * 4 * 3 * 3);
  expect_error_containing(
      [&] {
        cpu::attention_forward(f32(out, {2, 3, 20}), f32(att, {2, 4, 3, 3}), f32(qkv, {2, 3, 40}),
                               4, 3);
      },
      "n_kv_head 3 must divide n_head 4");
}

// Through the Ops entry (what the model calls): the same as the kernel, and
// the entry's own shape contract names the head counts.
TEST(CpuAttentionGqa, OpsEntryPassesTheKeyValueHeadsThrough) {
  const Gqa g;
  const int64_t B = g.B, T = g.T, NH = g.NH, C = NH * g.hs;
  auto ops = cpu_ops();
  std::vector<float> qkv = random_vector(B * T * g.ld_gqa(), 83);
  std::vector<float> out(B * T * C), att(B * NH * T * T), out_k(out.size()), att_k(att.size());
  ops->attention_forward(f32(out, {B, T, C}),
                         f32(att, {ops->attention_saved_elems(g.B, g.NH, g.T)}),
                         f32(qkv, {B, T, g.ld_gqa()}), g.NH, g.KV);
  cpu::attention_forward(f32(out_k, {B, T, C}), f32(att_k, {B, NH, T, T}),
                         f32(qkv, {B, T, g.ld_gqa()}), g.NH, g.KV);
  EXPECT_EQ(out, out_k);
  expect_error_containing(
      [&] {
        ops->attention_forward(f32(out, {B, T, C}), f32(att, {B * NH * T * T}),
                               f32(qkv, {B, T, g.ld_gqa()}), g.NH, 4);
      },
      "n_kv_head 4 must divide n_head 6");
  expect_error_containing(
      [&] {
        ops->attention_forward(f32(out, {B, T, C}), f32(att, {B * NH * T * T}),
                               f32(qkv, {B, T, g.ld_gqa() - 1}), g.NH, g.KV);
      },
      "is not (B, T, (n_head + 2 n_kv_head) hs) with n_head 6 and n_kv_head 2");
}

}  // namespace
}  // namespace gt::test
