// `qbc opt`'s driver (qbc/driver/opt.h): the input kind, the pass names of both registries,
// which pass runs on which input, and errors naming the file, line, column or pass.
#include "qbc/driver/opt.h"

#include <gtest/gtest.h>

#include "qbc/config/config.h"
#include "test_support.h"

namespace qbc::driver {
namespace {

using qbc::testing::contains;

// A hand-written graph: one RMSNorm feeding one linear (what normConv folds).
const char* kNormLinear = R"(mblt 1
graph @g
weight @n.weight : f32[8] = model "n.weight"
weight @l.weight : f32[4,8] = model "l.weight"
%inputs_embeds = input() : f32[?,?,8]
%positions = input() : i64[?,?]
%n = rms_norm(%inputs_embeds, @n.weight) {eps = 1e-05, group = 0, unit_offset = 0} : f32[?,?,8]
%logits = linear(%n, @l.weight) : f32[?,?,4]
return %logits
)";

OptRequest request(const std::string& text, std::vector<std::string> passes) {
  OptRequest r;
  r.label = "in.mblt";
  r.text = text;
  r.passes = std::move(passes);
  auto cfg = config::resolve(config::LoadRequest{});
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  if (cfg.ok()) r.cfg = *cfg;
  return r;
}

TEST(Opt, DetectsTheInputKind) {
  EXPECT_EQ(detect_kind(kNormLinear), TextKind::kMblt);
  EXPECT_EQ(detect_kind("\nbundle target=- cores=1"), TextKind::kProgram);
}

TEST(Opt, ListsThePassesOfBothStages) {
  bool norm_conv = false, assign_tokens = false;
  for (const OptPass& p : opt_passes()) {
    norm_conv |= p.name == "normConv" && p.stage == "quant" && !p.summary.empty();
    assign_tokens |= p.name == "assign-tokens" && p.stage == "npu" && p.input == "mblt, program";
  }
  EXPECT_TRUE(norm_conv);
  EXPECT_TRUE(assign_tokens);
}

TEST(Opt, NoPassPrintsTheParsedGraph) {
  auto out = run_opt(request(kNormLinear, {}));
  QBC_ASSERT_OK(out);
  EXPECT_TRUE(contains(*out, "%n = rms_norm(%inputs_embeds, @n.weight)")) << *out;
}

TEST(Opt, NormConvRewritesTheLinearAndTheNorm) {
  auto before = run_opt(request(kNormLinear, {}));
  auto after = run_opt(request(kNormLinear, {"normConv"}));
  QBC_ASSERT_OK(before);
  QBC_ASSERT_OK(after);
  EXPECT_NE(*before, *after);
  EXPECT_TRUE(contains(*before, "weight @l.weight : f32[4,8] = model \"l.weight\"")) << *before;
  EXPECT_FALSE(contains(*after, "weight @l.weight : f32[4,8] = model \"l.weight\"")) << *after;
}

TEST(Opt, UnknownPassIsUnsupportedAndNamed) {
  auto out = run_opt(request(kNormLinear, {"normConv", "frobnicate"}));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(contains(out.status().message(), "unknown pass 'frobnicate'"));
}

TEST(Opt, QuantPassOnProgramTextIsRefused) {
  auto r =
      request("bundle target=- cores=1 sram_bytes=0 dram_bytes=0 dma_align=16\n", {"normConv"});
  auto out = run_opt(r);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(contains(out.status().message(), "pass 'normConv' needs MBLT text"));
}

TEST(Opt, QuantPassAfterABackendPassIsRefused) {
  auto out = run_opt(request(kNormLinear, {"plan-tiles", "normConv"}));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(out.status().message(), "quant pass 'normConv' after a backend pass"));
}

TEST(Opt, BadTextNamesFileLineAndColumn) {
  std::string text = kNormLinear;
  text.replace(text.find("rms_norm("), 9, "rms_nrom(");
  auto out = run_opt(request(text, {}));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(out.status().message(), "in.mblt:7:")) << out.status().message();
  auto prog = run_opt(request("bundle target=- cores=x", {}));
  ASSERT_FALSE(prog.ok());
  EXPECT_TRUE(contains(prog.status().message(), "in.mblt:1:23: expected an integer (found 'x')"))
      << prog.status().message();
}

TEST(Opt, CalibrationPassesAreRefusedNamingWhatIsMissing) {
  auto out = run_opt(request(kNormLinear, {"calibrate"}));
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(contains(out.status().message(), "calibrat")) << out.status().message();
}

}  // namespace
}  // namespace qbc::driver
