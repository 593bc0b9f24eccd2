// The HTML compile report (see qbc/report/report.h): the page, its style and summary,
// and the accuracy JSON reader. The sections are in sections_*.cpp.
#include "qbc/report/report.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "qbc/npu/memory_plan.h"
#include "sections.h"
#include "svg.h"

namespace qbc::report {
namespace {

constexpr const char* kStyle = R"(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
       color: #1d2530; background: #fff; margin: 0; }
main { max-width: 960px; margin: 0 auto; padding: 24px 28px 60px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 34px 0 8px; padding-bottom: 4px; border-bottom: 2px solid #e3e7ed; }
h3 { font-size: 15px; margin: 18px 0 6px; }
p.sub, p.note { color: #5b6675; margin: 4px 0 10px; }
nav { margin: 10px 0 4px; } nav a { margin-right: 14px; color: #2f5fa7; text-decoration: none; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 16px 0 6px; }
.card { flex: 1 1 0; border: 1px solid #dfe4ea; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.card b { display: block; font-size: 17px; } .card span { color: #5b6675; font-size: 12px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid #eef1f4; vertical-align: top; }
th { color: #5b6675; font-weight: 600; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, td.mono { font-family: "DejaVu Sans Mono", Menlo, monospace; font-size: 12px; }
details summary { cursor: pointer; color: #2f5fa7; margin: 6px 0; }
svg.plot { display: block; margin: 4px 0 8px; font-size: 11px; }
svg .label, svg .value, svg .tick, svg .unit { fill: #3b4654; }
svg .tick, svg .unit { fill: #7a8594; } svg .grid { stroke: #edf0f3; stroke-width: 1; }
svg .cell-text { fill: #fff; font-weight: 600; } svg .col { fill: #3b4654; }
.legend { margin: 2px 0 8px; font-size: 12px; color: #3b4654; }
.legend span { margin-right: 14px; white-space: nowrap; }
.legend i { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
.missing { background: #fbf6e9; border-left: 3px solid #d9a520; padding: 6px 10px; color: #5b4a1a; }
)";

std::string card(const std::string& value, const std::string& what) {
  return "<div class=\"card\"><b>" + esc(value) + "</b><span>" + esc(what) + "</span></div>";
}

/// The headline figures: memory, and the cost model's TTFT and decode rate of the first mode.
StatusOr<std::string> summary_cards(const ReportInput& in) {
  const isa::Bundle& b = *in.bundle;
  const npu::MemoryReport r = npu::memory_report(b);
  int64_t peak = 0;
  for (int64_t p : r.sram_peak) peak = std::max(peak, p);
  std::string s = "<div class=\"cards\">";
  s += card(npu::human_bytes(r.dram.total()), "DRAM of " + npu::human_bytes(r.device_bytes));
  s += card(npu::human_bytes(peak), "SRAM peak of " + npu::human_bytes(r.sram_bytes) + " per core");
  if (!b.modes.empty()) {
    const isa::Mode& mode = b.modes.front();
    const int64_t prompt = std::clamp<int64_t>(in.prompt_tokens, 1, b.max_cache - 1);
    QBC_ASSIGN_OR_RETURN(npu::ModePrediction p, npu::predict_mode(b, mode, prompt, in.cost, 1));
    s += card(num(p.ttft_s * 1e3, 2) + " ms",
              "TTFT, " + std::to_string(prompt) + " tokens (estimate)");
    s += card(num(p.decode_s > 0 ? 1.0 / p.decode_s : 0.0, 1) + " tok/s",
              "decode, " + std::string(isa::scheme_name(mode.scheme)) + " (estimate)");
  }
  s += card(std::to_string(b.max_cache), "cache positions, batch " + std::to_string(b.batch));
  return s + "</div>\n";
}

std::string header(const ReportInput& in) {
  const isa::Bundle& b = *in.bundle;
  std::string schemes;
  for (const isa::Mode& m : b.modes) {
    schemes += (schemes.empty() ? "" : ", ") + std::string(isa::scheme_name(m.scheme)) + " (" +
               std::to_string(m.cores_per_instance) + " core" +
               (m.cores_per_instance > 1 ? "s" : "") + " × " + std::to_string(m.instances) + ")";
  }
  std::string s = "<h1>qbc compile report: " + esc(in.model_name) + "</h1>\n";
  s += "<p class=\"sub\"><code>" + esc(in.model_file) + "</code> · target <b>" + esc(b.target) +
       "</b> · " + esc(schemes) + " · prefill chunk " + std::to_string(b.chunk) + " · " +
       esc(in.producer) + "</p>\n";
  s += "<nav><a href=\"#config\">Configuration</a><a href=\"#accuracy\">Accuracy</a>"
       "<a href=\"#bits\">Weight bits</a><a href=\"#memory\">Memory</a>"
       "<a href=\"#cost\">Cost model</a><a href=\"#passes\">Pass times</a></nav>\n";
  return s;
}

}  // namespace

StatusOr<Accuracy> parse_accuracy_json(const std::string& text, const std::string& source) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(source, ": not JSON (expected `qbc eval --reference --json` output)");
  Accuracy a;
  a.measured = true;
  a.source = source;
  const auto number = [&](const char* key, double* out) -> Status {
    if (!j.contains(key)) return ok_status();
    if (!j[key].is_number()) return invalid_argument(source, ": \"", key, "\" is not a number");
    *out = j[key].get<double>();
    return ok_status();
  };
  if (!j.contains("perplexity") && !j.contains("layers"))
    return invalid_argument(source, ": no \"perplexity\" or \"layers\" (expected `qbc eval ",
                            "--reference --json` output)");
  QBC_RETURN_IF_ERROR(number("perplexity", &a.perplexity));
  QBC_RETURN_IF_ERROR(number("perplexity_reference", &a.perplexity_reference));
  QBC_RETURN_IF_ERROR(number("kld_mean", &a.kld_mean));
  QBC_RETURN_IF_ERROR(number("kld_p99", &a.kld_p99));
  QBC_RETURN_IF_ERROR(number("kld_max", &a.kld_max));
  QBC_RETURN_IF_ERROR(number("top1", &a.top1));
  if (j.contains("layers")) {
    if (!j["layers"].is_array()) return invalid_argument(source, ": \"layers\" is not a list");
    for (const auto& l : j["layers"]) {
      if (!l.is_object() || !l.contains("node") || !l["node"].is_string())
        return invalid_argument(source, ": a \"layers\" entry without a \"node\" name");
      LayerAccuracy e;
      e.node = l["node"].get<std::string>();
      const auto& v = l.contains("sqnr_db") ? l["sqnr_db"] : nlohmann::json();
      if (v.is_number()) {
        e.sqnr_db = v.get<double>();
      } else if (v.is_null()) {
        e.identical = true;  // eval writes null for +inf (no error)
      } else {
        return invalid_argument(source, ": layer ", e.node, ": \"sqnr_db\" is not a number");
      }
      a.layers.push_back(std::move(e));
    }
  }
  return a;
}

StatusOr<std::string> render_html(const ReportInput& in) {
  if (in.bundle == nullptr) return invalid_argument("report: no compiled program");
  QBC_ASSIGN_OR_RETURN(std::string cards, summary_cards(in));
  QBC_ASSIGN_OR_RETURN(std::string cost, cost_section(in));
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>qbc report: " +
      esc(in.model_name) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n<main>\n";
  s += header(in) + cards;
  s += config_section(in);
  s += accuracy_section(in.accuracy);
  s += weight_bits_section(*in.bundle);
  s += memory_section(*in.bundle);
  s += cost;
  s += passes_section(in);
  s += "</main>\n</body>\n</html>\n";
  return s;
}

}  // namespace qbc::report
