// What the emulated cuBLASLt's tests share (test_emu_cublaslt.cpp,
// test_emu_cublaslt_fp8.cpp): RAII owners of device memory and of the
// cuBLASLt objects, and a fixture with a stream, a handle and the
// heuristic's first algorithm.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gt_emu/control.hpp"

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define ASSERT_LT_OK(expr) ASSERT_EQ((expr), CUBLAS_STATUS_SUCCESS) << #expr

namespace gt::emu_test {

// A device allocation of exactly `bytes` (cudaMalloc / cudaFree).
class DevMem {
 public:
  explicit DevMem(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&p_, bytes), cudaSuccess);
  }
  ~DevMem() { cudaFree(p_); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  void* get() const { return p_; }
  template <typename T = unsigned char>
  T* at(size_t byte_offset) const {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(p_) + byte_offset);
  }
  void upload(const std::vector<unsigned char>& b) {
    ASSERT_LE(b.size(), bytes_);
    ASSERT_EQ(cudaMemcpy(p_, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> b(bytes_);
    EXPECT_EQ(cudaMemcpy(b.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return b;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// RAII owners of the cuBLASLt objects, so a failed assertion leaks nothing.
struct Desc {
  cublasLtMatmulDesc_t d = nullptr;
  explicit Desc(cublasComputeType_t c = CUBLAS_COMPUTE_32F) {
    EXPECT_EQ(cublasLtMatmulDescCreate(&d, c, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  }
  ~Desc() { cublasLtMatmulDescDestroy(d); }
  template <typename T>
  cublasStatus_t set(cublasLtMatmulDescAttributes_t a, T v) {
    return cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), CUBLAS_STATUS_SUCCESS);
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l); }
};
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  Pref() { EXPECT_EQ(cublasLtMatmulPreferenceCreate(&p), CUBLAS_STATUS_SUCCESS); }
  ~Pref() { cublasLtMatmulPreferenceDestroy(p); }
  template <typename T>
  cublasStatus_t set(cublasLtMatmulPreferenceAttributes_t a, T v) {
    return cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof v);
  }
};

// Restores the refuse-epilogues switch however the test ends.
struct RefuseEpilogues {
  explicit RefuseEpilogues(bool on) { gt::emu::set_cublaslt_refuse_epilogues(on); }
  ~RefuseEpilogues() { gt::emu::set_cublaslt_refuse_epilogues(false); }
};

class EmuCublasLt : public ::testing::Test {
 protected:
  void SetUp() override {
    // Independent of GT_EMU_CUBLASLT_REFUSE_EPILOGUES in the environment.
    gt::emu::set_cublaslt_refuse_epilogues(false);
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ASSERT_LT_OK(cublasLtCreate(&handle_));
  }
  void TearDown() override {
    cublasLtDestroy(handle_);
    cudaStreamDestroy(stream_);
  }

  // The heuristic's first algorithm, or the status it refused with.
  cublasStatus_t heuristic(const Desc& d, const Layout& a, const Layout& b, const Layout& c,
                           const Layout& dl, cublasLtMatmulAlgo_t* algo,
                           cublasLtMatmulPreference_t pref = nullptr) {
    cublasLtMatmulHeuristicResult_t r[4] = {};
    int returned = -1;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, d.d, a.l, b.l, c.l, dl.l, pref, 4, r, &returned);
    if (st != CUBLAS_STATUS_SUCCESS) {
      EXPECT_EQ(returned, 0);
      return st;
    }
    EXPECT_EQ(returned, 1);
    EXPECT_EQ(r[0].state, CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(r[0].workspaceSize, 0u);
    *algo = r[0].algo;
    return st;
  }

  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
};

}  // namespace gt::emu_test
