// Host-side controls of the emulated device, for tests and the device
// banner (compiled only in TRAINER_CUDA_EMULATOR builds). Everything else
// about the emulator is reached through the ordinary CUDA API.
#pragma once

#include <string>

namespace gt::emu {

// "gt-emu emulated CUDA device (8 devices; blocks forward, streams issue
// order, wmma layout seed 24301)": what the tests print as the device they
// ran on.
std::string describe_device();

// Switch the orders for the rest of the process (tests that show a missing
// wait or a grid-order assumption): "forward"/"reverse" and
// "issue"/"reverse"/"random". Returns false for an unknown name.
bool set_block_order(const std::string& order);
std::string block_order();
bool set_stream_order(const std::string& order);
// How many emulated devices are visible from now on (as CUDA_VISIBLE_DEVICES
// decides at start-up); 0 hides them all, for the "no device" paths.
void set_visible_devices(int n);
// Makes the cuBLASLt heuristic refuse every fused epilogue (or stop refusing).
void set_cublaslt_refuse_epilogues(bool refuse);

// The explanation of the current sticky device fault ("" when none).
std::string fault_message();

}  // namespace gt::emu
