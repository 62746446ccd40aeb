// gpu_bench: times the CUDA backend's GEMMs and attention at GPT-2 124M's
// training shapes (B=16, T=1024, C=768, V=50257, 12 heads of 64) and the bf16
// GEMM peak, and prints one CSV line per measurement:
//   section,name,dtype,M,N,K,gflop,ms,tflops,gbs
// section: peak (square bf16 GEMMs through GemmContext), gemm (CudaOps::
// matmul_forward / matmul_backward, bias fused, dbias included in bwd),
// epilogue (the bf16 trainer's forms: an fp32 bias on bf16 GEMMs, c_fc's GELU
// fused and not), or
// attention (CudaOps::attention_forward / attention_backward; M = B*NH,
// N = T, K = head size; *_tc rows: the tensor-core kernels). FLOPs are model FLOPs: a GEMM
// 2MNK (bwd: two GEMMs, 4MNK); causal attention fwd 2 * 2 B NH T^2 hs / 2, bwd 2.5x fwd (the
// flash-attention convention: our backward recomputes more than that).
// section fp8: the forward GEMMs of GPT-2 124M (R = 16384) and of Llama 3
// 8B's layers (R = 8192: qkv 6144x4096, o_proj, gate|up 28672x4096, down
// 4096x14336) as bf16 x bf16 and as e4m3 x e4m3 (tensorwise scales, fast
// accumulation, bf16 out; Fp8GemmContext), both TN, D bf16, dtype e4m3 on
// the fp8 rows; and each input's tensorwise cast from bf16 (<name>_quant,
// gbs over its 3 bytes an element), what fp8 costs besides the GEMM.
// section memory: the bandwidth-bound kernels of a step (LayerNorm, GELU,
// fused cross-entropy, AdamW over 124M parameters), with gbs = GB/s of their
// minimum traffic (M x N elements; gflop and tflops 0).
// The LM head's bf16 GEMMs (V padded to 50304, as the model stores it) are
// also checked, once, on 256 sampled outputs each against double-precision
// sums of the same inputs (tests/cuda/sampled_gemm_check.hpp): one comment
// line each, "# check lm_head_<fwd|dinp|dweight> bf16 MxNxK: ... ok|FAILED";
// a failed check makes the exit status 1 after every row is printed.
// Inputs are random (uniform [-1, 1) from a hash), since zeros run faster.
// Times are the mean of --iters launches after warm-up, by CUDA events.
// With no device it prints one line saying so and exits 2.
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/sampled_gemm_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_resources.hpp"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_fp8.cuh"

namespace {

using gt::DType;
using gt::TensorView;

__device__ float hash_uniform(uint64_t i, uint64_t seed) {
  uint64_t z = i + seed * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.f / 16777216.f) - 1.f;
}

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = hash_uniform(static_cast<uint64_t>(i), seed) * scale;
    if constexpr (std::is_same_v<T, float>) p[i] = v;
    else p[i] = __float2bfloat16_rn(v);
  }
}

// A device tensor with random contents.
struct Tensor {
  gt::cuda::DeviceBuffer buf;
  TensorView view;
  Tensor(DType dtype, std::initializer_list<int64_t> shape, uint64_t seed, cudaStream_t s,
         float scale = 1.f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    buf = gt::cuda::DeviceBuffer(static_cast<size_t>(n) * gt::dtype_size(dtype));
    view = gt::make_view(buf.data(), dtype, gt::Device::cuda, shape);
    const unsigned blocks = 4096;
    if (dtype == DType::bf16)
      fill_kernel<<<blocks, 256, 0, s>>>(buf.as<__nv_bfloat16>(), n, seed, scale);
    else
      fill_kernel<<<blocks, 256, 0, s>>>(buf.as<float>(), n, seed, scale);
    CUDA_CHECK_LAUNCH();
  }
};

struct Timer {
  cudaStream_t s;
  int warmup, iters;
  // Mean milliseconds of f() over iters launches.
  double time(const std::function<void()>& f) const {
    for (int i = 0; i < warmup; ++i) f();
    gt::cuda::CudaEvent start(0), stop(0);
    start.record(s);
    for (int i = 0; i < iters; ++i) f();
    stop.record(s);
    stop.synchronize();
    return static_cast<double>(stop.elapsed_ms_since(start)) / iters;
  }
};

// bytes: the minimum device-memory traffic (read once, written once), for GB/s.
void row(const char* section, const std::string& name, const char* dtype, int64_t M, int64_t N,
         int64_t K, double flop, double ms, double bytes = 0.0) {
  std::printf("%s,%s,%s,%lld,%lld,%lld,%.3f,%.4f,%.1f,%.0f\n", section, name.c_str(), dtype,
              static_cast<long long>(M), static_cast<long long>(N),
              static_cast<long long>(K), flop * 1e-9, ms, flop / (ms * 1e-3) * 1e-12,
              bytes / (ms * 1e-3) * 1e-9);
  std::fflush(stdout);
}
void row(const char* section, const std::string& name, DType dtype, int64_t M, int64_t N,
         int64_t K, double flop, double ms, double bytes = 0.0) {
  row(section, name, gt::dtype_name(dtype), M, N, K, flop, ms, bytes);
}

// The fp8 section (see the header comment): per shape, the bf16 GEMM, the
// fp8 GEMM and the input's cast.
void bench_fp8(gt::CudaOps& ops, const Timer& timer, cudaStream_t s) {
  struct Fp8Shape {
    const char* name;
    int64_t R, N, K;
  };
  const Fp8Shape shapes[] = {{"gpt2_qkv", 16384, 2304, 768},   {"gpt2_attn_proj", 16384, 768, 768},
                             {"gpt2_fc", 16384, 3072, 768},    {"gpt2_fc_proj", 16384, 768, 3072},
                             {"llama8b_qkv", 8192, 6144, 4096}, {"llama8b_o_proj", 8192, 4096, 4096},
                             {"llama8b_gate_up", 8192, 28672, 4096},
                             {"llama8b_down", 8192, 4096, 14336}};
  gt::cuda::Fp8GemmContext fp8;
  for (const Fp8Shape& sh : shapes) {
    const double flop = 2.0 * sh.R * sh.N * sh.K;
    Tensor a(DType::bf16, {sh.R, sh.K}, 60, s), b(DType::bf16, {sh.N, sh.K}, 61, s, 0.05f),
        d(DType::bf16, {sh.R, sh.N}, 62, s);
    gt::cuda::GemmArgs g;
    g.M = sh.R;
    g.N = sh.N;
    g.K = sh.K;
    g.A = a.buf.data();
    g.B = b.buf.data();
    g.trans_b = true;
    g.D = d.buf.data();
    g.ab_type = g.d_type = DType::bf16;
    row("fp8", std::string(sh.name) + "_bf16", DType::bf16, sh.R, sh.N, sh.K, flop,
        timer.time([&] { ops.gemm().run(g, s); }));
    // Codes of the same values, through the quantising kernels.
    gt::cuda::DeviceBuffer qa(static_cast<size_t>(sh.R * sh.K)), qb(static_cast<size_t>(sh.N * sh.K));
    gt::cuda::DeviceBuffer amax(sizeof(float)), sa(sizeof(float)), sb(sizeof(float)),
        ia(sizeof(float)), ib(sizeof(float));
    gt::cuda::DeviceBuffer scratch(
        static_cast<size_t>(gt::cuda::fp8_amax_scratch_floats(sh.N * sh.K)) * sizeof(float));
    const auto* a16 = a.buf.as<__nv_bfloat16>();
    const auto* b16 = b.buf.as<__nv_bfloat16>();
    gt::cuda::fp8_amax(amax.as<float>(), b16, sh.N * sh.K, scratch.as<float>(), s);
    gt::cuda::fp8_scales(sb.as<float>(), ib.as<float>(), amax.as<float>(), 1, gt::Fp8Format::e4m3,
                         false, s);
    gt::cuda::fp8_quantize(qb.as<uint8_t>(), b16, sh.N * sh.K, sb.as<float>(), gt::Fp8Format::e4m3,
                           s);
    gt::cuda::fp8_amax(amax.as<float>(), a16, sh.R * sh.K, scratch.as<float>(), s);
    gt::cuda::fp8_scales(sa.as<float>(), ia.as<float>(), amax.as<float>(), 1, gt::Fp8Format::e4m3,
                         false, s);
    const double quant = timer.time([&] {
      gt::cuda::fp8_quantize(qa.as<uint8_t>(), a16, sh.R * sh.K, sa.as<float>(),
                             gt::Fp8Format::e4m3, s);
    });
    row("fp8", std::string(sh.name) + "_quant", "e4m3", sh.R, sh.K, 0, 0.0, quant,
        3.0 * sh.R * sh.K);
    gt::cuda::Fp8GemmArgs f;
    f.M = sh.R;
    f.N = sh.N;
    f.K = sh.K;
    f.A = qa.as<uint8_t>();
    f.B = qb.as<uint8_t>();
    f.a_scale = ia.as<float>();
    f.b_scale = ib.as<float>();
    f.D = d.buf.data();
    f.d_type = DType::bf16;
    f.fast_accum = true;
    row("fp8", std::string(sh.name) + "_fp8", "e4m3", sh.R, sh.N, sh.K, flop,
        timer.time([&] { fp8.run(f, s); }));
  }
}

// One untimed forward and backward of the LM head (dweight from zero), each
// result checked on 16 x 16 samples in double precision; prints "# check"
// lines and returns whether all three passed.
bool check_lm_head(gt::CudaOps& ops, const Tensor& inp, const Tensor& w, const Tensor& out,
                   const Tensor& dinp, const Tensor& dw, int64_t R, int64_t N, int64_t K) {
  CUDA_CHECK(cudaMemsetAsync(dw.buf.data(), 0, dw.buf.bytes(), ops.stream()));
  ops.matmul_forward(out.view, inp.view, w.view, TensorView{});
  ops.matmul_backward(dinp.view, dw.view, TensorView{}, out.view, inp.view, w.view);
  ops.synchronize();
  const gt::test::LmHeadReports r =
      gt::test::check_lm_head_samples(inp.buf.data(), w.buf.data(), out.buf.data(), dinp.buf.data(),
                                      dw.buf.as<float>(), R, N, K, 16, 16);
  struct Check {
    const char* name;
    const gt::test::SampledGemmReport& rep;
    int64_t m, n, k;
  };
  const Check checks[] = {{"lm_head_fwd", r.forward, R, N, K},
                          {"lm_head_dinp", r.dinp, R, K, N},
                          {"lm_head_dweight", r.dweight, N, K, R}};
  for (const Check& c : checks)
    std::printf("# check %s bf16 %lldx%lldx%lld: %s: %s\n", c.name, static_cast<long long>(c.m),
                static_cast<long long>(c.n), static_cast<long long>(c.k), c.rep.describe().c_str(),
                c.rep.ok() ? "ok" : "FAILED");
  std::fflush(stdout);
  return r.ok();
}

int run(int argc, char** argv) {
  bool quick = false;
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: gpu_bench [--quick] [--iters N]\n");
      return 2;
    }
  }
  if (!gt::cuda_available()) {
    std::printf("# no CUDA device: nothing measured\n");
    return 2;
  }
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  const Timer timer{s, 3, quick ? 3 : iters};
  std::printf("section,name,dtype,M,N,K,gflop,ms,tflops,gbs\n");

  // ---- the bf16 GEMM peak: square products, bf16 in and out ----
  for (int64_t n : {4096, 8192}) {
    Tensor a(DType::bf16, {n, n}, 1, s), b(DType::bf16, {n, n}, 2, s), d(DType::bf16, {n, n}, 3, s);
    gt::cuda::GemmArgs g;
    g.M = g.N = g.K = n;
    g.A = a.buf.data();
    g.B = b.buf.data();
    g.trans_b = true;
    g.D = d.buf.data();
    g.ab_type = g.d_type = DType::bf16;
    const double ms = timer.time([&] { ops.gemm().run(g, s); });
    row("peak", "gemm_" + std::to_string(n), DType::bf16, n, n, n, 2.0 * n * n * n, ms);
  }

  // ---- GPT-2 124M linear layers, R = B*T rows ----
  const int64_t B = 16, T = 1024, C = 768, V = 50257, NH = 12, R = B * T;
  const int64_t Vp = 50304;  // the stored (padded) vocabulary: ModelConfig::padded_vocab_size
  bool checks_ok = true;
  struct Shape {
    const char* name;
    int64_t N, K;
    bool bias;
  };
  const Shape shapes[] = {{"qkv", 3 * C, C, true},
                          {"attn_proj", C, C, true},
                          {"fc", 4 * C, C, true},
                          {"fc_proj", C, 4 * C, true},
                          {"lm_head", Vp, C, false}};
  for (DType dt : {DType::bf16, DType::f32}) {
    for (const Shape& sh : shapes) {
      // Small weights keep bf16 sums in range; values do not change the speed.
      Tensor inp(dt, {R, sh.K}, 10, s), w(dt, {sh.N, sh.K}, 11, s, 0.05f),
          bias(dt, {sh.N}, 12, s), out(dt, {R, sh.N}, 13, s);
      const TensorView b = sh.bias ? bias.view : TensorView{};
      const double fwd = timer.time([&] { ops.matmul_forward(out.view, inp.view, w.view, b); });
      row("gemm", std::string(sh.name) + "_fwd", dt, R, sh.N, sh.K, 2.0 * R * sh.N * sh.K, fwd);

      // Backward: dinp in the activation dtype, dweight and dbias fp32 (accumulated).
      Tensor dinp(dt, {R, sh.K}, 14, s), dw(DType::f32, {sh.N, sh.K}, 15, s),
          db(DType::f32, {sh.N}, 16, s);
      const TensorView dbv = sh.bias ? db.view : TensorView{};
      const double bwd = timer.time(
          [&] { ops.matmul_backward(dinp.view, dw.view, dbv, out.view, inp.view, w.view); });
      row("gemm", std::string(sh.name) + "_bwd", dt, R, sh.N, sh.K, 4.0 * R * sh.N * sh.K, bwd);
      if (dt == DType::bf16 && std::strcmp(sh.name, "lm_head") == 0)
        checks_ok &= check_lm_head(ops, inp, w, out, dinp, dw, R, sh.N, sh.K);
    }
  }

  // ---- the bf16 trainer's forward epilogues ----
  // Under bf16 storage the model's biases stay fp32 (BIAS_DATA_TYPE = 32F
  // with a bf16 D), and c_fc runs GELU_AUX_BIAS; the gemm rows above use a
  // bf16 bias. These rows time each form at the same shapes, so a slow
  // epilogue kernel shows as the difference (fc_plus_gelu: the unfused form,
  // the product with its bias, then the GELU kernel).
  {
    const DType dt = DType::bf16;
    for (const Shape& sh : shapes) {
      if (!sh.bias) continue;
      Tensor inp(dt, {R, sh.K}, 10, s), w(dt, {sh.N, sh.K}, 11, s, 0.05f),
          bias32(DType::f32, {sh.N}, 12, s), out(dt, {R, sh.N}, 13, s);
      const double ms =
          timer.time([&] { ops.matmul_forward(out.view, inp.view, w.view, bias32.view); });
      row("epilogue", std::string(sh.name) + "_fwd_f32bias", dt, R, sh.N, sh.K,
          2.0 * R * sh.N * sh.K, ms);
    }
    const int64_t N = 4 * C, K = C;
    Tensor inp(dt, {R, K}, 10, s), w(dt, {N, K}, 11, s, 0.05f), bias16(dt, {N}, 12, s),
        bias32(DType::f32, {N}, 12, s), pre(dt, {R, N}, 13, s), out(dt, {R, N}, 14, s);
    const double flop = 2.0 * R * N * K;
    const double g16 = timer.time(
        [&] { ops.matmul_gelu_forward(out.view, pre.view, inp.view, w.view, bias16.view); });
    row("epilogue", "fc_gelu_fwd", dt, R, N, K, flop, g16);
    const double g32 = timer.time(
        [&] { ops.matmul_gelu_forward(out.view, pre.view, inp.view, w.view, bias32.view); });
    row("epilogue", "fc_gelu_fwd_f32bias", dt, R, N, K, flop, g32);
    const double unfused = timer.time([&] {
      ops.matmul_forward(pre.view, inp.view, w.view, bias32.view);
      ops.gelu_forward(out.view, pre.view);
    });
    row("epilogue", "fc_plus_gelu_f32bias", dt, R, N, K, flop, unfused);
  }

  // ---- fp8 against bf16 at the linear layers' shapes ----
  bench_fp8(ops, timer, s);

  // ---- attention, B=16, NH=12, T=1024, hs=64 ----
  for (DType dt : {DType::bf16, DType::f32}) {
    const int64_t hs = C / NH;
    Tensor qkv(dt, {B, T, 3 * C}, 20, s), out(dt, {B, T, C}, 21, s), dout(dt, {B, T, C}, 22, s),
        dqkv(dt, {B, T, 3 * C}, 23, s);
    const int b = static_cast<int>(B), nh = static_cast<int>(NH), t = static_cast<int>(T);
    Tensor saved(DType::f32, {ops.attention_saved_elems(b, nh, t)}, 24, s),
        scratch(DType::f32, {ops.attention_scratch_elems(b, nh, t)}, 25, s);
    const double flop_fwd = 2.0 * 2.0 * B * NH * T * T * hs / 2.0;
    const double fwd = timer.time(
        [&] { ops.attention_forward(out.view, saved.view, qkv.view, static_cast<int>(NH)); });
    row("attention", "attn_fwd", dt, B * NH, T, hs, flop_fwd, fwd);
    const double bwd = timer.time([&] {
      ops.attention_backward(dqkv.view, scratch.view, dout.view, qkv.view, out.view, saved.view,
                             static_cast<int>(NH));
    });
    row("attention", "attn_bwd", dt, B * NH, T, hs, 2.5 * flop_fwd, bwd);
    if (dt == DType::bf16) {  // the tensor-core kernels (attention_tc.cu)
      gt::CudaContextOptions o;
      o.attention_tensor_cores = true;
      gt::CudaOps tc(o);
      tc.synchronize();
      ops.synchronize();
      const cudaStream_t ts = tc.stream();
      const Timer tc_timer{ts, timer.warmup, timer.iters};
      const double tfwd = tc_timer.time(
          [&] { tc.attention_forward(out.view, saved.view, qkv.view, static_cast<int>(NH)); });
      row("attention", "attn_fwd_tc", dt, B * NH, T, hs, flop_fwd, tfwd);
      const double tbwd = tc_timer.time([&] {
        tc.attention_backward(dqkv.view, scratch.view, dout.view, qkv.view, out.view, saved.view,
                              static_cast<int>(NH));
      });
      row("attention", "attn_bwd_tc", dt, B * NH, T, hs, 2.5 * flop_fwd, tbwd);
      tc.synchronize();
      // The sm_90 forward (attention_sm90.cu: TMA, wgmma), on an sm_90 GPU only.
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0) {
        o.attention_wgmma = true;
        gt::CudaOps wg(o);
        wg.synchronize();
        const Timer wg_timer{wg.stream(), timer.warmup, timer.iters};
        const double wfwd = wg_timer.time(
            [&] { wg.attention_forward(out.view, saved.view, qkv.view, static_cast<int>(NH)); });
        row("attention", "attn_fwd_wgmma", dt, B * NH, T, hs, flop_fwd, wfwd);
        wg.synchronize();
      }
    }
  }
  // ---- the bandwidth-bound kernels ----
  for (DType dt : {DType::bf16, DType::f32}) {
    const double e = static_cast<double>(gt::dtype_size(dt));
    Tensor x(dt, {R, C}, 30, s), y(dt, {R, C}, 31, s), w(dt, {C}, 32, s), bb(dt, {C}, 33, s);
    Tensor mean(DType::f32, {R}, 34, s), rstd(DType::f32, {R}, 35, s);
    const double ln = timer.time(
        [&] { ops.layernorm_forward(y.view, mean.view, rstd.view, x.view, w.view, bb.view); });
    row("memory", "layernorm_fwd", dt, R, C, 0, 0.0, ln, 2.0 * R * C * e + 8.0 * R);
    Tensor h(dt, {R, 4 * C}, 36, s), g(dt, {R, 4 * C}, 37, s);
    const double ge = timer.time([&] { ops.gelu_forward(g.view, h.view); });
    row("memory", "gelu_fwd", dt, R, 4 * C, 0, 0.0, ge, 2.0 * R * 4 * C * e);
    const double gb = timer.time([&] { ops.gelu_backward(g.view, h.view, g.view); });
    row("memory", "gelu_bwd", dt, R, 4 * C, 0, 0.0, gb, 3.0 * R * 4 * C * e);
  }
  {
    Tensor dx(DType::f32, {R, C}, 40, s), x(DType::f32, {R, C}, 41, s), dy(DType::f32, {R, C}, 42, s),
        w(DType::f32, {C}, 43, s), dw(DType::f32, {C}, 44, s), db(DType::f32, {C}, 45, s),
        mean(DType::f32, {R}, 46, s), rstd(DType::f32, {R}, 47, s);
    const double lb = timer.time([&] {
      ops.layernorm_backward(dx.view, dw.view, db.view, dy.view, x.view, w.view, mean.view,
                             rstd.view, {});
    });
    row("memory", "layernorm_bwd", DType::f32, R, C, 0, 0.0, lb, 4.0 * R * C * 4);
    Tensor logits(DType::f32, {R, V}, 48, s, 4.f), losses(DType::f32, {R}, 49, s);
    gt::cuda::DeviceBuffer tgt_buf(static_cast<size_t>(R) * sizeof(int32_t));
    CUDA_CHECK(cudaMemsetAsync(tgt_buf.data(), 0, tgt_buf.bytes(), s));  // target 0: any works
    const TensorView targets = gt::make_view(tgt_buf.data(), DType::i32, gt::Device::cuda, {R});
    const double ce = timer.time([&] {
      ops.softmax_cross_entropy(losses.view, logits.view, logits.view, targets, V, 1.f / R);
    });
    row("memory", "cross_entropy", DType::f32, R, V, 0, 0.0, ce, 2.0 * R * V * 4);
    const int64_t n = 124439808;  // GPT-2 124M's parameters
    Tensor p(DType::f32, {n}, 50, s, 0.02f), gr(DType::f32, {n}, 51, s, 0.01f),
        m(DType::f32, {n}, 52, s, 0.f), v(DType::f32, {n}, 53, s, 0.f);
    const gt::Ops::AdamWParams hp{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.f, 1};
    const double ad = timer.time([&] { ops.adamw_update(p.view, gr.view, m.view, v.view, hp); });
    row("memory", "adamw", DType::f32, n, 1, 0, 0.0, ad, 7.0 * n * 4);
  }
  ops.synchronize();
  return checks_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
