// The plan text form read back (npu::parse_plan, docs/npu.md "The plan"): over the plans the
// backend really makes, for stories260K and every tiny family, W8 and W4V8, on one core and
// eight cooperating cores of aries-rb and both cores of test-2core, after the planning
// pipelines and the whole compile, print -> parse -> print gives the same text and the parsed
// plan passes the plan verifier; malformed text fails at its line and column, naming what
// was expected and the token found.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "qbc/config/config.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/model_loader.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/plan.h"
#include "test_support.h"
#include "unit/npu/quantized_case.h"
#include "unit/npu/small_case.h"
#include "unit/quant/transform_cases.h"

namespace qbc {
namespace {

using npu::Plan;
using ::qbc::testing::contains;

StatusOr<Plan> plan_of(const ir::Graph& g, const std::string& target, int cores,
                       const std::string& pipeline) {
  config::LoadRequest req;
  req.sets = {"targetProfile=" + target};
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
  QBC_ASSIGN_OR_RETURN(npu::Options o, driver::backend_options(g, cfg));
  o.modes = {npu::ModeRequest{cores == 1   ? isa::Scheme::kSingle
                              : cores == 8 ? isa::Scheme::kGlobal8
                                           : isa::Scheme::kGlobal4,
                              cores, 1}};
  o.chunk = 7;
  Plan plan;
  QBC_RETURN_IF_ERROR(npu::run_pipeline(pipeline, g, o, nullptr, {}, {}, nullptr, &plan).status());
  return plan;
}

class PlanText : public ::testing::TestWithParam<testing::TransformCase> {};

TEST_P(PlanText, PrintParsePrintIsIdenticalForEveryPlan) {
  const testing::TransformCase& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  for (bool w4 : {false, true}) {
    auto q = testing::quantize_transform_case(c, w4, "plan-text");
    QBC_ASSERT_OK(q);
    const std::pair<const char*, int> deployments[] = {
        {"aries-rb", 1}, {"aries-rb", 8}, {"test-2core", 2}};
    for (const auto& [target, cores] : deployments) {
      for (const char* pipeline : {"npu-plan", "npu-fit", "npu-compile"}) {
        const std::string what = c.name + (w4 ? " W4V8 " : " W8 ") + target + " x" +
                                 std::to_string(cores) + " " + pipeline;
        auto plan = plan_of(q->model.graph, target, cores, pipeline);
        QBC_ASSERT_OK(plan);
        const std::string text = npu::print_plan(*plan);
        ASSERT_TRUE(npu::is_plan_text(text)) << what;
        auto parsed = npu::parse_plan(text, what);
        QBC_ASSERT_OK(parsed);
        EXPECT_EQ(npu::print_plan(*parsed), text) << what;
        const Status v = npu::verify_plan(*parsed);
        EXPECT_TRUE(v.ok()) << what << ": " << v.to_string();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PlanText, ::testing::ValuesIn(testing::transform_cases()),
                         [](const auto& info) { return info.param.name; });

// A plan with second weight images (bit.decode): each qlinear of a block prints its decode
// image's plan after its own ("; decode image ..."), which reads back the same and verifies.
TEST(PlanTextPhase, SecondImagesPrintParseAndVerify) {
  const testing::TransformCase& c = testing::find_transform_case("llama32_gqa_tied");
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto q = testing::quantize_transform_case_with(
      c, "llm_fast", {}, {"bit.decode.weight=4", "bit.decode.weightGroupSize=32"}, "decode4",
      "plan-text");
  QBC_ASSERT_OK(q);
  for (const char* pipeline : {"npu-plan", "npu-compile"}) {
    auto plan = plan_of(q->model.graph, "aries-rb", 8, pipeline);
    QBC_ASSERT_OK(plan);
    int second = 0;
    for (const npu::NodePlan& n : plan->nodes) second += n.has_second() ? 1 : 0;
    EXPECT_GT(second, 0) << pipeline;
    const std::string text = npu::print_plan(*plan);
    EXPECT_TRUE(contains(text, "; decode image n ")) << pipeline;
    auto parsed = npu::parse_plan(text, pipeline);
    QBC_ASSERT_OK(parsed);
    EXPECT_EQ(npu::print_plan(*parsed), text) << pipeline;
    int parsed_second = 0;
    for (const npu::NodePlan& n : parsed->nodes) {
      parsed_second += n.has_second() ? 1 : 0;
      if (n.has_second()) {
        EXPECT_EQ(n.second_for, isa::Phase::kDecode) << n.name;
        EXPECT_EQ(n.second.w_bits, 4) << n.name;
      }
    }
    EXPECT_EQ(parsed_second, second) << pipeline;
    const Status v = npu::verify_plan(*parsed);
    EXPECT_TRUE(v.ok()) << pipeline << ": " << v.to_string();
  }
}

/// The small case's compiled plan as text.
std::string small_plan_text() {
  StatusOr<testing::Case> c = testing::small_case(512);
  if (!c.ok()) return "";
  Plan plan;
  if (!npu::run_pipeline("npu-compile", c->graph, c->options, nullptr, {}, {}, nullptr, &plan).ok())
    return "";
  return npu::print_plan(plan);
}

/// Replaces the first `from` on line `line` (1-based) of `text` by `to`.
std::string edit_line(std::string text, int line, const std::string& from, const std::string& to) {
  size_t at = 0;
  for (int i = 1; i < line; ++i) at = text.find('\n', at) + 1;
  const size_t hit = text.find(from, at);
  EXPECT_LT(hit, text.find('\n', at)) << "line " << line << " has no '" << from << "'";
  return text.replace(hit, from.size(), to);
}

/// The 1-based number of the first line of `text` that contains `what`.
int line_of(const std::string& text, const std::string& what) {
  const size_t hit = text.find(what);
  int line = 1;
  for (size_t i = 0; i < hit && i < text.size(); ++i) line += text[i] == '\n' ? 1 : 0;
  return line;
}

TEST(PlanTextErrors, MalformedTextNamesItsLineColumnAndToken) {
  QBC_REQUIRE_SHARED(cfg, "model-configs/SmolLM2-135M-Instruct/config.json");
  const std::string text = small_plan_text();
  ASSERT_FALSE(text.empty());
  QBC_ASSERT_OK(npu::parse_plan(text, "p.txt"));
  const auto fails = [](const std::string& bad, const std::string& want) {
    const StatusOr<Plan> p = npu::parse_plan(bad, "p.txt");
    ASSERT_FALSE(p.ok()) << want;
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(p.status().message(), want)) << p.status().message();
  };
  // Header: a word where the core count goes ("cores 2," is at column 46 onwards).
  const size_t cores = text.find("cores ") + 6;
  fails(edit_line(text, 1, "cores 2", "cores two"),
        "p.txt:1:" + std::to_string(cores + 1) + ": expected an integer (found 'two,')");
  // A node of an unknown kind.
  const int rows = line_of(text, " rms_norm rows ");
  fails(edit_line(text, rows, " rows ", " lines "), "p.txt:" + std::to_string(rows) + ":");
  fails(edit_line(text, rows, " rows ", " lines "), "expected a node kind (found 'lines')");
  // Nodes out of order.
  fails(edit_line(text, 4, "  %0 ", "  %5 "), "p.txt:4:4: expected index 0 (in order) (found '5')");
  // A buffer of an unknown region.
  const int buf = line_of(text, "  #0 ");
  fails(edit_line(text, buf, ": weights at", ": weighs at"), "p.txt:" + std::to_string(buf) + ":");
  fails(edit_line(text, buf, ": weights at", ": weighs at"), "expected a region (found 'weighs')");
  // A stage whose budget is not the header's.
  const int st = line_of(text, "  s0 ");
  fails(edit_line(text, st, " bytes", "1 bytes"), "expected the header's SRAM budget");
  // Cut after the stages: the dram section is missing.
  fails(text.substr(0, text.find("dram\n")),
        "p.txt:" + std::to_string(line_of(text, "dram\n")) + ":1: expected 'dram'");
  // Trailing text.
  fails(text + "more\n", "expected the end of the plan (found 'more')");
}

TEST(PlanTextErrors, ParsedPlanGoesThroughTheVerifier) {
  QBC_REQUIRE_SHARED(cfg, "model-configs/SmolLM2-135M-Instruct/config.json");
  const std::string text = small_plan_text();
  ASSERT_FALSE(text.empty());
  // A stage planned over the budget parses (the text is well formed) and the plan verifier
  // refuses it: the parsed plan is the data the verifier checks, not a copy of the text.
  const int st = line_of(text, "  s0 ");
  const size_t at = text.find(": planned ", text.find("  s0 ")) + 10;
  const size_t end = text.find(',', at);
  std::string bad = text;
  bad.replace(at, end - at, "999999999999");
  auto p = npu::parse_plan(bad, "p.txt");
  QBC_ASSERT_OK(p);
  const Status v = npu::verify_plan(*p);
  ASSERT_FALSE(v.ok()) << "line " << st;
  EXPECT_EQ(v.code(), Code::kFailedPrecondition);
  EXPECT_TRUE(contains(v.message(), "P")) << v.message();
}

}  // namespace
}  // namespace qbc
