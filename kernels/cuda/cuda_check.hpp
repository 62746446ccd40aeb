// One check-macro family for every CUDA-side C API (runtime, cuBLAS/cuBLASLt,
// and NCCL: parallel/nccl_communicator.cpp's NCCL_CHECK is one more line). A failing call
// throws gt::Error naming the API, the failing expression, the library's own
// error string, file:line, the host and, when launched under MPI, the rank.
// Nothing here calls exit(): the exception unwinds, so every RAII owner
// (kernels/cuda/cuda_resources.hpp) frees its handle on the way out.
//
// Host-only header: safe to include from g++-compiled code (the backend's
// .cpp files, parallel/'s CUDA parts, tests); nothing under trainer/ does.
#pragma once

#include <cublasLt.h>  // cublasStatus_t, cublasGetStatusString (via cublas_api.h)
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/core/error.hpp"
#include "kernels/core/host.hpp"

namespace gt::cuda::detail {

// "host <name>" plus ", rank <r>" when an MPI launcher exported one. Read at
// failure time from the environment so no global state is needed.
inline std::string where_running() {
  std::string out = "host " + this_host();
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char* r = std::getenv(var)) {
      out += std::string(", rank ") + r;
      break;
    }
  }
  return out;
}

inline std::string api_error_message(const char* api, const char* expr, int code,
                                     const char* msg, const char* file, int line) {
  return ::gt::detail::concat(api, " error ", code, " (", msg ? msg : "unknown", ") in `", expr,
                              "` at ", file, ":", line, " on ", where_running());
}

[[noreturn]] inline void throw_api_error(const char* api, const char* expr, int code,
                                         const char* msg, const char* file, int line) {
  throw ::gt::Error(api_error_message(api, expr, code, msg, file, line));
}

// For destructors and other noexcept paths: report, never throw.
inline void log_api_error(const char* api, const char* expr, int code, const char* msg,
                          const char* file, int line) noexcept {
  try {
    std::fprintf(stderr, "error (ignored in destructor): %s\n",
                 api_error_message(api, expr, code, msg, file, line).c_str());
  } catch (...) {
    std::fprintf(stderr, "error (ignored in destructor): %s failure in %s\n", api, expr);
  }
}

}  // namespace gt::cuda::detail

// The generic form: `expr` is evaluated exactly once; `ok` is the success
// value of its status type and `to_string` turns a status into text.
#define GT_API_CHECK(api, expr, ok, to_string)                                                \
  do {                                                                                        \
    const auto gt_api_status_ = (expr);                                                       \
    if (gt_api_status_ != (ok))                                                               \
      ::gt::cuda::detail::throw_api_error(api, #expr, static_cast<int>(gt_api_status_),       \
                                          to_string(gt_api_status_), __FILE__, __LINE__);     \
  } while (0)

#define GT_API_LOG(api, expr, ok, to_string)                                                  \
  do {                                                                                        \
    const auto gt_api_status_ = (expr);                                                       \
    if (gt_api_status_ != (ok))                                                               \
      ::gt::cuda::detail::log_api_error(api, #expr, static_cast<int>(gt_api_status_),         \
                                        to_string(gt_api_status_), __FILE__, __LINE__);       \
  } while (0)

#define CUDA_CHECK(expr) GT_API_CHECK("CUDA", expr, cudaSuccess, cudaGetErrorString)
#define CUBLAS_CHECK(expr) GT_API_CHECK("cuBLAS", expr, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
// Destructor-safe variants: log to stderr, never throw.
#define CUDA_LOG_ERROR(expr) GT_API_LOG("CUDA", expr, cudaSuccess, cudaGetErrorString)
#define CUBLAS_LOG_ERROR(expr) \
  GT_API_LOG("cuBLAS", expr, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
// After every kernel launch: launch-configuration errors surface here, at the
// launcher that caused them, instead of at the next unrelated sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
