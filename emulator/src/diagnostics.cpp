// Error state of the emulated runtime (see diagnostics.hpp).
#include "diagnostics.hpp"

#include <cstdio>
#include <mutex>

namespace gt::emu {

namespace {

thread_local cudaError_t t_last_error = cudaSuccess;

// The sticky (device-fault) error is the device's, not a thread's.
struct Sticky {
  std::mutex mu;
  cudaError_t code = cudaSuccess;
  std::string text;  // "<the runtime's string> [gt-emu: <why>]"
};
Sticky& sticky() {
  static Sticky* s = new Sticky;  // never destroyed: usable from any destructor
  return *s;
}

// The runtime's own text for a code (no sticky explanation).
const char* plain_error_string(cudaError_t e);

}  // namespace

void report(const char* kind, const std::string& msg) {
  std::string line = "gt-emu: ";
  line += kind;
  line += ": ";
  for (char c : msg) {
    line += c;
    if (c == '\n') line += "    ";
  }
  line += '\n';
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

cudaError_t fail(cudaError_t e, const std::string& msg) {
  if (e == cudaSuccess) return e;
  if (!msg.empty()) report("error", msg);
  t_last_error = e;
  return e;
}

void set_sticky(cudaError_t e, const std::string& msg) {
  report("device fault", msg);
  Sticky& s = sticky();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.code != cudaSuccess) return;  // the first fault is the one that counts
  s.code = e;
  s.text = std::string(plain_error_string(e)) + " [gt-emu: " + msg + "]";
}

cudaError_t sticky_error() {
  Sticky& s = sticky();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.code;
}

void clear_errors() {
  Sticky& s = sticky();
  std::lock_guard<std::mutex> lock(s.mu);
  s.code = cudaSuccess;
  s.text.clear();
  t_last_error = cudaSuccess;
}

cudaError_t take_last_error() {
  const cudaError_t st = sticky_error();
  if (st != cudaSuccess) return st;
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t peek_last_error() {
  const cudaError_t st = sticky_error();
  return st != cudaSuccess ? st : t_last_error;
}

std::string address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

const char* error_string(cudaError_t e) {
  Sticky& s = sticky();
  std::lock_guard<std::mutex> lock(s.mu);
  if (e != cudaSuccess && e == s.code) return s.text.c_str();
  return plain_error_string(e);
}

namespace {
const char* plain_error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unrecognized error code";
  }
}

}  // namespace

}  // namespace gt::emu
