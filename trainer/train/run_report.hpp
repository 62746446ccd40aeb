// What a training run tells its reader: the start-up banner (model, layout,
// memory, data, batch), human-sized numbers, and the bytes each mesh axis
// sent (metrics.jsonl's comm_bytes).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "parallel/mesh.hpp"
#include "trainer/config/config.hpp"
#include "trainer/train/run_setup.hpp"

namespace gt {

// 124.44M, 1.2k, 3.00B: counts (parameters, tokens) for log lines.
std::string human_count(double x);
// A step log line's MFU with what it divides, from a metrics record
// (ProfileSession::end_step's fields): " | MFU 40.1% (PaLM 6N+12LTC,
// datasheet 989 TFLOP/s; llm.c 6P+6LCT 38.3%)", the datasheet peak where
// profile.hardware gives one, else the measured peak; "" without either.
std::string mfu_text(const nlohmann::json& rec);
// Axis name -> bytes this rank sent since the last reset_comm_bytes.
nlohmann::json comm_bytes(const DeviceMesh& mesh);
void reset_comm_bytes(const DeviceMesh& mesh);
// Rank 0's start-up lines: resume/init source, model, precision, layout and
// mesh, memory per rank, data, batch, where logs and checkpoints go.
void log_run_banner(const Run& run, const Config& cfg);

}  // namespace gt
