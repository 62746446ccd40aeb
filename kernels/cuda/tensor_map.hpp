// Tensor maps for the bulk tensor copy engine (kernels/cuda/async_sm90.cuh):
// a box-tiled view of a row-major device tensor, encoded by the driver's
// cuTensorMapEncodeTiled, reached through the runtime's driver entry point
// (no link against libcuda; the emulated device answers with its own
// encode). Host code only. A tensor map is passed to a kernel by value as a
// `const __grid_constant__ CUtensorMap` parameter.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gt::cuda {

// Rows of 16-byte chunks XOR-permuted over a span: the layouts wgmma reads
// without bank conflicts. `bytes` is the span (0: no swizzle).
enum class TileSwizzle { none = 0, b32 = 32, b64 = 64, b128 = 128 };

// A rank-1..5 view: dims[i] elements along dimension i (0 innermost),
// strides[i] bytes between consecutive indices of dimension i + 1
// (rank - 1 of them; each a multiple of 16), boxes of box[i] elements.
struct TileMapShape {
  int rank = 2;
  uint64_t dims[5] = {};
  uint64_t strides[4] = {};
  uint32_t box[5] = {};
};

// Encodes the map; throws std::invalid_argument naming the broken rule
// (checked here with the driver's documented limits first, so the message
// is ours on a GPU too) or std::runtime_error with the driver's code.
CUtensorMap encode_tile_map(const void* base, CUtensorMapDataType type, const TileMapShape& shape,
                            TileSwizzle swizzle);

// The bytes one box occupies in shared memory (what a copy completes).
uint32_t tile_box_bytes(CUtensorMapDataType type, const TileMapShape& shape);

}  // namespace gt::cuda
