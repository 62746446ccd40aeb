#include "trainer/io/progress.hpp"

#include <unistd.h>

#include <cmath>
#include <spdlog/spdlog.h>
#include <utility>

namespace gt {

namespace {

std::string amount(double value, const std::string& unit) {
  char buf[64];
  if (unit == "MB")
    std::snprintf(buf, sizeof buf, "%.1f", value / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(std::llround(value)));
  return buf;
}

}  // namespace

std::string clock_text(double seconds) {
  // Python's round() is to even; llround is away from zero: the two agree on
  // every case except exact halves, which the shared cases avoid.
  const long long s = std::llround(std::max(0.0, seconds));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string progress_line(const std::string& job, double done, double total,
                          const std::string& unit, double elapsed_s,
                          const std::vector<std::string>& fields) {
  const double pct = total > 0 ? 100.0 * done / total : 100.0;
  const double rate = elapsed_s > 0 ? done / elapsed_s : 0.0;
  const double shown_rate = unit == "MB" ? rate / 1e6 : rate;
  std::string eta;
  if (done >= total)
    eta = clock_text(0);
  else if (rate > 0)
    eta = clock_text((total - done) / rate);
  else
    eta = "?";
  char head[64], tail[64];
  std::snprintf(head, sizeof head, " (%.0f%%)", pct);
  std::snprintf(tail, sizeof tail, "%.2f", shown_rate);
  std::string line =
      job + ": " + amount(done, unit) + "/" + amount(total, unit) + " " + unit + head;
  for (const std::string& f : fields) line += " | " + f;
  line += std::string(" | ") + tail + " " + unit + "/s | elapsed " + clock_text(elapsed_s) +
          " | ETA " + eta;
  return line;
}

ProgressMeter::ProgressMeter(std::string job, double total, std::string unit, double quiet_s)
    : job_(std::move(job)),
      unit_(std::move(unit)),
      total_(total),
      quiet_s_(quiet_s),
      tty_(isatty(fileno(stderr)) != 0),
      start_(Clock::now()),
      last_(start_) {
  every_s_ = tty_ ? 0.5 : 10.0;
}

ProgressMeter::~ProgressMeter() {
  // A job that threw mid-way: end the live line so the error starts clean.
  if (live_open_) std::fputc('\n', stderr);
}

double ProgressMeter::seconds_since(Clock::time_point t) const {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void ProgressMeter::update(double done, const std::vector<std::string>& fields) {
  done_ = done;
  if (seconds_since(start_) < quiet_s_) return;
  if (shown_ && seconds_since(last_) < every_s_) return;
  emit(done, fields);
}

void ProgressMeter::finish(const std::vector<std::string>& fields) {
  if (!shown_) return;  // a quick job says nothing
  emit(done_, fields);
  if (live_open_) {
    std::fputc('\n', stderr);
    live_open_ = false;
  }
}

void ProgressMeter::emit(double done, const std::vector<std::string>& fields) {
  last_ = Clock::now();
  shown_ = true;
  const std::string line = progress_line(job_, done, total_, unit_, seconds_since(start_), fields);
  if (tty_) {
    std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
    std::fflush(stderr);
    live_open_ = true;
  } else {
    spdlog::info("{}", line);
  }
}

ByteProgressLine::ByteProgressLine(std::string job, std::vector<std::string> fields, bool reports)
    : job_(std::move(job)), fields_(std::move(fields)), reports_(reports) {}

ByteProgress ByteProgressLine::callback() {
  return [this](uint64_t done, uint64_t total) {
    if (!reports_) return;
    if (!meter_) meter_ = std::make_unique<ProgressMeter>(job_, static_cast<double>(total), "MB");
    meter_->update(static_cast<double>(done), fields_);
  };
}

void ByteProgressLine::finish() {
  if (meter_) meter_->finish(fields_);
}

}  // namespace gt
