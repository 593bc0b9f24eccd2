// Report sections read from the compiled program: the weight-bit map, the memory plan
// and the cost model per node.
#include <algorithm>
#include <map>

#include "qbc/npu/memory_plan.h"
#include "sections.h"
#include "svg.h"

namespace qbc::report {
namespace {

constexpr size_t kMaxCostRows = 120;

/// "blk.3.attn.q_proj" -> {3, "attn.q_proj"}; other names -> {-1, name}.
std::pair<int, std::string> split_block(const std::string& node) {
  if (node.rfind("blk.", 0) == 0) {
    const size_t dot = node.find('.', 4);
    if (dot != std::string::npos) {
      try {
        return {std::stoi(node.substr(4, dot - 4)), node.substr(dot + 1)};
      } catch (...) {  // not a number: keep the whole name
      }
    }
  }
  return {-1, node};
}

/// "12.5 %", "0.04 %", "< 0.01 %".
std::string percent(double fraction) {
  const double pct = 100.0 * fraction;
  if (pct > 0 && pct < 0.01) return "&lt; 0.01 %";
  return num(pct, pct >= 10 ? 1 : 2) + " %";
}

const char* bits_color(int bits) {
  return bits <= 4 ? "#4c78a8" : bits <= 8 ? "#f58518" : "#b279a2";
}

std::string node_label(const isa::Bundle& b, int32_t node) {
  return node >= 0 && static_cast<size_t>(node) < b.nodes.size()
             ? b.nodes[static_cast<size_t>(node)]
             : std::string("(between nodes)");
}

std::string cost_chart(const isa::Bundle& b, const npu::CallCost& c, const std::string& id) {
  std::vector<const npu::NodeCost*> rows;
  for (const npu::NodeCost& n : c.nodes) rows.push_back(&n);
  std::string note;
  if (rows.size() > kMaxCostRows) {
    std::stable_sort(rows.begin(), rows.end(), [](const npu::NodeCost* x, const npu::NodeCost* y) {
      return x->seconds > y->seconds;
    });
    note = "<p class=\"note\">The " + std::to_string(kMaxCostRows) + " slowest of " +
           std::to_string(rows.size()) + " nodes.</p>\n";
    rows.resize(kMaxCostRows);
  }
  std::vector<Bar> bars;
  for (const npu::NodeCost* n : rows) {
    Bar bar;
    bar.label = node_label(b, n->node);
    bar.value = n->seconds * 1e6;
    bar.color = bound_color(n->bound);
    bar.value_text = num(bar.value, bar.value < 10 ? 2 : 1);
    bar.tip = bar.label + ": " + bar.value_text + " us, " + npu::bound_name(n->bound) +
              "-bound; DRAM " + num(static_cast<double>(n->counts.dram_bytes()) / 1e6, 3) +
              " MB, " + num(static_cast<double>(n->counts.macs) / 1e6, 3) + " MMACs";
    bars.push_back(std::move(bar));
  }
  return note + bar_chart(id, bars, "us", 260);
}

}  // namespace

const char* bound_color(npu::Bound b) {
  switch (b) {
    case npu::Bound::kDram:
      return "#4c78a8";
    case npu::Bound::kMac:
      return "#e45756";
    case npu::Bound::kVector:
      return "#54a24b";
    case npu::Bound::kLatency:
      return "#9aa5b1";
  }
  return "#9aa5b1";
}

std::string weight_bits_section(const isa::Bundle& b) {
  std::string s = "<section id=\"bits\"><h2>Weight bits per projection</h2>\n";
  if (b.modes.empty()) return s + "<p class=\"missing\">No program.</p></section>\n";
  // The weight type of every node's matmuls (the decode program holds every projection).
  std::map<std::pair<int, std::string>, int> bits;
  std::vector<std::string> columns;
  int blocks = 0;
  bool outside = false;
  for (const isa::CoreProgram& core : b.modes.front().decode.cores) {
    for (const isa::Instr& in : core.code) {
      const auto* mm = std::get_if<isa::MatMul>(&in.op);
      if (mm == nullptr) continue;
      auto [block, name] = split_block(node_label(b, in.node));
      if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
      blocks = std::max(blocks, block + 1);
      outside = outside || block < 0;
      bits[{block, name}] = isa::dtype_bits(mm->wtype);
    }
  }
  if (bits.empty()) return s + "<p class=\"missing\">No matmul in the program.</p></section>\n";
  const int label_w = 70, cell_w = 84, cell_h = 18, head_h = 26;
  const int rows = blocks + (outside ? 1 : 0);
  const int width = label_w + cell_w * static_cast<int>(columns.size()) + 4;
  const int height = head_h + cell_h * rows + 4;
  s += "<p class=\"sub\">The integer type of each projection's weights, by decoder block "
       "(from the compiled program).</p>\n";
  s += legend({{bits_color(4), "4-bit"}, {bits_color(8), "8-bit"}, {bits_color(16), "16-bit"}});
  s += "<svg class=\"plot\" data-plot=\"bits\" width=\"" + std::to_string(width) + "\" height=\"" +
       std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
       std::to_string(height) + "\">\n";
  for (size_t c = 0; c < columns.size(); ++c) {
    s += "<text class=\"col\" x=\"" +
         std::to_string(label_w + cell_w * static_cast<int>(c) + cell_w / 2) + "\" y=\"" +
         std::to_string(head_h - 8) + "\" text-anchor=\"middle\">" + esc(columns[c]) + "</text>";
  }
  for (int r = 0; r < rows; ++r) {
    const int block = r < blocks ? r : -1;
    const int y = head_h + cell_h * r;
    s += "<text class=\"label\" x=\"" + std::to_string(label_w - 6) + "\" y=\"" +
         std::to_string(y + cell_h - 5) + "\" text-anchor=\"end\">" +
         (block >= 0 ? "blk." + std::to_string(block) : std::string("model")) + "</text>";
    for (size_t c = 0; c < columns.size(); ++c) {
      auto it = bits.find({block, columns[c]});
      if (it == bits.end()) continue;
      const int x = label_w + cell_w * static_cast<int>(c);
      s += "<rect class=\"bar cell\" x=\"" + std::to_string(x + 1) + "\" y=\"" +
           std::to_string(y + 1) + "\" width=\"" + std::to_string(cell_w - 2) + "\" height=\"" +
           std::to_string(cell_h - 2) + "\" rx=\"2\" fill=\"" + bits_color(it->second) +
           "\"><title>" +
           esc((block >= 0 ? "blk." + std::to_string(block) + "." : "") + columns[c]) + ": " +
           std::to_string(it->second) + "-bit weights</title></rect>";
      s += "<text class=\"cell-text\" x=\"" + std::to_string(x + cell_w / 2) + "\" y=\"" +
           std::to_string(y + cell_h - 5) + "\" text-anchor=\"middle\">" +
           std::to_string(it->second) + "</text>";
    }
    s += "\n";
  }
  return s + "</svg>\n</section>\n";
}

std::string memory_section(const isa::Bundle& b) {
  const npu::MemoryReport r = npu::memory_report(b);
  const struct {
    const char* name;
    int64_t bytes;
    const char* color;
  } parts[] = {{"weights", r.dram.weights, "#4c78a8"},
               {"kv cache", r.dram.kv, "#f58518"},
               {"activations", r.dram.activations, "#54a24b"},
               {"scratch", r.dram.scratch, "#b279a2"},
               {"io", r.dram.io, "#72b7b2"},
               {"reserve", r.dram.reserve, "#9d755d"}};
  const double device = static_cast<double>(std::max<int64_t>(1, r.device_bytes));
  std::string s = "<section id=\"memory\"><h2>Memory</h2>\n";
  s += "<h3>DRAM: " + npu::human_bytes(r.dram.total()) + " of " + npu::human_bytes(r.device_bytes) +
       " (" + num(100.0 * static_cast<double>(r.dram.total()) / device, 1) + " %), " +
       std::to_string(b.batch) + " sequence slot" + (b.batch == 1 ? "" : "s") + " of " +
       std::to_string(b.max_cache) + " positions</h3>\n";
  std::vector<Bar> segs;
  std::vector<std::pair<std::string, std::string>> keys;
  std::string table = "<table><tr><th>region</th><th>bytes</th><th>of the device</th></tr>\n";
  for (const auto& p : parts) {
    segs.push_back(Bar{p.name, static_cast<double>(p.bytes), p.color,
                       std::string(p.name) + ": " + npu::human_bytes(p.bytes), ""});
    keys.push_back({p.color, p.name});
    table += "<tr><td>" + std::string(p.name) + "</td><td class=\"num\">" +
             npu::human_bytes(p.bytes) + "</td><td class=\"num\">" +
             percent(static_cast<double>(p.bytes) / device) + "</td></tr>\n";
  }
  keys.push_back({"#eceff3", "free"});
  s += stacked_bar("dram", segs, device) + legend(keys) + table + "</table>\n";
  // The largest DRAM buffers (the whole list is `qbc inspect --memory`).
  std::vector<const isa::Buffer*> bufs;
  for (const isa::Buffer& buf : b.buffers)
    if (buf.space == isa::Space::kDram) bufs.push_back(&buf);
  std::stable_sort(bufs.begin(), bufs.end(),
                   [](const isa::Buffer* x, const isa::Buffer* y) { return x->bytes > y->bytes; });
  const size_t shown = std::min<size_t>(bufs.size(), 10);
  s += "<details><summary>The " + std::to_string(shown) + " largest of " +
       std::to_string(bufs.size()) +
       " DRAM buffers (all of them: <code>qbc inspect --memory</code>)</summary>\n"
       "<table><tr><th>offset</th><th>bytes</th><th>purpose</th><th>buffer</th></tr>\n";
  for (size_t i = 0; i < shown; ++i) {
    char off[32];
    std::snprintf(off, sizeof(off), "%#llx", static_cast<unsigned long long>(bufs[i]->offset));
    s += "<tr><td class=\"mono\">" + std::string(off) + "</td><td class=\"num\">" +
         npu::human_bytes(bufs[i]->bytes) + "</td><td>" + isa::purpose_name(bufs[i]->purpose) +
         "</td><td class=\"mono\">" + esc(bufs[i]->name) + "</td></tr>\n";
  }
  s += "</table></details>\n";
  s += "<h3>SRAM peak per core (" + npu::human_bytes(r.sram_bytes) + " each)</h3>\n";
  std::vector<Bar> cores;
  for (size_t c = 0; c < r.sram_peak.size(); ++c) {
    const double pct = 100.0 * static_cast<double>(r.sram_peak[c]) /
                       static_cast<double>(std::max<int64_t>(1, r.sram_bytes));
    cores.push_back(Bar{"core " + std::to_string(c), static_cast<double>(r.sram_peak[c]) / 1024.0,
                        pct > 95 ? "#c8463c" : "#4c78a8",
                        "core " + std::to_string(c) + ": " + npu::human_bytes(r.sram_peak[c]) +
                            " (" + num(pct, 1) + " %)",
                        npu::human_bytes(r.sram_peak[c]) + " (" + num(pct, 1) + " %)"});
  }
  s += bar_chart("sram", cores, "KiB", 80, static_cast<double>(r.sram_bytes) / 1024.0);
  return s + "</section>\n";
}

StatusOr<std::string> cost_section(const ReportInput& in) {
  const isa::Bundle& b = *in.bundle;
  std::string s = "<section id=\"cost\"><h2>Cost model</h2>\n";
  if (b.modes.empty()) return s + "<p class=\"missing\">No program.</p></section>\n";
  const int64_t prompt = std::clamp<int64_t>(in.prompt_tokens, 1, b.max_cache - 1);
  s += "<p class=\"sub\">Estimates of the cost model (docs/performance.md) on the compiled "
       "programs, with the target profile's parameters; <code>qbc inspect --cost</code> and "
       "<code>--trace</code> print the same model.</p>\n";
  s += "<table><tr><th>scheme</th><th>cores × instances</th><th>TTFT (" + std::to_string(prompt) +
       " tokens)</th><th>decode</th><th>decode, cache full</th><th>DRAM roofline</th>"
       "<th>bound</th></tr>\n";
  for (const isa::Mode& mode : b.modes) {
    QBC_ASSIGN_OR_RETURN(npu::ModePrediction p,
                         npu::predict_mode(b, mode, prompt, in.cost, mode.instances));
    s += "<tr><td>" + std::string(isa::scheme_name(mode.scheme)) + "</td><td>" +
         std::to_string(mode.cores_per_instance) + " × " + std::to_string(mode.instances) +
         "</td><td class=\"num\">" + num(p.ttft_s * 1e3, 2) + " ms</td><td class=\"num\">" +
         num(p.decode_s > 0 ? 1.0 / p.decode_s : 0.0, 1) + " tok/s</td><td class=\"num\">" +
         num(p.decode_end_s > 0 ? 1.0 / p.decode_end_s : 0.0, 1) + " tok/s</td><td class=\"num\">" +
         num(100.0 * p.roofline_fraction, 1) + " %</td><td>" + npu::bound_name(p.bound) +
         "</td></tr>\n";
  }
  s += "</table>\n";
  const isa::Mode& mode = b.modes.front();
  const int64_t chunk = std::max<int64_t>(1, std::min(mode.prefill.max_seq, b.max_cache - 1));
  npu::CallSpec pre;
  pre.phase = isa::Phase::kPrefill;
  pre.seq = chunk;
  QBC_ASSIGN_OR_RETURN(npu::CallCost pc, npu::estimate_call(b, mode, pre, in.cost));
  npu::CallSpec dec;
  dec.start = prompt;
  QBC_ASSIGN_OR_RETURN(npu::CallCost dc, npu::estimate_call(b, mode, dec, in.cost));
  const auto key = legend({{bound_color(npu::Bound::kDram), "DRAM-bound"},
                           {bound_color(npu::Bound::kMac), "MAC-bound"},
                           {bound_color(npu::Bound::kVector), "vector-bound"},
                           {bound_color(npu::Bound::kLatency), "latency-bound"}});
  const std::string scheme = isa::scheme_name(mode.scheme);
  s += "<h3>Prefill chunk of " + std::to_string(chunk) + " tokens, " + scheme + ": " +
       num(pc.seconds * 1e3, 3) + " ms, time per node</h3>\n" + key + cost_chart(b, pc, "prefill");
  s += "<h3>Decode step at position " + std::to_string(prompt) + ", " + scheme + ": " +
       num(dc.seconds * 1e3, 3) + " ms, time per node</h3>\n" + key + cost_chart(b, dc, "decode");
  return s + "</section>\n";
}

}  // namespace qbc::report
