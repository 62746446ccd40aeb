// CPU causal attention against a double reference and finite differences,
// with one and two threads and with T both inside one row block (128) and
// across several. Also: att is a causal probability matrix; dqkv is assigned.
#include <cmath>
#include <cstring>

#include "test_ops_common.hpp"

namespace gt::test {
namespace {

struct AttentionCase {
  int64_t B, T, C, NH;
  std::vector<float> qkv, w;
  AttentionCase(int64_t b, int64_t t, int64_t c, int64_t nh, uint64_t seed)
      : B(b), T(t), C(c), NH(nh), qkv(random_vector(b * t * 3 * c, seed, -2.f, 2.f)),
        w(random_vector(b * t * c, seed + 1)) {}
  void forward(Ops& ops, std::vector<float>& out, std::vector<float>& att) {
    out.assign(B * T * C, 0.f);
    att.assign(B * NH * T * T, 42.f);  // garbage: every entry must be written
    ops.attention_forward(f32(out, {B, T, C}), f32(att, {B, NH, T, T}), f32(qkv, {B, T, 3 * C}),
                          static_cast<int>(NH));
  }
  // Double-precision causal softmax attention, one (b, h, i) at a time.
  void reference(std::vector<double>& out, std::vector<double>& att) const {
    const int64_t hs = C / NH;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
    out.assign(B * T * C, 0.0);
    att.assign(B * NH * T * T, 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < T; ++i) {
          const float* q = &qkv[(b * T + i) * 3 * C + h * hs];
          std::vector<double> s(i + 1);
          double mx = -1e300;
          for (int64_t j = 0; j <= i; ++j) {
            const float* k = &qkv[(b * T + j) * 3 * C + C + h * hs];
            double d = 0.0;
            for (int64_t e = 0; e < hs; ++e) d += static_cast<double>(q[e]) * k[e];
            s[j] = d * scale;
            mx = std::max(mx, s[j]);
          }
          double sum = 0.0;
          for (int64_t j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - mx));
          double* arow = &att[((b * NH + h) * T + i) * T];
          for (int64_t j = 0; j <= i; ++j) {
            arow[j] = s[j] / sum;
            const float* v = &qkv[(b * T + j) * 3 * C + 2 * C + h * hs];
            for (int64_t e = 0; e < hs; ++e) out[(b * T + i) * C + h * hs + e] += arow[j] * v[e];
          }
        }
  }
};

struct Shape {
  int64_t B, T, C, NH;
};

const int kThreadCounts[] = {2, 1};
// T = 7 fits one row block; T = 130 and 260 cross block boundaries (128).
const Shape kShapes[] = {{2, 7, 12, 3}, {1, 130, 8, 2}, {1, 260, 8, 1}};

TEST(CpuAttention, ForwardMatchesReferenceAndAttIsCausalSoftmax) {
  for (int threads : kThreadCounts)
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(testing::Message() << "threads=" << threads << " B=" << s.B << " T=" << s.T
                                      << " C=" << s.C << " NH=" << s.NH);
      auto ops = cpu_ops(threads);
      AttentionCase k(s.B, s.T, s.C, s.NH, 200);
      std::vector<float> out, att;
      k.forward(*ops, out, att);
      std::vector<double> ro, ra;
      k.reference(ro, ra);
      EXPECT_TRUE(all_close(out, to_float(ro), 1e-5f, 1e-4f));
      EXPECT_TRUE(all_close(att, to_float(ra), 1e-6f, 1e-4f));
      int64_t above_nonzero = 0, bad_rows = 0;
      for (int64_t r = 0; r < s.B * s.NH * s.T; ++r) {
        const int64_t i = r % s.T;
        double sum = 0.0;
        for (int64_t j = 0; j < s.T; ++j) {
          const float p = att[r * s.T + j];
          if (j > i && p != 0.f) ++above_nonzero;
          sum += p;
        }
        if (std::fabs(sum - 1.0) > 1e-5) ++bad_rows;
      }
      EXPECT_EQ(above_nonzero, 0);
      EXPECT_EQ(bad_rows, 0);
    }
  cpu_ops();
}

TEST(CpuAttention, BackwardMatchesFiniteDifferences) {
  // The multi-block case runs on one thread only: the block logic does not
  // depend on the thread count, and finite differences over it are slow.
  const std::pair<int, Shape> cases[] = {
      {2, kShapes[0]}, {1, kShapes[0]}, {1, Shape{1, 130, 2, 1}}};
  for (const auto& [threads, s] : cases) {
    SCOPED_TRACE(testing::Message() << "threads=" << threads << " T=" << s.T);
    auto ops = cpu_ops(threads);
    AttentionCase k(s.B, s.T, s.C, s.NH, 300);
    std::vector<float> out, att;
    k.forward(*ops, out, att);
    std::vector<float> dqkv(k.qkv.size(), 77.f);  // assigned: the pre-fill must vanish
    std::vector<float> scratch(att.size(), -3.f), dout(k.w);
    ops->attention_backward(f32(dqkv, {s.B, s.T, 3 * s.C}), f32(scratch, {s.B, s.NH, s.T, s.T}),
                            f32(dout, {s.B, s.T, s.C}), f32(k.qkv, {s.B, s.T, 3 * s.C}),
                            f32(out, {s.B, s.T, s.C}), f32(att, {s.B, s.NH, s.T, s.T}),
                            static_cast<int>(s.NH));
    auto loss = [&] {
      std::vector<float> o, a;
      k.forward(*ops, o, a);
      return weighted_sum(o, k.w);
    };
    EXPECT_TRUE(grad_close(dqkv, numeric_grad(k.qkv, loss)));
  }
  cpu_ops();
}

TEST(CpuAttention, IsBitwiseDeterministicRunToRun) {
  auto ops = cpu_ops();
  AttentionCase k(2, 130, 16, 4, 400);
  auto run = [&] {
    std::vector<float> out, att;
    k.forward(*ops, out, att);
    std::vector<float> dqkv(k.qkv.size()), scratch(att.size());
    ops->attention_backward(f32(dqkv, {2, 130, 48}), f32(scratch, {2, 4, 130, 130}),
                            f32(k.w, {2, 130, 16}), f32(k.qkv, {2, 130, 48}),
                            f32(out, {2, 130, 16}), f32(att, {2, 4, 130, 130}), 4);
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    return out;
  };
  std::vector<float> a = run(), b = run();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(CpuAttention, RejectsBadShapes) {
  auto ops = cpu_ops();
  std::vector<float> qkv(2 * 7 * 36), out(2 * 7 * 12), att(2 * 5 * 7 * 7);
  // C = 12 is not divisible by 5 heads.
  expect_error_containing(
      [&] {
        ops->attention_forward(f32(out, {2, 7, 12}), f32(att, {2, 5, 7, 7}),
                               f32(qkv, {2, 7, 36}), 5);
      },
      "n_head 5");
  // qkv whose last dim is not 3C for out's C.
  std::vector<float> att3(2 * 3 * 7 * 7);
  EXPECT_THROW(ops->attention_forward(f32(out, {2, 7, 12}), f32(att3, {2, 3, 7, 7}),
                                      f32(qkv, {2, 7, 18}), 3),
               Error);
  EXPECT_THROW(ops->attention_forward(f32(out, {2, 7, 12}), f32(att3, {2, 3, 7, 7}),
                                      f32(qkv, {2, 7, 35}), 3),
               Error);
}

}  // namespace
}  // namespace gt::test
