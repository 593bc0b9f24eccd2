// Inline SVG plots of the HTML report: horizontal bar charts, a stacked bar and a colour
// legend. Every bar is a <rect class="bar"> with a <title> (its tooltip); each plot is an
// <svg class="plot" data-plot="ID"> so tests can find and measure it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qbc::report {

/// `s` with &, <, >, " and ' escaped for HTML text and attributes.
std::string esc(std::string_view s);
/// `v` with `digits` digits after the point.
std::string num(double v, int digits);

/// One bar: a label on the left, the bar, the value text on the right.
struct Bar {
  std::string label;
  double value = 0;
  std::string color;
  std::string tip;         ///< tooltip (a <title>); the label and value when empty
  std::string value_text;  ///< printed after the bar; num(value, 1) when empty
};

/// A horizontal bar chart, one row per bar, scaled to `scale_max` (0: the largest value).
/// Negative values draw a 2-pixel stub.
std::string bar_chart(const std::string& id, const std::vector<Bar>& bars, const std::string& unit,
                      int label_width = 230, double scale_max = 0);

/// One bar split into segments of `total` (e.g. the DRAM plan of the device), with the
/// free rest drawn grey.
std::string stacked_bar(const std::string& id, const std::vector<Bar>& segments, double total);

/// A row of colour swatches with their labels.
std::string legend(const std::vector<std::pair<std::string, std::string>>& color_label);

}  // namespace qbc::report
