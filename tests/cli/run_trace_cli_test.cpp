// `qbc run MODEL.mxq --trace OUT.json`: the executor's measured timeline of a stories260K
// compile on four cores (global4), checked against the trace event format's rules, against
// the program itself (every core and queue that runs an instruction has events) and against
// what an executor can do (a core's instructions do not overlap; the decode steps follow the
// prefill chunk).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <variant>

#include "qbc/isa/program.h"
#include "qbc/mxq/model_file.h"
#include "test_support.h"
#include "trace_schema.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::trace_schema_errors;
using Json = nlohmann::json;

/// One global4 compile of stories260K, shared by the tests of this file.
class RunTraceCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path hf = testing::shared_dir() / "models/stories260k/hf";
    if (!fs::exists(hf)) return;
    dir_ = new fs::path(testing::temp_dir());
    compiled_ = new testing::RunResult(run_qbc(
        "compile " + shell_quote(hf) +
        " --preset llm_fast --use-random-calib --inference-scheme global4"
        " --set calibration.numSamples=4 --set calibration.seqLength=128"
        " --set llm.attributes.calibration.useFullSeqLength=false"
        " --set llm.attributes.maxSequenceLength=512 --set llm.attributes.maxCacheLength=512 -o " +
        shell_quote(*dir_ / "q.mxq")));
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
fs::path* RunTraceCli::dir_ = nullptr;
testing::RunResult* RunTraceCli::compiled_ = nullptr;

/// (pid, tid) of the trace layout (qbc/report/trace.h: pid core + 1, tid queue + 1) of every
/// core and queue that holds an executed instruction (not a loop or barrier) in `p`.
std::set<std::pair<int64_t, int64_t>> queues_used(const isa::Program& p) {
  std::set<std::pair<int64_t, int64_t>> used;
  for (const isa::CoreProgram& cp : p.cores) {
    for (const isa::Instr& in : cp.code) {
      if (std::holds_alternative<isa::Loop>(in.op) || std::holds_alternative<isa::Barrier>(in.op))
        continue;
      used.insert({cp.core + 1, static_cast<int64_t>(in.queue) + 1});
    }
  }
  return used;
}

TEST_F(RunTraceCli, TraceFollowsTheEventFormatAndCoversEveryCoreAndQueue) {
  const fs::path out = *dir_ / "run.json";
  const std::string run = "run " + shell_quote(mxq()) + " -p \"Once upon\" -n 6 --ignore-eos";
  auto plain = run_qbc(run);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto r = run_qbc(run + " --trace " + shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out) << "tracing changed the generated text";
  EXPECT_TRUE(contains(r.err, "measured host-executor times")) << r.err;

  const Json doc = Json::parse(read_file(out), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "the trace is not JSON";
  for (const std::string& e : trace_schema_errors(doc)) ADD_FAILURE() << e;
  ASSERT_TRUE(doc.contains("otherData"));
  EXPECT_TRUE(contains(doc["otherData"].value("times", ""), "measured host-executor times"));

  auto m = mxq::load_model(mxq().string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const isa::Mode& mode = m->bundle->modes.front();
  ASSERT_EQ(mode.cores_per_instance, 4);

  // cat -> the (pid, tid) with instruction events; the calls (tid 4) by cat.
  std::map<std::string, std::set<std::pair<int64_t, int64_t>>> seen;
  std::map<std::string, std::vector<const Json*>> calls;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>>
      by_core;  // (pid, call ts)
  for (const Json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string cat = e["cat"];
    const int64_t pid = e["pid"], tid = e["tid"];
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    if (tid == 4) {
      calls[cat].push_back(&e);
      continue;
    }
    seen[cat].insert({pid, tid});
    by_core[{pid, 0}].push_back(
        {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  }
  ASSERT_EQ(calls["prefill"].size(), 4u) << "one prefill chunk, one call event per core";
  // Six new tokens: the first comes from the prefill, the other five from decode steps.
  EXPECT_EQ(calls["decode"].size(), 4u * 5u);
  for (const auto& [cat, program] :
       {std::pair<std::string, const isa::Program*>{"prefill", &mode.prefill},
        {"decode", &mode.decode}}) {
    SCOPED_TRACE(cat);
    const auto want = queues_used(*program);
    EXPECT_GT(want.size(), 4u);
    for (const auto& q : want)
      EXPECT_TRUE(seen[cat].count(q))
          << "no event on core " << q.first - 1 << " queue tid " << q.second;
  }
  // A core runs its queues one instruction after another on the host.
  for (auto& [core, spans] : by_core) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      ASSERT_GE(spans[i].first, spans[i - 1].second - 1e-3) << "pid " << core.first;
  }
  // The decode steps start after the prefill chunk has ended.
  double prefill_end = 0, first_decode = 1e300;
  for (const Json* e : calls["prefill"])
    prefill_end = std::max(prefill_end, (*e)["ts"].get<double>() + (*e)["dur"].get<double>());
  for (const Json* e : calls["decode"])
    first_decode = std::min(first_decode, (*e)["ts"].get<double>());
  EXPECT_GE(first_decode, prefill_end - 1e-3);
}

TEST_F(RunTraceCli, TraceOfAGraphIsRefused) {
  auto r = run_qbc("run " + shell_quote(testing::shared_dir() / "models/stories260k/hf") +
                   " -p Once -n 1 --trace " + shell_quote(*dir_ / "x.json"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--trace applies to compiled .mxq models")) << r.err;
  EXPECT_FALSE(fs::exists(*dir_ / "x.json"));
}

}  // namespace
}  // namespace qbc
