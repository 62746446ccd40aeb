// Microbenchmarks that give the roofline and MFU their measured peaks, run
// through the same Ops the trainer uses (so a backend is measured as the
// model sees it) and the job's world communicator:
//   gemm         matmul_forward on square shapes (1024³ up, each larger one
//                while predicted under a second per call; quick: 512³ and
//                1024³); peak = the best FLOP/s of any repetition;
//   memory       copy (2 x bytes moved) and add (out = a + b, 3 x bytes, STREAM's
//                "add"); peak = the better of the two;
//   collectives  (world size > 1) all_reduce_sum and all_gather of a few sizes,
//                reported as nccl-tests does: algbw = size / time, busbw = algbw
//                x 2(n-1)/n (all-reduce) or (n-1)/n (all-gather, size = the
//                gathered total); time = the slowest rank's; peak = best busbw.
// Per-rank figures (gemm, memory) run on every rank at once and are averaged,
// so oversubscribed ranks measure the share they actually get.
//
// The result is JSON (written by `trainer bench --out`, read back as peaks by
// profile.peaks / --peaks):
//   {"format": "gpt-trainer-bench", "version": 1, "device", "dtype", "threads",
//    "world_size", "quick", "gemm": [{m, n, k, seconds, tflops}],
//    "memory": [{kernel, bytes, seconds, gbps}],
//    "collectives": [{op, bytes, seconds, algbw_gbps, busbw_gbps}],
//    "peaks": {gemm_tflops, mem_gbps, all_reduce_busbw_gbps|null,
//              all_gather_busbw_gbps|null}}
// Buffers come from Ops::allocate (device memory on a GPU, what the trainer's
// collectives move there too), and every timed call waits for the backend.
// The GEMM operands are in BenchOptions::gemm_dtype: a bf16 run's MFU is
// measured against the bf16 peak (fp32 accumulation, fp32 output), "dtype".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "kernels/ops.hpp"

namespace gt {

class Communicator;

struct BenchOptions {
  bool quick = false;  // the < 2 s version a profiled run does at start
  DType gemm_dtype = DType::f32;  // bf16: the GEMMs of a bf16 run
};

// Collective over `world` (null or size 1: no collectives measured).
nlohmann::json run_bench(Ops& ops, Communicator* world, const BenchOptions& opt);

// The human-readable table of a run_bench result.
std::string format_bench(const nlohmann::json& result);

// `trainer bench [--config FILE] [--out FILE.json]`: one process or every
// rank of an MPI job; rank 0 prints the table and writes the JSON. Returns the
// exit code.
int bench_command(const std::string& config_path, const std::string& out_path);

}  // namespace gt
