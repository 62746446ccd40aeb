// How the emulated device reports: one "gt-emu: ..." line on stderr at the
// moment a rule is broken (so the reason is visible even when the program
// swallows the error code), and the error code the CUDA runtime would return:
//   * per-thread last error (cudaGetLastError returns and clears it);
//   * sticky errors (a kernel fault): every later call returns it, as after a
//     real device fault, until cudaDeviceReset; cudaGetErrorString of the
//     sticky code carries the emulator's explanation.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace gt::emu {

// Prints "gt-emu: <kind>: <msg>" on stderr (one line; a multi-line message
// is indented).
void report(const char* kind, const std::string& msg);

// Records `e` as the thread's last error and returns it; with a message it
// is reported first. cudaSuccess passes through untouched.
cudaError_t fail(cudaError_t e, const std::string& msg = {});

// A fault on the device: reported, then sticky until cudaDeviceReset.
void set_sticky(cudaError_t e, const std::string& msg);
// The sticky error, or cudaSuccess.
cudaError_t sticky_error();
void clear_errors();

// cudaGetLastError / cudaPeekAtLastError.
cudaError_t take_last_error();
cudaError_t peek_last_error();

const char* error_name(cudaError_t e);

// "0x7f12a8c0" for reports.
std::string address(const void* p);
const char* error_string(cudaError_t e);

}  // namespace gt::emu
