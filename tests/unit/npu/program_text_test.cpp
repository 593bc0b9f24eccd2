// The NPU program text form over what the backend really produces: for stories260K and every
// tiny family, W8 and W4V8, on one core, four and eight cooperating cores of aries-rb and
// both cores of test-2core, print -> parse -> print gives the same text (isa::parse_bundle),
// the parsed bundle passes the program verifier, and assign-tokens on the parsed programs
// with their tokens removed gives back the printed tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "qbc/config/config.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/quantize.h"
#include "qbc/isa/text.h"
#include "qbc/isa/text_parser.h"
#include "qbc/isa/verify.h"
#include "qbc/npu/assign_tokens.h"
#include "test_support.h"
#include "unit/npu/quantized_case.h"
#include "unit/quant/transform_cases.h"

namespace qbc {
namespace {

StatusOr<driver::LoadedModel> quantized(const testing::TransformCase& c, bool w4) {
  QBC_ASSIGN_OR_RETURN(testing::QuantizedCase q, testing::quantize_transform_case(c, w4, "text"));
  return std::move(q.model);
}

StatusOr<isa::Bundle> compile(const driver::LoadedModel& q, const std::string& target, int cores) {
  config::LoadRequest req;
  req.sets = {"targetProfile=" + target};
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
  QBC_ASSIGN_OR_RETURN(npu::Options o, driver::backend_options(q.graph, cfg));
  o.modes = {npu::ModeRequest{cores == 1   ? isa::Scheme::kSingle
                              : cores == 8 ? isa::Scheme::kGlobal8
                                           : isa::Scheme::kGlobal4,
                              cores, 1}};
  o.chunk = 7;
  return driver::compile_backend(q, o);
}

class ProgramText : public ::testing::TestWithParam<testing::TransformCase> {};

TEST_P(ProgramText, PrintParsePrintIsIdenticalForEveryProgram) {
  const testing::TransformCase& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  for (bool w4 : {false, true}) {
    auto q = quantized(c, w4);
    QBC_ASSERT_OK(q);
    const std::pair<const char*, int> deployments[] = {
        {"aries-rb", 1}, {"aries-rb", 4}, {"aries-rb", 8}, {"test-2core", 2}};
    for (const auto& [target, cores] : deployments) {
      const std::string what =
          c.name + (w4 ? " W4V8 " : " W8 ") + target + " x" + std::to_string(cores);
      auto b = compile(*q, target, cores);
      QBC_ASSERT_OK(b);
      const std::string text = isa::print_bundle(*b);
      auto parsed = isa::parse_bundle(text, what);
      QBC_ASSERT_OK(parsed);
      EXPECT_EQ(isa::print_bundle(*parsed), text) << what;
      EXPECT_TRUE(isa::verify(*parsed).ok()) << what << ": " << isa::verify(*parsed).to_string();
      // Without its tokens the text parses to programs that assign-tokens completes again.
      isa::PrintOptions no_tokens;
      no_tokens.tokens = false;
      auto bare = isa::parse_bundle(isa::print_bundle(*b, no_tokens), what);
      QBC_ASSERT_OK(bare);
      QBC_ASSERT_OK(npu::assign_tokens(*bare));
      EXPECT_EQ(isa::print_bundle(*bare), text) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ProgramText, ::testing::ValuesIn(testing::transform_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace qbc
