// CPU add / accumulate / zero / copy against plain loops (small and large,
// so both the serial and the OpenMP path run), plus the factory itself.
#include <cstring>

#include "test_ops_common.hpp"

namespace gt::test {
namespace {

const int64_t kSizes[] = {37, 300001};

TEST(CpuOps, FactoryReturnsCpuBackend) {
  EXPECT_EQ(cpu_ops(0)->device(), Device::cpu);
  EXPECT_EQ(cpu_ops(1)->device(), Device::cpu);
  EXPECT_EQ(cpu_ops(-1)->device(), Device::cpu);
}

TEST(CpuElementwise, AddMatchesReference) {
  auto ops = cpu_ops();
  for (int64_t n : kSizes) {
    std::vector<float> a = random_vector(n, 600), b = random_vector(n, 601), out(n, 5.f);
    ops->add(f32(out, {n}), f32(a, {n}), f32(b, {n}));
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<double>(a[i]) + b[i];
    EXPECT_TRUE(all_close(out, to_float(ref), 1e-7f, 1e-6f)) << "n=" << n;
  }
}

TEST(CpuElementwise, AccumulateAddsIntoAcc) {
  auto ops = cpu_ops();
  for (int64_t n : kSizes) {
    std::vector<float> acc = random_vector(n, 610), x = random_vector(n, 611);
    std::vector<double> ref(acc.begin(), acc.end());
    for (int64_t i = 0; i < n; ++i) ref[i] += x[i];
    ops->accumulate(f32(acc, {n}), f32(x, {n}));
    EXPECT_TRUE(all_close(acc, to_float(ref), 1e-7f, 1e-6f)) << "n=" << n;
  }
}

TEST(CpuElementwise, ZeroClearsFloatAndIntTensors) {
  auto ops = cpu_ops();
  for (int64_t n : {int64_t{37}, int64_t{700001}}) {  // > 1 MiB: several chunks
    std::vector<float> t = random_vector(n, 620, 1.f, 2.f);
    ops->zero(f32(t, {n}));
    EXPECT_TRUE(all_close(t, std::vector<float>(n, 0.f), 0.f, 0.f)) << "n=" << n;
  }
  std::vector<int32_t> ids = random_ints(1000, 621, 1, 50);
  ops->zero(i32(ids, {10, 100}));
  EXPECT_EQ(ids, std::vector<int32_t>(1000, 0));
}

TEST(CpuElementwise, CopyIsExact) {
  auto ops = cpu_ops();
  for (int64_t n : {int64_t{37}, int64_t{700001}}) {
    std::vector<float> src = random_vector(n, 630), dst(n, 0.f);
    ops->copy(f32(dst, {n}), f32(src, {n}));
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), n * sizeof(float)), 0) << "n=" << n;
  }
  std::vector<int32_t> a = random_ints(77, 631, -5, 5), b(77, 0);
  ops->copy(i32(b, {7, 11}), i32(a, {7, 11}));
  EXPECT_EQ(a, b);
}

TEST(CpuElementwise, RejectsMismatchedArguments) {
  auto ops = cpu_ops();
  std::vector<float> a(12), b(12), c(13);
  std::vector<int32_t> ints(12);
  EXPECT_THROW(ops->add(f32(a, {12}), f32(b, {12}), f32(c, {13})), Error);
  EXPECT_THROW(ops->accumulate(f32(a, {3, 4}), f32(b, {4, 3})), Error);
  EXPECT_THROW(ops->copy(f32(a, {12}), i32(ints, {12})), Error);
  EXPECT_THROW(ops->add(f32(a, {12}), f32(b, {12}), i32(ints, {12})), Error);
}

}  // namespace
}  // namespace gt::test
