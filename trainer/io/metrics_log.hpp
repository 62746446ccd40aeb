// MetricsLog: {log.dir}/metrics.jsonl, one JSON object per optimizer step,
// flushed every line so a crashed run keeps what it logged. On resume the
// lines of steps >= the resume step are dropped (rewritten atomically), so
// the file always describes one consistent run.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace gt {

class MetricsLog {
 public:
  // start_step 0 truncates the file; otherwise keeps lines with step < start_step.
  MetricsLog(const std::string& path, int64_t start_step);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// Non-finite floats become null (JSON has no NaN); finite ones stay numbers.
nlohmann::json json_number(double x);

}  // namespace gt
