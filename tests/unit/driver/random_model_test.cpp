// `qbc random-model`'s driver function (qbc/driver/random_model.h): the request checks, the
// dtype taken from the config, the overrides, and what it reports about the written files.
#include "qbc/driver/random_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;
using qbc::testing::contains;
using qbc::testing::read_file;
using qbc::testing::temp_dir;
using qbc::testing::write_file;

RandomModelRequest tiny(const fs::path& out) {
  RandomModelRequest r;
  r.tiny = true;
  r.output = out.string();
  return r;
}

TEST(RandomModel, NeedsExactlyOneOfConfigAndTiny) {
  RandomModelRequest r = tiny(temp_dir() / "m");
  r.config = "config.json";
  EXPECT_EQ(write_random_model(r).status().code(), Code::kInvalidArgument);
  r.tiny = false;
  r.config.clear();
  EXPECT_EQ(write_random_model(r).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(fs::exists(temp_dir() / "m"));
}

TEST(RandomModel, RefusesANonEmptyFolderWithoutForce) {
  const fs::path dir = temp_dir();
  write_file(dir / "keep.txt", "x");
  auto res = write_random_model(tiny(dir));
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(res.status().message(), "--force")) << res.status().message();
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  RandomModelRequest forced = tiny(dir);
  forced.force = true;
  QBC_ASSERT_OK(write_random_model(forced));
  EXPECT_EQ(read_file(dir / "keep.txt"), "x");
}

TEST(RandomModel, ReportsWhatItWrote) {
  const fs::path dir = temp_dir() / "tiny";
  RandomModelRequest r = tiny(dir);
  r.seed = 7;
  r.overrides.num_hidden_layers = 1;
  auto res = write_random_model(r);
  QBC_ASSERT_OK(res);
  const uint64_t bytes =
      fs::file_size(dir / "model.safetensors") + fs::file_size(dir / "config.json");
  EXPECT_EQ(res->bytes, bytes);
  EXPECT_EQ(res->dtype, "F32");
  EXPECT_EQ(res->seed, 7u);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir / "config.json"))["num_hidden_layers"], 1);
  // One layer of the tiny Llama (hidden 64, 4 heads of 16, 2 kv heads, intermediate 128) with
  // untied 256-row embeddings: q,k,v,o = 64*64 + 2*64*32 + 64*64, mlp 3*64*128, two norms,
  // the final norm, embed and lm_head 2*256*64.
  const int64_t layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64;
  EXPECT_EQ(res->parameters, layer + 64 + 2 * 256 * 64);
  EXPECT_EQ(res->tensors, 9u + 3u);
  const nlohmann::json j = nlohmann::json::parse(random_model_json(*res));
  EXPECT_EQ(j["bytes"], bytes);
  EXPECT_EQ(j["output_dir"], dir.string());
  const std::string text = random_model_text(*res);
  EXPECT_EQ(text.rfind(dir.string() + ": ", 0), 0u) << text;
  EXPECT_TRUE(contains(text, ", 12 tensors, " + std::to_string(res->parameters) +
                                 " parameters (F32), " + std::to_string(bytes) + " bytes in "))
      << text;
}

TEST(RandomModel, DtypeFollowsTheConfigUnlessGiven) {
  const fs::path src = temp_dir();
  QBC_ASSERT_OK(write_random_model(tiny(src / "base")));
  nlohmann::json cfg = nlohmann::json::parse(read_file(src / "base" / "config.json"));
  cfg["torch_dtype"] = "bfloat16";
  write_file(src / "bf16.json", cfg.dump());
  RandomModelRequest r;
  r.config = (src / "bf16.json").string();
  r.output = (src / "a").string();
  auto a = write_random_model(r);
  QBC_ASSERT_OK(a);
  EXPECT_EQ(a->dtype, "BF16");
  r.output = (src / "b").string();
  r.dtype = "f16";
  auto b = write_random_model(r);
  QBC_ASSERT_OK(b);
  EXPECT_EQ(b->dtype, "F16");
  r.output = (src / "c").string();
  r.dtype = "f64";
  EXPECT_EQ(write_random_model(r).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace qbc::driver
