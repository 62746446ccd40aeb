// Shadow of NVIDIA's <cuda_runtime.h> for code compiled by g++ against the
// emulated device (TRAINER_CUDA_EMULATOR builds put emulator/include first on
// the include path). It includes the real header, which brings the runtime
// API declarations, dim3, uint3 and the vector types, then adds the device
// layer that nvcc would have provided (gt_emu/device.hpp).
#pragma once

#include_next <cuda_runtime.h>

#include "gt_emu/device.hpp"
