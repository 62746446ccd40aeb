// nvcuda::wmma on the emulated device (included through the shadow <mma.h>).
//
// A fragment holds its tile distributed over the 32 lanes of a warp, each
// lane `num_elements` of them in `x[]`, as on a GPU. Which lane holds which
// element is unspecified by CUDA, so here it is a permutation chosen by
// GT_EMU_WMMA_LAYOUT (fixed per fragment type, different across types): code
// that assumes a layout breaks here instead of on the next GPU generation.
// Element-wise code over x[] (scaling, fill) works under any layout.
//
// load_matrix_sync / store_matrix_sync run per lane (each lane touches only
// its own elements, so a missing __syncwarp around them shows); mma_sync is a
// warp collective: every lane of the warp must arrive at the same call site,
// and the product is computed in fp32 in k order from the gathered tiles.
// The CUDA rules are enforced: the pointer 32-byte aligned, ldm a multiple of
// 16 bytes, the whole warp present.
//
// Shapes: m16n16k16, m32n8k16, m8n32k16 with __nv_bfloat16 inputs and float
// accumulators (what the project's kernels use); anything else fails to compile.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "gt_emu/device.hpp"

namespace gt::emu::detail {

enum class FragUse { a = 0, b = 1, acc = 2 };

// The permutation of a fragment type: element i of lane l holds tile
// position perm[l * num_elements + i] (row-major in the tile: r * cols + c).
const uint16_t* wmma_permutation(FragUse use, int m, int n, int k, bool col_major);

// This CUDA thread's lane.
int lane_id();

// The warp-collective half of mma_sync (block_scheduler.cpp): gathers every
// lane's a, b, c fragments, writes every lane's d.
struct MmaLane {
  const __nv_bfloat16* a;
  const __nv_bfloat16* b;
  const float* c;
  float* d;
  int m, n, k;
  bool a_col_major, b_col_major;
};
void warp_mma(const MmaLane& lane, Site site);

// The CUDA rules on a wmma pointer and leading dimension.
void check_wmma_pointer(const void* p, unsigned ldm, int elem_bytes, const char* api, Site site);

}  // namespace gt::emu::detail

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
template <typename Use, int M, int N, int K>
struct Dims;
template <int M, int N, int K>
struct Dims<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
  static constexpr gt::emu::detail::FragUse use = gt::emu::detail::FragUse::a;
};
template <int M, int N, int K>
struct Dims<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
  static constexpr gt::emu::detail::FragUse use = gt::emu::detail::FragUse::b;
};
template <int M, int N, int K>
struct Dims<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
  static constexpr gt::emu::detail::FragUse use = gt::emu::detail::FragUse::acc;
};
template <int M, int N, int K>
constexpr bool kSupportedShape = (M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) ||
                                 (M == 8 && N == 32 && K == 16);
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(detail::kSupportedShape<M, N, K>, "wmma shape not emulated (m16n16k16, m32n8k16, m8n32k16)");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                  : std::is_same_v<T, __nv_bfloat16>,
                "the emulator's wmma takes __nv_bfloat16 inputs and float accumulators");

 public:
  using element_type = T;
  using D = detail::Dims<Use, M, N, K>;
  static constexpr int num_elements = D::rows * D::cols / 32;
  T x[num_elements];

  static const uint16_t* permutation() {
    return gt::emu::detail::wmma_permutation(D::use, M, N, K, std::is_same_v<Layout, col_major>);
  }
};

template <typename Use, int M, int N, int K, typename T, typename L, typename V>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = static_cast<T>(v);
}
template <typename Use, int M, int N, int K, typename L>
void fill_fragment(fragment<Use, M, N, K, __nv_bfloat16, L>& f, float v) {
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = __float2bfloat16_rn(v);
}

// matrix_a / matrix_b: the layout is the fragment's.
template <typename Use, int M, int N, int K, typename L>
void load_matrix_sync(fragment<Use, M, N, K, __nv_bfloat16, L>& f, const __nv_bfloat16* p,
                      unsigned ldm, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using Frag = fragment<Use, M, N, K, __nv_bfloat16, L>;
  gt::emu::detail::check_wmma_pointer(p, ldm, 2, "wmma::load_matrix_sync", {file, line});
  const uint16_t* perm = Frag::permutation() + gt::emu::detail::lane_id() * Frag::num_elements;
  constexpr bool col = std::is_same_v<L, col_major>;
  for (int i = 0; i < Frag::num_elements; ++i) {
    const int r = perm[i] / Frag::D::cols, c = perm[i] % Frag::D::cols;
    f.x[i] = col ? p[r + static_cast<size_t>(c) * ldm] : p[static_cast<size_t>(r) * ldm + c];
  }
}

// Accumulators: the memory layout is an argument.
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                      layout_t layout, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  using Frag = fragment<accumulator, M, N, K, float>;
  gt::emu::detail::check_wmma_pointer(p, ldm, 4, "wmma::load_matrix_sync", {file, line});
  const uint16_t* perm = Frag::permutation() + gt::emu::detail::lane_id() * Frag::num_elements;
  for (int i = 0; i < Frag::num_elements; ++i) {
    const int r = perm[i] / N, c = perm[i] % N;
    f.x[i] = layout == mem_col_major ? p[r + static_cast<size_t>(c) * ldm]
                                     : p[static_cast<size_t>(r) * ldm + c];
  }
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                       layout_t layout, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  using Frag = fragment<accumulator, M, N, K, float>;
  gt::emu::detail::check_wmma_pointer(p, ldm, 4, "wmma::store_matrix_sync", {file, line});
  const uint16_t* perm = Frag::permutation() + gt::emu::detail::lane_id() * Frag::num_elements;
  for (int i = 0; i < Frag::num_elements; ++i) {
    const int r = perm[i] / N, c = perm[i] % N;
    if (layout == mem_col_major) p[r + static_cast<size_t>(c) * ldm] = f.x[i];
    else p[static_cast<size_t>(r) * ldm + c] = f.x[i];
  }
}

template <int M, int N, int K, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d,
              const fragment<matrix_a, M, N, K, __nv_bfloat16, LA>& a,
              const fragment<matrix_b, M, N, K, __nv_bfloat16, LB>& b,
              const fragment<accumulator, M, N, K, float>& c, bool satf = false,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (satf) gt::emu::detail::device_fault("wmma::mma_sync with satf is not emulated", {file, line});
  gt::emu::detail::warp_mma({a.x, b.x, c.x, d.x, M, N, K, std::is_same_v<LA, col_major>,
                             std::is_same_v<LB, col_major>},
                            {file, line});
}

}  // namespace nvcuda::wmma
