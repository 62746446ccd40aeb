// Helpers for the emulator's own tests (tests/emulator): device arrays on a
// stream, and the check that a launch ends in a device fault whose report
// names what broke and where. Each faulting test resets the device
// afterwards (cudaDeviceReset clears the sticky error, as on a GPU).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "gt_emu/control.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_resources.hpp"

namespace gt::emu_test {

// Runs `launch` (which enqueues kernels on `stream`), synchronises, and
// expects the sticky `code` with a report containing every one of `words`.
inline ::testing::AssertionResult faults_with(cudaStream_t stream,
                                              const std::function<void()>& launch,
                                              cudaError_t code,
                                              std::initializer_list<const char*> words) {
  launch();
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t synced = cudaStreamSynchronize(stream);
  const std::string msg = gt::emu::fault_message();
  cudaDeviceReset();
  if (launched != cudaSuccess && launched != code)
    return ::testing::AssertionFailure() << "the launch failed with " << cudaGetErrorName(launched);
  if (synced != code)
    return ::testing::AssertionFailure() << "expected " << cudaGetErrorName(code) << ", got "
                                         << cudaGetErrorName(synced) << " (" << msg << ")";
  for (const char* w : words)
    if (msg.find(w) == std::string::npos)
      return ::testing::AssertionFailure() << "the report lacks \"" << w << "\": " << msg;
  return ::testing::AssertionSuccess() << msg;
}

// A launch-configuration error: returned by the launch (through
// cudaGetLastError, then cleared), never sticky.
inline ::testing::AssertionResult launch_rejected(const std::function<void()>& launch,
                                                  cudaError_t code) {
  launch();
  const cudaError_t e = cudaGetLastError();
  const cudaError_t again = cudaGetLastError();
  if (e != code)
    return ::testing::AssertionFailure() << "expected " << cudaGetErrorName(code) << ", got "
                                         << cudaGetErrorName(e);
  if (again != cudaSuccess)
    return ::testing::AssertionFailure() << "the error stayed after cudaGetLastError: "
                                         << cudaGetErrorName(again);
  return ::testing::AssertionSuccess();
}

}  // namespace gt::emu_test
