// Inline SVG plots of the HTML report (see svg.h). Plain SVG 1.1 elements, no script.
#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qbc::report {
namespace {

constexpr int kChartWidth = 900;
constexpr int kRow = 18;
constexpr int kBarHeight = 12;
constexpr int kAxis = 22;

std::string attr(const char* name, double v) {
  return std::string(" ") + name + "=\"" + num(v, 1) + "\"";
}

/// A "nice" axis step (1, 2 or 5 times a power of ten) for about five ticks up to `max`.
double tick_step(double max) {
  const double raw = max / 5.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * p) return m * p;
  return 10.0 * p;
}

std::string tick_text(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  return num(v, a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3);
}

}  // namespace

std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string bar_chart(const std::string& id, const std::vector<Bar>& bars, const std::string& unit,
                      int label_width, double scale_max) {
  double max = scale_max;
  for (const Bar& b : bars) max = std::max(max, b.value);
  if (max <= 0) max = 1;
  const double step = tick_step(max);
  const double axis_max = std::ceil(max / step) * step;
  const int plot_w = kChartWidth - label_width - 80;
  const int height = kAxis + kRow * static_cast<int>(bars.size()) + 4;
  const auto x_of = [&](double v) { return label_width + plot_w * v / axis_max; };
  std::string s = "<svg class=\"plot\" data-plot=\"" + esc(id) + "\" width=\"" +
                  std::to_string(kChartWidth) + "\" height=\"" + std::to_string(height) +
                  "\" viewBox=\"0 0 " + std::to_string(kChartWidth) + " " + std::to_string(height) +
                  "\">\n";
  for (double t = 0; t <= axis_max * 1.0001; t += step) {
    s += "<line class=\"grid\"" + attr("x1", x_of(t)) + attr("x2", x_of(t)) +
         attr("y1", kAxis - 4) + attr("y2", height - 2) + "/>";
    s += "<text class=\"tick\"" + attr("x", x_of(t)) + attr("y", kAxis - 8) +
         " text-anchor=\"middle\">" + tick_text(t) + "</text>\n";
  }
  s += "<text class=\"unit\"" + attr("x", label_width - 6) + attr("y", kAxis - 8) +
       " text-anchor=\"end\">" + esc(unit) + "</text>\n";
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double y = kAxis + kRow * static_cast<double>(i);
    const double w = b.value > 0 ? x_of(b.value) - label_width : 2.0;
    const std::string value = b.value_text.empty() ? num(b.value, 1) : b.value_text;
    const std::string tip = b.tip.empty() ? b.label + ": " + value + " " + unit : b.tip;
    s += "<text class=\"label\"" + attr("x", label_width - 6) + attr("y", y + kBarHeight - 2) +
         " text-anchor=\"end\">" + esc(b.label) + "</text>";
    s += "<rect class=\"bar\"" + attr("x", label_width) + attr("y", y + 1) + attr("width", w) +
         attr("height", kBarHeight) + " fill=\"" + esc(b.color) + "\"><title>" + esc(tip) +
         "</title></rect>";
    s += "<text class=\"value\"" + attr("x", label_width + w + 4) + attr("y", y + kBarHeight - 2) +
         ">" + esc(value) + "</text>\n";
  }
  return s + "</svg>\n";
}

std::string stacked_bar(const std::string& id, const std::vector<Bar>& segments, double total) {
  const int width = kChartWidth, height = 34, x0 = 0, w0 = width - 2;
  double used = 0;
  for (const Bar& b : segments) used += std::max(0.0, b.value);
  const double scale = w0 / std::max({total, used, 1.0});
  std::string s = "<svg class=\"plot\" data-plot=\"" + esc(id) + "\" width=\"" +
                  std::to_string(width) + "\" height=\"" + std::to_string(height) +
                  "\" viewBox=\"0 0 " + std::to_string(width) + " " + std::to_string(height) +
                  "\">\n";
  s += "<rect class=\"free\" x=\"0\" y=\"4\"" + attr("width", w0) +
       " height=\"26\" fill=\"#eceff3\"><title>device capacity</title></rect>\n";
  double x = x0;
  for (const Bar& b : segments) {
    if (b.value <= 0) continue;
    // Tiny segments stay visible (at least one pixel wide).
    const double w = std::max(1.0, b.value * scale);
    s += "<rect class=\"bar\"" + attr("x", x) + " y=\"4\"" + attr("width", w) +
         " height=\"26\" fill=\"" + esc(b.color) + "\"><title>" +
         esc(b.tip.empty() ? b.label : b.tip) + "</title></rect>\n";
    x += w;
  }
  return s + "</svg>\n";
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& color_label) {
  std::string s = "<div class=\"legend\">";
  for (const auto& [color, label] : color_label)
    s += "<span><i style=\"background:" + esc(color) + "\"></i>" + esc(label) + "</span>";
  return s + "</div>\n";
}

}  // namespace qbc::report
