// Tests of tools/check_layering.sh on small fixture trees (never on a bad include in the real
// tree), and that the rules table in docs/architecture.md is the one the script prints.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::RunResult;
using ::qbc::testing::shell_quote;

// A clean tree: support, ir (with a private qbc_proto), quant, ref with a LibTorch plugin, mxq,
// an interface-only runner and a runtime. Tests overwrite or add files before running the check.
class Fixture {
 public:
  Fixture() : root_(::qbc::testing::temp_dir()) {
    files_ = {
        {"CMakeLists.txt", "add_library(qbc_torch INTERFACE)\n"},
        {"proto/CMakeLists.txt",
         "file(GLOB QBC_PROTOS *.proto)\nadd_library(qbc_proto STATIC ${QBC_PROTOS})\n"},
        {"src/support/CMakeLists.txt",
         "qbc_add_library(qbc_support SOURCES status.cpp DEPS fmt::fmt)\n"},
        {"include/qbc/support/status.h", "#pragma once\n"},
        {"src/support/status.cpp", "#include \"qbc/support/status.h\"\n"},
        {"src/ir/CMakeLists.txt",
         "qbc_add_library(qbc_ir\n  SOURCES graph.cpp serialize.cpp\n  DEPS qbc_support\n"
         "  PRIVATE_DEPS qbc_proto nlohmann_json::nlohmann_json)\n"},
        {"include/qbc/ir/graph.h", "#pragma once\n#include \"qbc/support/status.h\"\n"},
        {"src/ir/graph.cpp", "#include \"qbc/ir/graph.h\"\n"},
        {"src/ir/serialize.cpp", "#include \"mblt.pb.h\"\n#include \"qbc/ir/graph.h\"\n"},
        {"src/quant/CMakeLists.txt",
         "qbc_add_library(qbc_quant SOURCES pass.cpp DEPS qbc_support qbc_ir)\n"},
        {"include/qbc/quant/pass.h",
         "#pragma once\n#include \"qbc/ir/graph.h\"\n#include \"qbc/support/status.h\"\n"},
        {"src/quant/pass.cpp",
         "#include \"qbc/quant/pass.h\"\n#include \"qbc/support/status.h\"\n"},
        {"src/ref/CMakeLists.txt",
         "qbc_add_library(qbc_ref SOURCES runner.cpp DEPS qbc_support qbc_ir)\n"
         "add_library(qbc_ref_torch MODULE session.cpp)\n"
         "target_link_libraries(qbc_ref_torch PRIVATE qbc_ir qbc_support)\n"
         "qbc_use_torch(qbc_ref_torch)\n"},
        {"include/qbc/ref/runner.h",
         "#pragma once\n#include \"qbc/ir/graph.h\"\n#include \"qbc/support/status.h\"\n"},
        {"src/ref/runner.cpp",
         "#include \"qbc/ref/runner.h\"\n#include \"qbc/support/status.h\"\n"},
        {"src/ref/session.cpp", "#include <torch/torch.h>\n#include \"qbc/ir/graph.h\"\n"},
        {"src/mxq/CMakeLists.txt",
         "qbc_add_library(qbc_mxq SOURCES reader.cpp DEPS qbc_support)\n"},
        {"include/qbc/mxq/reader.h", "#pragma once\n#include \"qbc/support/status.h\"\n"},
        {"src/mxq/reader.cpp", "#include \"qbc/mxq/reader.h\"\n"},
        {"src/runner/CMakeLists.txt", "qbc_add_interface_library(qbc_runner DEPS qbc_support)\n"},
        {"include/qbc/runner/runner.h", "#pragma once\n#include \"qbc/support/status.h\"\n"},
        {"src/runtime/CMakeLists.txt",
         "qbc_add_library(qbc_runtime SOURCES x.cpp DEPS qbc_support qbc_mxq qbc_runner)\n"},
        {"include/qbc/runtime/runtime.h",
         "#pragma once\n#include \"qbc/mxq/reader.h\"\n#include \"qbc/runner/runner.h\"\n"
         "#include \"qbc/support/status.h\"\n"},
        {"src/runtime/x.cpp",
         "#include \"qbc/runtime/runtime.h\"\n\n#include <vector>\n\n"
         "#include \"qbc/support/status.h\"\n"},
    };
  }

  /// Sets (or adds) a file of the tree, relative to its root.
  void set(const std::string& rel, const std::string& contents) { files_[rel] = contents; }
  /// Appends a line to a file of the tree.
  void append(const std::string& rel, const std::string& line) { files_[rel] += line + "\n"; }

  /// Writes the tree and runs the script on it.
  RunResult check(const std::string& flags = "") const {
    for (const auto& [rel, contents] : files_) ::qbc::testing::write_file(root_ / rel, contents);
    const fs::path script = ::qbc::testing::source_dir() / "tools/check_layering.sh";
    return ::qbc::testing::run_command("bash " + shell_quote(script) + " --root " +
                                       shell_quote(root_) + " " + flags);
  }

 private:
  fs::path root_;
  std::map<std::string, std::string> files_;
};

// The number of violations the script printed: lines starting with "layering: ".
int violations(const std::string& out) {
  int n = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) n += line.rfind("layering: ", 0) == 0;
  return n;
}

TEST(Layering, CleanFixturePasses) {
  const RunResult r = Fixture().check();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "layering: ok\n");
}

TEST(Layering, RuntimeIncludingIrFails) {
  Fixture t;
  t.append("src/runtime/x.cpp", "#include \"qbc/ir/graph.h\"");
  const RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "layering: src/runtime/x.cpp:6: includes \"qbc/ir/graph.h\": "
                       "qbc_ir is not a dependency of qbc_runtime in "
                       "src/runtime/CMakeLists.txt"))
      << r.out;
  EXPECT_TRUE(contains(r.out,
                       "policy \"runtime -> only support, numerics, mxq, runner, isa, tokenizer, "
                       "image\" forbids ir"))
      << r.out;
  EXPECT_EQ(violations(r.out), 1) << r.out;
}

TEST(Layering, RuntimeHeaderIncludingQuantFails) {
  Fixture t;
  t.append("include/qbc/runtime/runtime.h", "#include <qbc/quant/pass.h>");
  const RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "layering: include/qbc/runtime/runtime.h:5: includes <qbc/quant/pass.h>: "
                       "qbc_quant is not a dependency of qbc_runtime"))
      << r.out;
  EXPECT_TRUE(contains(
      r.out,
      "policy \"runtime -> only support, numerics, mxq, runner, isa, tokenizer, image\" forbids "
      "quant"))
      << r.out;
}

TEST(Layering, RuntimeLinkingIrIsAPolicyViolationEvenWhenCMakeAllowsIt) {
  Fixture t;
  t.set("src/runtime/CMakeLists.txt",
        "qbc_add_library(qbc_runtime\n  SOURCES x.cpp\n  DEPS qbc_support qbc_mxq qbc_runner\n"
        "  PRIVATE_DEPS qbc_ir)\n");
  t.append("src/runtime/x.cpp", "#include \"qbc/ir/graph.h\"");
  const RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(
      r.out,
      "layering: src/runtime/CMakeLists.txt: qbc_runtime links qbc_ir; "
      "policy \"runtime -> only support, numerics, mxq, runner, isa, tokenizer, image\" forbids "
      "ir"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "layering: src/runtime/x.cpp:6: includes \"qbc/ir/graph.h\": policy"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "not a dependency")) << r.out;  // CMake allows it
}

TEST(Layering, UnusedDeclaredDependencyFails) {
  Fixture t;
  t.set("src/quant/CMakeLists.txt",
        "qbc_add_library(qbc_quant SOURCES pass.cpp DEPS qbc_support qbc_ir qbc_mxq)\n");
  const RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "layering: src/quant/CMakeLists.txt: qbc_quant links qbc_mxq, but no "
                       "file of src/quant/ or include/qbc/quant/ includes qbc/mxq/; drop it"))
      << r.out;
  EXPECT_EQ(violations(r.out), 1) << r.out;
}

TEST(Layering, LinkOnlyMarkerKeepsADependencyThatIsNotIncluded) {
  Fixture t;
  t.set("src/quant/CMakeLists.txt",
        "# layering: link-only qbc_mxq (registers its codecs when linked)\n"
        "qbc_add_library(qbc_quant SOURCES pass.cpp DEPS qbc_support qbc_ir qbc_mxq)\n");
  RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const RunResult rules = t.check("--print-rules");
  EXPECT_TRUE(contains(rules.out, "mxq (link-only (registers its codecs when linked))"))
      << rules.out;

  t.set("src/quant/CMakeLists.txt",  // a marker needs a reason, and goes stale when included
        "# layering: link-only qbc_ir\n"
        "qbc_add_library(qbc_quant SOURCES pass.cpp DEPS qbc_support qbc_ir)\n");
  r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "link-only marker for qbc_ir needs a reason")) << r.out;
  EXPECT_TRUE(contains(r.out, "qbc_ir is marked link-only but qbc_quant includes qbc/ir/"))
      << r.out;
}

TEST(Layering, PublicHeadersNeedPublicDependencies) {
  Fixture t;
  t.append("include/qbc/ir/graph.h", "#include \"mblt.pb.h\"");  // qbc_proto is PRIVATE_DEPS
  t.set("src/mxq/CMakeLists.txt",  // public, but only a .cpp includes it
        "qbc_add_library(qbc_mxq SOURCES reader.cpp DEPS qbc_support qbc_runner)\n");
  t.append("src/mxq/reader.cpp", "#include \"qbc/runner/runner.h\"");
  const RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "layering: include/qbc/ir/graph.h:3: includes \"mblt.pb.h\": a public "
                       "header needs a public dependency, but qbc_proto is private to "
                       "qbc_ir"))
      << r.out;
  EXPECT_TRUE(contains(r.out,
                       "layering: src/mxq/CMakeLists.txt: qbc_mxq links qbc_runner "
                       "publicly, but only src/mxq/ includes qbc/runner/"))
      << r.out;
  // mxq -> runner is also outside mxq's policy.
  EXPECT_TRUE(contains(r.out, "policy \"mxq -> only support, isa, proto\" forbids runner"))
      << r.out;
}

TEST(Layering, NewStageFolderIsCheckedAgainstThePolicy) {
  Fixture t;  // no list of stages anywhere: the folder is enough
  t.set("src/npu/CMakeLists.txt",
        "file(GLOB S *.cpp)\nqbc_add_library(qbc_npu SOURCES ${S} DEPS qbc_support qbc_ir)\n"
        "target_link_libraries(qbc_npu PRIVATE qbc_quant)\n");
  t.set("src/npu/lower.cpp", "#include \"qbc/ir/graph.h\"\n#include \"qbc/quant/pass.h\"\n");
  const RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "layering: src/npu/CMakeLists.txt: qbc_npu links qbc_quant; policy "
                       "\"npu -> never quant, ref, frontend, calib, driver\" forbids quant"))
      << r.out;
  EXPECT_TRUE(
      contains(r.out, "layering: src/npu/lower.cpp:2: includes \"qbc/quant/pass.h\": policy"))
      << r.out;
}

TEST(Layering, UnknownStagesAndTargetsFail) {
  Fixture t;
  t.append("src/quant/pass.cpp", "#include \"qbc/nosuch/x.h\"");
  t.set("include/qbc/orphan/a.h", "#pragma once\n");
  t.set("src/mxq/CMakeLists.txt",
        "qbc_add_library(qbc_mxq SOURCES reader.cpp DEPS qbc_support qbc_tensorfile)\n");
  const RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "src/quant/pass.cpp:3: includes \"qbc/nosuch/x.h\": there is no stage "
                       "nosuch"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "include/qbc/orphan/: no stage owns these headers")) << r.out;
  EXPECT_TRUE(contains(r.out, "qbc_mxq links qbc_tensorfile, which no CMakeLists.txt defines"))
      << r.out;
}

TEST(Layering, LibTorchOnlyInTorchTargetSources) {
  Fixture t;
  t.append("include/qbc/ref/runner.h", "#include <ATen/ATen.h>");
  t.append("src/quant/pass.cpp", "#include <torch/torch.h>");
  t.set("src/ref/ops.h", "#pragma once\n#include <c10/core/Scalar.h>\n");
  const RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "include/qbc/ref/runner.h:4: includes <ATen/ATen.h>: LibTorch in a "
                       "header"))
      << r.out;
  EXPECT_TRUE(
      contains(r.out, "src/ref/ops.h:2: includes <c10/core/Scalar.h>: LibTorch in a header"))
      << r.out;
  EXPECT_TRUE(contains(r.out,
                       "src/quant/pass.cpp:3: includes <torch/torch.h>: LibTorch outside the "
                       "sources of a target that calls qbc_use_torch()"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "src/ref/session.cpp")) << r.out;
}

TEST(Layering, IsaHoldsNoCompilerPass) {
  Fixture t;
  t.set("src/isa/CMakeLists.txt",
        "qbc_add_library(qbc_isa SOURCES program.cpp DEPS qbc_support)\n");
  t.set("include/qbc/isa/program.h",
        "#pragma once\n#include \"qbc/support/status.h\"\n"
        "Status verify(const Bundle& b);\nStatus print(const isa::Program& p, int n);\n");
  t.set("src/isa/program.cpp", "#include \"qbc/isa/program.h\"\n");
  RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;  // reading and checking programs is isa's
  t.set("include/qbc/isa/deps.h",
        "#pragma once\n#include \"qbc/support/status.h\"\n"
        "Status assign_tokens(Bundle& b, Program& p);\nStatus other(int n, isa::Program* p);\n");
  r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "layering: include/qbc/isa/deps.h:3: takes a mutable program "
                       "(Status assign_tokens(Bundle& b, Program& p);): a compiler pass, which "
                       "belongs in npu"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "layering: include/qbc/isa/deps.h:4: takes a mutable program"))
      << r.out;
  EXPECT_EQ(violations(r.out), 2) << r.out;
}

// The CLI (tools/qbc/) is a shell over driver/: it includes driver, support and the runtime's
// public headers, nothing else.
TEST(Layering, CliIncludingAStageOtherThanDriverFails) {
  Fixture t;
  t.set(
      "tools/qbc/cmd_x.cpp",
      "#include \"cli.h\"\n#include \"qbc/driver/compile.h\"\n#include \"qbc/runtime/runtime.h\"\n"
      "#include \"qbc/support/status.h\"\n#include <vector>\n");
  RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  t.append("tools/qbc/cmd_x.cpp", "#include \"qbc/quant/pass.h\"");
  t.append("tools/qbc/cmd_x.cpp", "#include \"mblt.pb.h\"");
  r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "layering: tools/qbc/cmd_x.cpp:6: includes \"qbc/quant/pass.h\": the CLI "
                       "(tools/qbc/) may include only driver, support, runtime"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "layering: tools/qbc/cmd_x.cpp:7: includes \"mblt.pb.h\": the CLI"))
      << r.out;
  EXPECT_EQ(violations(r.out), 2) << r.out;
}

// The includes not yet moved into driver/ are listed with a reason, and every entry must
// still be needed.
TEST(Layering, CliAllowListEntriesAreNeededAndGiveAReason) {
  Fixture t;
  t.set("tools/qbc/cmd_x.cpp", "#include \"qbc/quant/pass.h\"\n");
  t.set("tools/layering-cli-allow.txt",
        "# FILE | stages | why\ntools/qbc/cmd_x.cpp | quant | prints the pipeline itself\n");
  RunResult r = t.check();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;

  t.set("tools/layering-cli-allow.txt",
        "tools/qbc/cmd_x.cpp | quant ir | prints the pipeline itself\n"
        "tools/qbc/gone.cpp | quant | was removed\n");
  r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out,
                       "layering: tools/layering-cli-allow.txt: tools/qbc/cmd_x.cpp no longer "
                       "includes qbc/ir/; drop it from its entry"))
      << r.out;
  EXPECT_TRUE(
      contains(r.out, "layering: tools/layering-cli-allow.txt: tools/qbc/gone.cpp does not exist"))
      << r.out;
  EXPECT_EQ(violations(r.out), 2) << r.out;

  t.set("tools/layering-cli-allow.txt", "tools/qbc/cmd_x.cpp | quant driver |\n");
  r = t.check();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "tools/qbc/cmd_x.cpp needs a reason")) << r.out;
  EXPECT_TRUE(contains(r.out, "lists driver, which the CLI may include anyway")) << r.out;
  EXPECT_EQ(violations(r.out), 2) << r.out;
}

TEST(Layering, PrintRulesTableComesFromCMake) {
  const RunResult r = Fixture().check("--print-rules");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "| stage | may include (its CMakeLists.txt) | policy")) << r.out;
  EXPECT_TRUE(contains(r.out, "\n| support | nothing | nothing: the bottom layer |\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "\n| ir | support, proto (src only) |  |\n")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "\n| runtime | support, mxq, runner | only support, numerics, mxq, "
                       "runner, isa, tokenizer, image: "))
      << r.out;
  EXPECT_TRUE(contains(r.out, "\n| npu | (planned: no src/npu/ yet) | never quant, ")) << r.out;
  EXPECT_TRUE(contains(r.out, "`src/ref/session.cpp` (qbc_ref_torch")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "- The CLI (`tools/qbc/`) is a shell over `driver/`: it may include "
                       "only driver, support, runtime"))
      << r.out;
  // Rows come in dependency order: support before ir before quant and ref.
  EXPECT_LT(r.out.find("| support |"), r.out.find("| ir |"));
  EXPECT_LT(r.out.find("| ir |"), r.out.find("| quant |"));
}

TEST(Layering, RulesTableInArchitectureDocIsFresh) {
  const fs::path script = ::qbc::testing::source_dir() / "tools/check_layering.sh";
  const RunResult r = ::qbc::testing::run_command("bash " + shell_quote(script) + " --print-rules");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string doc =
      ::qbc::testing::read_file(::qbc::testing::source_dir() / "docs/architecture.md");
  const std::string begin = "<!-- layering-rules:begin";
  const std::string end = "<!-- layering-rules:end -->";
  const size_t b = doc.find(begin);
  const size_t e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/architecture.md has no " << begin << " marker";
  ASSERT_NE(e, std::string::npos) << "docs/architecture.md has no " << end << " marker";
  const size_t body = doc.find('\n', b) + 1;
  ASSERT_LE(body, e);
  EXPECT_EQ(doc.substr(body, e - body), r.out)
      << "docs/architecture.md's dependency table is stale: run tools/update-docs.sh (or paste "
         "the output of tools/check_layering.sh --print-rules between the layering-rules markers)";
}

}  // namespace
}  // namespace qbc
