// The profiler's byte formulas (trainer/profile/op_costs.hpp, the roofline's
// "bytes" of every op) against the bytes our kernels actually move, counted
// on the emulated device (gt_emu/control.hpp: the distinct pages each kernel
// loads from and stores to). A kernel touching part of a page is charged
// the whole page, so the shapes keep what each kernel touches page-shaped:
// every buffer is a multiple of 256 bytes and ends at a page boundary, tensors
// are a few hundred KiB (the rounding of a 1-D vector stays under 3%),
// attention's q, k and v parts of a row are a page each (C = 1024 floats),
// and the embedding looks up contiguous token ids. Each op's count must lie
// within 3% of its formula,
// plus the extra bytes a kernel is known to move beyond it (named in the
// table: what a fused kernel would save). A formula that charged bytes a
// kernel does not move (or missed some) fails here, naming the op, both
// figures and the kernels counted; so does a kernel change that moves more.
//
// On a real GPU there is nothing to count: the test skips there and runs in
// CI on the emulated device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/layernorm.cuh"
#include "test_util.hpp"
#include "trainer/profile/op_costs.hpp"
#if defined(TRAINER_CUDA_EMULATOR)
#include "gt_emu/control.hpp"
#endif

namespace {

using gt::DType;
using gt::TensorView;
using gt::test::DeviceArray;

#if defined(TRAINER_CUDA_EMULATOR)
struct Counted {
  double bytes = 0;
  std::string kernels;
};

// Runs `op` (which enqueues on `stream`) with counting on; the bytes every
// kernel it launched moved.
Counted count(cudaStream_t stream, const std::function<void()>& op) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  (void)gt::emu::take_traffic();
  gt::emu::set_traffic_counting(true);
  op();
  const cudaError_t e = cudaStreamSynchronize(stream);
  gt::emu::set_traffic_counting(false);
  CUDA_CHECK(e);
  Counted c;
  for (const auto& t : gt::emu::take_traffic()) {
    c.bytes += static_cast<double>(t.bytes_read() + t.bytes_written());
    const size_t at = t.kernel.rfind('/');
    c.kernels +=
        (c.kernels.empty() ? "" : ", ") + t.kernel.substr(at == std::string::npos ? 0 : at + 1);
  }
  return c;
}
#endif

TEST(CudaTraffic, EveryOpsByteFormulaMatchesTheBytesItsKernelsMove) {
#if !defined(TRAINER_CUDA_EMULATOR)
  GTEST_SKIP()
      << "traffic is counted on the emulated device (page faults); a GPU has no such count";
#else
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  auto f32 = [&](DeviceArray<float>& a, std::initializer_list<int64_t> shape) {
    return gt::test::dev_view(a, DType::f32, shape);
  };
  auto rnd = [&](int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    return DeviceArray<float>(gt::test::random_vector(n, seed, lo, hi), s);
  };
  const int64_t R = 256, C = 512, n = R * C;  // 512 KiB per fp32 (R, C) tensor

  struct Row {
    std::string op;
    double formula, extra, counted;
    std::string kernels, why;
  };
  std::vector<Row> rows;
  // `extra`: bytes the kernels move beyond the formula's one pass, and why.
  auto check = [&](const std::string& op, gt::OpCost formula, const Counted& c, double extra = 0,
                   const std::string& why = "") {
    rows.push_back({op, formula.bytes, extra, c.bytes, c.kernels, why});
    const double want = formula.bytes + extra;
    EXPECT_NEAR(c.bytes, want, 0.03 * want)
        << op << ": counted " << c.bytes << " bytes (" << c.kernels << "), the formula says "
        << formula.bytes << (extra ? " + " + std::to_string(extra) + " (" + why + ")" : "");
  };

  auto x = rnd(n, 1), y = rnd(n, 2), out = rnd(n, 3), w = rnd(C, 4, 0.5f, 1.5f), b = rnd(C, 5);
  DeviceArray<float> mean(R, s), rstd(R, s), dw(C, s), db(C, s), dx(n, s);
  check("layernorm_forward", gt::op_cost::layernorm_forward(R, C), count(s, [&] {
          ops.layernorm_forward(f32(out, {R, C}), f32(mean, {R}), f32(rstd, {R}), f32(x, {R, C}),
                                f32(w, {C}), f32(b, {C}));
        }));
  check("add_layernorm_forward", gt::op_cost::add_layernorm_forward(R, C), count(s, [&] {
          ops.add_layernorm_forward(f32(dx, {R, C}), f32(out, {R, C}), f32(mean, {R}),
                                    f32(rstd, {R}), f32(x, {R, C}), f32(y, {R, C}), f32(w, {C}),
                                    f32(b, {C}));
        }));
  // The backward's per-chunk dweight/dbias partials go through scratch:
  // written by the row pass, read by the reduction (1.6% of the bytes here,
  // 1.8% at 124M's shape).
  const double ln_scratch =
      2.0 * 4.0 * static_cast<double>(gt::cuda::layernorm_backward_scratch_floats(R, C));
  const char* ln_scratch_why = "dweight/dbias partials written and read back (scratch)";
  check("layernorm_backward", gt::op_cost::layernorm_backward(R, C),
        count(s,
              [&] {
                ops.layernorm_backward(f32(dx, {R, C}), f32(dw, {C}), f32(db, {C}), f32(y, {R, C}),
                                       f32(x, {R, C}), f32(w, {C}), f32(mean, {R}), f32(rstd, {R}),
                                       {});
              }),
        ln_scratch, ln_scratch_why);
  check("gelu_forward", gt::op_cost::gelu_forward(n),
        count(s, [&] { ops.gelu_forward(f32(out, {n}), f32(x, {n})); }));
  check("gelu_backward", gt::op_cost::gelu_backward(n),
        count(s, [&] { ops.gelu_backward(f32(dx, {n}), f32(x, {n}), f32(y, {n})); }));
  check("add", gt::op_cost::add(n),
        count(s, [&] { ops.add(f32(out, {n}), f32(x, {n}), f32(y, {n})); }));
  check("accumulate", gt::op_cost::accumulate(n),
        count(s, [&] { ops.accumulate(f32(out, {n}), f32(x, {n})); }));
  check("add_bias", gt::op_cost::add_bias(R, C), count(s, [&] {
          ops.add_bias(f32(out, {R, C}), f32(b, {C}));
        }));
  DeviceArray<uint16_t> half(n, s);
  check("cast fp32->bf16", gt::op_cost::cast(n, 4, 2),
        count(s, [&] { ops.cast(gt::test::dev_view(half, DType::bf16, {n}), f32(x, {n})); }));
  auto m = rnd(n, 6, -0.01f, 0.01f), v = rnd(n, 7, 0.f, 0.01f);
  // The gradient norm's runs, with a gap, as ShardedParameters counts them.
  // The gap is a page, so the count skips it.
  const std::vector<gt::AdamWRun> runs0 = {{0, 0, n / 2, true},
                                           {0, n / 2 + 1024, n / 2 - 1024, true}};
  check("adamw", gt::op_cost::adamw(n), count(s, [&] {
          ops.adamw_update(f32(out, {n}), f32(x, {n}), f32(m, {n}), f32(v, {n}),
                           {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.f, 3});
        }));
  DeviceArray<float> sq(1, s);
  check("sum_squares_runs", gt::op_cost::sum_squares(gt::adamw_runs_elems(runs0)),
        count(s, [&] { ops.sum_squares_runs(f32(sq, {1}), f32(x, {n}), runs0); }), 4.0 * 4096,
        "the run table, the blocks' sums (written, read) and the result: a page each here, "
        "a few hundred bytes on a GPU");
  // The step as ShardedParameters runs it: runs with gaps between them, the
  // bf16 copy written alongside (the run table it reads is 40 bytes a run).
  const std::vector<gt::AdamWRun> runs = {{0, 0, n / 4, true},
                                          {n / 4 + 8, n / 4 + 8, n / 4, false},
                                          {n / 2 + 64, n / 2 + 64, n / 2 - 64, true}};
  check("adamw runs +bf16", gt::op_cost::adamw(gt::adamw_runs_elems(runs), true), count(s, [&] {
          ops.adamw_update_runs(f32(out, {n}), f32(x, {n}), f32(m, {n}), f32(v, {n}),
                                gt::test::dev_view(half, DType::bf16, {n}), TensorView{}, runs,
                                {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.f, 3});
        }));

  // The fp8 path's amaxes (one read of x; the tensor's and the columns'
  // partial maxima go through a page of scratch each) and the bias gradient.
  DeviceArray<float> amax_r(R, s), amax_c(C, s), amax_t(1, s);
  check("fp8_amax tensor", gt::op_cost::fp8_amax(R, C, 4, 1),
        count(s, [&] { ops.fp8_amax(f32(amax_t, {1}), f32(x, {R, C}), gt::Fp8Reduce::tensor); }),
        2.0 * 4096, "the blocks' maxima written and read back (scratch)");
  check("fp8_amax rows", gt::op_cost::fp8_amax(R, C, 4, R),
        count(s, [&] { ops.fp8_amax(f32(amax_r, {R}), f32(x, {R, C}), gt::Fp8Reduce::rows); }));
  check("fp8_amax cols", gt::op_cost::fp8_amax(R, C, 4, C),
        count(s, [&] { ops.fp8_amax(f32(amax_c, {C}), f32(x, {R, C}), gt::Fp8Reduce::cols); }),
        2.0 * 4.0 * C, "each row slice's column maxima written and read back (scratch)");
  check("bias_backward", gt::op_cost::bias_backward(R, C, 4),
        count(s, [&] { ops.bias_backward(f32(db, {C}), f32(x, {R, C})); }),
        2.0 * 4.0 * static_cast<double>(gt::cuda::column_sum_scratch_floats(R, C)),
        "the row blocks' partial sums written and read back (scratch)");

  // The LM head's cross-entropy at a padded vocabulary, fp32 and bf16 logits.
  const int64_t Rl = 64, V = 4096, vocab = 4000;
  auto logits = rnd(Rl * V, 8, -4.f, 4.f);
  DeviceArray<int32_t> tgt(gt::test::random_ints(Rl, 9, 0, vocab), s);
  DeviceArray<float> losses(Rl, s);
  const TensorView tv = gt::test::dev_view(tgt, DType::i32, {Rl});
  check("softmax_cross_entropy fp32", gt::op_cost::softmax_cross_entropy(Rl, V, true),
        count(s, [&] {
          ops.softmax_cross_entropy(f32(losses, {Rl}), f32(logits, {Rl, V}), f32(logits, {Rl, V}),
                                    tv, vocab, 0.5f);
        }));
  DeviceArray<uint16_t> logits16(Rl * V, s);
  ops.cast(gt::test::dev_view(logits16, DType::bf16, {Rl * V}), f32(logits, {Rl * V}));
  const TensorView l16 = gt::test::dev_view(logits16, DType::bf16, {Rl, V});
  check("softmax_cross_entropy bf16", gt::op_cost::softmax_cross_entropy(Rl, V, true, 2),
        count(s, [&] { ops.softmax_cross_entropy(f32(losses, {Rl}), l16, l16, tv, vocab, 0.5f); }));

  // Attention (the fp32 SIMT kernels) and the embedding.
  const int B = 1, NH = 16, T = 64, hs = 64, Ca = NH * hs;  // q, k, v parts: 4 KiB a row
  const int64_t saved = ops.attention_saved_elems(B, NH, T);
  const int64_t scratch = ops.attention_scratch_elems(B, NH, T);
  auto qkv = rnd(B * T * 3 * Ca, 10);
  DeviceArray<float> att(B * T * Ca, s), att_saved(saved, s), att_scratch(scratch, s),
      dqkv(B * T * 3 * Ca, s);
  auto datt = rnd(B * T * Ca, 11);
  check("attention_forward fp32", gt::op_cost::attention_forward(B, NH, T, hs, saved),
        count(s, [&] {
          ops.attention_forward(f32(att, {B, T, Ca}), f32(att_saved, {saved}),
                                f32(qkv, {B, T, 3 * Ca}), NH);
        }));
  check("attention_backward fp32", gt::op_cost::attention_backward(B, NH, T, hs, saved),
        count(s,
              [&] {
                ops.attention_backward(f32(dqkv, {B, T, 3 * Ca}), f32(att_scratch, {scratch}),
                                       f32(datt, {B, T, Ca}), f32(qkv, {B, T, 3 * Ca}),
                                       f32(att, {B, T, Ca}), f32(att_saved, {saved}), NH);
              }),
        // Three kernels: D = rowsum(dout * out) into scratch, then dK/dV and dQ,
        // each reading q, k, v, dout, the log-sum-exp and D.
        gt::op_cost::attention_backward_kernel_extra_bytes(B, NH, T, hs, saved, scratch),
        "qkv read twice and dout three times (rowdot, dK/dV, dQ kernels), D written and read "
        "twice, the log-sum-exp read twice");
  // bf16 storage (runtime.dtype=bf16): the same ops on bf16 activations.
  auto bf16_copy = [&](DeviceArray<float>& src, int64_t elems) {
    DeviceArray<uint16_t> h(elems, s);
    ops.cast(gt::test::dev_view(h, DType::bf16, {elems}), f32(src, {elems}));
    return h;
  };
  auto b16 = [&](DeviceArray<uint16_t>& a, std::initializer_list<int64_t> shape) {
    return gt::test::dev_view(a, DType::bf16, shape);
  };
  auto x16 = bf16_copy(x, n), y16 = bf16_copy(y, n), out16 = bf16_copy(out, n);
  check("layernorm_forward bf16", gt::op_cost::layernorm_forward(R, C, 2, 4), count(s, [&] {
          ops.layernorm_forward(b16(out16, {R, C}), f32(mean, {R}), f32(rstd, {R}),
                                b16(x16, {R, C}), f32(w, {C}), f32(b, {C}));
        }));
  check("layernorm_backward bf16 inp", gt::op_cost::layernorm_backward(R, C, 2),
        count(s,
              [&] {
                ops.layernorm_backward(f32(dx, {R, C}), f32(dw, {C}), f32(db, {C}), f32(y, {R, C}),
                                       b16(x16, {R, C}), f32(w, {C}), f32(mean, {R}),
                                       f32(rstd, {R}), {});
              }),
        ln_scratch, ln_scratch_why);
  check("layernorm_backward bf16 dout", gt::op_cost::layernorm_backward(R, C, 2, 2),
        count(s,
              [&] {
                ops.layernorm_backward(f32(dx, {R, C}), f32(dw, {C}), f32(db, {C}),
                                       b16(y16, {R, C}), b16(x16, {R, C}), f32(w, {C}),
                                       f32(mean, {R}), f32(rstd, {R}), {});
              }),
        ln_scratch, ln_scratch_why);
  check("layernorm_backward bf16 dout, dinp's bf16 copy",
        gt::op_cost::layernorm_backward(R, C, 2, 2, 2),
        count(s,
              [&] {
                ops.layernorm_backward(f32(dx, {R, C}), f32(dw, {C}), f32(db, {C}),
                                       b16(y16, {R, C}), b16(x16, {R, C}), f32(w, {C}),
                                       f32(mean, {R}), f32(rstd, {R}), b16(out16, {R, C}));
              }),
        ln_scratch, ln_scratch_why);
  auto res16 = bf16_copy(x, n);
  check("add_layernorm_forward bf16", gt::op_cost::add_layernorm_forward(R, C, 2, 4), count(s, [&] {
          ops.add_layernorm_forward(b16(res16, {R, C}), b16(out16, {R, C}), f32(mean, {R}),
                                    f32(rstd, {R}), b16(x16, {R, C}), b16(y16, {R, C}), f32(w, {C}),
                                    f32(b, {C}));
        }));
  check("gelu_forward bf16", gt::op_cost::gelu_forward(n, 2),
        count(s, [&] { ops.gelu_forward(b16(out16, {n}), b16(x16, {n})); }));
  check("gelu_backward bf16", gt::op_cost::gelu_backward(n, 2),
        count(s, [&] { ops.gelu_backward(b16(out16, {n}), b16(x16, {n}), b16(y16, {n})); }));
  check("add bf16", gt::op_cost::add(n, 2),
        count(s, [&] { ops.add(b16(out16, {n}), b16(x16, {n}), b16(y16, {n})); }));
  // Twice the heads, so a bf16 row's q, k and v parts are 4 KiB (a page) too.
  const int NH2 = 2 * NH, Ca2 = NH2 * hs;
  const int64_t saved2 = ops.attention_saved_elems(B, NH2, T);
  const int64_t scratch2 = ops.attention_scratch_elems(B, NH2, T);
  auto qkv2 = rnd(B * T * 3 * Ca2, 14), datt2 = rnd(B * T * Ca2, 15);
  auto qkv16 = bf16_copy(qkv2, B * T * 3 * Ca2), datt16 = bf16_copy(datt2, B * T * Ca2);
  DeviceArray<uint16_t> att16(B * T * Ca2, s), dqkv16(B * T * 3 * Ca2, s);
  DeviceArray<float> saved16(saved2, s), scratch16(scratch2, s);
  check("attention_forward bf16", gt::op_cost::attention_forward(B, NH2, T, hs, saved2, 2),
        count(s, [&] {
          ops.attention_forward(b16(att16, {B, T, Ca2}), f32(saved16, {saved2}),
                                b16(qkv16, {B, T, 3 * Ca2}), NH2);
        }));
  check("attention_backward bf16", gt::op_cost::attention_backward(B, NH2, T, hs, saved2, 2),
        count(s,
              [&] {
                ops.attention_backward(b16(dqkv16, {B, T, 3 * Ca2}), f32(scratch16, {scratch2}),
                                       b16(datt16, {B, T, Ca2}), b16(qkv16, {B, T, 3 * Ca2}),
                                       b16(att16, {B, T, Ca2}), f32(saved16, {saved2}), NH2);
              }),
        gt::op_cost::attention_backward_kernel_extra_bytes(B, NH2, T, hs, saved2, scratch2, 2),
        "as fp32, at 2 bytes an activation element");

  // The tensor-core kernels (runtime.attention_tensor_cores) on the same bf16 tensors.
  {
    gt::CudaContextOptions tc_options;
    tc_options.attention_tensor_cores = true;
    gt::CudaOps tc(tc_options);
    const cudaStream_t ts = tc.stream();
    check("attention_forward tc", gt::op_cost::attention_forward(B, NH2, T, hs, saved2, 2),
          count(ts, [&] {
            tc.attention_forward(b16(att16, {B, T, Ca2}), f32(saved16, {saved2}),
                                 b16(qkv16, {B, T, 3 * Ca2}), NH2);
          }));  // its second pass over the keys is inside one kernel (L2 on a GPU)
    check("attention_backward tc", gt::op_cost::attention_backward(B, NH2, T, hs, saved2, 2),
          count(ts,
                [&] {
                  tc.attention_backward(b16(dqkv16, {B, T, 3 * Ca2}), f32(scratch16, {scratch2}),
                                        b16(datt16, {B, T, Ca2}), b16(qkv16, {B, T, 3 * Ca2}),
                                        b16(att16, {B, T, Ca2}), f32(saved16, {saved2}), NH2);
                }),
          gt::op_cost::attention_backward_kernel_extra_bytes(B, NH2, T, hs, saved2, scratch2, 2),
          "the same three kernels as the SIMT backward");
  }

  const int64_t Vt = 4096, Tt = 128, Bt = 2, Ce = 256;
  auto wte = rnd(Vt * Ce, 12), wpe = rnd(Tt * Ce, 13);
  std::vector<int32_t> ids(Bt * Tt);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);  // rows 0..255 of wte
  DeviceArray<int32_t> tokens(ids, s);
  DeviceArray<float> emb(Bt * Tt * Ce, s);
  const TensorView tok = gt::test::dev_view(tokens, DType::i32, {Bt, Tt});
  check(
      "embedding_forward", gt::op_cost::embedding_forward(Bt, Tt, Ce, Vt), count(s, [&] {
        ops.embedding_forward(f32(emb, {Bt, Tt, Ce}), tok, f32(wte, {Vt, Ce}), f32(wpe, {Tt, Ce}));
      }));

  std::printf("\n%-28s %13s %13s %13s  %s\n", "op", "formula B", "+ known", "counted B",
              "kernels; what the known extra is");
  for (const Row& r : rows)
    std::printf("%-28s %13.0f %13.0f %13.0f  %s%s%s\n", r.op.c_str(), r.formula, r.extra, r.counted,
                r.kernels.c_str(), r.why.empty() ? "" : "; ", r.why.c_str());
#endif
}

}  // namespace
