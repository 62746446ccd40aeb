// The fp8 ops of CudaOps (kernels/cuda/cuda_ops_fp8.cpp: the runtime.fp8
// linear layers' path) against CpuOps, the twin: fp8_amax over the tensor,
// its rows and its columns (fp32 and bf16, a NaN propagated), the scales
// bit for bit, bias_backward, and fp8_matmul in every form the layers call
// it: each operand read as stored or transposed, e4m3 and e5m2, tensorwise,
// rowwise and one of each, a K that is not a multiple of 16 (the codes'
// zero padding), fp32 and bf16 inputs and outputs, with a bias of either
// type, and accumulating into fp32. Both backends quantise the same values
// with the same scales to the same codes; the GEMMs then differ only by
// their fp32 summation order (and bf16's final rounding). The producers'
// row amaxes (norms, SwiGLU, GELU) against the device's own outputs.
// Refusals by name: two e5m2 operands.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "test_util.hpp"
#if defined(TRAINER_CUDA_EMULATOR)
#include "gt_emu/control.hpp"
#endif

namespace gt {
namespace {

using test::DeviceArray;
using test::random_vector;

// One tensor on both backends: host values (bf16-rounded when bf16) and a
// device copy; cpu() / gpu() views of it.
struct Both {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<float> host;       // the fp32 backing (or the bf16 values as floats)
  std::vector<uint16_t> host16;  // the bf16 backing
  std::unique_ptr<DeviceArray<float>> dev;
  std::unique_ptr<DeviceArray<uint16_t>> dev16;

  Both(std::vector<float> values, DType t, std::vector<int64_t> s, cudaStream_t stream)
      : dtype(t), shape(std::move(s)) {
    if (t == DType::bf16) {
      host16 = test::to_bf16(values);
      dev16 = std::make_unique<DeviceArray<uint16_t>>(host16, stream);
    } else {
      host = std::move(values);
      dev = std::make_unique<DeviceArray<float>>(host, stream);
    }
  }
  TensorView view(void* p, Device d) const {
    return shape.size() == 1 ? make_view(p, dtype, d, {shape[0]})
                             : make_view(p, dtype, d, {shape[0], shape[1]});
  }
  TensorView cpu() {
    return view(dtype == DType::bf16 ? static_cast<void*>(host16.data()) : host.data(),
                Device::cpu);
  }
  TensorView gpu() {
    return view(dtype == DType::bf16 ? static_cast<void*>(dev16->get()) : dev->get(),
                Device::cuda);
  }
  // Both sides' current values as floats.
  std::vector<float> cpu_values() const {
    return dtype == DType::bf16 ? test::from_bf16(host16) : host;
  }
  std::vector<float> gpu_values() const {
    return dtype == DType::bf16 ? test::from_bf16(dev16->download()) : dev->download();
  }
};

class CudaFp8Ops : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    cuda_ = std::make_unique<CudaOps>();
    cpu_ = make_cpu_ops(1);
  }
  Both make(std::vector<float> v, DType t, std::vector<int64_t> shape) {
    return Both(std::move(v), t, std::move(shape), cuda_->stream());
  }
  std::unique_ptr<CudaOps> cuda_;
  std::unique_ptr<Ops> cpu_;
};

TEST_F(CudaFp8Ops, AmaxesOverTheTensorRowsAndColumnsMatchTheCpu) {
  const int64_t R = 37, C = 129;
  for (DType t : {DType::f32, DType::bf16})
    for (bool nan : {false, true}) {
      std::vector<float> x = random_vector(R * C, 5, -3.f, 3.f);
      if (nan) x[static_cast<size_t>(11 * C + 40)] = std::numeric_limits<float>::quiet_NaN();
      Both xb = make(x, t, {R, C});
      for (Fp8Reduce over : {Fp8Reduce::tensor, Fp8Reduce::rows, Fp8Reduce::cols}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + fp8_reduce_name(over) +
                     (nan ? " with a NaN" : ""));
        const int64_t n = over == Fp8Reduce::tensor ? 1 : over == Fp8Reduce::rows ? R : C;
        Both amax = make(std::vector<float>(static_cast<size_t>(n), -1.f), DType::f32, {n});
        cpu_->fp8_amax(amax.cpu(), xb.cpu(), over);
        cuda_->fp8_amax(amax.gpu(), xb.gpu(), over);
        const std::vector<float> want = amax.cpu_values(), got = amax.gpu_values();
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(want[static_cast<size_t>(i)])) {
            EXPECT_TRUE(std::isnan(got[static_cast<size_t>(i)])) << i;
          } else {
            EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << i;
          }
        }
        // The NaN reaches the slice holding it (the comparison above holds
        // every other slice to the CPU's).
        if (nan) {
          const size_t at = over == Fp8Reduce::tensor ? 0 : over == Fp8Reduce::rows ? 11 : 40;
          EXPECT_TRUE(std::isnan(got[at]));
        }
      }
    }
}

TEST_F(CudaFp8Ops, ScalesMatchTheCpuBitForBitAndMayOverwriteTheAmaxes) {
  const std::vector<float> amax = {0.f, 1e-20f, 0.37f, 1.f, 448.f, 3e4f, 1e9f};
  const int64_t n = static_cast<int64_t>(amax.size());
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (bool pow2 : {false, true}) {
      SCOPED_TRACE(std::string(fp8_format_name(f)) + (pow2 ? " pow2" : ""));
      Both a = make(amax, DType::f32, {n});
      cpu_->fp8_scale_from_amax(a.cpu(), a.cpu(), f, pow2);  // in place
      cuda_->fp8_scale_from_amax(a.gpu(), a.gpu(), f, pow2);
      EXPECT_TRUE(test::bitwise_equal(a.gpu_values(), a.cpu_values()));
    }
}

TEST_F(CudaFp8Ops, BiasBackwardAccumulatesTheColumnSums) {
  const int64_t R = 130, OC = 37;
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Both dout = make(random_vector(R * OC, 3), t, {R, OC});
    Both dbias = make(random_vector(OC, 4), DType::f32, {OC});
    cpu_->bias_backward(dbias.cpu(), dout.cpu());
    cuda_->bias_backward(dbias.gpu(), dout.gpu());
    EXPECT_TRUE(test::all_close(dbias.gpu_values(), dbias.cpu_values(), 1e-5f, 1e-5f));
  }
}

struct GemmCase {
  int64_t M, N, K;
  bool a_t, b_t;
  Fp8Format fa, fb;
  int scales;  // 0 tensorwise, 1 rowwise, 2 a rowwise and b tensorwise
  DType in, out;
  int bias;  // 0 none, 1 fp32, 2 bf16
  bool accumulate;
};

std::string describe(const GemmCase& c) {
  return detail::concat("M=", c.M, " N=", c.N, " K=", c.K, c.a_t ? " aT" : "", c.b_t ? " bT" : "",
                        " ", fp8_format_name(c.fa), "x", fp8_format_name(c.fb),
                        c.scales == 0   ? " tensorwise"
                        : c.scales == 1 ? " rowwise"
                                        : " mixed",
                        " in ", dtype_name(c.in), " out ", dtype_name(c.out),
                        c.bias == 1   ? " bias f32"
                        : c.bias == 2 ? " bias bf16"
                                      : "",
                        c.accumulate ? " accumulate" : "");
}

// The shapes and forms the fp8 linear layers call (tp_layers_fp8.cpp):
// forward (x W^T, bias), input gradient (dy W, W read transposed), weight
// gradient (dy^T x accumulated, both read transposed), plus odd sizes.
const GemmCase kGemms[] = {
    {7, 13, 5, false, false, Fp8Format::e4m3, Fp8Format::e4m3, 0, DType::f32, DType::f32, 0, false},
    {33, 40, 64, false, false, Fp8Format::e4m3, Fp8Format::e4m3, 0, DType::bf16, DType::bf16, 2, false},
    {33, 40, 64, false, false, Fp8Format::e4m3, Fp8Format::e4m3, 1, DType::bf16, DType::bf16, 1, false},
    {33, 40, 100, false, true, Fp8Format::e5m2, Fp8Format::e4m3, 0, DType::bf16, DType::bf16, 0, false},
    {33, 40, 100, false, true, Fp8Format::e4m3, Fp8Format::e4m3, 1, DType::bf16, DType::f32, 0, false},
    {40, 24, 33, true, true, Fp8Format::e5m2, Fp8Format::e4m3, 0, DType::bf16, DType::f32, 0, true},
    {40, 24, 33, true, true, Fp8Format::e4m3, Fp8Format::e4m3, 1, DType::f32, DType::f32, 0, true},
    {17, 29, 48, true, false, Fp8Format::e4m3, Fp8Format::e5m2, 2, DType::f32, DType::bf16, 1, false},
    {64, 96, 130, false, false, Fp8Format::e4m3, Fp8Format::e4m3, 2, DType::bf16, DType::f32, 2, false},
};

TEST_F(CudaFp8Ops, MatmulMatchesTheTwinInEveryFormTheLayersUse) {
  for (const GemmCase& c : kGemms) {
    SCOPED_TRACE(describe(c));
    // Values spread over several binades, so the codes are not all alike.
    std::vector<float> av = random_vector(c.M * c.K, 21, -2.f, 2.f);
    std::vector<float> bv = random_vector(c.N * c.K, 22, -0.5f, 0.5f);
    av[3] *= 40.f;
    Both a = make(av, c.in, c.a_t ? std::vector<int64_t>{c.K, c.M} : std::vector<int64_t>{c.M, c.K});
    Both b = make(bv, c.in, c.b_t ? std::vector<int64_t>{c.K, c.N} : std::vector<int64_t>{c.N, c.K});
    // Scales as the layers make them: amax over the operand's rows (as read)
    // or the whole tensor, then fp8_scale_from_amax, on the CPU; the same
    // values go to the device.
    auto scales = [&](Both& x, bool transposed, bool rowwise, Fp8Format f, int64_t rows) {
      const Fp8Reduce over = !rowwise ? Fp8Reduce::tensor
                                      : transposed ? Fp8Reduce::cols : Fp8Reduce::rows;
      const int64_t n = rowwise ? rows : 1;
      std::vector<float> s(static_cast<size_t>(n));
      cpu_->fp8_amax(make_view(s.data(), DType::f32, Device::cpu, {n}), x.cpu(), over);
      cpu_->fp8_scale_from_amax(make_view(s.data(), DType::f32, Device::cpu, {n}),
                                make_view(s.data(), DType::f32, Device::cpu, {n}), f, rowwise);
      return make(s, DType::f32, {n});
    };
    Both sa = scales(a, c.a_t, c.scales >= 1, c.fa, c.M);
    Both sb = scales(b, c.b_t, c.scales == 1, c.fb, c.N);
    Both out = make(random_vector(c.M * c.N, 23), c.out, {c.M, c.N});
    Both bias = make(random_vector(c.N, 24), c.bias == 2 ? DType::bf16 : DType::f32, {c.N});
    Fp8MatmulSpec spec;
    spec.a_format = c.fa;
    spec.b_format = c.fb;
    spec.a_transposed = c.a_t;
    spec.b_transposed = c.b_t;
    spec.accumulate = c.accumulate;
    spec.fast_accum = !c.accumulate;  // a hint: the emulator and the CPU sum in fp32 either way
    cpu_->fp8_matmul(out.cpu(), a.cpu(), sa.cpu(), b.cpu(), sb.cpu(),
                     c.bias ? bias.cpu() : TensorView{}, spec);
    cuda_->fp8_matmul(out.gpu(), a.gpu(), sa.gpu(), b.gpu(), sb.gpu(),
                      c.bias ? bias.gpu() : TensorView{}, spec);
    const std::vector<float> want = out.cpu_values(), got = out.gpu_values();
    // fp32 sums of K products of dequantised values up to ~80 in magnitude,
    // in two orders; bf16 outputs one rounding step apart at most.
    const float rtol = c.out == DType::bf16 ? 8e-3f : 1e-5f;
    const float atol = c.out == DType::bf16 ? 1e-2f : 1e-5f * std::sqrt(static_cast<float>(c.K)) * 10;
    EXPECT_TRUE(test::all_close(got, want, atol, rtol));
  }
}

#if defined(TRAINER_CUDA_EMULATOR)
// The kernels `op` launched on `stream` (the emulator's traffic records,
// named by where they were launched).
std::vector<std::string> kernels_launched(cudaStream_t stream, const std::function<void()>& op) {
  CUDA_CHECK(cudaStreamSynchronize(stream));
  (void)emu::take_traffic();
  emu::set_traffic_counting(true);
  op();
  const cudaError_t e = cudaStreamSynchronize(stream);
  emu::set_traffic_counting(false);
  CUDA_CHECK(e);
  std::vector<std::string> names;
  for (const auto& t : emu::take_traffic()) names.push_back(t.kernel);
  return names;
}

// A bf16 bias on a bf16 output rides in cuBLASLt's BIAS epilogue (no fp32
// product in scratch, no epilogue kernel); where the library has no
// algorithm for it (the emulator told to refuse fused epilogues) the GEMM
// writes fp32 scratch and fp8_epilogue adds the bias. Both round once,
// after the bias: the same bits, and equal to the CPU twin's within the
// summation order. An fp32 bias keeps the scratch path.
TEST_F(CudaFp8Ops, ABf16BiasRidesInTheGemmsEpilogueAndEqualsTheFallback) {
  if (const char* v = std::getenv("GT_EMU_CUBLASLT_REFUSE_EPILOGUES"); v && std::string(v) == "1")
    GTEST_SKIP() << "GT_EMU_CUBLASLT_REFUSE_EPILOGUES=1: no fused epilogue to compare against";
  const int64_t M = 33, N = 40, K = 64;
  // Runs one biased GEMM on `ops`; the kernels it launched.
  auto run = [&](CudaOps& ops, DType bias_type, std::vector<float>* got) {
    const std::vector<float> av = random_vector(M * K, 31, -2.f, 2.f);
    const std::vector<float> bv = random_vector(N * K, 32, -0.5f, 0.5f);
    Both a(av, DType::bf16, {M, K}, ops.stream()), b(bv, DType::bf16, {N, K}, ops.stream());
    Both sa({3.f}, DType::f32, {1}, ops.stream()), sb({200.f}, DType::f32, {1}, ops.stream());
    Both bias(random_vector(N, 33), bias_type, {N}, ops.stream());
    Both out(std::vector<float>(static_cast<size_t>(M * N)), DType::bf16, {M, N}, ops.stream());
    Fp8MatmulSpec spec;
    spec.fast_accum = true;
    const std::vector<std::string> kernels = kernels_launched(ops.stream(), [&] {
      ops.fp8_matmul(out.gpu(), a.gpu(), sa.gpu(), b.gpu(), sb.gpu(), bias.gpu(), spec);
    });
    *got = out.gpu_values();
    cpu_->fp8_matmul(out.cpu(), a.cpu(), sa.cpu(), b.cpu(), sb.cpu(), bias.cpu(), spec);
    EXPECT_TRUE(test::all_close(*got, out.cpu_values(), 1e-2f, 8e-3f));
    return kernels.size();
  };
  // The emulated cuBLASLt's GEMM is no kernel launch: the quantising casts
  // and the inverse scales are, and the scratch path's bias pass one more.
  std::vector<float> fused, fallback, f32_bias;
  const size_t in_epilogue = run(*cuda_, DType::bf16, &fused);
  EXPECT_EQ(run(*cuda_, DType::f32, &f32_bias), in_epilogue + 1)
      << "an fp32 bias takes the scratch path and its bias pass";
  emu::set_cublaslt_refuse_epilogues(true);
  {
    CudaOps refused;  // a fresh plan cache, built while the library refuses
    EXPECT_EQ(run(refused, DType::bf16, &fallback), in_epilogue + 1)
        << "the library refused the BIAS epilogue: the bias pass must run instead";
  }
  emu::set_cublaslt_refuse_epilogues(false);
  EXPECT_TRUE(test::bitwise_equal(fused, fallback));
}
#endif

// fp8_quantize's codes are the CPU's bit for bit; a weight handed to
// fp8_matmul as those codes (read in place when K is a multiple of 16, or
// copied, transposed or padded, when not) gives the product of handing it
// the floats, bit for bit.
TEST_F(CudaFp8Ops, PreQuantisedCodesAreTheCpusAndGiveTheSameProduct) {
  for (int64_t K : {32, 20})
    for (bool transposed : {false, true}) {
      SCOPED_TRACE(detail::concat("K=", K, transposed ? " b read transposed" : " b as stored"));
      const int64_t M = 24, N = 40;
      Both a = make(random_vector(M * K, 41), DType::bf16, {M, K});
      const std::vector<float> bv = random_vector(N * K, 42, -3.f, 3.f);
      Both b = make(bv, DType::bf16, {N * K});
      float amax = 0.f;
      for (float x : b.cpu_values()) amax = std::max(amax, std::abs(x));
      Both sa = make({2.f}, DType::f32, {1});
      Both sb = make({448.f / amax}, DType::f32, {1});
      std::vector<uint8_t> cpu_codes(static_cast<size_t>(N * K));
      cpu_->fp8_quantize(make_view(cpu_codes.data(), DType::u8, Device::cpu, {N * K}), b.cpu(),
                         sb.cpu(), Fp8Format::e4m3);
      DeviceArray<uint8_t> codes(static_cast<size_t>(N * K), cuda_->stream());
      cuda_->fp8_quantize(make_view(codes.get(), DType::u8, Device::cuda, {N * K}), b.gpu(),
                          sb.gpu(), Fp8Format::e4m3);
      EXPECT_EQ(codes.download(), cpu_codes);
      const std::initializer_list<int64_t> b_shape = {transposed ? K : N, transposed ? N : K};
      Fp8MatmulSpec spec;
      spec.b_transposed = transposed;
      Both from_floats = make(std::vector<float>(M * N), DType::f32, {M, N});
      Both from_codes = make(std::vector<float>(M * N), DType::f32, {M, N});
      cuda_->fp8_matmul(from_floats.gpu(), a.gpu(), sa.gpu(),
                        make_view(b.dev16->get(), DType::bf16, Device::cuda, b_shape), sb.gpu(), {},
                        spec);
      cuda_->fp8_matmul(from_codes.gpu(), a.gpu(), sa.gpu(),
                        make_view(codes.get(), DType::u8, Device::cuda, b_shape), sb.gpu(), {}, spec);
      EXPECT_TRUE(test::bitwise_equal(from_codes.gpu_values(), from_floats.gpu_values()));
      // The same codes 64 bytes into a buffer (a weight inside a gathered
      // unit): a pointer less aligned than the plan's first one gets a plan
      // of its own (cuBLASLt may rely on the alignment it saw).
      std::vector<uint8_t> shifted(64, 0);
      const std::vector<uint8_t> c = codes.download();
      shifted.insert(shifted.end(), c.begin(), c.end());
      DeviceArray<uint8_t> at64(shifted, cuda_->stream());
      Both from_at64 = make(std::vector<float>(M * N), DType::f32, {M, N});
      cuda_->fp8_matmul(from_at64.gpu(), a.gpu(), sa.gpu(),
                        make_view(at64.get() + 64, DType::u8, Device::cuda, b_shape), sb.gpu(), {},
                        spec);
      EXPECT_TRUE(test::bitwise_equal(from_at64.gpu_values(), from_floats.gpu_values()));
    }
}

// The producers' row amaxes (Ops: "Row amaxes for an fp8 GEMM's input"):
// each kernel's own pass takes max |out| per row as stored, so the amaxes
// equal fp8_amax over the device's own output bit for bit, a NaN reaching
// its row; the outputs are those of the call without amaxes; and the CPU
// twin's amaxes agree to its outputs' difference. The forward producers
// (norms, SwiGLU, GELU, the norms with the residual add fused) and the
// gradients' (the norms' accumulated dinp, with their bf16 copy under
// bf16, SwiGLU's and GELU's backward).
// Widths: odd (scalar loads) and a multiple of 8 (16-byte packs).
TEST_F(CudaFp8Ops, ProducersTakeTheRowAmaxesOfTheirOutputsAsStored) {
  const int64_t R = 37;
  const char* names[] = {"rmsnorm_forward",  "layernorm_forward", "add_layernorm_forward",
                         "swiglu_forward",   "gelu_forward",      "rmsnorm_backward",
                         "swiglu_backward",  "layernorm_backward", "gelu_backward",
                         "add_rmsnorm_forward"};
  for (int64_t C : {int64_t{129}, int64_t{256}})
    for (DType t : {DType::f32, DType::bf16})
      for (int op = 0; op < 10; ++op) {
        SCOPED_TRACE(detail::concat(names[op], " ", dtype_name(t), " C=", C));
        // swiglu reads [gate | up] and its backward writes d[gate | up]; the
        // norms' backward accumulate an fp32 dinp (LayerNorm's with its bf16
        // copy, whose values the amaxes are then of, under bf16).
        const int64_t in_cols = op == 3 || op == 6 ? 2 * C : C, out_cols = op == 6 ? 2 * C : C;
        const DType out_t = op == 5 || op == 7 ? DType::f32 : t;
        std::vector<float> x = random_vector(R * in_cols, 7 + op, -3.f, 3.f);
        x[static_cast<size_t>(5 * in_cols + 3)] = std::numeric_limits<float>::quiet_NaN();
        Both in = make(x, t, {R, in_cols}), in2 = make(random_vector(R * C, 8), t, {R, C});
        Both w = make(random_vector(C, 9, 0.5f, 1.5f), DType::f32, {C});
        Both bias = make(random_vector(C, 10), DType::f32, {C});
        Both rstd = make(std::vector<float>(R), DType::f32, {R});
        Both mean = make(std::vector<float>(R), DType::f32, {R});
        Both res = make(std::vector<float>(R * C), t, {R, C});
        Both dw = make(std::vector<float>(C), DType::f32, {C});
        Both db = make(std::vector<float>(C), DType::f32, {C});
        for (Both* b : {&rstd, &mean})  // read by the backward ops
          *b = make(random_vector(R, 11, 0.5f, 1.5f), DType::f32, {R});
        Both copy16 = make(std::vector<float>(R * C), DType::bf16, {R, C});
        auto run = [&](Ops& o, bool gpu, Both& out, Both* amax) {
          auto V = [gpu](Both& b) { return gpu ? b.gpu() : b.cpu(); };
          const TensorView a = amax ? V(*amax) : TensorView{};
          switch (op) {
            case 0: return o.rmsnorm_forward(V(out), V(rstd), V(in), V(w), 1e-5f, a);
            case 1: return o.layernorm_forward(V(out), V(mean), V(rstd), V(in), V(w), V(bias), a);
            case 2:
              return o.add_layernorm_forward(V(res), V(out), V(mean), V(rstd), V(in), V(in2),
                                             V(w), V(bias), a);
            case 3: return o.swiglu_forward(V(out), V(in), a);
            case 4: return o.gelu_forward(V(out), V(in), a);
            case 5:  // with the bf16 copy when bf16, as LayerNorm's
              return o.rmsnorm_backward(V(out), V(dw), V(in2), V(in), V(w), V(rstd),
                                        t == DType::bf16 ? V(copy16) : TensorView{}, a);
            case 6: return o.swiglu_backward(V(out), V(in2), V(in), a);
            case 7:  // with the bf16 copy when bf16: the amaxes are of it
              return o.layernorm_backward(V(out), V(dw), V(db), V(in2), V(in), V(w), V(mean),
                                          V(rstd), t == DType::bf16 ? V(copy16) : TensorView{},
                                          a);
            case 8: return o.gelu_backward(V(out), V(in), V(in2), a);
            default:
              return o.add_rmsnorm_forward(V(res), V(out), V(rstd), V(in), V(in2), V(w), 1e-5f,
                                           a);
          }
        };
        // The accumulating outputs start equal (0.5) on both sides.
        Both out = make(std::vector<float>(R * out_cols, 0.5f), out_t, {R, out_cols});
        Both plain = make(std::vector<float>(R * out_cols, 0.5f), out_t, {R, out_cols});
        Both amax = make(std::vector<float>(R, -1.f), DType::f32, {R});
        Both own = make(std::vector<float>(R, -1.f), DType::f32, {R});
        run(*cuda_, true, out, &amax);
        const bool of_copy = (op == 5 || op == 7) && t == DType::bf16;
        cuda_->fp8_amax(own.gpu(), of_copy ? copy16.gpu() : out.gpu(), Fp8Reduce::rows);
        run(*cuda_, true, plain, nullptr);
        const std::vector<float> got = amax.gpu_values(), want = own.gpu_values();
        EXPECT_TRUE(test::bitwise_equal(out.gpu_values(), plain.gpu_values()));
        for (int64_t r = 0; r < R; ++r) {
          const size_t i = static_cast<size_t>(r);
          if (r == 5) {
            EXPECT_TRUE(std::isnan(got[i]));
          } else {
            EXPECT_EQ(got[i], want[i]) << "row " << r;
          }
        }
        run(*cpu_, false, out, &amax);
        const std::vector<float> cpu = amax.cpu_values();
        for (int64_t r = 0; r < R; ++r) {
          const size_t i = static_cast<size_t>(r);
          if (r == 5) {
            EXPECT_TRUE(std::isnan(cpu[i]));
          } else {
            // bf16: one rounding step; fp32: the backends' summation orders.
            EXPECT_NEAR(got[i], cpu[i], 1e-5f + (t == DType::bf16 ? 8e-3f : 1e-4f) * cpu[i])
                << "row " << r;
          }
        }
      }
}

TEST_F(CudaFp8Ops, TwoE5m2OperandsAreRefusedByName) {
  Both a = make(random_vector(16 * 16, 1), DType::f32, {16, 16});
  Both s = make({1.f}, DType::f32, {1});
  Both out = make(std::vector<float>(256), DType::f32, {16, 16});
  Fp8MatmulSpec spec;
  spec.a_format = spec.b_format = Fp8Format::e5m2;
  const std::string msg = test::error_message(
      [&] { cuda_->fp8_matmul(out.gpu(), a.gpu(), s.gpu(), a.gpu(), s.gpu(), TensorView{}, spec); });
  EXPECT_NE(msg.find("CudaOps::fp8_matmul: a and b cannot both be e5m2"), std::string::npos) << msg;
}

}  // namespace
}  // namespace gt
