// `qbc parse` on a random Gemma 3 folder (written from the real gemma-3-4b-it config, tower
// shrunk) writes the SigLIP vision MBLT next to the Gemma 3 text MBLT; the vision graph has the
// tanh GELU and the 4 x 4 average pool, the random tokenizer has the image tokens, the text MBLT
// runs a prompt, and `qbc compile` of the vision MBLT exits 3 naming its first vision op.
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

TEST(Gemma3ParseCli, WritesBothGraphsWithThePoolAndTheImageTokens) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/gemma-3-4b-it/config.json");
  const fs::path dir = testing::temp_dir() / "gemma3_parse_cli";
  fs::remove_all(dir);
  frontend::RandomModelOptions o;
  o.config_path = config;
  o.output_dir = dir / "vlm";
  o.overrides.vision.depth = 2;
  o.overrides.vision.hidden_size = 32;
  o.overrides.vision.num_heads = 2;
  o.overrides.vision.intermediate_size = 43;
  o.overrides.num_hidden_layers = 2;
  o.overrides.hidden_size = 24;
  o.overrides.intermediate_size = 32;
  o.overrides.num_attention_heads = 2;
  o.overrides.num_key_value_heads = 1;
  o.overrides.head_dim = 12;
  o.overrides.vocab_size = 300;
  QBC_ASSERT_OK(frontend::write_random_model(o));
  // The image tokens moved to the top of the 300-token vocabulary, named as Gemma 3's are.
  const std::string tok = testing::read_file(dir / "vlm" / "tokenizer.json");
  EXPECT_TRUE(contains(tok, "\"<image_soft_token>\"")) << "tokenizer.json";
  EXPECT_TRUE(contains(tok, "\"<start_of_image>\""));
  EXPECT_TRUE(contains(tok, "\"<end_of_image>\""));
  const std::string cfg = testing::read_file(dir / "vlm" / "config.json");
  EXPECT_TRUE(contains(cfg, "\"image_token_index\": 299")) << cfg;
  EXPECT_TRUE(contains(cfg, "\"boi_token_index\": 298")) << cfg;

  const fs::path out = dir / "m.mblt", vision = dir / "m.vision.mblt";
  const auto p = run_qbc("parse " + shell_quote(dir / "vlm") + " -o " + shell_quote(out));
  EXPECT_EQ(p.exit_code, 0) << p.err;
  ASSERT_TRUE(fs::exists(vision));
  ASSERT_TRUE(fs::exists(out));
  const auto i = run_qbc("inspect --graph " + shell_quote(vision));
  EXPECT_EQ(i.exit_code, 0) << i.err;
  EXPECT_TRUE(contains(i.out, "avg_pool")) << i.out;
  EXPECT_TRUE(contains(i.out, "full_attention")) << i.out;
  const auto r = run_qbc("run " + shell_quote(out) + " -p \"Once upon\" -n 4 --ignore-eos");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto c = run_qbc("compile " + shell_quote(vision) + " --use-random-calib -o " +
                         shell_quote(dir / "v.mxq"));
  EXPECT_EQ(c.exit_code, 3) << c.err;
  EXPECT_TRUE(contains(c.err, "no ARIES backend lowering")) << c.err;
}

}  // namespace
}  // namespace qbc
