// `trainer costs`: the per-op cost table of one optimizer step as the CUDA
// backend would run it, and the step's roofline floor on a given GPU.
//
// The real model, parameter store and optimizer run one step on DryRunOps
// (dry_run_ops.hpp: no arithmetic, no memory), wrapped in ProfilingOps, so
// the table lists every op the step issues with its shape, calls, FLOPs and
// bytes (trainer/profile/op_costs.hpp: the formulas that
// CudaTraffic.EveryOpsByteFormulaMatchesTheBytesItsKernelsMove holds to the
// bytes our kernels move on the emulated device, plus the extra that test
// names for a kernel known to move more). Each op runs on one unit:
//   gemm       bf16 operands: the tensor cores' bf16 peak; fp32: the fp32 FMA peak
//              (TF32 is off);
//   attention  the fp32 FMA peak (the model's attention reads fp32 activations
//              and runs the SIMT kernels);
//   the rest   memory-bound: FLOPs at the fp32 FMA peak, bytes at HBM bandwidth;
// and its floor is max(FLOPs / unit peak, bytes / HBM bandwidth). The step's
// floor is the sum (one stream). Peaks: `--peaks BENCH.json` (measured) if
// given, else the hardware file's sustained figures when it has them, else
// its datasheet; the table says which.
//
//   trainer costs --config FILE --hardware FILE [--peaks BENCH.json]
//                 [--json FILE|-] [section.key=value ...]
//
// One data, tensor and pipeline rank (parallel.pp = dp = fsdp = tp = 1):
// another layout is an error that says so. Under context parallelism
// (parallel.cp > 1) the table is one cp rank's step, run on a mesh of
// communicators that move nothing (dry_run_mesh.hpp): the rank's T / cp
// rows of each sequence, its attention over key blocks, and the bytes its
// collectives would send per mesh axis. The rank is the last one: with
// load-balanced chunks all do the same work, without, it attends to the
// most keys.
#pragma once

#include <string>
#include <vector>

namespace gt {

struct CostsArgs {
  std::string config, hardware, peaks, json;
  std::vector<std::string> overrides;
};

int run_costs_command(const CostsArgs& args);

}  // namespace gt
