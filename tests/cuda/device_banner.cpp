// Prints, before the first test, which device the CUDA tests run on: the
// emulated device with its settings, a GPU by name, or none (then the tests
// that need one skip, each saying so).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_resources.hpp"
#if defined(TRAINER_CUDA_EMULATOR)
#include "gt_emu/control.hpp"
#endif

namespace {

std::string device_line() {
#if defined(TRAINER_CUDA_EMULATOR)
  return gt::emu::describe_device();
#else
  if (!gt::cuda_available()) return "no CUDA device visible: the tests that need one skip";
  int d = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&d) != cudaSuccess || cudaGetDeviceProperties(&prop, d) != cudaSuccess)
    return "a CUDA device (its properties could not be read)";
  return std::string("GPU ") + std::to_string(d) + ": " + prop.name;
#endif
}

class DeviceBanner : public ::testing::Environment {
 public:
  void SetUp() override { std::printf("[ device   ] CUDA tests run on %s\n", device_line().c_str()); }
};

::testing::Environment* const kBanner = ::testing::AddGlobalTestEnvironment(new DeviceBanner);

}  // namespace
