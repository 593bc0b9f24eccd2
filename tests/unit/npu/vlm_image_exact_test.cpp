// A VLM with an image in the prompt, end to end (docs/multimodal.md "Running with an image"),
// for each family whose tower compiles: a random LLaVA-1.5, Qwen2.5-VL, Qwen2-VL, Gemma 3 and
// Qwen3-VL (whose rows carry its DeepStack rows after each feature row, set on the evaluator
// with set_deepstack and written by the session to the deepstack io buffers) from
// the real configs compiled by the driver into one MXQ (language and vision part), the shared
// photographs encoded by the file's vision part on the executor (runtime::VisionEncoder),
// their rows spliced at the image tokens by the runtime session (NpuSession::splice; for
// Qwen2.5-VL also its M-RoPE positions of the image grid, NpuSession::set_positions), and the
// language model's logits compared with the fake-quant evaluator's over the same spliced rows
// and positions: bit for bit, for the `single` and `global8` modes, with the prompt prefilled
// in chunks of 128 and fed one token at a time, and a decode step after it. Gemma 3's image
// tokens attend to each other (HF's token-type mask): its MXQ has span programs, the session
// runs the image as one span call (the text around it token by token in the one-a-call case),
// and the evaluator's reference is forward_embeds_span over the image rows. (The vision
// part's own executor-vs-evaluator equality is unit_npu_vision_backend_test's and
// unit_npu_qwen_vision_backend_test's.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/compile.h"
#include "qbc/driver/model_loader.h"
#include "qbc/frontend/random_model.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/quant/fakequant.h"
#include "qbc/runner/mrope.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/npu_session.h"
#include "qbc/runtime/vision_encoder.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;

size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size();
}

struct Compiled {
  fs::path dir, mxq, mblt;
  config::ResolvedConfig cfg;
  driver::LoadedModel model;  // the quantized language MBLT
};

/// One family: its real config, the image token's rows per image, whether its language model
/// takes M-RoPE positions (then each image is a side x side grid of merged patches).
struct Family {
  const char* name;
  const char* config;  // under the shared folder, or the source tree's when it starts "tests/"
  int64_t tokens;      // image tokens per image
  int64_t side;        // M-RoPE: the merged grid's side; 0: 1-D positions
  int64_t head_dim;    // the language model's explicit head_dim (Gemma 3), 0: none
  bool span;           // the image is one bidirectional span (Gemma 3)
  int64_t levels;      // DeepStack levels after the feature row (Qwen3-VL), 0: none
};

const Family kFamilies[] = {
    {"llava", "model-configs-new/llava-1.5-7b-hf/config.json", 576, 0, 0, false, 0},
    {"qwen2_5_vl", "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json", 256, 16, 0, false, 0},
    {"qwen2_vl", "tests/assets/model-configs/Qwen2-VL-2B-Instruct/config.json", 256, 16, 0, false,
     0},
    {"gemma3", "model-configs-new/gemma-3-4b-it/config.json", 256, 0, 16, true, 0},
    // 2 tower blocks: the taps [5, 11, 17] of 24 scale to [0, 1], added after decoder layers 0, 1.
    {"qwen3_vl", "model-configs-new/Qwen3-VL-4B-Instruct/config.json", 196, 14, 16, false, 2},
    // Compiled at 1024 (vision.imageSize below): 2 x 2 tiles of 512 and the global view, 64
    // rows each.
    {"smolvlm", "tests/assets/model-configs/SmolVLM-256M-Instruct/config.json", 320, 0, 0, false,
     0},
    // LLaVA with a SigLIP tower over Qwen2 (llava-interleave): 27 x 27 patches of 14 at 384
    // (the last 6 pixels unread), every row kept ("full").
    {"llava_siglip", "tests/assets/model-configs/llava-interleave-qwen-0.5b-hf/config.json", 729, 0,
     0, false, 0},
};

fs::path config_path(const Family& f) {
  const std::string c = f.config;
  return c.rfind("tests/", 0) == 0 ? testing::source_dir() / c : testing::shared_dir() / c;
}

StatusOr<Compiled> compile_once(const Family& f) {
  Compiled c;
  c.dir = testing::temp_dir() / (std::string("vlm_image_exact_") + f.name);
  fs::remove_all(c.dir);
  frontend::RandomModelOptions o;
  o.config_path = config_path(f);
  o.output_dir = c.dir / "model";
  o.seed = 11;
  o.init_std = 0.15;  // attention, and so the image rows, matter
  o.overrides.num_hidden_layers = 2;
  o.overrides.hidden_size = 64;
  o.overrides.intermediate_size = 96;
  o.overrides.num_attention_heads = 4;
  o.overrides.num_key_value_heads = 2;
  o.overrides.vocab_size = 256;
  o.overrides.vision.depth = 2;
  o.overrides.vision.hidden_size = 32;
  o.overrides.vision.num_heads = 2;
  o.overrides.vision.intermediate_size = 64;                // Qwen2-VL: embed_dim x mlp_ratio 2
  if (f.side > 0) o.overrides.vision.out_hidden_size = 64;  // the merger writes the text width
  if (f.head_dim > 0) o.overrides.head_dim = f.head_dim;
  // SmolVLM's processor writes 38 marker tokens around its tiles: a vocabulary with room for
  // them beside the random tokenizer's 256 bytes.
  if (std::string(f.name) == "smolvlm") o.overrides.vocab_size = 512;
  QBC_RETURN_IF_ERROR(frontend::write_random_model(o));
  config::LoadRequest req;
  req.preset = "multimodal";
  req.sets = {"useRandomCalib=true",
              "llm.attributes.maxSequenceLength=1024",
              "llm.attributes.maxCacheLength=1024",
              "calibration.numSamples=2",
              "calibration.seqLength=32",
              "inferenceScheme=all"};
  if (std::string(f.name) == "smolvlm") req.sets.push_back("vision.imageSize=1024");
  QBC_ASSIGN_OR_RETURN(c.cfg, config::resolve(req));
  driver::CompileRequest r;
  r.model = o.output_dir.string();
  c.mxq = c.dir / "m.mxq";
  r.output = c.mxq.string();
  r.keep_intermediate = (c.dir / "kept").string();
  r.images = (testing::shared_dir() / "data/images").string();
  r.resume = false;
  QBC_ASSIGN_OR_RETURN(const driver::CompileResult res, driver::run_compile(r, c.cfg));
  if (!res.vision.compiled) return internal_error("the vision part was not compiled");
  for (const auto& e : fs::directory_iterator(c.dir / "kept"))
    if (e.path().extension() == ".mblt") c.mblt = e.path();
  if (c.mblt.empty()) return internal_error("no MBLT kept");
  QBC_ASSIGN_OR_RETURN(c.model, driver::open_model(c.mblt.string(), c.cfg));
  return c;
}

class VlmImageExact : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(config_path(GetParam()))) << config_path(GetParam());
    QBC_REQUIRE_SHARED(images, "data/images");
    auto c = compile_once(GetParam());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    compiled_ = std::make_unique<Compiled>(std::move(*c));
  }
  std::unique_ptr<Compiled> compiled_;
};

TEST_P(VlmImageExact, LogitsWithAnImageEqualTheFakeQuantEvaluatorBitForBit) {
  const Family& f = GetParam();
  const Compiled& c = *compiled_;
  const driver::LoadedModel* lm = &c.model;
  const ir::WeightReader reader = [lm](const ir::Weight& w, std::vector<float>* out) {
    return driver::read_weight(*lm, w, out);
  };
  std::vector<float> first_rows;
  for (const char* mode : {"single", "global8"}) {
    runtime::LoadOptions lo;
    lo.core_mode = mode;
    auto m = runtime::load_model(c.mxq.string(), lo);
    ASSERT_TRUE(m.ok()) << mode << ": " << m.status().to_string();
    auto enc = runtime::VisionEncoder::create(m->file, m->device->mode().scheme);
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    const int32_t image = (*enc)->image_token_id();
    auto rows = (*enc)->encode_file((testing::shared_dir() / "data/images/rocket.jpg").string());
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    const int64_t w = 64 * (1 + f.levels);  // the feature row, then each DeepStack level's
    ASSERT_EQ(rows->size(), static_cast<size_t>(f.tokens * w));
    // The vision part gives the same rows in every mode (tile invariance).
    if (first_rows.empty()) first_rows = *rows;
    EXPECT_EQ(first_difference(*rows, first_rows), rows->size()) << mode;

    // Text, the image tokens, text.
    std::vector<int32_t> prompt = {1, 85, 83, 69, 82, 58};
    prompt.insert(prompt.end(), static_cast<size_t>(f.tokens), image);
    for (int32_t t : {10, 68, 101, 115, 99, 65, 58}) prompt.push_back(t);
    const auto n = static_cast<int64_t>(prompt.size());
    std::vector<int64_t> positions;  // M-RoPE: the image on its grid
    if (f.side > 0) {
      auto p = runner::mrope_positions(prompt, image, {runner::LlmGrid{1, f.side, f.side}});
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      positions = p->positions;
      EXPECT_GT(p->delta, -f.tokens);  // the grid's positions are fewer than its tokens
      EXPECT_LT(p->delta, 0);
    }

    auto fq = quant::FakeQuantSession::create(c.model.graph, reader);
    ASSERT_TRUE(fq.ok()) << fq.status().to_string();
    std::vector<float> x;
    QBC_ASSERT_OK((*fq)->embed(prompt, &x));
    std::vector<std::vector<float>> deepstack(static_cast<size_t>(f.levels),
                                              std::vector<float>(prompt.size() * 64, 0.0f));
    for (size_t i = 0, r = 0; i < prompt.size(); ++i) {
      if (prompt[i] != image) continue;
      const auto row = rows->begin() + static_cast<std::ptrdiff_t>(r * w);
      std::copy(row, row + 64, x.begin() + i * 64);
      for (size_t j = 0; j < deepstack.size(); ++j)
        std::copy(row + 64 * (j + 1), row + 64 * (j + 2), deepstack[j].begin() + i * 64);
      ++r;
    }
    std::vector<float> want;
    if (f.levels > 0) QBC_ASSERT_OK((*fq)->set_deepstack(deepstack));
    if (f.side > 0) {
      QBC_ASSERT_OK((*fq)->forward_embeds_mrope(x, n, positions, &want));
    } else if (f.span) {  // text, the image as one span, text
      const int64_t a = 6, b = a + f.tokens, h = 64;
      std::vector<float> part;
      for (const auto& [lo, hi] : {std::pair{int64_t{0}, a}, std::pair{a, b}, std::pair{b, n}}) {
        const std::vector<float> rows_in(x.begin() + lo * h, x.begin() + hi * h);
        if (lo == a) {
          QBC_ASSERT_OK((*fq)->forward_embeds_span(rows_in, hi - lo, &part));
        } else {
          QBC_ASSERT_OK((*fq)->forward_embeds(rows_in, hi - lo, &part));
        }
        want.insert(want.end(), part.begin(), part.end());
      }
    } else {
      QBC_ASSERT_OK((*fq)->forward_embeds(x, n, &want));
    }

    // Prefill in chunks of 128 (the compiled chunk; Gemma 3's is raised to its 256 image tokens).
    auto npu = runtime::NpuSession::create(m->device, 0);
    QBC_ASSERT_OK(npu);
    EXPECT_EQ((*npu)->has_span_program(), f.span) << mode;
    EXPECT_EQ(m->device->bundle().chunk, f.span ? f.tokens : 128) << mode;
    const auto start = [&]() {
      (*npu)->reset();
      QBC_ASSERT_OK((*npu)->splice(image, *rows));
      if (f.side > 0) QBC_ASSERT_OK((*npu)->set_positions(positions));
    };
    start();
    std::vector<float> got;
    QBC_ASSERT_OK((*npu)->forward(prompt, &got));
    EXPECT_EQ((*npu)->rows_pending(), 0);
    EXPECT_EQ((*npu)->positions_pending(), 0);
    EXPECT_EQ(first_difference(got, want), got.size())
        << mode << ", chunks of 128: first difference at " << first_difference(got, want);
    // A decode step after the image (M-RoPE: at the largest position + 1).
    std::vector<float> want_next, got_next;
    QBC_ASSERT_OK((*fq)->forward({42}, &want_next));
    QBC_ASSERT_OK((*npu)->forward({42}, &got_next));
    EXPECT_EQ(first_difference(got_next, want_next), got_next.size()) << mode << ", decode";

    // One token a call: the splice and the positions carry over calls (a span stays one call).
    start();
    std::vector<float> one_by_one;
    for (size_t i = 0; i < prompt.size();) {
      size_t e = i + 1;
      if (f.span && prompt[i] == image)
        while (e < prompt.size() && prompt[e] == image) ++e;
      std::vector<float> l;
      QBC_ASSERT_OK(
          (*npu)->forward(std::vector<int32_t>(prompt.begin() + i, prompt.begin() + e), &l));
      one_by_one.insert(one_by_one.end(), l.begin(), l.end());
      i = e;
    }
    EXPECT_EQ(first_difference(one_by_one, want), want.size())
        << mode << ", one token a call: first difference at " << first_difference(one_by_one, want);

    // The span matters: the causal evaluator's logits differ from them.
    if (f.span) {
      auto causal = quant::FakeQuantSession::create(c.model.graph, reader);
      ASSERT_TRUE(causal.ok()) << causal.status().to_string();
      std::vector<float> causal_logits;
      QBC_ASSERT_OK((*causal)->forward_embeds(x, n, &causal_logits));
      EXPECT_NE(first_difference(causal_logits, want), want.size()) << mode;
      // A span longer than the compiled chunk is refused, not split.
      (*npu)->reset();
      const std::vector<float> too_long(static_cast<size_t>((f.tokens + 1) * 64), 0.25f);
      const Status s = (*npu)->forward_embeds_span(too_long, f.tokens + 1, nullptr);
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
      EXPECT_NE(s.message().find("maxCoreDataLength"), std::string::npos) << s.to_string();
      // An image split across forward() calls is refused at the call that continues it.
      start();
      std::vector<float> l;
      QBC_ASSERT_OK((*npu)->forward(std::vector<int32_t>(prompt.begin(), prompt.begin() + 16), &l));
      const Status split =
          (*npu)->forward(std::vector<int32_t>(prompt.begin() + 16, prompt.end()), &l);
      EXPECT_EQ(split.code(), Code::kInvalidArgument) << split.to_string();
      EXPECT_NE(split.message().find("in one call"), std::string::npos) << split.to_string();
      EXPECT_EQ((*npu)->rows_pending(), f.tokens - 10) << "the refused call consumed nothing";
    }
    // DeepStack matters: the same feature rows with zero DeepStack rows give other logits.
    if (f.levels > 0) {
      std::vector<float> flat = *rows;
      for (int64_t r = 0; r < f.tokens; ++r)
        std::fill(flat.begin() + r * w + 64, flat.begin() + (r + 1) * w, 0.0f);
      (*npu)->reset();
      QBC_ASSERT_OK((*npu)->splice(image, flat));
      QBC_ASSERT_OK((*npu)->set_positions(positions));
      std::vector<float> no_deepstack;
      QBC_ASSERT_OK((*npu)->forward(prompt, &no_deepstack));
      EXPECT_NE(first_difference(no_deepstack, want), want.size()) << mode;
      // Rows of the hidden size alone are refused on a DeepStack model.
      const std::vector<float> narrow(static_cast<size_t>(f.tokens * 64), 0.5f);
      const Status s = (*npu)->splice(image, narrow);
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
      EXPECT_NE(s.message().find("DeepStack"), std::string::npos) << s.to_string();
    }
    // The image matters: without the splice the logits differ.
    (*npu)->reset();
    std::vector<float> plain;
    QBC_ASSERT_OK((*npu)->forward(prompt, &plain));
    EXPECT_NE(first_difference(plain, want), want.size()) << mode;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, VlmImageExact, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<Family>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace qbc
