// The pass manager on a toy unit (a list of ints whose invariant is "sorted"): needs
// checked once before any pass, the verifier after every pass as an internal error
// naming the pass, disabled passes skipped, records, dumps, and broken promises.
#include "qbc/pass/pass_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "qbc/pass/pass_registry.h"
#include "qbc/pass/pipeline.h"
#include "qbc/support/cancel.h"
#include "qbc/support/exit_codes.h"
#include "test_support.h"

namespace qbc::pass {
namespace {

enum : ResourceSet { kTable = 1u << 0, kLimit = 1u << 1 };

struct ToyContext {
  static constexpr const char* kStage = "toy";
  static constexpr const char* kDumpExtension = "toy.txt";
  std::vector<int> unit;
  ResourceSet held = 0;
  Status storage;  ///< What health() reports.
  ResourceSet available() const { return held; }
  Status health() const { return storage; }
  static std::string describe(ResourceSet r) {
    std::string out;
    if (r & kTable) out += "the table";
    if (r & kLimit) out += std::string(out.empty() ? "" : ", ") + "the limit";
    return out;
  }
  Status verify() const {
    if (!std::is_sorted(unit.begin(), unit.end()))
      return invalid_argument("invariant T1: the unit is not sorted");
    return ok_status();
  }
  StatusOr<std::string> dump_text() const {
    std::string s;
    for (int v : unit) s += std::to_string(v) + "\n";
    return s;
  }
};

/// Appends `value`; needs/provides as given; `fake_provide` claims without providing.
class Append final : public Pass<ToyContext> {
 public:
  Append(std::string name, int value, ResourceSet needs = 0, ResourceSet provides = 0,
         bool fake_provide = false)
      : name_(std::move(name)),
        value_(value),
        needs_(needs),
        provides_(provides),
        fake_(fake_provide) {}
  std::string name() const override { return name_; }
  ResourceSet needs() const override { return needs_; }
  ResourceSet provides() const override { return provides_; }
  StatusOr<bool> run(ToyContext& ctx) override {
    if (value_ < 0) return false;  // a no-op
    ctx.unit.push_back(value_);
    if (!fake_) ctx.held |= provides_;
    return true;
  }

 private:
  std::string name_;
  int value_;
  ResourceSet needs_, provides_;
  bool fake_;
};

using Passes = std::vector<std::unique_ptr<Pass<ToyContext>>>;

Passes make(std::vector<Append> list) {
  Passes out;
  for (Append& a : list) out.push_back(std::make_unique<Append>(std::move(a)));
  return out;
}

TEST(PassManager, RunsInOrderAndRecordsChangedAndSkipsDisabled) {
  ToyContext ctx;
  PassManager<ToyContext> pm(Instrumentation{{"second"}, {}, ""});
  pm.add(std::make_unique<Append>("first", 1));
  pm.add(std::make_unique<Append>("second", 2));
  pm.add(std::make_unique<Append>("noop", -1));
  pm.add(std::make_unique<Append>("third", 3));
  std::vector<PassRecord> records;
  QBC_ASSERT_OK(pm.run(ctx, &records));
  EXPECT_EQ(ctx.unit, (std::vector<int>{1, 3}));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].name, "first");
  EXPECT_TRUE(records[0].changed);
  EXPECT_EQ(records[1].name, "noop");
  EXPECT_FALSE(records[1].changed);
  EXPECT_EQ(records[2].name, "third");
}

TEST(PassManager, RefusesUnmetNeedsBeforeAnyPassRuns) {
  ToyContext ctx;
  Passes passes =
      make({Append("early", 1), Append("reader", 2, kTable), Append("writer", 3, 0, kTable)});
  Status s = run_passes(passes, ctx, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_EQ(exit_code_for(s), kExitBadInput);
  EXPECT_TRUE(testing::contains(
      s.message(), "pass reader needs the table: pass writer provides it, but only later"))
      << s.message();
  EXPECT_TRUE(ctx.unit.empty()) << "a pass ran before the needs were checked";

  // Provided by an earlier pass: fine. Provided only by a disabled pass: refused, naming it.
  Passes ok = make({Append("writer", 1, 0, kTable), Append("reader", 2, kTable)});
  QBC_ASSERT_OK(run_passes(ok, ctx, {}, nullptr));
  ToyContext fresh;
  Status off = run_passes(ok, fresh, Instrumentation{{"writer"}, {}, ""}, nullptr);
  ASSERT_FALSE(off.ok());
  EXPECT_TRUE(
      testing::contains(off.message(), "pass writer provides it, but --disable-pass removed it"))
      << off.message();
  // Held by the initial context: fine.
  ToyContext held;
  held.held = kTable | kLimit;
  QBC_ASSERT_OK(run_passes(make({Append("reader", 2, kTable | kLimit)}), held, {}, nullptr));
}

/// Appends `value` and then asks for cancellation, as Ctrl-C during the pass would.
class AppendThenInterrupt final : public Pass<ToyContext> {
 public:
  std::string name() const override { return "interrupted"; }
  StatusOr<bool> run(ToyContext& ctx) override {
    ctx.unit.push_back(2);
    cancel::request(SIGINT);
    return true;
  }
};

// Ctrl-C during a pass: that pass finishes (it has no safe point of its own), the next one
// never starts, and the run fails naming where it stopped.
TEST(PassManager, StopsAtTheNextPassBoundaryWhenCancelled) {
  ToyContext ctx;
  Passes passes;
  passes.push_back(std::make_unique<Append>("first", 1));
  passes.push_back(std::make_unique<AppendThenInterrupt>());
  passes.push_back(std::make_unique<Append>("after", 3));
  std::vector<PassRecord> records;
  Status s = run_passes(passes, ctx, {}, &records);
  EXPECT_TRUE(cancel::requested());
  cancel::reset();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "interrupted at toy pass after");
  EXPECT_EQ(ctx.unit, (std::vector<int>{1, 2}));
  EXPECT_EQ(records.size(), 2u);
}

// A pass that breaks the unit's invariant is a bug: internal error (exit 70) naming the
// pass and the invariant, and the passes after it do not run.
TEST(PassManager, VerifierFailureIsAnInternalErrorNamingThePass) {
  ToyContext ctx;
  Passes passes = make({Append("fine", 5), Append("breaker", 1), Append("after", 9)});
  Status s = run_passes(passes, ctx, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_EQ(exit_code_for(s), kExitInternal);
  EXPECT_TRUE(testing::contains(s.message(), "pass breaker broke an invariant")) << s.message();
  EXPECT_TRUE(testing::contains(s.message(), "invariant T1: the unit is not sorted"))
      << s.message();
  EXPECT_EQ(ctx.unit, (std::vector<int>{5, 1}));
}

// A storage failure (scratch space exhausted) is not the pass's bug: its code survives.
TEST(PassManager, StorageFailuresKeepTheirCode) {
  ToyContext ctx;
  ctx.storage = resource_exhausted("scratch space: disk full?");
  const Status s = run_passes(make({Append("writer", 1)}), ctx, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_TRUE(testing::contains(s.message(), "after pass writer")) << s.message();
  EXPECT_TRUE(testing::contains(s.message(), "disk full?")) << s.message();
}

TEST(PassManager, APassThatDoesNotProvideWhatItDeclaresIsABug) {
  ToyContext ctx;
  Status s = run_passes(
      make({Append("liar", 1, 0, kTable, /*fake_provide=*/true), Append("reader", 2, kTable)}), ctx,
      {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_TRUE(
      testing::contains(s.message(), "pass liar declares that it provides the table but did not"))
      << s.message();
}

TEST(PassManager, DumpsAfterNamedOrAllPasses) {
  const std::filesystem::path dir = testing::temp_dir();
  ToyContext ctx;
  Passes passes = make({Append("a", 1), Append("b", 2), Append("c", 3)});
  QBC_ASSERT_OK(
      run_passes(passes, ctx, Instrumentation{{}, {"b"}, (dir / "one").string()}, nullptr));
  EXPECT_EQ(testing::read_file(dir / "one" / "02-b.toy.txt"), "1\n2\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "one" / "01-a.toy.txt"));
  ToyContext again;
  QBC_ASSERT_OK(
      run_passes(passes, again, Instrumentation{{"b"}, {"all"}, (dir / "all").string()}, nullptr));
  EXPECT_EQ(testing::read_file(dir / "all" / "01-a.toy.txt"), "1\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "all" / "02-b.toy.txt"))
      << "a disabled pass was dumped";
  EXPECT_EQ(testing::read_file(dir / "all" / "03-c.toy.txt"), "1\n3\n");
}

TEST(PassRegistry, CreatesByNameAndRefusesUnknownNames) {
  PassRegistry<ToyContext, int> r;
  r.add("append", "appends its option",
        [](const int& v) -> StatusOr<std::unique_ptr<Pass<ToyContext>>> {
          if (v < 0) return invalid_argument("negative");
          return std::unique_ptr<Pass<ToyContext>>(std::make_unique<Append>("append", v));
        });
  EXPECT_TRUE(r.contains("append"));
  EXPECT_EQ(r.summary("append"), "appends its option");
  EXPECT_EQ(r.names(), std::vector<std::string>{"append"});
  auto p = r.create("append", 4);
  QBC_ASSERT_OK(p);
  EXPECT_EQ((*p)->name(), "append");
  auto bad = r.create("append", -1);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(testing::contains(bad.status().message(), "pass append: negative"));
  auto unknown = r.create("nope", 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Code::kInternal);
}

TEST(Pipeline, FormatsEntriesWithKeysReasonsAndDisabledMarks) {
  const std::vector<PipelineEntry> entries = {{"first", "a.apply", "goes first"},
                                              {"second", "always", "then"}};
  EXPECT_TRUE(contains_pass(entries, "second"));
  EXPECT_FALSE(contains_pass(entries, "third"));
  const std::string text = format_pipeline("toy", entries, {"second"});
  EXPECT_TRUE(testing::contains(text, "toy pipeline, 2 passes in order")) << text;
  EXPECT_TRUE(testing::contains(text, "1  first   a.apply")) << text;
  EXPECT_TRUE(testing::contains(text, "(disabled by --disable-pass) then")) << text;
  EXPECT_TRUE(testing::contains(pipeline_json(entries, {"second"}), R"("disabled":true)"));
}

}  // namespace
}  // namespace qbc::pass
