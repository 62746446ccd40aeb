// TensorBoardWriter: a run's scalars as a TensorBoard event file
// (log.tensorboard: true), so `tensorboard --logdir runs/` shows a live run.
//
// The format, written by hand (no protobuf or TensorFlow in the build):
// a TFRecord file, each record
//   uint64 length | uint32 masked CRC32C(length) | data | uint32 masked CRC32C(data)
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), each data a
// serialized tensorflow.Event:
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
//                Summary summary = 5; SessionLog session_log = 7; }
//   Summary    { repeated Value value = 1; }
//   Value      { string tag = 1; float simple_value = 2; }
//   SessionLog { SessionStatus status = 1; }   (START = 1)
// The first record names the version ("brain.Event:2"). A resumed run
// writes SessionLog START at the step it resumes from: TensorBoard's reader
// then drops the earlier file's events at that step and after (the steps
// the crashed run wrote past its checkpoint), so each step shows once.
// tests/scripts/test_tensorboard.py reads the files with TensorBoard's own
// reader and compares every value with metrics.jsonl.
//
// One file per run (events.out.tfevents.<unix seconds>.<host>.<pid>),
// flushed after every step; written by rank 0 only.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gt {

class TensorBoardWriter {
 public:
  // Creates the event file in `dir` (which exists); resumed_at > 0 writes the
  // session-start marker at that step.
  TensorBoardWriter(const std::string& dir, int64_t resumed_at);
  // Every number of a metrics.jsonl record as a scalar at `step`: its keys
  // as tags, nested objects' as "outer/inner"; null, strings and booleans
  // are skipped ("step" itself too).
  void write_record(int64_t step, const nlohmann::json& record);
  void write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::string& path() const { return path_; }

  // The pieces, for tests: a serialized Event's bytes, a TFRecord's framing.
  static std::string scalars_event(double wall_time, int64_t step,
                                   const std::vector<std::pair<std::string, double>>& scalars);
  static std::string session_start_event(double wall_time, int64_t step);
  static std::string version_event(double wall_time);
  static std::string record(const std::string& data);
  static uint32_t masked_crc(const void* data, size_t n);

 private:
  void append(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace gt
