// Every wrapper of kernels/cuda/async_sm90.cuh in one kernel, so that nvcc
// assembles their inline PTX for sm_90 and sm_90a where it is installed
// (tests/scripts/test_ptxas_report.py). The emulator runs the same wrappers
// in tests/emulator/test_emu_async.cu; this file is never linked.
#include "kernels/cuda/async_sm90.cuh"

namespace dev = gt::cuda::dev;

__global__ void async_sm90_probe_kernel(const __grid_constant__ CUtensorMap map2,
                                        const __grid_constant__ CUtensorMap map3, float* out) {
  __shared__ alignas(1024) float tile[2][32 * 32];
  __shared__ uint64_t full, empty;
  if (threadIdx.x == 0) {
    dev::mbarrier_init(&full, 1);
    dev::mbarrier_init(&empty, blockDim.x);
    dev::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    dev::mbarrier_arrive_expect_tx(&full, sizeof tile[0]);
    dev::mbarrier_expect_tx(&full, sizeof tile[1]);
    dev::tma_load_2d(tile[0], &map2, 0, static_cast<int>(blockIdx.x), &full);
    dev::tma_load_3d(tile[1], &map3, 0, 0, static_cast<int>(blockIdx.x), &full);
  }
  dev::mbarrier_wait(&full, 0);
  out[threadIdx.x] = tile[0][threadIdx.x] + tile[1][threadIdx.x];
  dev::fence_proxy_async_shared();
  dev::mbarrier_arrive(&empty);
  dev::mbarrier_wait(&empty, 0);
}
