// Shadow of NVIDIA's <mma.h> for the emulated device: nvcuda::wmma with
// fragments distributed over the 32 lanes of a warp (gt_emu/wmma.hpp).
#pragma once

#include <cuda_runtime.h>

#include "gt_emu/wmma.hpp"
