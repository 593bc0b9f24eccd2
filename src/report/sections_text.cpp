// Report sections from data the caller gathered: the configuration with its origins,
// the measured accuracy and the pass times.
#include <algorithm>
#include <cmath>

#include "sections.h"
#include "svg.h"

namespace qbc::report {
namespace {

std::string config_table(const std::vector<const config::OriginRow*>& rows) {
  std::string s = "<table><tr><th>key</th><th>value</th><th>from</th></tr>\n";
  for (const config::OriginRow* r : rows) {
    s += "<tr><td class=\"mono\">" + esc(r->path) + "</td><td class=\"mono\">" + esc(r->value) +
         "</td><td>" + esc(r->origin) + "</td></tr>\n";
  }
  return s + "</table>\n";
}

/// Green from 30 dB up, amber from 15 dB, red below.
const char* sqnr_color(double db) {
  return db >= 30 ? "#3a9a5b" : db >= 15 ? "#d9a520" : "#c8463c";
}

}  // namespace

std::string config_section(const ReportInput& in) {
  std::vector<const config::OriginRow*> set, target, defaults;
  for (const config::OriginRow& r : in.config) {
    const bool from_target = r.path.rfind("target.", 0) == 0 && r.origin != "default" &&
                             r.origin.find("targets/") != std::string::npos;
    (r.origin == "default" ? defaults : from_target ? target : set).push_back(&r);
  }
  std::string s = "<section id=\"config\"><h2>Configuration</h2>\n";
  if (!in.config_note.empty()) s += "<p class=\"note\">" + esc(in.config_note) + "</p>\n";
  s += "<h3>Set by a preset, file, --set or flag (" + std::to_string(set.size()) + " keys)</h3>\n";
  s += config_table(set);
  if (!target.empty()) {
    s += "<details><summary>The target profile (" + std::to_string(target.size()) + " keys, from " +
         esc(target.front()->origin.substr(0, target.front()->origin.find(':'))) + ")</summary>\n" +
         config_table(target) + "</details>\n";
  }
  s += "<details><summary>Every other key, at its built-in default (" +
       std::to_string(defaults.size()) + " keys)</summary>\n" + config_table(defaults) +
       "</details>\n";
  return s + "</section>\n";
}

std::string accuracy_section(const Accuracy& a) {
  std::string s = "<section id=\"accuracy\"><h2>Accuracy</h2>\n";
  if (!a.measured) {
    return s +
           "<p class=\"missing\">Not measured. <code>qbc eval Q.mblt --reference MODEL --json "
           "&gt; eval.json</code> (the quantized MBLT of <code>compile --keep-intermediate</code>) "
           "measures it; <code>--accuracy eval.json</code> adds it to this report.</p>\n"
           "</section>\n";
  }
  s += "<p class=\"sub\">From <code>" + esc(a.source) +
       "</code> (<code>qbc eval --reference</code>).</p>\n";
  s += "<table><tr><th>perplexity</th><th>reference</th><th>ratio</th><th>KLD mean</th>"
       "<th>KLD p99</th><th>KLD max</th><th>top-1 agreement</th></tr><tr>";
  const double ratio = a.perplexity_reference > 0 ? a.perplexity / a.perplexity_reference : 0.0;
  for (const std::string& v :
       {num(a.perplexity, 3), num(a.perplexity_reference, 3), num(ratio, 4), num(a.kld_mean, 5),
        num(a.kld_p99, 5), num(a.kld_max, 5), num(100.0 * a.top1, 2) + " %"})
    s += "<td class=\"num\">" + v + "</td>";
  s += "</tr></table>\n";
  if (a.layers.empty())
    return s + "<p class=\"note\">No per-layer SQNR in the file.</p></section>\n";
  std::vector<Bar> bars;
  for (const LayerAccuracy& l : a.layers) {
    Bar b;
    b.label = l.node;
    b.value = l.identical ? 0.0 : l.sqnr_db;
    b.color = l.identical ? "#9aa5b1" : sqnr_color(l.sqnr_db);
    b.value_text = l.identical ? "exact" : num(l.sqnr_db, 1);
    bars.push_back(std::move(b));
  }
  s += "<h3>Per-layer SQNR against the float reference (higher is better)</h3>\n";
  s += legend({{"#3a9a5b", "≥ 30 dB"}, {"#d9a520", "15–30 dB"}, {"#c8463c", "< 15 dB"}});
  s += bar_chart("sqnr", bars, "dB");
  return s + "</section>\n";
}

std::string passes_section(const ReportInput& in) {
  std::string s = "<section id=\"passes\"><h2>Pass times</h2>\n";
  if (in.passes.empty()) {
    return s + "<p class=\"missing\">" +
           esc(in.passes_note.empty() ? "No pass times recorded." : in.passes_note) +
           "</p></section>\n";
  }
  double total = 0;
  std::vector<Bar> bars;
  for (const PassTime& p : in.passes) {
    total += p.seconds;
    Bar b;
    b.label = p.stage + ": " + p.name;
    b.value = p.seconds;
    b.color = p.stage == "quant" ? "#4c78a8" : p.stage == "backend" ? "#f58518" : "#72b7b2";
    b.value_text = p.seconds < 10 ? num(p.seconds, 2) : num(p.seconds, 1);
    bars.push_back(std::move(b));
  }
  s += "<p class=\"sub\">Wall time of each step of this compile, " + num(total, 1) +
       " s in all.</p>\n";
  s += legend(
      {{"#4c78a8", "quantization passes"}, {"#f58518", "backend"}, {"#72b7b2", "MXQ write"}});
  s += bar_chart("passes", bars, "s");
  return s + "</section>\n";
}

}  // namespace qbc::report
