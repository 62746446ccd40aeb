// cuTensorMapEncodeTiled on the emulated device (see tensor_map.hpp).
#include "tensor_map.hpp"

#include <cstring>

#include "config.hpp"
#include "diagnostics.hpp"

namespace gt::emu {

namespace {

// Bytes per element, or 0 for a type the emulator does not model (the
// packed sub-byte types).
int element_bytes(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    default: return 0;
  }
}

bool is_float(CUtensorMapDataType t) {
  return t == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || t == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ||
         t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 || t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ ||
         t == CU_TENSOR_MAP_DATA_TYPE_FLOAT64 || t == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 ||
         t == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
}

CUresult refuse(CUresult code, const std::string& msg) {
  report("error", "cuTensorMapEncodeTiled: " + msg);
  return code;
}

}  // namespace

const EmuTensorMap* decode_tensor_map(const CUtensorMap* map, std::string* why) {
  if (reinterpret_cast<uintptr_t>(map) % 64 != 0) {
    *why = "the tensor map at " + address(map) + " is not 64-byte aligned";
    return nullptr;
  }
  const auto* m = reinterpret_cast<const EmuTensorMap*>(map);
  if (m->magic != kTensorMapMagic) {
    *why = "the bytes at " + address(map) +
           " are not a tensor map cuTensorMapEncodeTiled wrote (uninitialized or overwritten)";
    return nullptr;
  }
  return m;
}

CUresult encode_tensor_map_tiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                 cuuint32_t tensorRank, void* globalAddress,
                                 const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                 const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                 CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                 CUtensorMapL2promotion l2Promotion,
                                 CUtensorMapFloatOOBfill oobFill) {
  (void)l2Promotion;  // a cache hint: no effect on the data
  if (config().compute_capability < 90)
    return refuse(CUDA_ERROR_NOT_SUPPORTED,
                  "tensor maps need compute capability 9.0; the device reports " +
                      std::to_string(config().compute_capability / 10) + "." +
                      std::to_string(config().compute_capability % 10));
  if (!tensorMap || reinterpret_cast<uintptr_t>(tensorMap) % 64 != 0)
    return refuse(CUDA_ERROR_INVALID_VALUE,
                  "tensorMap " + address(tensorMap) + " must be a 64-byte aligned address");
  const int elem = element_bytes(tensorDataType);
  if (elem == 0)
    return refuse(CUDA_ERROR_INVALID_VALUE,
                  "tensorDataType " + std::to_string(static_cast<int>(tensorDataType)) +
                      " is not a type the emulator models (the packed sub-byte types are not)");
  if (tensorRank < 1 || tensorRank > 5)
    return refuse(CUDA_ERROR_INVALID_VALUE,
                  "tensorRank " + std::to_string(tensorRank) + " must be in 1..5");
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE)
    return refuse(CUDA_ERROR_NOT_SUPPORTED,
                  "the emulator models CU_TENSOR_MAP_INTERLEAVE_NONE only");
  if (reinterpret_cast<uintptr_t>(globalAddress) % 16 != 0)
    return refuse(CUDA_ERROR_INVALID_VALUE,
                  "globalAddress " + address(globalAddress) + " must be 16-byte aligned");
  if (!globalDim || !boxDim || !elementStrides || (tensorRank > 1 && !globalStrides))
    return refuse(CUDA_ERROR_INVALID_VALUE, "a null globalDim, globalStrides, boxDim or "
                                            "elementStrides array");
  int swizzle_bytes = 0;
  switch (swizzle) {
    case CU_TENSOR_MAP_SWIZZLE_NONE: swizzle_bytes = 0; break;
    case CU_TENSOR_MAP_SWIZZLE_32B: swizzle_bytes = 32; break;
    case CU_TENSOR_MAP_SWIZZLE_64B: swizzle_bytes = 64; break;
    case CU_TENSOR_MAP_SWIZZLE_128B: swizzle_bytes = 128; break;
    default:
      return refuse(CUDA_ERROR_NOT_SUPPORTED,
                    "swizzle " + std::to_string(static_cast<int>(swizzle)) +
                        ": the emulator models NONE, 32B, 64B and 128B");
  }
  if (oobFill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !is_float(tensorDataType))
    return refuse(CUDA_ERROR_INVALID_VALUE,
                  "oobFill NAN_REQUEST_ZERO_FMA needs a floating-point tensorDataType");

  EmuTensorMap m{};
  m.magic = kTensorMapMagic;
  m.base = reinterpret_cast<uint64_t>(globalAddress);
  m.rank = static_cast<uint8_t>(tensorRank);
  m.elem_bytes = static_cast<uint8_t>(elem);
  m.swizzle_bytes = static_cast<uint8_t>(swizzle_bytes);
  m.oob_nan = oobFill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  m.dtype = static_cast<uint8_t>(tensorDataType);
  for (unsigned i = 0; i < tensorRank; ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    if (globalDim[i] == 0 || globalDim[i] > (uint64_t{1} << 32))
      return refuse(CUDA_ERROR_INVALID_VALUE, "globalDim" + at + " = " +
                                                  std::to_string(globalDim[i]) +
                                                  " must be in 1..2^32");
    if (boxDim[i] == 0 || boxDim[i] > 256)
      return refuse(CUDA_ERROR_INVALID_VALUE, "boxDim" + at + " = " + std::to_string(boxDim[i]) +
                                                  " must be in 1..256");
    if (elementStrides[i] == 0 || elementStrides[i] > 8)
      return refuse(CUDA_ERROR_INVALID_VALUE, "elementStrides" + at + " = " +
                                                  std::to_string(elementStrides[i]) +
                                                  " must be in 1..8");
    if (i > 0 && elementStrides[i] != 1)
      return refuse(CUDA_ERROR_NOT_SUPPORTED,
                    "elementStrides" + at + " = " + std::to_string(elementStrides[i]) +
                        ": the emulator models unit traversal strides only");
    m.dim[i] = globalDim[i];
    m.box[i] = static_cast<uint16_t>(boxDim[i]);
  }
  m.stride[0] = static_cast<uint64_t>(elem);
  for (unsigned i = 1; i < tensorRank; ++i) {
    const uint64_t s = globalStrides[i - 1];
    const std::string at = "globalStrides[" + std::to_string(i - 1) + "] = " + std::to_string(s);
    if (s % 16 != 0 || s >= (uint64_t{1} << 40))
      return refuse(CUDA_ERROR_INVALID_VALUE, at + " must be a multiple of 16 below 2^40");
    // Each stride spans the dimension below it (the driver's own assert).
    if (s < m.dim[i - 1] * m.stride[i - 1])
      return refuse(CUDA_ERROR_INVALID_VALUE,
                    at + " is shorter than dimension " + std::to_string(i - 1) + " (" +
                        std::to_string(m.dim[i - 1] * m.stride[i - 1]) +
                        " bytes): rows would overlap");
    m.stride[i] = s;
  }
  const uint64_t inner = uint64_t{m.box[0]} * static_cast<uint64_t>(elem);
  if (inner % 16 != 0)
    return refuse(CUDA_ERROR_INVALID_VALUE,
                  "boxDim[0] * element size = " + std::to_string(inner) +
                      " bytes must be a multiple of 16");
  if (swizzle_bytes && inner > static_cast<uint64_t>(swizzle_bytes))
    return refuse(CUDA_ERROR_INVALID_VALUE,
                  "the box's inner dimension (" + std::to_string(inner) +
                      " bytes) exceeds the swizzle span (" + std::to_string(swizzle_bytes) +
                      " bytes)");
  if (swizzle_bytes && inner != static_cast<uint64_t>(swizzle_bytes))
    return refuse(CUDA_ERROR_NOT_SUPPORTED,
                  "a swizzled box's inner dimension (" + std::to_string(inner) +
                      " bytes) shorter than the swizzle span (" + std::to_string(swizzle_bytes) +
                      " bytes) is not modelled by the emulator");
  std::memset(tensorMap, 0, sizeof *tensorMap);
  std::memcpy(tensorMap, &m, sizeof m);
  return CUDA_SUCCESS;
}

}  // namespace gt::emu
