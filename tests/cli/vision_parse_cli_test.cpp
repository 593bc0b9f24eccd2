// `qbc parse` on a Qwen2.5-VL folder writes the vision MBLT next to the language one (M-RoPE
// through host tables), the language MBLT runs a text prompt, and `qbc compile` of the vision
// MBLT exits 3 naming its first vision op.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "qbc/frontend/random_model.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run_qbc;
using testing::shell_quote;

TEST(VisionParseCli, WritesBothGraphsRunsTextAndRefusesVisionCompileNamingTheOp) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
  const fs::path dir = testing::temp_dir() / "vision_parse_cli";
  fs::remove_all(dir);
  frontend::RandomModelOptions o;
  o.config_path = config;
  o.output_dir = dir / "vlm";
  o.overrides.vision.depth = 2;
  o.overrides.vision.hidden_size = 32;
  o.overrides.vision.num_heads = 2;
  o.overrides.vision.intermediate_size = 48;
  o.overrides.vision.out_hidden_size = 24;
  o.overrides.vision.fullatt_block_indexes = std::vector<int64_t>{1};
  o.overrides.num_hidden_layers = 2;
  o.overrides.hidden_size = 24;
  o.overrides.intermediate_size = 32;
  o.overrides.num_attention_heads = 2;
  o.overrides.num_key_value_heads = 1;
  o.overrides.vocab_size = 300;
  QBC_ASSERT_OK(frontend::write_random_model(o));

  const fs::path out = dir / "m.mblt";
  const auto p = run_qbc("parse " + shell_quote(dir / "vlm") + " -o " + shell_quote(out));
  EXPECT_EQ(p.exit_code, 0) << p.err;
  const fs::path vision = dir / "m.vision.mblt";
  ASSERT_TRUE(fs::exists(vision)) << p.out << p.err;
  ASSERT_TRUE(fs::exists(out)) << p.out << p.err;

  const auto i = run_qbc("inspect --graph " + shell_quote(vision));
  EXPECT_EQ(i.exit_code, 0) << i.err;
  for (const char* want : {"full_attention", "rope_table", "merge_rows", "gelu", "segments",
                           "visual.merger.mlp.2.weight", "448x448"}) {
    EXPECT_TRUE(contains(i.out, want)) << want << "\n" << i.out;
  }
  // The language graph: M-RoPE through host tables (docs/multimodal.md, "The language graph").
  const auto l = run_qbc("inspect --graph " + shell_quote(out));
  EXPECT_EQ(l.exit_code, 0) << l.err;
  for (const char* want : {"%rope_cos", "%rope_sin", "blk.1.attn.k_rope = rope_table",
                           "model.layers.1.self_attn.q_proj.bias"}) {
    EXPECT_TRUE(contains(l.out, want)) << want << "\n" << l.out;
  }
  EXPECT_FALSE(contains(l.out, "= rope(")) << l.out;
  // A text prompt runs on the float runtime (all three position streams equal).
  const auto r = run_qbc("run " + shell_quote(out) + " -p \"Once upon\" -n 4 --ignore-eos");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  const auto c = run_qbc("compile " + shell_quote(vision) + " --use-random-calib -o " +
                         shell_quote(dir / "v.mxq"));
  EXPECT_EQ(c.exit_code, 3) << c.err;
  // The compile's own check names the first tower op and says to compile the folder (the
  // configuration step does not read the recorded VLM config.json for a graph without a KV
  // cache).
  EXPECT_TRUE(contains(c.err, "node 'vis.blk.0.attn.q_rope' (rope_table)")) << c.err;
  EXPECT_TRUE(contains(c.err, "compile the VLM folder")) << c.err;
  EXPECT_FALSE(contains(c.err, "Qwen2_5_VLForConditionalGeneration")) << c.err;
}

}  // namespace
}  // namespace qbc
