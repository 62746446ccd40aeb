// cuTensorMapEncodeTiled through the runtime's driver entry point (see
// tensor_map.hpp).
#include "kernels/cuda/tensor_map.hpp"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace gt::cuda {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// Looked up once per process (every attention call encodes its maps).
EncodeTiled lookup_encode() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                         cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn)
    throw std::runtime_error(std::string("tensor maps: the driver has no cuTensorMapEncodeTiled (") +
                             cudaGetErrorString(e) + "); they need CUDA 12 and an sm_90 GPU");
  return reinterpret_cast<EncodeTiled>(fn);
}

EncodeTiled encode_entry_point() {
  static const EncodeTiled fn = lookup_encode();
  return fn;
}

int element_bytes(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32: return 4;
    default:
      throw std::invalid_argument("tensor maps: element type " +
                                  std::to_string(static_cast<int>(type)) +
                                  " is not one the kernels use (uint8, bf16, fp16, fp32)");
  }
}

}  // namespace

uint32_t tile_box_bytes(CUtensorMapDataType type, const TileMapShape& shape) {
  uint32_t n = static_cast<uint32_t>(element_bytes(type));
  for (int i = 0; i < shape.rank; ++i) n *= shape.box[i];
  return n;
}

CUtensorMap encode_tile_map(const void* base, CUtensorMapDataType type, const TileMapShape& shape,
                            TileSwizzle swizzle) {
  const int elem = element_bytes(type);
  auto bad = [](const std::string& what) {
    throw std::invalid_argument("tensor map: " + what);
  };
  if (shape.rank < 1 || shape.rank > 5) bad("rank " + std::to_string(shape.rank) + " is not 1..5");
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) bad("the base address is not 16-byte aligned");
  for (int i = 0; i < shape.rank; ++i)
    if (shape.box[i] < 1 || shape.box[i] > 256 || shape.dims[i] < 1)
      bad("dimension " + std::to_string(i) + ": box " + std::to_string(shape.box[i]) +
          " must be 1..256 and the extent " + std::to_string(shape.dims[i]) + " positive");
  for (int i = 0; i + 1 < shape.rank; ++i)
    if (shape.strides[i] % 16 != 0)
      bad("the stride of dimension " + std::to_string(i + 1) + " (" +
          std::to_string(shape.strides[i]) + " bytes) is not a multiple of 16");
  const uint32_t inner = shape.box[0] * static_cast<uint32_t>(elem);
  if (inner % 16 != 0) bad("a box row of " + std::to_string(inner) + " bytes is not a multiple of 16");
  const uint32_t span = static_cast<uint32_t>(swizzle);
  if (span != 0 && inner != span)
    bad("a box row of " + std::to_string(inner) + " bytes under a " + std::to_string(span) +
        "-byte swizzle: the kernels use rows exactly one swizzle span wide");

  const CUtensorMapSwizzle mode = swizzle == TileSwizzle::b32   ? CU_TENSOR_MAP_SWIZZLE_32B
                                  : swizzle == TileSwizzle::b64  ? CU_TENSOR_MAP_SWIZZLE_64B
                                  : swizzle == TileSwizzle::b128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                                                 : CU_TENSOR_MAP_SWIZZLE_NONE;
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode_entry_point()(
      &map, type, static_cast<cuuint32_t>(shape.rank), const_cast<void*>(base), shape.dims,
      shape.strides, shape.box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, mode,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("tensor map: cuTensorMapEncodeTiled returned CUresult " +
                             std::to_string(static_cast<int>(r)));
  return map;
}

}  // namespace gt::cuda
