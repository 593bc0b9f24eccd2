// The compile report and the timeline trace of stories260K: `qbc inspect --trace` writes a
// Chrome trace event document (checked here against the format's rules, with the cost
// model's per-core figures), and `qbc compile --report` / `qbc report` write one
// self-contained HTML file that headless Chromium renders without a console message, with
// every plot's bars laid out at a non-zero size.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "qbc/config/config.h"
#include "qbc/driver/plan.h"
#include "qbc/mxq/model_file.h"
#include "qbc/npu/cost_model.h"
#include "test_support.h"
#include "trace_schema.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_command;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using Json = nlohmann::json;
using ::qbc::testing::trace_schema_errors;

/// One compile of stories260K with --report, shared by the tests of this file.
class ReportCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path hf = testing::shared_dir() / "models/stories260k/hf";
    if (!fs::exists(hf)) return;
    dir_ = new fs::path(testing::temp_dir());
    compiled_ = new testing::RunResult(run_qbc(
        "compile " + shell_quote(hf) +
        " --preset llm_fast --use-random-calib --set calibration.numSamples=4"
        " --set calibration.seqLength=128 --set llm.attributes.calibration.useFullSeqLength=false"
        " --set llm.attributes.maxSequenceLength=512 --set llm.attributes.maxCacheLength=512"
        " --log-format json -o " +
        shell_quote(*dir_ / "q.mxq") + " --report " + shell_quote(*dir_ / "compile.html")));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete compiled_;
  }
  void SetUp() override {
    QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
    ASSERT_EQ(compiled_->exit_code, 0) << compiled_->err;
  }
  static fs::path mxq() { return *dir_ / "q.mxq"; }

  static fs::path* dir_;
  static testing::RunResult* compiled_;
};
fs::path* ReportCli::dir_ = nullptr;
testing::RunResult* ReportCli::compiled_ = nullptr;

TEST(TraceSchema, CatchesWhatItShould) {
  const Json bad = Json::parse(R"({"traceEvents": [
      {"name": "a", "ph": "X", "cat": "c", "ts": -1, "dur": 2, "pid": 1, "tid": 1},
      {"name": "b", "ph": "X", "cat": "c", "ts": 0, "pid": 2, "tid": 1},
      {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "core 0"}}]})");
  const std::vector<std::string> e = trace_schema_errors(bad);
  const auto has = [&](const std::string& s) {
    return std::any_of(e.begin(), e.end(), [&](const std::string& x) { return contains(x, s); });
  };
  EXPECT_TRUE(has("event 0: ts is negative"));
  EXPECT_TRUE(has("event 1: dur is not a number"));
  EXPECT_TRUE(has("pid 2 has no process_name"));
  EXPECT_TRUE(has("pid 1 tid 1 has no thread_name"));
}

/// The cost model's call figures of `mxq`'s first mode, evaluated here on the file.
struct CostFigures {
  npu::CallCost prefill, decode;
  double dma_latency_s = 0;
};
CostFigures cost_figures(const fs::path& mxq_path, const fs::path& dir) {
  CostFigures f;
  auto m = mxq::load_model(mxq_path.string());
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  // The stored configuration, through the same loader `-c` uses.
  const fs::path cfg_path = dir / "stored.json";
  auto dumped = run_qbc("dump-config " + shell_quote(mxq_path) + " -o " + shell_quote(cfg_path));
  EXPECT_EQ(dumped.exit_code, 0) << dumped.err;
  config::LoadRequest req;
  req.files = {cfg_path.string()};
  auto cfg = config::resolve(req);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  if (!m.ok() || !cfg.ok()) return f;
  const npu::CostParams p = driver::cost_params(cfg->options.target());
  f.dma_latency_s = p.dma_latency_s;
  const isa::Bundle& b = *m->bundle;
  const isa::Mode& mode = b.modes.front();
  npu::CallSpec pre;
  pre.phase = isa::Phase::kPrefill;
  pre.seq = std::min({mode.prefill.max_seq, b.chunk, b.max_cache - 1});
  auto pc = npu::estimate_call(b, mode, pre, p);
  npu::CallSpec dec;
  dec.start = pre.seq;
  auto dc = npu::estimate_call(b, mode, dec, p);
  EXPECT_TRUE(pc.ok() && dc.ok());
  if (pc.ok()) f.prefill = *pc;
  if (dc.ok()) f.decode = *dc;
  return f;
}

TEST_F(ReportCli, TraceFollowsTheEventFormatAndMatchesTheCostModelPerCore) {
  const fs::path out = *dir_ / "trace.json";
  auto r = run_qbc("inspect " + shell_quote(mxq()) + " --trace " + shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json doc = Json::parse(read_file(out), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "the trace is not JSON";
  const std::vector<std::string> errors = trace_schema_errors(doc);
  for (const std::string& e : errors) ADD_FAILURE() << e;

  const CostFigures f = cost_figures(mxq(), *dir_);
  ASSERT_FALSE(f.prefill.core_end_s.empty());
  // The "calls" thread of each core: one event per call, lasting the core's time.
  std::map<std::string, std::map<int64_t, const Json*>> calls;  // cat -> pid -> event
  std::map<std::string, std::map<int64_t, double>> last_end;    // cat -> pid -> queue end
  std::map<std::string, size_t> instructions;
  for (const Json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string cat = e["cat"];
    if (e["tid"] == 4) {
      calls[cat][e["pid"].get<int64_t>()] = &e;
      continue;
    }
    ++instructions[cat];
    double& end = last_end[cat][e["pid"].get<int64_t>()];
    end = std::max(end, e["ts"].get<double>() + e["dur"].get<double>());
  }
  ASSERT_EQ(calls.count("prefill"), 1u);
  ASSERT_EQ(calls.count("decode"), 1u);
  for (const auto& [cat, cost] :
       {std::pair<std::string, const npu::CallCost*>{"prefill", &f.prefill},
        {"decode", &f.decode}}) {
    SCOPED_TRACE(cat);
    ASSERT_EQ(calls[cat].size(), cost->core_end_s.size());
    EXPECT_GT(instructions[cat], 10u);
    double slowest = 0;
    for (size_t c = 0; c < cost->core_end_s.size(); ++c) {
      const Json& call = *calls[cat].at(static_cast<int64_t>(c) + 1);
      const double want_us = cost->core_end_s[c] * 1e6;
      EXPECT_NEAR(call["dur"].get<double>(), want_us, 1e-6 * want_us + 1e-6) << "core " << c;
      // The queues of the core end inside the call: at its end, or a DMA latency before.
      const double end = last_end[cat][static_cast<int64_t>(c) + 1] - call["ts"].get<double>();
      EXPECT_LE(end, want_us + 1e-6) << "core " << c;
      EXPECT_GE(end, want_us - f.dma_latency_s * 1e6 - 1e-6) << "core " << c;
      slowest = std::max(slowest, call["dur"].get<double>());
    }
    EXPECT_NEAR(slowest, cost->core_seconds * 1e6, 1e-6 * slowest + 1e-6);
  }
  // The token carriers between nodes (no node) keep their counts but count their time
  // towards the node before them: the per-node times cover the step, none goes to them.
  double sum = 0;
  bool carriers = false;
  for (const npu::NodeCost& n : f.decode.nodes) {
    sum += n.seconds;
    if (n.node >= 0) continue;
    carriers = n.counts.instructions > 0;
    EXPECT_LT(n.seconds, 0.01 * f.decode.core_seconds);
  }
  EXPECT_TRUE(carriers) << "stories260K's decode step has token carriers";
  EXPECT_NEAR(sum, f.decode.core_seconds, 1e-9);
  // The decode step starts when the prefill chunk's call (slowest core + host) has ended.
  EXPECT_NEAR((*calls["decode"].begin()->second)["ts"].get<double>(), f.prefill.seconds * 1e6,
              1e-3);
}

TEST_F(ReportCli, TraceOfANonMxqIsRefused) {
  auto r = run_qbc("inspect " + shell_quote(testing::shared_dir() / "models/stories260k/hf") +
                   " --trace " + shell_quote(*dir_ / "x.json"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "is not an .mxq")) << r.err;
  EXPECT_FALSE(fs::exists(*dir_ / "x.json"));
}

// ---------------------------------------------------------------------------------------
// The report.

/// The rect.bar elements inside `<svg ... data-plot="ID"> ... </svg>` of `html`.
size_t bars_in_plot(const std::string& html, const std::string& id) {
  const size_t at = html.find("data-plot=\"" + id + "\"");
  if (at == std::string::npos) return 0;
  const std::string svg = html.substr(at, html.find("</svg>", at) - at);
  size_t n = 0;
  for (size_t p = svg.find("class=\"bar"); p != std::string::npos;
       p = svg.find("class=\"bar", p + 1))
    ++n;
  return n;
}

TEST_F(ReportCli, CompileReportIsSelfContainedWithOriginsAndPassTimes) {
  const std::string html = read_file(*dir_ / "compile.html");
  // Nothing is loaded from anywhere and nothing runs.
  for (const char* bad : {"<script", "http://", "https://", "<link", "@import", "url(", "src="})
    EXPECT_FALSE(contains(html, bad)) << bad;
  // Origins: the preset and the --set flags of the compile above.
  EXPECT_TRUE(contains(html, "presets/llm_fast.yaml:")) << "no preset origin";
  EXPECT_TRUE(contains(html, "--set llm.attributes.maxCacheLength=512")) << "no --set origin";
  // Pass times: the compile's JSON summary lists them; the report has one bar each.
  Json summary;
  std::istringstream lines(compiled_->err);
  for (std::string line; std::getline(lines, line);) {
    const Json e = Json::parse(line, nullptr, false);
    if (e.is_object() && e.value("event", "") == "summary") summary = e["result"];
  }
  ASSERT_TRUE(summary.is_object() && summary.contains("passes")) << compiled_->err;
  EXPECT_GE(summary["passes"].size(), 3u);
  EXPECT_EQ(bars_in_plot(html, "passes"), summary["passes"].size());
  EXPECT_TRUE(contains(html, "Not measured")) << "compile measures no accuracy";
}

TEST_F(ReportCli, ReportCommandShowsTheAccuracyOfAnEvalJson) {
  // The document `qbc eval --reference --json` prints (docs/cli.md), written here.
  const Json eval = {{"perplexity", 9.5},
                     {"perplexity_reference", 9.25},
                     {"kld_mean", 0.012},
                     {"kld_p99", 0.1},
                     {"kld_max", 0.4},
                     {"top1", 0.93},
                     {"layers",
                      {{{"node", "blk.0.attn.q_proj"}, {"op", "linear"}, {"sqnr_db", 31.5}},
                       {{"node", "blk.0.attn.k_proj"}, {"op", "linear"}, {"sqnr_db", 12.0}},
                       {{"node", "blk.0.out"}, {"op", "add"}, {"sqnr_db", nullptr}}}}};
  testing::write_file(*dir_ / "eval.json", eval.dump());
  const fs::path out = *dir_ / "report.html";
  auto r = run_qbc("report " + shell_quote(mxq()) + " -o " + shell_quote(out) + " --accuracy " +
                   shell_quote(*dir_ / "eval.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = read_file(out);
  EXPECT_EQ(bars_in_plot(html, "sqnr"), 3u);
  EXPECT_TRUE(contains(html, "1.0270")) << "perplexity ratio 9.5 / 9.25";
  EXPECT_TRUE(contains(html, "stored in the MXQ")) << "an MXQ keeps values, not origins";
  EXPECT_FALSE(contains(html, "Not measured"));

  testing::write_file(*dir_ / "bad.json", R"({"layers": [{"sqnr_db": 3}]})");
  r = run_qbc("report " + shell_quote(mxq()) + " -o " + shell_quote(*dir_ / "bad.html") +
              " --accuracy " + shell_quote(*dir_ / "bad.json"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "bad.json")) << r.err;
  EXPECT_FALSE(fs::exists(*dir_ / "bad.html"));
}

/// Appended to a copy of the report: writes, for every plot, how many of its bars the
/// browser laid out with a non-zero width and height, as "id=drawn/total;" in a <pre>.
constexpr const char* kMeasureScript = R"(<script>
const out = [];
for (const svg of document.querySelectorAll('svg.plot')) {
  const bars = svg.querySelectorAll('rect.bar');
  let drawn = 0;
  for (const b of bars) { const r = b.getBoundingClientRect(); if (r.width > 0 && r.height > 0) drawn++; }
  out.push(svg.dataset.plot + '=' + drawn + '/' + bars.length + ';');
}
const pre = document.createElement('pre'); pre.id = 'qbc-measure'; pre.textContent = out.join('');
document.body.appendChild(pre);
</script>)";

TEST_F(ReportCli, RendersInHeadlessChromiumWithEveryPlotDrawn) {
  const auto which = run_command("command -v chromium");
  ASSERT_EQ(which.exit_code, 0) << "chromium is not installed (tools/setup.sh installs it)";
  std::string html = read_file(*dir_ / "compile.html");
  const size_t end = html.rfind("</body>");
  ASSERT_NE(end, std::string::npos);
  html.insert(end, kMeasureScript);
  const fs::path page = *dir_ / "measure.html";
  testing::write_file(page, html);
  const auto r = run_command(
      "chromium --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 "
      "--user-data-dir=" +
      shell_quote(*dir_ / "profile") + " --dump-dom " + shell_quote("file://" + page.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Any console message (an error, a blocked resource) is a failure.
  EXPECT_FALSE(contains(r.err, ":CONSOLE")) << r.err;
  EXPECT_FALSE(contains(r.err, "Uncaught")) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("<pre id=\"qbc-measure\">([^<]*)</pre>")))
      << r.out.substr(0, 2000);
  std::map<std::string, std::pair<int, int>> plots;
  const std::string text = m[1];
  const std::regex item("([a-z]+)=([0-9]+)/([0-9]+);");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), item); it != std::sregex_iterator();
       ++it)
    plots[(*it)[1]] = {std::stoi((*it)[2]), std::stoi((*it)[3])};
  // The cost model's decode step has one bar per node, as `inspect --cost --json` lists them;
  // the SRAM plot one per core of `inspect --memory --json`.
  const Json cost = Json::parse(
      run_qbc("inspect " + shell_quote(mxq()) + " --cost --json --prompt-tokens 240").out, nullptr,
      false);
  const Json memory = Json::parse(run_qbc("inspect " + shell_quote(mxq()) + " --memory --json").out,
                                  nullptr, false);
  ASSERT_TRUE(cost.is_object() && memory.is_object());
  const std::map<std::string, size_t> expected = {
      {"decode", std::min<size_t>(cost["schemes"][0]["layers"].size(), 120)},  // 120 slowest
      {"sram", memory["sram_peak_bytes"].size()},
      {"passes", bars_in_plot(html, "passes")}};
  for (const char* id : {"dram", "bits", "prefill", "decode", "sram", "passes"}) {
    SCOPED_TRACE(id);
    ASSERT_EQ(plots.count(id), 1u) << text;
    EXPECT_GT(plots[id].second, 0);
    EXPECT_EQ(plots[id].first, plots[id].second) << "bars drawn at zero size";
    if (expected.count(id)) {
      EXPECT_EQ(static_cast<size_t>(plots[id].second), expected.at(id));
    }
  }
}

}  // namespace
}  // namespace qbc
