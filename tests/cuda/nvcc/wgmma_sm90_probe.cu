// Every wrapper of kernels/cuda/wgmma_sm90.cuh, instantiated for each N and
// major-ness, so that nvcc assembles their inline PTX for sm_90a where it is
// installed (tests/scripts/test_ptxas_report.py). The emulator runs the same
// wrappers in tests/emulator/test_emu_wgmma.cu; this file is never linked.
#include "kernels/cuda/wgmma_sm90.cuh"

namespace dev = gt::cuda::dev;

template <int N, bool TransA, bool TransB>
__device__ void probe_one(const void* a, const void* b, float* out) {
  float d[N / 2] = {};
  uint32_t regs[4] = {1u, 2u, 3u, 4u};
  const uint64_t da = dev::wgmma_descriptor(a, dev::WgmmaSwizzle::b128, 16, 1024);
  const uint64_t db = dev::wgmma_descriptor(b, dev::WgmmaSwizzle::b64, 16, 512);
  dev::wgmma_fence();
  dev::wgmma_ss<N, TransA, TransB>(d, da, db, false);
  dev::wgmma_rs<N, TransB>(d, regs, db, true);
  dev::wgmma_commit_group();
  dev::wgmma_wait_group<0>();
  dev::wgmma_fence_operands(d);
  for (int i = 0; i < N / 2; ++i) out[threadIdx.x * (N / 2) + i] = d[i];
}

__global__ void __launch_bounds__(128) wgmma_sm90_probe_kernel(float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  probe_one<64, false, false>(smem, smem + 8192, out);
  probe_one<64, false, true>(smem, smem + 8192, out);
  probe_one<128, true, false>(smem, smem + 16384, out);
  probe_one<128, false, true>(smem, smem + 16384, out);
}
