#include "kernels/core/buffer.hpp"

#include "kernels/core/error.hpp"

namespace gt {

Buffer::Buffer(void* data, size_t bytes, Device device, Release release)
    : ptr_(data, std::move(release)), bytes_(bytes), device_(device) {}

namespace {
int64_t elements(std::initializer_list<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
}  // namespace

TensorView Buffer::f32_view(std::initializer_list<int64_t> shape, int64_t offset) const {
  GT_CHECK(offset >= 0 && (offset + elements(shape)) * int64_t(sizeof(float)) <= int64_t(bytes_),
           "fp32 view of ", elements(shape), " elements at ", offset, " past a buffer of ",
           bytes_, " bytes");
  return make_view(f32() + offset, DType::f32, device_, shape);
}

TensorView Buffer::i32_view(std::initializer_list<int64_t> shape, int64_t offset) const {
  GT_CHECK(offset >= 0 &&
               (offset + elements(shape)) * int64_t(sizeof(int32_t)) <= int64_t(bytes_),
           "int32 view of ", elements(shape), " elements at ", offset, " past a buffer of ",
           bytes_, " bytes");
  return make_view(i32() + offset, DType::i32, device_, shape);
}

}  // namespace gt
