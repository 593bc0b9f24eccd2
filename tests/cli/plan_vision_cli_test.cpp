// `qbc plan` on vision-language configs (docs/cli.md, docs/multimodal.md): the vision part is
// reported on its own line, marked as an estimate, and in --json; not silently left out.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run_qbc;
using testing::shell_quote;

TEST(PlanVisionCliTest, Gemma3PlansTheTextModelAndReportsTheVisionTower) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/gemma-3-4b-it");
  const auto r = run_qbc("plan " + shell_quote(dir) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("vision")) << r.out;
  const auto& v = j["vision"];
  EXPECT_TRUE(v["estimate"].get<bool>());
  EXPECT_EQ(v["tower"], "SigLIP");
  EXPECT_EQ(v["layers"], 27);
  EXPECT_EQ(v["tokens_per_image"], 256);  // config.json's mm_tokens_per_image
  EXPECT_EQ(v["image_size"], 896);
  // bfloat16 checkpoint: two bytes a parameter; 8-bit weights: one.
  EXPECT_EQ(v["source_bytes"].get<int64_t>(), 2 * v["weight_bytes"].get<int64_t>());
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_TRUE(v["fits_with_text"].get<bool>());
  EXPECT_EQ(v["rows"], 4096);  // (896 / 14)^2 patches, no CLS
  EXPECT_EQ(v["dram_bytes"].get<int64_t>(),
            v["weight_bytes"].get<int64_t>() + v["activation_bytes"].get<int64_t>());
  // Every scheme: the tower's time on its cores and the TTFT of the prompt with the image.
  ASSERT_FALSE(j["schemes"].empty());
  double single_ms = 0, global8_ms = 0;
  for (const auto& s : j["schemes"]) {
    EXPECT_GT(s["vision_ms"].get<double>(), 0.0) << s.dump();
    EXPECT_EQ(s["image_prompt_tokens"].get<int64_t>(), s["prompt_tokens"].get<int64_t>() + 256);
    EXPECT_GT(s["ttft_with_image_ms"].get<double>(),
              s["ttft_ms"].get<double>() + s["vision_ms"].get<double>())
        << "the longer prompt's prefill takes longer: " << s.dump();
    if (s["scheme"] == "single") single_ms = s["vision_ms"].get<double>();
    if (s["scheme"] == "global8") global8_ms = s["vision_ms"].get<double>();
  }
  EXPECT_GT(single_ms, global8_ms);  // the tower is MAC-bound: eight cores are faster
  // The image's 256 tokens attend to each other: span programs, a chunk that holds an image.
  EXPECT_TRUE(j["span_programs"].get<bool>());
  EXPECT_EQ(j["prefill_chunk"], 256);
}

TEST(PlanVisionCliTest, ExitsFourWhenOnlyTheVisionPartDoesNotFit) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/gemma-3-4b-it");
  const auto first = run_qbc("plan " + shell_quote(dir) + " --json");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto j = nlohmann::json::parse(first.out);
  const int64_t text = j["memory"]["dram"]["total_bytes"].get<int64_t>();
  const int64_t vision = j["vision"]["dram_bytes"].get<int64_t>();
  // A device with room for the language model and half the vision part.
  const fs::path target = testing::temp_dir() / "plan_vision_small.yaml";
  // The rest of the profile as aries-rb's (a smaller SRAM would change the tiling).
  testing::write_file(target,
                      "name: small-vlm\ndescription: room for the text model only\n"
                      "clusters: 2\ncoresPerCluster: 4\nsramBytesPerCore: 4194304\n"
                      "dramBytes: " +
                          std::to_string(text + vision / 2) +
                          "\ndramBandwidthGbps: 51.2\nclockMhz: 1000\n"
                          "int8MacsPerCyclePerCore: 5000\nint16MacsPerCyclePerCore: 1250\n"
                          "vectorFp16OpsPerCyclePerCore: 128\ndmaAlignBytes: 64\n"
                          "dramReserveBytes: 536870912\n");
  const auto r =
      run_qbc("plan " + shell_quote(dir) + " --target-profile " + shell_quote(target.string()));
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "the language model fits")) << r.err;
  EXPECT_TRUE(contains(r.err, "with the vision part")) << r.err;
  EXPECT_TRUE(contains(r.out, "DOES NOT FIT")) << r.out;
}

TEST(PlanVisionCliTest, LlavaPlansItsLlamaLanguageModelAndPrintsTheVisionLine) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/llava-1.5-7b-hf");
  const auto r = run_qbc("plan " + shell_quote(dir));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "vision (estimate")) << r.out;
  EXPECT_TRUE(contains(r.out, "CLIP ViT 24 layers x 1024")) << r.out;
  EXPECT_TRUE(contains(r.out, "576 tokens per 336x336 image")) << r.out;  // (336 / 14)^2
  // The language model (Vicuna-7B from LlamaConfig's defaults under the sparse text_config)
  // is planned: text_config's 4096 positions.
  EXPECT_TRUE(contains(r.out, "fits in memory")) << r.out;
  EXPECT_TRUE(contains(r.out, "model trained for 4096 positions")) << r.out;
  EXPECT_TRUE(contains(r.out, "prefill chunk 128\n")) << r.out;  // causal: no span programs
}

// Qwen3-VL-4B: the language model (Qwen3 under text_config: 36 layers of width 2560, 8 KV
// heads of 128, interleaved M-RoPE) is planned from the config, with the vision part and the
// time to first token with an image. `qbc parse` of a random one writes the language graph
// (interleaved M-RoPE recorded in its metadata) and the tower's graph (its learned positions a
// host input, its DeepStack features outputs after the image features).
TEST(PlanVisionCliTest, Qwen3VlPlansItsLanguageModelAndTheVisionPart) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/Qwen3-VL-4B-Instruct");
  const auto r = run_qbc("plan " + shell_quote(dir) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["fits"].get<bool>());
  ASSERT_TRUE(j.contains("vision")) << r.out;
  EXPECT_EQ(j["vision"]["tower"], "Qwen3-VL ViT");
  EXPECT_EQ(j["vision"]["tokens_per_image"], 196);  // (448 / 32)^2
  EXPECT_TRUE(j["vision"]["fits_with_text"].get<bool>());
  // K and V of 36 layers x 8 heads x 128 at 8 bits for the 4096 planned positions.
  EXPECT_EQ(j["memory"]["dram"]["kv_bytes"].get<int64_t>(), int64_t{36} * 8 * 128 * 2 * 4096);
  for (const auto& s : j["schemes"]) {
    EXPECT_GT(s["vision_ms"].get<double>(), 0.0) << s.dump();
    EXPECT_EQ(s["image_prompt_tokens"].get<int64_t>(), s["prompt_tokens"].get<int64_t>() + 196);
  }
  // A random Qwen3-VL shrunk by the language flags (which reach text_config, mrope_section
  // rescaled to the new head_dim) and the tower flags (the DeepStack taps [5, 11, 17] of 24
  // blocks scaled to [0, 1] of 2) parses both graphs.
  const fs::path out = testing::temp_dir() / "qwen3vl_parse";
  const auto made =
      run_qbc("random-model " + shell_quote(dir / "config.json") + " -o " + shell_quote(out) +
              " --layers 1 --hidden 64 --heads 2 --kv-heads 1 --head-dim 32"
              " --intermediate 64 --vocab 256 --vision-layers 2 --vision-hidden 32"
              " --vision-heads 2 --vision-intermediate 64");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const auto cfg = nlohmann::json::parse(testing::read_file(out / "config.json"));
  EXPECT_EQ(cfg["text_config"]["num_hidden_layers"], 1);
  EXPECT_EQ(cfg["text_config"]["rope_scaling"]["mrope_section"], nlohmann::json({6, 5, 5}));
  EXPECT_EQ(cfg["vision_config"]["deepstack_visual_indexes"], nlohmann::json({0, 1}));
  const auto p = run_qbc("parse " + shell_quote(out) + " -o " + shell_quote(out / "m.mblt"));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  ASSERT_TRUE(fs::exists(out / "m.mblt"));
  ASSERT_TRUE(fs::exists(out / "m.vision.mblt"));
  const auto text = run_qbc("inspect " + shell_quote(out / "m.mblt") + " --graph");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "meta \"mrope.interleaved\" \"1\"")) << text.out.substr(0, 2000);
  const auto vision = run_qbc("inspect " + shell_quote(out / "m.vision.mblt") + " --graph");
  ASSERT_EQ(vision.exit_code, 0) << vision.err;
  for (const char* want : {"%embed_base", "%deepstack_features.1", "visual.pos_embed",
                           "\"vision.deepstack_layers\" \"0,1\""})
    EXPECT_TRUE(contains(vision.out, want)) << want << "\n" << vision.out.substr(0, 3000);
}

TEST(PlanVisionCliTest, TextModelsHaveNoVisionLine) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Qwen2.5-0.5B-Instruct");
  const auto r = run_qbc("plan " + shell_quote(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "vision")) << r.out;
  EXPECT_FALSE(contains(r.out, "with one image")) << r.out;
}

}  // namespace
}  // namespace qbc
