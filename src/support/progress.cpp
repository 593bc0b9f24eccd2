#include "qbc/support/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qbc::progress {

double remaining_seconds(const Line& l) {
  if (l.done <= 0 || l.total <= 0 || l.done > l.total) return -1.0;
  return l.step_seconds * static_cast<double>(l.total - l.done) / static_cast<double>(l.done);
}

double rate(const Line& l) {
  if (l.done <= 0 || l.step_seconds <= 0) return -1.0;
  return static_cast<double>(l.done) / l.step_seconds;
}

std::string format_rate(double per_second) {
  if (!(per_second > 0)) return "";
  if (per_second >= 1.0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f/s", per_second);
    return buf;
  }
  return format_duration(1.0 / per_second) + " each";
}

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(seconds, 0.0));
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%ld s", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%ld min %02ld s", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ld h %02ld min", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

std::string format(const Line& l) {
  std::string out;
  if (l.steps > 0) {
    out = "[" + l.stage + " " + std::to_string(l.step) + "/" + std::to_string(l.steps) + "] " +
          l.pass;
  } else if (!l.stage.empty()) {
    out = "[" + l.stage + "]";
  }
  if (!l.unit.empty() && l.total > 0) {
    if (!out.empty()) out += " · ";
    out += l.unit + " " + std::to_string(l.done) + "/" + std::to_string(l.total);
    if (const std::string r = format_rate(rate(l)); !r.empty()) out += " · " + r;
  }
  if (!out.empty()) out += " · ";
  out += format_duration(l.seconds) + " elapsed";
  const double left = remaining_seconds(l);
  if (left >= 0) out += " · ~" + format_duration(left) + " left";
  return out;
}

double Heartbeat::wait(double now, double fallback) const {
  if (interval_ <= 0) return fallback;
  return std::max(0.0, next_ - now);
}

}  // namespace qbc::progress
