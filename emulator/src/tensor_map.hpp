// Tensor maps (CUtensorMap) on the emulated device: what the driver's
// cuTensorMapEncodeTiled writes into the 128 opaque bytes, here our own
// decoded form, and the encode itself with the rules the driver documents
// (cuda.h's comment on cuTensorMapEncodeTiled), each broken one reported in
// a "gt-emu: error:" line naming the parameter. Programs reach the encode
// through cudaGetDriverEntryPointByVersion, as on a GPU.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gt::emu {

// The decoded tensor map, stored in a CUtensorMap's opaque bytes.
struct EmuTensorMap {
  uint64_t magic;         // kTensorMapMagic: written by our encode only
  uint64_t base;          // globalAddress
  uint64_t dim[5];        // globalDim, innermost first
  uint64_t stride[5];     // bytes; stride[0] is the element size
  uint16_t box[5];        // boxDim
  uint8_t rank;
  uint8_t elem_bytes;
  uint8_t swizzle_bytes;  // 0 (none), 32, 64, 128
  uint8_t oob_nan;        // CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
  uint8_t dtype;          // CUtensorMapDataType

  size_t box_bytes() const {
    size_t n = elem_bytes;
    for (int i = 0; i < rank; ++i) n *= box[i];
    return n;
  }
  // The last byte the map can address, plus one, from base.
  uint64_t extent_bytes() const {
    uint64_t last = 0;
    for (int i = 0; i < rank; ++i) last += (dim[i] - 1) * stride[i];
    return last + elem_bytes;
  }
};
static_assert(sizeof(EmuTensorMap) <= sizeof(CUtensorMap), "the decoded map must fit");
constexpr uint64_t kTensorMapMagic = 0x67742d656d75544dull;  // "gt-emuTM"

// The decoded map in `map`, or nullptr (with `why`) when the bytes are not
// one our encode wrote.
const EmuTensorMap* decode_tensor_map(const CUtensorMap* map, std::string* why);

// cuTensorMapEncodeTiled, with the driver's signature.
CUresult encode_tensor_map_tiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                 cuuint32_t tensorRank, void* globalAddress,
                                 const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                 const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                 CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                 CUtensorMapL2promotion l2Promotion,
                                 CUtensorMapFloatOOBfill oobFill);

// The byte offset of swizzled shared address `a` (the copy engine's XOR of
// the 16-byte chunk index with the 128-byte row index, over the pattern's
// span): CuTe's Swizzle<1|2|3, 4, 3>.
inline uintptr_t swizzle_address(uintptr_t a, int swizzle_bytes) {
  switch (swizzle_bytes) {
    case 32: return a ^ (((a >> 7) & 1u) << 4);
    case 64: return a ^ (((a >> 7) & 3u) << 4);
    case 128: return a ^ (((a >> 7) & 7u) << 4);
    default: return a;
  }
}

}  // namespace gt::emu
