// The Ops entry points (kernels/ops.hpp): every op checks its shapes once,
// in the backend's name, before anything runs; the observer sees each op
// once, with its named views, also when the backend throws; a dry run
// (DryRunOps) checks and skips every op; and the profiler describes an op it
// has no formula for from the views its call names (op_descriptions.hpp).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "model_steps.hpp"
#include "test_ops_common.hpp"
#include "test_util.hpp"
#include "trainer/plan/dry_run_ops.hpp"
#include "trainer/profile/op_descriptions.hpp"

namespace gt {
namespace {

using test::expect_error_containing;
using test::f32;

// Records every call; checks the begin/end pairing (ops never nest).
class Recorder final : public OpObserver {
 public:
  struct Seen {
    std::string name;
    OpClass cls;
    std::vector<std::string> tensors;  // "out:w", "inp:r", "dweight:a"
    bool ended = false;
  };
  uint64_t on_begin(const OpCall& call) override {
    EXPECT_FALSE(open_) << call.name() << " began inside another op";
    open_ = true;
    Seen s{call.name(), call.cls(), {}, false};
    for (int i = 0; i < call.num_tensors(); ++i) {
      const OpTensor& t = call.tensor(i);
      const char* a = t.access == Access::read ? "r" : t.access == Access::write ? "w" : "a";
      s.tensors.push_back(std::string(t.name) + ":" + a);
    }
    seen.push_back(s);
    return seen.size();
  }
  void on_end(uint64_t token, const OpCall& call) override {
    ASSERT_EQ(token, seen.size()) << call.name();
    EXPECT_EQ(seen.back().name, call.name());
    seen.back().ended = true;
    open_ = false;
  }
  std::vector<Seen> seen;

 private:
  bool open_ = false;
};

TEST(OpsEntry, TheObserverSeesEachOpOnceWithItsNamedViews) {
  auto ops = test::cpu_ops(1);
  Recorder rec;
  ops->set_observer(&rec);
  std::vector<float> x(6, 1.f), w(12, 0.5f), b(4, 0.f), out(8);
  ops->matmul_forward(f32(out, {2, 4}), f32(x, {2, 3}), f32(w, {4, 3}), f32(b, {4}));
  EXPECT_EQ(ops->sum_squares(f32(x, {6})), 6.0);
  ops->set_observer(nullptr);
  ops->zero(f32(b, {4}));  // detached: not seen

  ASSERT_EQ(rec.seen.size(), 2u);
  EXPECT_EQ(rec.seen[0].name, "matmul_forward");
  EXPECT_EQ(rec.seen[0].cls, OpClass::gemm);
  EXPECT_EQ(rec.seen[0].tensors,
            (std::vector<std::string>{"out:w", "inp:r", "weight:r", "bias:r"}));
  EXPECT_EQ(rec.seen[1].name, "sum_squares");
  EXPECT_EQ(rec.seen[1].tensors, (std::vector<std::string>{"t:r"}));
  EXPECT_TRUE(rec.seen[0].ended && rec.seen[1].ended);
  EXPECT_EQ(out[0], 1.5f);  // ran: 3 x 1 x 0.5
}

TEST(OpsEntry, AShapeErrorNamesTheBackendAndNothingRunsOrIsObserved) {
  auto ops = test::cpu_ops(1);
  Recorder rec;
  ops->set_observer(&rec);
  std::vector<float> x(32), w(21), out(12, 7.f);
  expect_error_containing(
      [&] {
        ops->matmul_forward(f32(out, {4, 3}), f32(x, {4, 8}), f32(w, {3, 7}), {});
      },
      "CpuOps::matmul_forward: weight must be (3, 8), got (3, 7)");
  expect_error_containing(
      [&] {
        ops->add(f32(out, {12}), f32(x, {12}), f32(w, {3, 4}));
      },
      "CpuOps::add: out (12) and b (3, 4) must have the same shape");
  EXPECT_TRUE(rec.seen.empty());
  for (float v : out) EXPECT_EQ(v, 7.f);
}

// The backend's own checks (dtypes on the CPU) throw inside the observed
// pair: the observer still sees the op end.
TEST(OpsEntry, TheObserverSeesTheEndOfAnOpTheBackendRejects) {
  auto ops = test::cpu_ops(1);
  Recorder rec;
  ops->set_observer(&rec);
  std::vector<float> a(4), out(4);
  std::vector<uint16_t> b16(4);
  EXPECT_THROW(ops->add(f32(out, {4}), f32(a, {4}), test::bf16_view(b16, {4})), Error);
  ASSERT_EQ(rec.seen.size(), 1u);
  EXPECT_TRUE(rec.seen[0].ended);
}

TEST(OpsEntry, ADryRunChecksAndSkipsEveryOp) {
  auto ops = make_dry_run_ops();
  EXPECT_STREQ(ops->backend_name(), "DryRunOps");
  Recorder rec;
  ops->set_observer(&rec);
  // PROT_NONE "device" memory: running any op on it would fault.
  Buffer x = ops->allocate(4 * 8 * 4), w = ops->allocate(3 * 8 * 4), y = ops->allocate(4 * 3 * 4);
  const auto view = [](const Buffer& b, std::initializer_list<int64_t> shape) {
    return make_view(b.data(), DType::f32, Device::cuda, shape);
  };
  ops->matmul_forward(view(y, {4, 3}), view(x, {4, 8}), view(w, {3, 8}), {});
  ops->gelu_forward(view(x, {32}), view(x, {32}));
  EXPECT_EQ(ops->sum_squares(view(x, {32})), 0.0);  // what a skipped op returns
  ASSERT_EQ(rec.seen.size(), 3u);
  EXPECT_TRUE(rec.seen[2].ended);
  expect_error_containing(
      [&] {
        ops->matmul_forward(view(y, {4, 3}), view(x, {4, 8}), view(w, {3, 7}), {});
      },
      "DryRunOps::matmul_forward: weight must be (3, 8), got (3, 7)");
}

// An op the profiler has no formula for (a new one) is described by the
// views it names: bytes read and written, one FLOP per element written.
TEST(OpsEntry, AnOpWithoutAFormulaGetsTheGenericCost) {
  std::vector<float> out(8), inp(8), acc(8);
  std::vector<uint16_t> half(8);
  TensorView o = f32(out, {2, 4}), i = f32(inp, {2, 4}), a = f32(acc, {8}),
             h = test::bf16_view(half, {8}), none;
  OpCall call("made_up", OpClass::elementwise);
  call.write("out", o).read("inp", i).accumulate("acc", a).read("half", h).read("none", none);
  call.scalar("alpha", 0.5);
  ASSERT_FALSE(has_op_formula("made_up"));
  const OpDescription d = describe_op(call);
  EXPECT_EQ(d.cost.bytes, 8 * 4 + 8 * 4 + 2 * 8 * 4 + 8 * 2);
  EXPECT_EQ(d.cost.flops, 16.0);  // out and acc
  EXPECT_EQ(d.shape, "out (2, 4)");
  EXPECT_EQ(call.scalar("alpha"), 0.5);
  expect_error_containing([&] { (void)call.view("missing"); }, "has no tensor named missing");
}

// Every op a training step issues keeps its exact formula (a name the
// description table misses would silently fall back to the generic cost).
TEST(OpsEntry, EveryOpOfATrainingStepHasAFormula) {
  for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
    auto ops = test::cpu_ops(1);
    Recorder rec;
    ops->set_observer(&rec);
    (void)test::train_steps(*ops, 1, test::tiny_gpt(), 2, 8, dtype);
    std::set<std::string> names;
    for (const auto& s : rec.seen) names.insert(s.name);
    EXPECT_GE(names.size(), 15u);
    for (const std::string& n : names) EXPECT_TRUE(has_op_formula(n.c_str())) << n;
  }
}

}  // namespace
}  // namespace gt
