// The emulated NCCL's element types and reductions (see comm.hpp): sizes and
// names of ncclDataType_t / ncclRedOp_t, and the reduction of p ranks'
// contributions in rank order 0..p-1, in the element's own arithmetic (fp16
// and bf16 through fp32), so that every rank computes the same bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "comm.hpp"

namespace gt::emu::nccl {

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return "an unknown ncclDataType_t";
  }
}

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
    default: return "an unknown ncclRedOp_t";
  }
}

bool reducible(ncclDataType_t t) {
  // fp8 would need its own conversions; nothing here reduces it.
  return type_size(t) != 0 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2;
}

namespace {

// How an element is loaded into the accumulator and stored back: the 16-bit
// floats accumulate in fp32 and are rounded once, at the end.
template <typename T>
struct Elem {
  using Acc = T;
  static Acc load(T x) { return x; }
  static T store(Acc a) { return a; }
};
template <>
struct Elem<__nv_bfloat16> {
  using Acc = float;
  static float load(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __nv_bfloat16 store(float a) { return __float2bfloat16_rn(a); }
};
template <>
struct Elem<__half> {
  using Acc = float;
  static float load(__half x) { return __half2float(x); }
  static __half store(float a) { return __float2half_rn(a); }
};

// Integer sums and products wrap (in the unsigned type: signed overflow is
// undefined in C++), as they do on the GPU.
template <typename A>
A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename A>
A mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

// Max and min keep a NaN: a NaN on one rank must not vanish in the result.
template <typename A>
A max_of(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b > a ? b : a;
}

template <typename A>
A min_of(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

template <typename T>
void reduce_typed(ncclRedOp_t op, int p, const void* blocks_v, size_t stride, size_t n,
                  void* out_v) {
  using E = Elem<T>;
  using A = typename E::Acc;
  const T* blocks = static_cast<const T*>(blocks_v);
  T* out = static_cast<T*>(out_v);
  // pre: applied to each contribution; combine: in rank order; post: once.
  auto run = [&](auto pre, auto combine, auto post) {
    for (size_t i = 0; i < n; ++i) {
      A acc = pre(E::load(blocks[i]));
      for (int r = 1; r < p; ++r)
        acc = combine(acc, pre(E::load(blocks[static_cast<size_t>(r) * stride + i])));
      out[i] = E::store(post(acc));
    }
  };
  auto same = [](A x) { return x; };
  switch (op) {
    case ncclSum:
      run(
          same, [](A a, A b) { return add(a, b); }, same);
      break;
    case ncclProd:
      run(
          same, [](A a, A b) { return mul(a, b); }, same);
      break;
    case ncclMax:
      run(
          same, [](A a, A b) { return max_of(a, b); }, same);
      break;
    case ncclMin:
      run(
          same, [](A a, A b) { return min_of(a, b); }, same);
      break;
    case ncclAvg:
      if constexpr (std::is_floating_point_v<A>) {
        // NCCL averages floats as a sum of inputs pre-multiplied by 1/p.
        const A scale = A(1) / static_cast<A>(p);
        run([scale](A x) { return x * scale; }, [](A a, A b) { return add(a, b); }, same);
      } else {
        // ... and integers as a sum divided by p at the end.
        run(
            same, [](A a, A b) { return add(a, b); },
            [p](A x) { return static_cast<A>(x / static_cast<A>(p)); });
      }
      break;
    default: break;  // rejected at the call
  }
}

}  // namespace

void reduce(ncclDataType_t t, ncclRedOp_t op, int p, const void* blocks, size_t stride, size_t n,
            void* out) {
  switch (t) {
    case ncclInt8: return reduce_typed<int8_t>(op, p, blocks, stride, n, out);
    case ncclUint8: return reduce_typed<uint8_t>(op, p, blocks, stride, n, out);
    case ncclInt32: return reduce_typed<int32_t>(op, p, blocks, stride, n, out);
    case ncclUint32: return reduce_typed<uint32_t>(op, p, blocks, stride, n, out);
    case ncclInt64: return reduce_typed<int64_t>(op, p, blocks, stride, n, out);
    case ncclUint64: return reduce_typed<uint64_t>(op, p, blocks, stride, n, out);
    case ncclFloat16: return reduce_typed<__half>(op, p, blocks, stride, n, out);
    case ncclFloat32: return reduce_typed<float>(op, p, blocks, stride, n, out);
    case ncclFloat64: return reduce_typed<double>(op, p, blocks, stride, n, out);
    case ncclBfloat16: return reduce_typed<__nv_bfloat16>(op, p, blocks, stride, n, out);
    default: return;  // rejected at the call
  }
}

}  // namespace gt::emu::nccl
