// CudaOps' attention over blocks (context parallelism): PLACEHOLDER until the
// kernels land (work in progress on this branch; every call fails naming
// the op, so nothing runs a wrong result).
#include "kernels/core/attention_kernels.hpp"
#include "kernels/cuda/cuda_ops.hpp"

namespace gt {

int64_t CudaOps::attention_block_scratch_elems(int B, int n_head, int Tq, int Tk) const {
  return gt::attention_block_scratch_elems(Device::cuda, B, n_head, Tq, Tk);
}
void CudaOps::do_attention_block_forward(TensorView, TensorView, TensorView, TensorView,
                                         TensorView, TensorView, int64_t, int64_t, int, int,
                                         bool) {
  fail("CudaOps::attention_block_forward: not implemented yet");
}
void CudaOps::do_attention_block_backward(TensorView, TensorView, TensorView, TensorView,
                                          TensorView, TensorView, TensorView, TensorView,
                                          TensorView, TensorView, int64_t, int64_t, int, int) {
  fail("CudaOps::attention_block_backward: not implemented yet");
}
void CudaOps::do_attention_row_dot(TensorView, TensorView, TensorView, int) {
  fail("CudaOps::attention_row_dot: not implemented yet");
}
void CudaOps::do_cast_rows(TensorView, TensorView) {
  fail("CudaOps::cast_rows: not implemented yet");
}

}  // namespace gt
