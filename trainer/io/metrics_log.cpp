#include "trainer/io/metrics_log.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "kernels/core/error.hpp"

namespace gt {

nlohmann::json json_number(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

MetricsLog::MetricsLog(const std::string& path, int64_t start_step) : path_(path) {
  if (start_step > 0) {
    std::ifstream in(path);
    std::ostringstream kept;
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() < start_step)
        kept << line << "\n";
    }
    const std::string tmp = path + ".tmp";
    {
      std::ofstream t(tmp, std::ios::trunc);
      t << kept.str();
      if (!t) fail("cannot write '", tmp, "': ", std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      fail("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
    out_.open(path, std::ios::app);
  } else {
    out_.open(path, std::ios::trunc);
  }
  if (!out_) fail("cannot open metrics log '", path, "': ", std::strerror(errno));
}

void MetricsLog::write(const nlohmann::json& record) {
  out_ << record.dump() << "\n";
  out_.flush();
  if (!out_) fail("writing metrics log '", path_, "' failed: ", std::strerror(errno));
}

}  // namespace gt
