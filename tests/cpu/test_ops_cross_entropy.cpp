// CPU fused softmax cross-entropy against a double reference and finite
// differences, with dlogits aliasing logits, without dlogits, and with bad
// targets (which must throw naming the value); a padded vocabulary's extra
// columns change nothing.
#include <cmath>

#include "kernels/core/bf16.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

struct CrossEntropyCase {
  int64_t R, V;
  std::vector<float> logits;
  std::vector<int32_t> targets;
  CrossEntropyCase(int64_t r, int64_t v, uint64_t seed)
      : R(r), V(v), logits(random_vector(r * v, seed, -4.f, 4.f)),
        targets(random_ints(r, seed + 1, 0, static_cast<int32_t>(v))) {
    // A large offset on one row: only max subtraction keeps exp finite.
    for (int64_t j = 0; j < v; ++j) logits[j] += 100.f;
    targets[r - 1] = static_cast<int32_t>(v - 1);  // the last class, an edge
  }
  std::vector<float> losses(Ops& ops, TensorView dlogits, float scale) {
    std::vector<float> out(R, -1.f);
    ops.softmax_cross_entropy(f32(out, {R}), dlogits, f32(logits, {R, V}), i32(targets, {R}), V,
                              scale);
    return out;
  }
  // The logits with `pad` columns of `fill` appended to every row.
  std::vector<float> padded_logits(int64_t pad, float fill) const {
    std::vector<float> out;
    for (int64_t r = 0; r < R; ++r) {
      out.insert(out.end(), logits.begin() + r * V, logits.begin() + (r + 1) * V);
      out.insert(out.end(), static_cast<size_t>(pad), fill);
    }
    return out;
  }
  void reference(std::vector<double>& loss, std::vector<double>& dlogits, double scale) const {
    loss.assign(R, 0.0);
    dlogits.assign(R * V, 0.0);
    for (int64_t r = 0; r < R; ++r) {
      const float* x = &logits[r * V];
      double mx = x[0], sum = 0.0;
      for (int64_t j = 1; j < V; ++j) mx = std::max(mx, static_cast<double>(x[j]));
      for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - mx);
      loss[r] = std::log(sum) + mx - x[targets[r]];
      for (int64_t j = 0; j < V; ++j)
        dlogits[r * V + j] = (std::exp(x[j] - mx) / sum - (j == targets[r] ? 1.0 : 0.0)) * scale;
    }
  }
};

TEST(CpuCrossEntropy, MatchesReference) {
  auto ops = cpu_ops();
  const float scale = 0.2f;
  for (auto [r, v] : {std::pair<int64_t, int64_t>{5, 37}, {6, 5003}}) {  // serial, parallel
    SCOPED_TRACE(testing::Message() << "R=" << r << " V=" << v);
    CrossEntropyCase k(r, v, 700);
    std::vector<double> rl, rd;
    k.reference(rl, rd, scale);
    std::vector<float> dl(r * v, 3.f);  // assigned: the pre-fill must vanish
    std::vector<float> loss = k.losses(*ops, f32(dl, {r, v}), scale);
    EXPECT_TRUE(all_close(loss, to_float(rl), 1e-5f, 1e-5f));
    EXPECT_TRUE(all_close(dl, to_float(rd), 1e-7f, 1e-4f));
    // Without dlogits the losses are the same.
    EXPECT_TRUE(all_close(k.losses(*ops, TensorView{}, scale), loss, 0.f, 0.f));
  }
}

TEST(CpuCrossEntropy, GradientMatchesFiniteDifferences) {
  auto ops = cpu_ops();
  CrossEntropyCase k(5, 37, 710);
  const float scale = 0.7f;
  std::vector<float> dl(k.R * k.V, 0.f);
  k.losses(*ops, f32(dl, {k.R, k.V}), scale);
  // dlogits is the gradient of L = grad_scale * sum(losses).
  std::vector<float> w(k.R, scale);
  auto loss = [&] { return weighted_sum(k.losses(*ops, TensorView{}, scale), w); };
  EXPECT_TRUE(grad_close(dl, numeric_grad(k.logits, loss)));
}

TEST(CpuCrossEntropy, DlogitsMayAliasLogits) {
  auto ops = cpu_ops();
  for (auto [r, v] : {std::pair<int64_t, int64_t>{5, 37}, {6, 5003}}) {
    CrossEntropyCase k(r, v, 720);
    std::vector<float> separate(r * v);
    std::vector<float> loss_sep = k.losses(*ops, f32(separate, {r, v}), 0.5f);
    std::vector<float> loss_alias = k.losses(*ops, f32(k.logits, {r, v}), 0.5f);
    EXPECT_TRUE(all_close(loss_alias, loss_sep, 0.f, 0.f)) << "R=" << r;
    EXPECT_TRUE(all_close(k.logits, separate, 0.f, 0.f)) << "R=" << r;
  }
}

// The model pads the vocabulary to a multiple of 128 (ops.hpp): the padding
// columns must not change a loss or a gradient bit, whatever they hold (here
// logits far above the real ones), and get a zero gradient.
TEST(CpuCrossEntropy, PaddingColumnsChangeNothingAndGetZeroGradient) {
  auto ops = cpu_ops();
  for (auto [r, v] : {std::pair<int64_t, int64_t>{5, 37}, {6, 5003}}) {  // serial, parallel
    SCOPED_TRACE(testing::Message() << "R=" << r << " V=" << v);
    CrossEntropyCase k(r, v, 740);
    const int64_t pad = (v + 127) / 128 * 128 - v, cols = v + pad;
    std::vector<float> want_d(r * v);
    const std::vector<float> want = k.losses(*ops, f32(want_d, {r, v}), 0.4f);
    std::vector<float> x = k.padded_logits(pad, 1e4f), d(r * cols, 5.f), loss(r, -1.f);
    ops->softmax_cross_entropy(f32(loss, {r}), f32(d, {r, cols}), f32(x, {r, cols}),
                               i32(k.targets, {r}), v, 0.4f);
    EXPECT_TRUE(all_close(loss, want, 0.f, 0.f));
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < cols; ++j)
        ASSERT_EQ(d[i * cols + j], j < v ? want_d[i * v + j] : 0.f) << "row " << i << " col " << j;
    // A target in the padding is out of range.
    k.targets[0] = static_cast<int32_t>(v);
    expect_error_containing(
        [&] {
          ops->softmax_cross_entropy(f32(loss, {r}), TensorView{}, f32(x, {r, cols}),
                                     i32(k.targets, {r}), v, 1.f);
        },
        "out of range [0, " + std::to_string(v) + ")");
  }
}

// bf16 logits (the bf16 model's LM head): the losses are the fp32 op's on
// the widened values, bit for bit, and the bf16 dlogits its gradient rounded
// to nearest even, in place or not, padding included.
TEST(CpuCrossEntropy, Bf16LogitsAreTheFp32OpOnTheirValuesRounded) {
  auto ops = cpu_ops();
  for (auto [r, v] : {std::pair<int64_t, int64_t>{5, 37}, {6, 5003}}) {  // serial, parallel
    SCOPED_TRACE(testing::Message() << "R=" << r << " V=" << v);
    CrossEntropyCase k(r, v, 750);
    const int64_t cols = (v + 127) / 128 * 128;
    std::vector<float> x = k.padded_logits(cols - v, 3.f);
    std::vector<uint16_t> bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      bits[i] = bf16_from_float(x[i]);
      x[i] = bf16_to_float(bits[i]);
    }
    std::vector<float> want_loss(r), want_d(x.size());
    ops->softmax_cross_entropy(f32(want_loss, {r}), f32(want_d, {r, cols}), f32(x, {r, cols}),
                               i32(k.targets, {r}), v, 0.3f);
    std::vector<float> loss(r);
    std::vector<uint16_t> d(bits.size(), 0x7FFF);
    ops->softmax_cross_entropy(f32(loss, {r}), bf16_view(d, {r, cols}), bf16_view(bits, {r, cols}),
                               i32(k.targets, {r}), v, 0.3f);
    EXPECT_TRUE(all_close(loss, want_loss, 0.f, 0.f));
    for (size_t i = 0; i < d.size(); ++i)
      ASSERT_EQ(d[i], bf16_from_float(want_d[i])) << "dlogits element " << i;
    ops->softmax_cross_entropy(f32(loss, {r}), bf16_view(bits, {r, cols}),
                               bf16_view(bits, {r, cols}), i32(k.targets, {r}), v,
                               0.3f);  // in place
    EXPECT_TRUE(all_close(loss, want_loss, 0.f, 0.f));
    EXPECT_EQ(bits, d) << "in place";
    // dlogits must have the logits' dtype.
    std::vector<float> d32(x.size());
    expect_error_containing(
        [&] {
          ops->softmax_cross_entropy(f32(loss, {r}), f32(d32, {r, cols}),
                                     bf16_view(bits, {r, cols}), i32(k.targets, {r}), v, 0.3f);
        },
        "dlogits must have the logits' dtype bf16, got fp32");
  }
}

TEST(CpuCrossEntropy, OutOfRangeTargetThrowsNamingIt) {
  auto ops = cpu_ops();
  CrossEntropyCase k(5, 37, 730);
  k.targets[2] = 37;
  expect_error_containing([&] { k.losses(*ops, TensorView{}, 1.f); }, "target 37");
  k.targets[2] = -1;
  expect_error_containing([&] { k.losses(*ops, TensorView{}, 1.f); }, "target -1");
}

}  // namespace
}  // namespace gt::test
