// `qbc compile` of a VLM folder (docs/multimodal.md "One file"): a random LLaVA-1.5 from the
// real config compiles into one MXQ whose vision section is a complete MXQ of the tower's
// feature bundle; the reader loads it, runs it from the file alone, and refuses (exit 2) a
// vision part of another compile, a corrupted vision section and a truncated file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "image_writers.h"
#include "qbc/calib/npy.h"
#include "qbc/frontend/clip_vision.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "qbc/mxq/container.h"
#include "qbc/mxq/model_file.h"
#include "qbc/runtime/feature_session.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/vision_encoder.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run_qbc;
using testing::shell_quote;

/// The `result` of the last `event` event ("summary", "result") of a --log-format json run's
/// stderr (null when there is none).
nlohmann::json last_event(const std::string& err, const std::string& event) {
  nlohmann::json last;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("event", "") == event && j.contains("result"))
      last = j["result"];
  }
  return last;
}

nlohmann::json summary_of(const std::string& err) { return last_event(err, "summary"); }

class VlmCompile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path config = testing::shared_dir() / "model-configs-new/llava-1.5-7b-hf/config.json";
    images_ = testing::shared_dir() / "data/images";
    if (!fs::exists(config) || !fs::exists(images_)) return;
    dir_ = testing::temp_dir() / "vlm_compile";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_ = dir_ / "llava";
    const auto made =
        run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(model_) +
                " --layers 2 --hidden 64 --intermediate 128 --heads 4 --kv-heads 2 --vocab 512"
                " --vision-layers 3 --vision-hidden 64 --vision-intermediate 128 --vision-heads 4"
                " --dtype f32 --seed 3");
    if (made.exit_code != 0) {
      setup_error_ = made.err;
      return;
    }
    const std::string common =
        " --preset multimodal --use-random-calib --no-resume --set calibration.numSamples=2"
        " --set calibration.seqLength=32 --context 1024 --log-format json";
    real_ = run_qbc("compile " + shell_quote(model_) + " -o " + shell_quote(dir_ / "a.mxq") +
                    " --images " + shell_quote(images_) + common);
    synthetic_ =
        run_qbc("compile " + shell_quote(model_) + " -o " + shell_quote(dir_ / "b.mxq") + common);
  }

  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/llava-1.5-7b-hf/config.json");
    QBC_REQUIRE_SHARED(images, "data/images");
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    ASSERT_EQ(real_.exit_code, 0) << real_.out << real_.err;
    ASSERT_EQ(synthetic_.exit_code, 0) << synthetic_.out << synthetic_.err;
  }

  static fs::path dir_, model_, images_;
  static std::string setup_error_;
  static testing::RunResult real_, synthetic_;
};

fs::path VlmCompile::dir_, VlmCompile::model_, VlmCompile::images_;
std::string VlmCompile::setup_error_;
testing::RunResult VlmCompile::real_, VlmCompile::synthetic_;

/// The tower's inputs for the image at `path`, from what the MXQ carries: the preprocessing
/// asset of the language part and the embed_base asset of the vision part.
std::vector<std::vector<float>> tower_inputs(const mxq::LoadedModel& m, const fs::path& path) {
  const mxq::pb::VisionPart& v = m.meta.vision();
  const mxq::HostAsset* pre = m.asset(v.preprocessor_asset());
  const mxq::HostAsset* base = m.vision->asset(mxq::vision_input_asset("embed_base"));
  EXPECT_NE(pre, nullptr);
  EXPECT_NE(base, nullptr);
  if (pre == nullptr || base == nullptr) return {};
  auto spec = image::parse_preprocess_spec(pre->bytes, "preprocessor_config.json");
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  auto img = image::decode_file(path.string());
  EXPECT_TRUE(img.ok()) << img.status().to_string();
  if (!spec.ok() || !img.ok()) return {};
  auto px = image::preprocess(*img, *spec, path.string());
  EXPECT_TRUE(px.ok()) << px.status().to_string();
  if (!px.ok()) return {};
  std::vector<float> embed(base->bytes.size() / sizeof(float));
  std::memcpy(embed.data(), base->bytes.data(), base->bytes.size());
  return {frontend::clip_patch_rows(px->values, v.image_size(), v.patch_size()), embed};
}

TEST_F(VlmCompile, TheMxqCarriesTheVisionPartAndItRunsFromTheFile) {
  const nlohmann::json s = summary_of(real_.err);
  ASSERT_TRUE(s.contains("vision")) << real_.err;
  EXPECT_TRUE(s["vision"]["compiled"].get<bool>());
  EXPECT_EQ(s["vision"]["feature_rows"], 577);  // 1 + (336 / 14)^2
  std::vector<std::string> stages;
  for (const auto& st : s["stages"]) stages.push_back(st.value("name", ""));
  EXPECT_EQ(stages,
            (std::vector<std::string>{"parse", "fit", "quantize", "backend", "vision", "write"}));
  EXPECT_EQ(s["vision"]["feature_width"], 64);  // the language model's hidden size
  EXPECT_FALSE(s["vision"]["synthetic_calibration"].get<bool>());
  EXPECT_GE(s["vision"]["calibration_images"].get<int>(), 4);
  EXPECT_TRUE(summary_of(synthetic_.err)["vision"]["synthetic_calibration"].get<bool>());
  EXPECT_TRUE(contains(synthetic_.err, "synthetic images")) << synthetic_.err;

  auto m = mxq::load_model((dir_ / "a.mxq").string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_NE(m->vision, nullptr);
  const mxq::pb::VisionPart& v = m->meta.vision();
  EXPECT_EQ(v.model_hash(), m->vision->meta.model_hash());
  EXPECT_EQ(v.family(), "llava");
  EXPECT_EQ(v.tokens_per_image(), 576);
  EXPECT_EQ(v.drop_front_rows(), 1);
  EXPECT_EQ(v.image_token_id(), 511);  // moved to the top id of the shrunk vocabulary
  EXPECT_EQ(m->vision->bundle->kind, isa::BundleKind::kFeatures);
  EXPECT_EQ(m->vision->bundle->vocab, m->bundle->hidden);
  const mxq::HostAsset* pre = m->asset("preprocessor_config.json");
  ASSERT_NE(pre, nullptr);
  EXPECT_EQ(pre->bytes, testing::read_file(model_ / "preprocessor_config.json"));
  const auto shown = run_qbc("inspect " + shell_quote(dir_ / "a.mxq"));
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(contains(shown.out,
                       "image 336x336 (patch 14) -> 577 x 64 features, 576 spliced "
                       "at token 511"))
      << shown.out;

  // The vision bundle runs from the file: features for two photographs, finite and different.
  std::vector<fs::path> photos;
  for (const auto& e : fs::directory_iterator(images_)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".png" || ext == ".jpg" || ext == ".jpeg") photos.push_back(e.path());
  }
  std::sort(photos.begin(), photos.end());
  ASSERT_GE(photos.size(), 2u);
  runtime::DeviceOptions dopt;
  dopt.scheme = m->vision->bundle->modes[0].scheme;
  auto session = runtime::FeatureSession::create(m->vision->bundle, dopt);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  std::vector<float> f[2];
  for (int i = 0; i < 2; ++i) {
    const auto inputs = tower_inputs(*m, photos[static_cast<size_t>(i)]);
    ASSERT_EQ(inputs.size(), 2u);
    QBC_ASSERT_OK((*session)->forward(inputs, &f[i]));
    ASSERT_EQ(f[i].size(), static_cast<size_t>(577 * 64));
    for (float x : f[i]) ASSERT_TRUE(std::isfinite(x));
  }
  EXPECT_NE(f[0], f[1]) << "two photographs gave the same features";
}

// The vision section of b.mxq (calibrated on synthetic images) in a.mxq's file, with every
// digest and the model hash made consistent: only the pair check can refuse it.
TEST_F(VlmCompile, AVisionPartOfAnotherCompileExitsTwoNamingTheMismatch) {
  auto a = mxq::Container::open((dir_ / "a.mxq").string());
  auto b = mxq::Container::open((dir_ / "b.mxq").string());
  ASSERT_TRUE(a.ok() && b.ok());
  const auto vision_of = [](const mxq::Container& c) {
    for (size_t i = 0; i < c.sections().size(); ++i)
      if (c.sections()[i].kind == static_cast<uint32_t>(mxq::SectionKind::kVision)) return i;
    return c.sections().size();
  };
  const size_t va = vision_of(*a), vb = vision_of(*b);
  ASSERT_LT(va, a->sections().size());
  ASSERT_LT(vb, b->sections().size());
  ASSERT_NE(a->bytes(va), b->bytes(vb)) << "the two compiles made the same vision part";
  std::vector<mxq::SectionData> sections;
  std::string hash_input;
  for (size_t i = 1; i < a->sections().size(); ++i) {
    mxq::SectionData d;
    d.entry = a->sections()[i];
    d.bytes = i == va ? b->bytes(vb) : a->bytes(i);
    const mxq::Digest dg = mxq::digest_of(d.bytes.data(), d.bytes.size());
    hash_input.append(reinterpret_cast<const char*>(dg.data()), dg.size());
    sections.push_back(d);
  }
  mxq::HeaderInfo h = a->header();
  h.model_hash = mxq::digest_of(hash_input.data(), hash_input.size());
  mxq::pb::Meta meta;
  ASSERT_TRUE(meta.ParseFromString(std::string(a->bytes(0))));
  meta.set_model_hash(mxq::digest_hex(h.model_hash));
  const std::string meta_bytes = meta.SerializeAsString();
  mxq::SectionData md;
  md.entry = a->sections()[0];
  md.bytes = meta_bytes;
  sections.insert(sections.begin(), md);
  const fs::path mixed = dir_ / "mixed.mxq";
  testing::write_file(mixed, mxq::write_container(h, sections));
  const auto r = run_qbc("inspect " + shell_quote(mixed));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "different compiles")) << r.err;
  EXPECT_TRUE(contains(r.err, "vision")) << r.err;
  // The same rebuild with a's own vision section loads: the refusal is the pair check's.
  sections[va].bytes = a->bytes(va);
  hash_input.clear();
  for (size_t i = 1; i < sections.size(); ++i) {
    const mxq::Digest dg = mxq::digest_of(sections[i].bytes.data(), sections[i].bytes.size());
    hash_input.append(reinterpret_cast<const char*>(dg.data()), dg.size());
  }
  h.model_hash = mxq::digest_of(hash_input.data(), hash_input.size());
  meta.set_model_hash(mxq::digest_hex(h.model_hash));
  const std::string meta_again = meta.SerializeAsString();
  sections[0].bytes = meta_again;
  const fs::path same = dir_ / "same.mxq";
  testing::write_file(same, mxq::write_container(h, sections));
  const auto ok = run_qbc("inspect " + shell_quote(same));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// The image-marking fields of the vision metadata are checked on load (exit 2 naming them): a
// prompt token or a token around the image outside the embedding, more than 64 tokens around
// an image, a feature divisor that is negative or not finite. The file is a.mxq with only its
// metadata section changed (the model hash covers the other sections).
TEST_F(VlmCompile, BadImageMarkingMetadataExitsTwo) {
  auto a = mxq::Container::open((dir_ / "a.mxq").string());
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  mxq::pb::Meta meta;
  ASSERT_TRUE(meta.ParseFromString(std::string(a->bytes(0))));
  ASSERT_TRUE(meta.has_vision());
  struct Case {
    const char* label;
    std::function<void(mxq::pb::VisionPart&)> edit;
    const char* says;
  };
  const Case cases[] = {
      {"prompt", [](mxq::pb::VisionPart& v) { v.set_prompt_token_id(100000); },
       "image prompt token id 100000"},
      {"prefix", [](mxq::pb::VisionPart& v) { v.add_image_prefix_ids(-3); },
       "token id -3 around an image"},
      {"suffix", [](mxq::pb::VisionPart& v) { v.add_image_suffix_ids(512); },
       "token id 512 around an image"},
      {"many",
       [](mxq::pb::VisionPart& v) {
         for (int i = 0; i < 65; ++i) v.add_image_prefix_ids(1);
       },
       "(at most 64)"},
      {"divisor", [](mxq::pb::VisionPart& v) { v.set_feature_divisor(-2.0); },
       "feature divisor -2"},
      {"nan", [](mxq::pb::VisionPart& v) { v.set_feature_divisor(std::nan("")); },
       "feature divisor nan"},
      // DeepStack levels the language model (LLaVA: none) does not take.
      {"deepstack", [](mxq::pb::VisionPart& v) { v.set_deepstack_levels(2); },
       "the vision part gives 2 DeepStack levels"},
      {"negative_deepstack", [](mxq::pb::VisionPart& v) { v.set_deepstack_levels(-1); },
       "the vision part gives -1 DeepStack levels"},
      // Idefics3's tiles and image span on a file whose vision program is one call per image.
      {"tiles", [](mxq::pb::VisionPart& v) { v.set_tiles_per_side(2); },
       "576 image tokens are not 5 call(s) of 577 feature rows less 1 dropped"},
      {"many_tiles", [](mxq::pb::VisionPart& v) { v.set_tiles_per_side(100000); },
       "100000 tiles per side (0 to 64)"},
      {"big_tiles", [](mxq::pb::VisionPart& v) { v.set_tiles_per_side(60); },
       "60 tiles of 336 pixels per side make an image larger than 16384"},
      {"span_count", [](mxq::pb::VisionPart& v) { v.add_image_span_ids(v.image_token_id()); },
       "the image span holds 1 image tokens, not the 576"},
      {"span_id", [](mxq::pb::VisionPart& v) { v.add_image_span_ids(-5); },
       "token id -5 of the image span"},
  };
  // The file with its metadata section (section 0) replaced by `m`, the rest as they are.
  const auto with_meta = [&a](const mxq::pb::Meta& m) {
    const std::string meta_bytes = m.SerializeAsString();
    std::vector<mxq::SectionData> sections;
    for (size_t i = 0; i < a->sections().size(); ++i) {
      mxq::SectionData d;
      d.entry = a->sections()[i];
      d.bytes = i == 0 ? std::string_view(meta_bytes) : a->bytes(i);
      sections.push_back(d);
    }
    return mxq::write_container(a->header(), sections);
  };
  for (const Case& c : cases) {
    mxq::pb::Meta m = meta;
    c.edit(*m.mutable_vision());
    const fs::path bad = dir_ / (std::string("marking_") + c.label + ".mxq");
    testing::write_file(bad, with_meta(m));
    const auto r = run_qbc("inspect " + shell_quote(bad));
    EXPECT_EQ(r.exit_code, 2) << c.label << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, c.says)) << c.label << ": " << r.err;
  }
  // A patch size the vision program's patches input does not take: refused when the runtime
  // opens the vision part, before any image is cut into patches.
  mxq::pb::Meta m = meta;
  m.mutable_vision()->set_patch_size(28);
  const fs::path bad = dir_ / "marking_patch.mxq";
  testing::write_file(bad, with_meta(m));
  const auto r = run_qbc("run " + shell_quote(bad) + " --image " +
                         shell_quote(images_ / "rocket.jpg") + " -p '<image>hi' -n 1");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "in patches of 28")) << r.err;
}

TEST_F(VlmCompile, ACorruptedOrTruncatedVisionSectionExitsTwo) {
  const std::string bytes = testing::read_file(dir_ / "a.mxq");
  auto a = mxq::Container::open((dir_ / "a.mxq").string());
  ASSERT_TRUE(a.ok());
  size_t va = 0;
  for (size_t i = 0; i < a->sections().size(); ++i)
    if (a->sections()[i].kind == static_cast<uint32_t>(mxq::SectionKind::kVision)) va = i;
  ASSERT_GT(va, 0u);
  const mxq::SectionEntry& e = a->sections()[va];
  std::string corrupt = bytes;
  corrupt[e.offset + e.size / 2] ^= 0x5A;  // a byte inside the vision part's weights
  testing::write_file(dir_ / "corrupt.mxq", corrupt);
  const auto r = run_qbc("inspect " + shell_quote(dir_ / "corrupt.mxq"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "vision")) << r.err;
  testing::write_file(dir_ / "cut.mxq", bytes.substr(0, e.offset + e.size / 2));
  const auto t = run_qbc("inspect " + shell_quote(dir_ / "cut.mxq"));
  EXPECT_EQ(t.exit_code, 2) << t.out << t.err;
}

TEST_F(VlmCompile, ImagesForATextModelOrAMissingFolderAreRefused) {
  const fs::path tiny = dir_ / "tiny";
  ASSERT_EQ(run_qbc("random-model --tiny -o " + shell_quote(tiny)).exit_code, 0);
  const auto r = run_qbc("compile " + shell_quote(tiny) + " -o " + shell_quote(dir_ / "t.mxq") +
                         " --use-random-calib --no-resume --images " + shell_quote(images_));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "has no vision part")) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "t.mxq"));
  const auto missing =
      run_qbc("compile " + shell_quote(model_) + " -o " + shell_quote(dir_ / "m.mxq") +
              " --use-random-calib --no-resume --images " + shell_quote(dir_ / "no-such-folder"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(contains(missing.err, "no-such-folder")) << missing.err;
}

/// The PNG and JPEG files of the shared images folder, sorted.
std::vector<fs::path> photographs(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".png" || ext == ".jpg" || ext == ".jpeg") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// A folder of image-text pairs for `qbc eval --images`: the first two photographs of
/// `images`, each with a caption of the same name (`prefix` starts each caption: a model's own
/// markers around the image, or nothing).
fs::path write_pairs(const fs::path& images, const fs::path& dir, const std::string& prefix) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<fs::path> photos = photographs(images);
  const char* captions[] = {"A photograph of an animal, seen up close, looking at the camera.",
                            "An outdoor scene in daylight with a tall object in the middle."};
  for (size_t i = 0; i < 2 && i < photos.size(); ++i) {
    fs::copy_file(photos[i], dir / photos[i].filename());
    testing::write_file(fs::path(dir / photos[i].filename()).replace_extension(".txt"),
                        prefix + captions[i] + "\n");
  }
  return dir;
}

/// `qbc eval MXQ --reference FOLDER --images PAIRS --json`: the report (null on failure).
nlohmann::json eval_pairs(const fs::path& mxq, const fs::path& folder, const fs::path& pairs) {
  const auto r = run_qbc("eval " + shell_quote(mxq) + " --reference " + shell_quote(folder) +
                         " --images " + shell_quote(pairs) + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return nullptr;
  return nlohmann::json::parse(r.out);
}

/// The report of a compiled VLM against its own float folder: both pairs scored, features
/// close to the float tower's, text close to the float model's.
void expect_close_to_float(const nlohmann::json& j, int64_t image_tokens) {
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["pairs"].size(), 2u) << j.dump();
  for (const auto& p : j["pairs"]) {
    EXPECT_EQ(p["image_tokens"], image_tokens) << p.dump();
    EXPECT_TRUE(p["deepstack_sqnr_db"].is_array()) << p.dump();
    EXPECT_GT(p["tokens_scored"].get<int64_t>(), 8) << p.dump();
    EXPECT_GT(p["feature_sqnr_db"].get<double>(), 25.0) << p.dump();
    EXPECT_LT(p["kld_mean"].get<double>(), 0.05) << p.dump();
  }
  EXPECT_GT(j["top1"].get<double>(), 0.6) << j.dump();  // random models: near-flat logits
}

/// `qbc run MXQ --image P -p PROMPT -n 5` (plus `flags`) on every photograph of `images`: each
/// generates 5 tokens, and not every photograph gives the same ones.
void expect_tokens_differ_by_photograph(const fs::path& mxq, const fs::path& images,
                                        const std::string& prompt, const std::string& flags) {
  std::vector<std::vector<int32_t>> outs;
  for (const fs::path& p : photographs(images)) {
    const auto g = run_qbc("run " + shell_quote(mxq) + " --image " + shell_quote(p) + " -p " +
                           shell_quote(prompt) + " -n 5 --ignore-eos --log-format json" + flags);
    ASSERT_EQ(g.exit_code, 0) << p << ": " << g.err;
    const nlohmann::json res = last_event(g.err, "result");
    const std::vector<int32_t> t = res.contains("new_tokens")
                                       ? res["new_tokens"].get<std::vector<int32_t>>()
                                       : std::vector<int32_t>();
    EXPECT_EQ(t.size(), 5u) << p << ": " << g.err;
    outs.push_back(t);
  }
  bool differ = false;
  for (const auto& t : outs) differ = differ || t != outs[0];
  EXPECT_TRUE(differ) << "every photograph gave the same tokens";
}

/// A random Gemma 3 folder from the real gemma-3-4b-it config: a 2-layer language model of
/// width 64 (head_dim 16) and a tiny SigLIP tower at the real 896x896 (4096 patches pooled 4 x 4).
fs::path write_gemma3(const fs::path& config, const fs::path& dir) {
  EXPECT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(dir) +
                    " --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --head-dim 16 --vision-layers 1 --vision-hidden 16 --vision-heads 1"
                    " --vision-intermediate 16 --dtype f32 --seed 5 --init-std 0.15")
                .exit_code,
            0);
  return dir;
}

// A tower the backend does not build (here a Gemma 3 folder whose vision_config.hidden_act is
// silu): its language model compiles, the summary and a warning say the vision part was not,
// and the file takes no image.
TEST_F(VlmCompile, ATowerThatDoesNotBuildLeavesALanguageOnlyMxqAndSaysSo) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/gemma-3-4b-it/config.json");
  const fs::path gemma = write_gemma3(config, dir_ / "gemma3_silu");
  nlohmann::json cfg = nlohmann::json::parse(testing::read_file(gemma / "config.json"));
  cfg["vision_config"]["hidden_act"] = "silu";
  testing::write_file(gemma / "config.json", cfg.dump(2));
  const auto r = run_qbc("compile " + shell_quote(gemma) + " -o " + shell_quote(dir_ / "g.mxq") +
                         " --use-random-calib --no-resume --context 1024 --log-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = summary_of(r.err);
  ASSERT_TRUE(s.contains("vision")) << r.err;
  EXPECT_FALSE(s["vision"]["compiled"].get<bool>());
  EXPECT_TRUE(contains(s["vision"]["reason"].get<std::string>(), "hidden_act 'silu'")) << r.err;
  EXPECT_TRUE(contains(r.err, "the MXQ holds the language model only")) << r.err;
  const auto run = run_qbc("run " + shell_quote(dir_ / "g.mxq") + " --image " +
                           shell_quote(photographs(images_).front()) + " -p hi -n 2");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(contains(run.err, "has no vision part")) << run.err;
}

// A Gemma 3 folder compiles with its SigLIP tower (tanh GELU, the 4 x 4 average pool, the
// soft-embedding projector) into one MXQ: 4096 patches of an 896x896 image give 256 image
// tokens. The file records how a prompt marks an image ("\n\n<start_of_image>" before the image
// tokens, "<end_of_image>\n\n" after) and the features' divisor (the language graph's embedding
// scale, sqrt(64) = 8); `qbc run --image` on every photograph generates, the image changes the
// tokens (sampled with a fixed seed: this tiny random language model's greedy choice is the same
// token whatever the image), and a prompt with two marks for one image exits 2.
TEST_F(VlmCompile, AGemma3FolderCompilesItsTowerAndRunsWithAnImage) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/gemma-3-4b-it/config.json");
  const fs::path gemma = write_gemma3(config, dir_ / "gemma3");
  const fs::path out = dir_ / "gemma3.mxq";
  const auto r = run_qbc("compile " + shell_quote(gemma) + " -o " + shell_quote(out) +
                         " --preset multimodal --use-random-calib --no-resume --context 1024"
                         " --set calibration.numSamples=2 --set calibration.seqLength=32"
                         " --images " +
                         shell_quote(images_) + " --log-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = summary_of(r.err);
  ASSERT_TRUE(s.contains("vision")) << r.err;
  EXPECT_TRUE(s["vision"]["compiled"].get<bool>()) << r.err;
  EXPECT_EQ(s["vision"]["feature_rows"], 256);
  auto m = mxq::load_model(out.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_NE(m->vision, nullptr);
  const mxq::pb::VisionPart& v = m->meta.vision();
  EXPECT_EQ(v.family(), "gemma3");
  EXPECT_EQ(v.tokens_per_image(), 256);
  EXPECT_EQ(v.drop_front_rows(), 0);
  EXPECT_EQ(v.image_size(), 896);
  // --vocab 512 moves the image ids to the top: soft token 511, <start_of_image> 510,
  // <end_of_image> 509.
  EXPECT_EQ(v.image_token_id(), 511);
  ASSERT_TRUE(v.has_prompt_token_id());
  EXPECT_EQ(v.prompt_token_id(), 510);
  // Gemma3Processor writes "\n\n" + <start_of_image> + the soft tokens + <end_of_image> +
  // "\n\n": the newlines as the folder's tokenizer encodes them, the same ids on both sides.
  const std::vector<int32_t> pre(v.image_prefix_ids().begin(), v.image_prefix_ids().end());
  const std::vector<int32_t> post(v.image_suffix_ids().begin(), v.image_suffix_ids().end());
  ASSERT_GE(pre.size(), 2u);
  ASSERT_GE(post.size(), 2u);
  EXPECT_EQ(pre.back(), 510);
  EXPECT_EQ(post.front(), 509);
  EXPECT_EQ(std::vector<int32_t>(pre.begin(), pre.end() - 1),
            std::vector<int32_t>(post.begin() + 1, post.end()));
  EXPECT_EQ(std::count(pre.begin(), pre.end(), 510), 1);
  EXPECT_DOUBLE_EQ(v.feature_divisor(), 8.0);
  EXPECT_EQ(m->vision->bundle->chunk, 4096);
  EXPECT_EQ(m->vision->bundle->output_rows, 256);
  EXPECT_NE(m->vision->asset(mxq::vision_input_asset("embed_base")), nullptr);
  // The image's tokens attend to each other: span programs, and a chunk that holds an image
  // (the default 128 raised to 256).
  for (const isa::Mode& mode : m->bundle->modes) EXPECT_TRUE(mode.has_span());
  EXPECT_EQ(m->bundle->chunk, 256);
  EXPECT_NE(m->containers.front().header().required_features & mxq::kFeatureSpanPrograms, 0u);

  expect_tokens_differ_by_photograph(out, images_, "<start_of_image>Describe this image.",
                                     " --temperature 1 --seed 3");
  const auto two =
      run_qbc("run " + shell_quote(out) + " --image " + shell_quote(photographs(images_).front()) +
              " -p '<start_of_image><start_of_image>' -n 2");
  EXPECT_EQ(two.exit_code, 2) << two.err;
  EXPECT_TRUE(contains(two.err, "2 image tokens (id 510) for 1 --image files")) << two.err;
  // --chat with an image: the processor's template (chat_template.json, packed as
  // chat_template.jinja) writes <start_of_image> where the image item is; the runtime expands
  // it into the 256 image tokens with their "\n\n" around.
  ASSERT_NE(m->asset("chat_template.jinja"), nullptr);
  const auto chat =
      run_qbc("run " + shell_quote(out) + " --image " + shell_quote(photographs(images_).front()) +
              " --chat -p 'Describe this image.' -n 2 --ids");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_TRUE(contains(chat.out,
                       "<start_of_turn>user\n<start_of_image>Describe this "
                       "image.<end_of_turn>\n<start_of_turn>model\n"))
      << chat.out;
  const size_t ids_at = chat.out.find("prompt ids:");
  ASSERT_NE(ids_at, std::string::npos) << chat.out;
  std::istringstream ids(chat.out.substr(ids_at + 11, chat.out.find('\n', ids_at) - ids_at - 11));
  std::vector<int> prompt;
  for (int t; ids >> t;) prompt.push_back(t);
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), static_cast<int>(v.image_token_id())), 256);
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), static_cast<int>(v.prompt_token_id())), 1);
  // Image-text pairs against the float folder: the image tokens one bidirectional span on both
  // sides.
  expect_close_to_float(eval_pairs(out, gemma, write_pairs(images_, dir_ / "gemma3_pairs", "")),
                        256);
}

// Image-text calibration (`qbc calib prepare --images`): each sample holds one photograph's span
// (the ids the prompt puts around an image, and the float tower's features between) after its
// first token, the window's text after it; a sample with the same photograph has the same span,
// another photograph another one; the features agree with the compiled (quantized) tower's on
// the same photograph; and the folder calibrates a compile.
TEST_F(VlmCompile, CalibPrepareWithImagesPutsAPhotographsSpanInEachSample) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/gemma-3-4b-it/config.json");
  QBC_REQUIRE_SHARED(text, "data/tinystories/tinystories_valid_head.clean.txt");
  const fs::path gemma = write_gemma3(config, dir_ / "gemma3_calib");
  const fs::path cal = dir_ / "cal", plain = dir_ / "cal_text";
  // A sample too short for an image is refused before the tower runs, naming both lengths.
  const auto short_run = run_qbc("calib prepare " + shell_quote(gemma) + " --text " +
                                 shell_quote(text) + " --seq-len 100 --images " +
                                 shell_quote(images_) + " -o " + shell_quote(dir_ / "short"));
  EXPECT_EQ(short_run.exit_code, 2) << short_run.err;
  EXPECT_TRUE(contains(short_run.err, "--seq-len 100 holds no image")) << short_run.err;
  EXPECT_FALSE(fs::exists(dir_ / "short"));
  const std::string common = " --text " + shell_quote(text) + " --num-samples 5 --seq-len 300";
  const auto r = run_qbc("calib prepare " + shell_quote(gemma) + common + " --images " +
                         shell_quote(images_) + " -o " + shell_quote(cal));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t n = photographs(images_).size();
  EXPECT_TRUE(contains(r.out, std::to_string(n) + " images, each a span of")) << r.out;
  ASSERT_EQ(run_qbc("calib prepare " + shell_quote(gemma) + common + " -o " + shell_quote(plain))
                .exit_code,
            0);
  const nlohmann::json p = nlohmann::json::parse(testing::read_file(cal / "provenance.json"));
  ASSERT_EQ(p["images"].size(), n);
  const int64_t span = p["images"][0]["rows"].get<int64_t>();
  EXPECT_GE(span, 256 + 2);  // the image tokens, <start_of_image> and <end_of_image>
  ASSERT_LT(span + 1, 300);
  const std::vector<int64_t> of = p["image_of_sample"].get<std::vector<int64_t>>();
  ASSERT_EQ(of.size(), 5u);
  EXPECT_EQ(of[0], 0);
  EXPECT_EQ(of[4], static_cast<int64_t>(4 % n));
  const int64_t h = 64;
  const auto sample = [&](const fs::path& d, int i) {
    std::vector<float> v;
    std::vector<int64_t> shape;
    const Status s = calib::read_npy(d / ("sample_000" + std::to_string(i) + ".npy"), &v, &shape);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(shape, (std::vector<int64_t>{1, 300, h}));
    return v;
  };
  const auto rows = [h](const std::vector<float>& v, int64_t a, int64_t b) {
    return std::vector<float>(v.begin() + a * h, v.begin() + b * h);
  };
  const std::vector<float> s0 = sample(cal, 0), s1 = sample(cal, 1), t0 = sample(plain, 0);
  ASSERT_EQ(s0.size(), static_cast<size_t>(300 * h));
  EXPECT_NE(rows(s0, 1, 1 + span), rows(s1, 1, 1 + span)) << "another photograph";
  if (n == 4) EXPECT_EQ(rows(s0, 1, 1 + span), rows(sample(cal, 4), 1, 1 + span));
  EXPECT_EQ(rows(s0, 0, 1), rows(t0, 0, 1)) << "the first token stays first";
  EXPECT_EQ(rows(s0, 1 + span, 300), rows(t0, 1, 300 - span)) << "the text follows the span";

  // The folder calibrates a compile; its tower's features on the same photograph are close.
  const fs::path out = dir_ / "gemma3_cal.mxq";
  const auto c = run_qbc("compile " + shell_quote(gemma) + " -o " + shell_quote(out) +
                         " --preset multimodal --calib " + shell_quote(cal) +
                         " --no-resume --context 1024 --images " + shell_quote(images_));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto m = runtime::load_model(out.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto enc = runtime::VisionEncoder::create(m->file, m->device->mode().scheme);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  const fs::path first = images_ / p["images"][0]["file"].get<std::string>();
  auto q = (*enc)->encode_file(first.string());
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  const int64_t pre = m->file.meta.vision().image_prefix_ids_size();
  const std::vector<float> f = rows(s0, 1 + pre, 1 + pre + 256);
  ASSERT_EQ(q->size(), f.size());
  double signal = 0, noise = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    signal += static_cast<double>(f[i]) * f[i];
    noise += (static_cast<double>(f[i]) - (*q)[i]) * (static_cast<double>(f[i]) - (*q)[i]);
  }
  EXPECT_GT(10.0 * std::log10(signal / std::max(noise, 1e-30)), 15.0)
      << "float features in the samples vs the compiled tower's";
}

// An M-RoPE model (Qwen2.5-VL) calibrates on image-text samples too: its rope tables are the
// host's, computed from the positions, so the samples are its embeddings alone; the compile
// takes the folder and the file runs with an image.
TEST_F(VlmCompile, CalibPrepareWithImagesCalibratesAnMRopeModel) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
  QBC_REQUIRE_SHARED(text, "data/tinystories/tinystories_valid_head.clean.txt");
  const fs::path qwen = dir_ / "qwen_calib";
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(qwen) +
                    " --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --vision-layers 2 --vision-hidden 32 --vision-heads 2"
                    " --vision-intermediate 64 --dtype f32 --seed 5 --init-std 0.15")
                .exit_code,
            0);
  const fs::path cal = dir_ / "qwen_cal";
  const auto r = run_qbc("calib prepare " + shell_quote(qwen) + " --text " + shell_quote(text) +
                         " --num-samples 3 --seq-len 300 --images " + shell_quote(images_) +
                         " -o " + shell_quote(cal));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json p = nlohmann::json::parse(testing::read_file(cal / "provenance.json"));
  EXPECT_EQ(p["images"][0]["rows"].get<int64_t>(), 256 + 2);  // vision_start, 256, vision_end
  const fs::path out = dir_ / "qwen_cal.mxq";
  const auto c = run_qbc("compile " + shell_quote(qwen) + " -o " + shell_quote(out) +
                         " --preset multimodal --calib " + shell_quote(cal) +
                         " --no-resume --context 1024 --images " + shell_quote(images_));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const auto run =
      run_qbc("run " + shell_quote(out) + " --image " + shell_quote(photographs(images_).front()) +
              " -p '<|vision_start|><|image_pad|><|vision_end|>hi' -n 3");
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

// An explicit chunk smaller than a Gemma 3 image is refused before any work: the image's tokens
// attend to each other and must be one call.
TEST_F(VlmCompile, AGemma3ChunkSmallerThanAnImageExitsTwo) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/gemma-3-4b-it/config.json");
  const fs::path gemma = write_gemma3(config, dir_ / "gemma3_chunk");
  const fs::path out = dir_ / "gemma3_chunk.mxq";
  const auto r = run_qbc("compile " + shell_quote(gemma) + " -o " + shell_quote(out) +
                         " --preset multimodal --use-random-calib --no-resume --context 1024"
                         " --set llm.attributes.maxCoreDataLength=128 --images " +
                         shell_quote(images_));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "llm.attributes.maxCoreDataLength 128")) << r.err;
  EXPECT_TRUE(contains(r.err, "256 tokens")) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// A Qwen2-VL / Qwen2.5-VL folder compiles with its tower (2-D rope tables, the 2x2 merger;
// Qwen2.5-VL's window attention, Qwen2-VL's LayerNorm / quick_gelu blocks) into one MXQ: 1024
// patches of a 448x448 image give 256 image tokens, which `qbc run --image` places on the
// merged 16 x 16 grid of M-RoPE positions; every photograph generates, and the image changes
// the tokens. `ffn` is the tower's MLP width (Qwen2-VL: a multiple of its width).
void expect_qwen_folder_compiles_and_runs(const fs::path& config, const fs::path& dir,
                                          const fs::path& images, const std::string& family,
                                          int ffn, bool windows) {
  const fs::path qwen = dir / family;
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(qwen) +
                    " --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --vision-layers 2 --vision-hidden 32 --vision-heads 2"
                    " --vision-intermediate " +
                    std::to_string(ffn) + " --dtype f32 --seed 5 --init-std 0.15")
                .exit_code,
            0);
  const fs::path out = dir / (family + ".mxq");
  const auto r = run_qbc("compile " + shell_quote(qwen) + " -o " + shell_quote(out) +
                         " --preset multimodal --use-random-calib --no-resume --context 1024"
                         " --set calibration.numSamples=2 --set calibration.seqLength=32"
                         " --images " +
                         shell_quote(images) + " --log-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = summary_of(r.err);
  ASSERT_TRUE(s.contains("vision")) << r.err;
  EXPECT_TRUE(s["vision"]["compiled"].get<bool>()) << r.err;
  EXPECT_EQ(s["vision"]["feature_rows"], 256);
  auto m = mxq::load_model(out.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_NE(m->vision, nullptr);
  const mxq::pb::VisionPart& v = m->meta.vision();
  EXPECT_EQ(v.family(), family);
  EXPECT_EQ(v.tokens_per_image(), 256);
  EXPECT_EQ(v.drop_front_rows(), 0);
  EXPECT_EQ(v.merge_size(), 2);
  EXPECT_EQ(v.image_size(), 448);
  EXPECT_EQ(m->vision->bundle->chunk, 1024);
  EXPECT_EQ(m->vision->bundle->output_rows, 256);
  EXPECT_NE(m->vision->asset(mxq::vision_input_asset("rope_cos")), nullptr);
  // Qwen2-VL works in the image's order: no window permutation is stored.
  EXPECT_EQ(m->vision->asset(mxq::kVisionWindowOrderAsset) != nullptr, windows);
  EXPECT_TRUE(m->bundle->rope_inputs.present());  // the language model's M-RoPE tables

  expect_tokens_differ_by_photograph(
      out, images, "<|vision_start|><|image_pad|><|vision_end|>Describe this image.", "");
  // Image-text pairs against the float folder: M-RoPE positions on both sides.
  expect_close_to_float(eval_pairs(out, qwen,
                                   write_pairs(images, dir / (family + "_pairs"),
                                               "<|vision_start|><|image_pad|><|vision_end|>")),
                        256);
  // Two image placeholders for one --image: exit 2 naming the count.
  const auto two =
      run_qbc("run " + shell_quote(out) + " --image " + shell_quote(photographs(images).front()) +
              " -p '<|image_pad|><|image_pad|>' -n 2");
  EXPECT_EQ(two.exit_code, 2) << two.err;
}

TEST_F(VlmCompile, AQwen25VlFolderCompilesItsTowerAndRunsWithAnImage) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
  expect_qwen_folder_compiles_and_runs(config, dir_, images_, "qwen2_5_vl", 48, true);
}

// A Qwen3-VL folder (the real Qwen3-VL-4B config, shrunk to 2 tower blocks, whose taps
// [5, 11, 17] of 24 scale to [0, 1]): the tower compiles with its DeepStack mergers, the vision
// program writes the features and both DeepStack levels side by side, the language model takes
// them as its deepstack inputs after decoder layers 0 and 1 (required feature bit 10, with bit 7
// for its interleaved M-RoPE tables), `qbc run --image` gives tokens that depend on the
// photograph, and `qbc eval --images` stays close to the float folder (which adds the float
// DeepStack rows as HF does).
TEST_F(VlmCompile, AQwen3VlFolderCompilesItsTowerWithDeepStackAndRunsWithAnImage) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen3-VL-4B-Instruct/config.json");
  const fs::path qwen = dir_ / "qwen3_vl";
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(qwen) +
                    " --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --head-dim 16 --vision-layers 2 --vision-hidden 32 --vision-heads 2"
                    " --vision-intermediate 64 --dtype f32 --seed 5 --init-std 0.15")
                .exit_code,
            0);
  const fs::path out = dir_ / "qwen3_vl.mxq";
  const auto r = run_qbc("compile " + shell_quote(qwen) + " -o " + shell_quote(out) +
                         " --preset multimodal --use-random-calib --no-resume --context 1024"
                         " --set calibration.numSamples=2 --set calibration.seqLength=32"
                         " --images " +
                         shell_quote(images_) + " --log-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = summary_of(r.err);
  ASSERT_TRUE(s.contains("vision")) << r.err;
  EXPECT_TRUE(s["vision"]["compiled"].get<bool>()) << r.err;
  EXPECT_EQ(s["vision"]["deepstack_levels"], 2) << r.err;
  EXPECT_TRUE(contains(r.err, "and 2 DeepStack levels of them")) << r.err;
  // The quantized tower against the float one, block by block, on the calibration images.
  ASSERT_EQ(s["vision"]["block_sqnr_db"].size(), 2u) << r.err;
  EXPECT_EQ(s["vision"]["block_sqnr_db"][1]["node"], "vis.blk.1.ffn_residual") << r.err;
  for (const auto& b : s["vision"]["block_sqnr_db"])
    EXPECT_GT(b["sqnr_db"].get<double>(), 20.0) << r.err;
  EXPECT_TRUE(contains(r.err, "lowest tower block SQNR")) << r.err;
  auto m = mxq::load_model(out.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_NE(m->vision, nullptr);
  const mxq::pb::VisionPart& v = m->meta.vision();
  EXPECT_EQ(v.family(), "qwen3_vl");
  EXPECT_EQ(v.deepstack_levels(), 2);
  EXPECT_EQ(v.feature_width(), 64);
  EXPECT_EQ(m->vision->bundle->vocab, 64 * 3);  // the features, then two DeepStack levels
  EXPECT_EQ(m->bundle->deepstack.size(), 2u);
  ASSERT_TRUE(m->bundle->rope_inputs.present());
  EXPECT_TRUE(m->bundle->rope_inputs.interleaved);
  const std::string bytes = testing::read_file(out);
  uint64_t required = 0;
  std::memcpy(&required, bytes.data() + 24, sizeof required);
  EXPECT_NE(required & mxq::kFeatureInterleavedMRope, 0u);
  EXPECT_NE(required & mxq::kFeatureDeepStack, 0u);
  const int64_t tokens = v.tokens_per_image();
  EXPECT_GT(tokens, 0);

  expect_tokens_differ_by_photograph(
      out, images_, "<|vision_start|><|image_pad|><|vision_end|>Describe this image.", "");
  // eval reports each DeepStack level's SQNR beside the features'.
  const nlohmann::json report = eval_pairs(
      out, qwen,
      write_pairs(images_, dir_ / "qwen3_vl_pairs", "<|vision_start|><|image_pad|><|vision_end|>"));
  expect_close_to_float(report, tokens);
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(report["deepstack_sqnr_db"].size(), 2u) << report.dump();
  // eval repeats the compile's per-block measurement from the file, labelled as such.
  EXPECT_EQ(report["compile_tower_block_sqnr_db"]["blocks"], s["vision"]["block_sqnr_db"])
      << report.dump();
  for (const auto& p : report["pairs"]) {
    ASSERT_EQ(p["deepstack_sqnr_db"].size(), 2u) << p.dump();
    for (const auto& db : p["deepstack_sqnr_db"]) EXPECT_GT(db.get<double>(), 20.0) << p.dump();
  }
  const auto run = run_qbc("run " + shell_quote(out) + " -p 'Hello there' -n 4 --seed 1");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
  const auto shown = run_qbc("inspect " + shell_quote(out));
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(contains(shown.out, "x 64 features (+ 2 DeepStack levels)")) << shown.out;

  // Calibration samples with the photographs' feature rows and, beside them, each DeepStack
  // level's rows at the image's rows (an input of its own, mapped by inputs.json); then the
  // `llm` preset on them with spinR1 forced: the language model's residual stream is rotated,
  // so the tower's merger and its DeepStack mergers write in the rotated basis (the file
  // records the seed), the calibration rows of every level are rotated alike, and the host
  // adds the DeepStack rows into the rotated stream; eval undoes R for every level's SQNR.
  QBC_REQUIRE_SHARED(text, "data/tinystories/tinystories_valid_head.clean.txt");
  const fs::path cal = dir_ / "qwen3_vl_cal";
  const auto prep = run_qbc("calib prepare " + shell_quote(qwen) + " --text " + shell_quote(text) +
                            " --num-samples 2 --seq-len 240 --images " + shell_quote(images_) +
                            " -o " + shell_quote(cal));
  ASSERT_EQ(prep.exit_code, 0) << prep.err;
  const nlohmann::json inputs = nlohmann::json::parse(testing::read_file(cal / "inputs.json"));
  EXPECT_EQ(inputs["inputs_embeds"], "npy_files.txt") << inputs.dump();
  EXPECT_EQ(inputs["deepstack.1"], "deepstack.1/npy_files.txt") << inputs.dump();
  ASSERT_TRUE(fs::exists(cal / "deepstack.0" / "sample_0001.npy"));
  // The same samples without their DeepStack rows (the folder read through npy_files.txt) are
  // calibrated with zero rows there, said, and give other activation ranges: another file.
  const fs::path text_only = dir_ / "qwen3_vl_cal_text_only";
  fs::copy(cal, text_only, fs::copy_options::recursive);
  fs::remove(text_only / "inputs.json");
  const std::string multimodal = " --preset multimodal --no-resume --context 1024 --images " +
                                 shell_quote(images_) + " --calib ";
  const auto with_rows =
      run_qbc("compile " + shell_quote(qwen) + " -o " + shell_quote(dir_ / "qwen3_vl_ds.mxq") +
              multimodal + shell_quote(cal));
  ASSERT_EQ(with_rows.exit_code, 0) << with_rows.err;
  EXPECT_FALSE(contains(with_rows.err, "no DeepStack rows")) << with_rows.err;
  const auto zero_rows =
      run_qbc("compile " + shell_quote(qwen) + " -o " + shell_quote(dir_ / "qwen3_vl_zero.mxq") +
              multimodal + shell_quote(text_only));
  ASSERT_EQ(zero_rows.exit_code, 0) << zero_rows.err;
  EXPECT_TRUE(contains(zero_rows.err, "give no DeepStack rows (deepstack.0)")) << zero_rows.err;
  EXPECT_NE(testing::read_file(dir_ / "qwen3_vl_ds.mxq"),
            testing::read_file(dir_ / "qwen3_vl_zero.mxq"));
  expect_close_to_float(eval_pairs(dir_ / "qwen3_vl_ds.mxq", qwen, dir_ / "qwen3_vl_pairs"),
                        tokens);
  const fs::path llm = dir_ / "qwen3_vl_llm.mxq";
  const auto c = run_qbc("compile " + shell_quote(qwen) + " -o " + shell_quote(llm) +
                         " --preset llm --calib " + shell_quote(cal) +
                         " --set equivalentTransformation.spinR1.policy=always"
                         " --no-resume --context 1024 --images " +
                         shell_quote(images_));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto rotated = mxq::load_model(llm.string());
  ASSERT_TRUE(rotated.ok()) << rotated.status().to_string();
  EXPECT_TRUE(rotated->meta.vision().has_language_rotation_seed());
  const nlohmann::json rotated_report = eval_pairs(llm, qwen, dir_ / "qwen3_vl_pairs");
  expect_close_to_float(rotated_report, tokens);
  ASSERT_EQ(rotated_report["deepstack_sqnr_db"].size(), 2u) << rotated_report.dump();
  for (const auto& db : rotated_report["deepstack_sqnr_db"])
    EXPECT_GT(db.get<double>(), 20.0) << rotated_report.dump();
  const auto with_image =
      run_qbc("run " + shell_quote(llm) + " --image " + shell_quote(photographs(images_).front()) +
              " -p '<|vision_start|><|image_pad|><|vision_end|>hi' -n 3");
  EXPECT_EQ(with_image.exit_code, 0) << with_image.err;
}

// `qbc run --chat`: the prompt rendered by the model's chat template (Qwen3-VL's processor
// template, which the folder keeps in chat_template.json and the MXQ as chat_template.jinja),
// the same text from the compiled file and from the folder on the float runtime; --system adds
// the system turn; a folder without a template, and --system without --chat, exit 2.
TEST_F(VlmCompile, RunChatRendersTheModelsTemplate) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen3-VL-4B-Instruct/config.json");
  const fs::path qwen = dir_ / "qwen3_vl_chat";
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(qwen) +
                    " --layers 1 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --head-dim 16 --vision-layers 1 --vision-hidden 16 --vision-heads 1"
                    " --vision-intermediate 16 --dtype f32 --seed 5")
                .exit_code,
            0);
  ASSERT_TRUE(fs::exists(qwen / "chat_template.json"));
  const fs::path out = dir_ / "qwen3_vl_chat.mxq";
  const auto r = run_qbc("compile " + shell_quote(qwen) + " -o " + shell_quote(out) +
                         " --preset llm_fast --use-random-calib --no-resume --context 256"
                         " --set calibration.numSamples=2 --set calibration.seqLength=32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string want =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n"
      "<|im_start|>assistant\n";
  const std::string flags = " --chat --system 'Be brief.' -p 'Hello there' -n 2 --seed 1";
  const auto mxq = run_qbc("run " + shell_quote(out) + flags);
  ASSERT_EQ(mxq.exit_code, 0) << mxq.err;
  EXPECT_EQ(mxq.out.rfind(want, 0), 0u) << mxq.out;
  const auto ref = run_qbc("run " + shell_quote(qwen) + flags);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_EQ(ref.out.rfind(want, 0), 0u) << ref.out;
  const auto plain = run_qbc("run " + shell_quote(out) + " -p 'Hello there' -n 2 --seed 1");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.rfind("Hello there", 0), 0u) << plain.out;
  const auto lone = run_qbc("run " + shell_quote(out) + " --system x -p hi -n 1");
  EXPECT_EQ(lone.exit_code, 2) << lone.err;
  EXPECT_TRUE(contains(lone.err, "--system needs --chat")) << lone.err;
  fs::remove(qwen / "chat_template.json");
  const auto none = run_qbc("run " + shell_quote(qwen) + " --chat -p hi -n 1");
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_TRUE(contains(none.err, "has no chat template")) << none.err;
}

// LLaVA with a SigLIP tower over a Qwen2 language model (llava-interleave-qwen-0.5b-hf's real
// config, shrunk): the tower at 384 with patch 14 (27 x 27 patches; HF's valid convolution does
// not read the last 6 pixels), every row kept (strategy "full", no CLS row), the features taken
// before post_layernorm; `qbc run --image` gives tokens that depend on the photograph, `qbc eval
// --images` stays close to the float folder, and `qbc plan` counts the real tower.
TEST_F(VlmCompile, ALlavaFolderWithASiglipTowerAndAQwen2ModelCompilesAndRuns) {
  const fs::path config = testing::source_dir() /
                          "tests/assets/model-configs/llava-interleave-qwen-0.5b-hf/config.json";
  const fs::path llava = dir_ / "llava_siglip";
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(llava) +
                    " --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --vision-layers 2 --vision-hidden 32 --vision-heads 2"
                    " --vision-intermediate 64 --dtype f32 --seed 5 --init-std 0.15")
                .exit_code,
            0);
  const fs::path out = dir_ / "llava_siglip.mxq";
  const auto r = run_qbc("compile " + shell_quote(llava) + " -o " + shell_quote(out) +
                         " --preset multimodal --use-random-calib --no-resume --context 1024"
                         " --set calibration.numSamples=2 --set calibration.seqLength=32"
                         " --images " +
                         shell_quote(images_) + " --log-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = summary_of(r.err);
  ASSERT_TRUE(s.contains("vision")) << r.err;
  EXPECT_TRUE(s["vision"]["compiled"].get<bool>()) << r.err;
  EXPECT_EQ(s["vision"]["feature_rows"], 729) << r.err;
  auto m = mxq::load_model(out.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_NE(m->vision, nullptr);
  const mxq::pb::VisionPart& v = m->meta.vision();
  EXPECT_EQ(v.family(), "llava");
  EXPECT_EQ(v.tokens_per_image(), 729);
  EXPECT_EQ(v.drop_front_rows(), 0);
  EXPECT_EQ(v.image_size(), 384);
  EXPECT_EQ(v.patch_size(), 14);
  expect_tokens_differ_by_photograph(out, images_, "<image>Describe this image.", "");
  expect_close_to_float(
      eval_pairs(out, llava, write_pairs(images_, dir_ / "llava_siglip_pairs", "<image>")), 729);
  const auto plan = run_qbc("plan --model-config " + shell_quote(config) + " --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const nlohmann::json p = nlohmann::json::parse(plan.out);
  ASSERT_TRUE(p.contains("vision")) << plan.out;
  EXPECT_EQ(p["vision"]["tokens_per_image"], 729) << plan.out;
  EXPECT_EQ(p["vision"]["layers"], 26) << plan.out;
}

// Qwen2-VL-2B's published config (tests/assets/model-configs/README.md).
TEST_F(VlmCompile, AQwen2VlFolderCompilesItsTowerAndRunsWithAnImage) {
  const fs::path config =
      testing::source_dir() / "tests/assets/model-configs/Qwen2-VL-2B-Instruct/config.json";
  expect_qwen_folder_compiles_and_runs(config, dir_, images_, "qwen2_vl", 64, false);
}

/// Copies the HF folder `from` to `to` with every tensor of model.safetensors renamed by the first
/// matching (old prefix, new prefix) pair: the file rewritten per the safetensors spec (an
/// 8-byte little-endian header length, the JSON header, the data bytes unchanged, since the
/// offsets are relative to the data), not by our reader.
void copy_with_renamed_tensors(const fs::path& from, const fs::path& to,
                               const std::vector<std::pair<std::string, std::string>>& prefixes) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  const std::string bytes = testing::read_file(from / "model.safetensors");
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : header.items()) {
    std::string name = key;
    for (const auto& [old_prefix, new_prefix] : prefixes) {
      if (name.rfind(old_prefix, 0) == 0) {
        name = new_prefix + name.substr(old_prefix.size());
        break;
      }
    }
    out[name] = value;
  }
  std::string h = out.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)
    file[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  file += h;
  file += bytes.substr(8 + n);
  testing::write_file(to / "model.safetensors", file);
}

/// The tokens `qbc run --image` samples (fixed seed) from `mxq` with `photo` and `prompt`.
std::vector<int32_t> sampled_tokens(const fs::path& mxq, const fs::path& photo,
                                    const std::string& prompt) {
  const auto g = run_qbc("run " + shell_quote(mxq) + " --image " + shell_quote(photo) + " -p " +
                         shell_quote(prompt) +
                         " -n 6 --ignore-eos --temperature 1 --seed 4 --log-format json");
  EXPECT_EQ(g.exit_code, 0) << g.err;
  const nlohmann::json res = last_event(g.err, "result");
  return res.contains("new_tokens") ? res["new_tokens"].get<std::vector<int32_t>>()
                                    : std::vector<int32_t>();
}

// Checkpoints saved by transformers >= 4.52 keep every tensor under `model.` (LLaVA:
// model.language_model.*, model.vision_tower.*, model.multi_modal_projector.*, lm_head.*;
// Qwen2-VL: model.language_model.*, model.visual.*): the same random models under those names
// compile, with their towers, into files that sample the same tokens with an image as the
// files compiled from the old names.
TEST_F(VlmCompile, CheckpointsUnderTransformers452NamesCompileToTheSameModel) {
  const std::string common =
      " --preset multimodal --use-random-calib --no-resume --set calibration.numSamples=2"
      " --set calibration.seqLength=32 --context 1024 --log-format json --images " +
      shell_quote(images_);
  const fs::path photo = photographs(images_).front();
  const fs::path llava = dir_ / "llava_452";
  copy_with_renamed_tensors(model_, llava,
                            {{"language_model.model.", "model.language_model."},
                             {"language_model.lm_head.", "lm_head."},
                             {"vision_tower.", "model.vision_tower."},
                             {"multi_modal_projector.", "model.multi_modal_projector."}});
  const auto l = run_qbc("compile " + shell_quote(llava) + " -o " +
                         shell_quote(dir_ / "llava_452.mxq") + common);
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_TRUE(summary_of(l.err)["vision"]["compiled"].get<bool>()) << l.err;
  const std::string llava_prompt = "USER: <image>\nDescribe. ASSISTANT:";
  const std::vector<int32_t> want = sampled_tokens(dir_ / "a.mxq", photo, llava_prompt);
  EXPECT_EQ(want.size(), 6u);
  EXPECT_EQ(sampled_tokens(dir_ / "llava_452.mxq", photo, llava_prompt), want);

  const fs::path config =
      testing::source_dir() / "tests/assets/model-configs/Qwen2-VL-2B-Instruct/config.json";
  const fs::path qwen = dir_ / "qwen2_vl_names";
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(qwen) +
                    " --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --vision-layers 2 --vision-hidden 32 --vision-heads 2"
                    " --vision-intermediate 64 --dtype f32 --seed 9 --init-std 0.15")
                .exit_code,
            0);
  copy_with_renamed_tensors(qwen, dir_ / "qwen2_vl_452",
                            {{"model.", "model.language_model."}, {"visual.", "model.visual."}});
  for (const char* name : {"qwen2_vl_names", "qwen2_vl_452"}) {
    const auto r = run_qbc("compile " + shell_quote(dir_ / name) + " -o " +
                           shell_quote(dir_ / (std::string(name) + ".mxq")) + common);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_TRUE(summary_of(r.err)["vision"]["compiled"].get<bool>()) << r.err;
  }
  const std::string qwen_prompt = "<|vision_start|><|image_pad|><|vision_end|>Describe.";
  const std::vector<int32_t> qwant =
      sampled_tokens(dir_ / "qwen2_vl_names.mxq", photo, qwen_prompt);
  EXPECT_EQ(qwant.size(), 6u);
  EXPECT_EQ(sampled_tokens(dir_ / "qwen2_vl_452.mxq", photo, qwen_prompt), qwant);
}

// vision.imageSize: a Qwen tower compiles at the configured square (336: 24 x 24 patches, 144
// merged tokens, the M-RoPE grid 12 x 12) and runs with an image; sizes the tower cannot take
// exit 2 naming the key, before any file is written; LLaVA's CLIP compiles at 224 with its
// positions resampled; `qbc plan` counts the tokens at that size.
TEST_F(VlmCompile, VisionImageSizeSetsTheCompiledSquare) {
  const fs::path config =
      testing::source_dir() / "tests/assets/model-configs/Qwen2-VL-2B-Instruct/config.json";
  const fs::path qwen = dir_ / "qwen2_vl_sized";
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(qwen) +
                    " --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --vision-layers 2 --vision-hidden 32 --vision-heads 2"
                    " --vision-intermediate 64 --dtype f32 --seed 9 --init-std 0.15")
                .exit_code,
            0);
  const std::string common =
      " --preset multimodal --use-random-calib --no-resume --context 1024"
      " --set calibration.numSamples=2 --set calibration.seqLength=32"
      " --log-format json --images " +
      shell_quote(images_);
  const fs::path out = dir_ / "sized.mxq";
  const auto r = run_qbc("compile " + shell_quote(qwen) + " -o " + shell_quote(out) + common +
                         " --set vision.imageSize=336");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(summary_of(r.err)["vision"]["feature_rows"], 144) << r.err;
  auto m = mxq::load_model(out.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_NE(m->vision, nullptr);
  EXPECT_EQ(m->meta.vision().image_size(), 336);
  EXPECT_EQ(m->meta.vision().tokens_per_image(), 144);
  EXPECT_EQ(m->vision->bundle->chunk, 576);
  const auto g =
      run_qbc("run " + shell_quote(out) + " --image " + shell_quote(photographs(images_).front()) +
              " -p '<|vision_start|><|image_pad|><|vision_end|>Describe.'"
              " -n 3 --ignore-eos --log-format json");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const nlohmann::json res = last_event(g.err, "result");
  ASSERT_TRUE(res.contains("new_tokens")) << g.err;
  EXPECT_EQ(res["new_tokens"].size(), 3u);

  const fs::path text = dir_ / "text_model";
  ASSERT_EQ(run_qbc("random-model --tiny -o " + shell_quote(text) + " --force").exit_code, 0);
  struct Bad {
    std::string model, set, want;
    int exit;
  };
  const Bad bad[] = {
      {qwen.string(), "300", "vision.imageSize 300", 2},
      {text.string(), "336", "has no vision part", 2},
      {qwen.string(), "28", "min_pixels 3136", 2},
      {model_.string(), "230", "multiples of patch_size = 14", 2},
  };
  for (const Bad& b : bad) {
    const fs::path none = dir_ / ("refused_" + b.set + ".mxq");
    const auto e = run_qbc("compile " + shell_quote(b.model) + " -o " + shell_quote(none) + common +
                           " --set vision.imageSize=" + b.set);
    EXPECT_EQ(e.exit_code, b.exit) << b.set << ": " << e.err;
    EXPECT_TRUE(contains(e.err, b.want)) << b.set << ": " << e.err;
    EXPECT_FALSE(fs::exists(none)) << b.set;
  }
  // LLaVA's CLIP at 224 instead of 336: its positions resampled, 16 x 16 patches, 256 image
  // tokens; it runs with an image and stays close to the float folder at the same size.
  const fs::path small = dir_ / "llava_224.mxq";
  const auto c224 = run_qbc("compile " + shell_quote(model_) + " -o " + shell_quote(small) +
                            common + " --set vision.imageSize=224");
  ASSERT_EQ(c224.exit_code, 0) << c224.err;
  EXPECT_EQ(summary_of(c224.err)["vision"]["feature_rows"], 257) << c224.err;
  auto l224 = mxq::load_model(small.string());
  ASSERT_TRUE(l224.ok()) << l224.status().to_string();
  EXPECT_EQ(l224->meta.vision().image_size(), 224);
  EXPECT_EQ(l224->meta.vision().tokens_per_image(), 256);
  const auto g224 = run_qbc("run " + shell_quote(small) + " --image " +
                            shell_quote(photographs(images_).front()) +
                            " -p 'USER: <image>\nDescribe. ASSISTANT:' -n 3 --ignore-eos");
  EXPECT_EQ(g224.exit_code, 0) << g224.err;
  expect_close_to_float(
      eval_pairs(small, model_, write_pairs(images_, dir_ / "llava_224_pairs", "")), 256);
  const auto plan = run_qbc("plan " + shell_quote(config) + " --set vision.imageSize=672");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_TRUE(contains(plan.out, "576 tokens per 672x672 image")) << plan.out;
  const auto plan_bad = run_qbc("plan " + shell_quote(config) + " --set vision.imageSize=670");
  EXPECT_EQ(plan_bad.exit_code, 2) << plan_bad.out << plan_bad.err;
  EXPECT_TRUE(contains(plan_bad.err, "vision.imageSize 670")) << plan_bad.err;
}

/// The "new_tokens" of a --log-format json `qbc run`'s result event (stderr).
std::vector<int32_t> new_tokens(const std::string& err) {
  const nlohmann::json r = last_event(err, "result");
  return r.contains("new_tokens") ? r["new_tokens"].get<std::vector<int32_t>>()
                                  : std::vector<int32_t>();
}

// A CLIP processor whose shortest-edge resize has no centre crop gives images of the
// photograph's aspect ratio, not the compiled square: refused before any work, exit 2 naming the
// file and the keys.
TEST_F(VlmCompile, AShortestEdgeResizeWithoutACropIsRefused) {
  const fs::path copy = dir_ / "llava_no_crop";
  fs::remove_all(copy);
  fs::copy(model_, copy, fs::copy_options::recursive);
  nlohmann::json pre = nlohmann::json::parse(testing::read_file(copy / "preprocessor_config.json"));
  ASSERT_TRUE(pre.contains("do_center_crop")) << pre.dump();
  pre["do_center_crop"] = false;
  testing::write_file(copy / "preprocessor_config.json", pre.dump(2));
  const fs::path out = dir_ / "no_crop.mxq";
  const auto r = run_qbc("compile " + shell_quote(copy) + " -o " + shell_quote(out) +
                         " --preset multimodal --use-random-calib --no-resume --context 1024"
                         " --set calibration.numSamples=2 --set calibration.seqLength=32");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "preprocessor_config.json") &&
              contains(r.err, "size.shortest_edge without do_center_crop"))
      << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// qbc run --image on every shared photograph: tokens come out, and the image changes them.
TEST_F(VlmCompile, RunWithAnImageGeneratesOnEveryPhotograph) {
  const std::vector<fs::path> photos = photographs(images_);
  ASSERT_GE(photos.size(), 4u);
  std::vector<std::vector<int32_t>> outs;
  for (const fs::path& p : photos) {
    const auto r = run_qbc("run " + shell_quote(dir_ / "a.mxq") + " --image " + shell_quote(p) +
                           " -p 'USER: <image>\nDescribe this image. ASSISTANT:' -n 6 "
                           "--ignore-eos --log-format json");
    ASSERT_EQ(r.exit_code, 0) << p << ": " << r.err;
    const std::vector<int32_t> t = new_tokens(r.err);
    EXPECT_EQ(t.size(), 6u) << p << ": " << r.err;
    outs.push_back(t);
  }
  bool differ = false;
  for (const auto& t : outs) differ = differ || t != outs[0];
  EXPECT_TRUE(differ) << "every photograph gave the same tokens";
  // A prompt without the placeholder gets one at its start: the same tokens as writing it there.
  const auto a =
      run_qbc("run " + shell_quote(dir_ / "a.mxq") + " --image " + shell_quote(photos[0]) +
              " -p '<image>Hi' -n 4 --ignore-eos "
              "--log-format json");
  const auto b = run_qbc("run " + shell_quote(dir_ / "a.mxq") + " --image " +
                         shell_quote(photos[0]) + " -p 'Hi' -n 4 --ignore-eos --log-format json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(new_tokens(a.err), new_tokens(b.err));
}

// Bad images and bad requests: exit 2 naming the problem, never a crash.
TEST_F(VlmCompile, RunRefusesBadImagesAndMismatchedPrompts) {
  const fs::path photo = photographs(images_).front();
  const std::string run = "run " + shell_quote(dir_ / "a.mxq") + " -n 2 ";
  const std::string bytes = testing::read_file(photo);
  testing::write_file(dir_ / "cut" / photo.filename(), bytes.substr(0, bytes.size() / 3));
  testing::write_file(dir_ / "empty.png", "");
  testing::write_file(dir_ / "text.jpg", "not an image at all\n");
  const std::pair<std::string, std::string> cases[] = {
      {"--image " + shell_quote(dir_ / "cut" / photo.filename()) + " -p hi", "cut"},
      {"--image " + shell_quote(dir_ / "empty.png") + " -p hi", "empty.png"},
      {"--image " + shell_quote(dir_ / "text.jpg") + " -p hi", "text.jpg"},
      {"--image " + shell_quote(dir_ / "missing.png") + " -p hi", "missing.png"},
      {"--image " + shell_quote(photo) + " --image " + shell_quote(photo) + " -p '<image> hi'",
       "1 image tokens"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = run_qbc(run + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, needle)) << args << ": " << r.err;
  }
  // Hostile files through `qbc run` (written by the spec-following writers of the image tests,
  // not by our decoder): each exit 2 naming the file and what is wrong, refused from the header
  // before any pixel buffer is allocated; a 16-bit PNG is converted and runs.
  namespace img = testing::img;
  testing::write_file(dir_ / "cmyk.jpg",
                      img::jpeg_file(8, 8, 4, JCS_CMYK, std::vector<uint8_t>(8 * 8 * 4, 7)));
  testing::write_file(dir_ / "huge.png",
                      img::png_file(100000, 100000, 8, 2, {std::string(6, '\0')}));
  testing::write_file(dir_ / "zero.png", img::png_file(0, 4, 8, 2, {std::string(1, '\0')}));
  std::string huge_jpeg = img::jpeg_file(16, 16, 3, JCS_RGB, std::vector<uint8_t>(16 * 16 * 3, 90));
  const size_t sof = huge_jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  for (size_t k : {sof + 5, sof + 7}) {  // height and width 60000
    huge_jpeg[k] = static_cast<char>(0xea);
    huge_jpeg[k + 1] = static_cast<char>(0x60);
  }
  testing::write_file(dir_ / "huge.jpg", huge_jpeg);
  const std::pair<const char*, const char*> hostile[] = {
      {"cmyk.jpg", "CMYK"},
      {"huge.png", "16384 pixels per side"},
      {"zero.png", "zero.png"},
      {"huge.jpg", "60000 x 60000"},
  };
  for (const auto& [file, says] : hostile) {
    const auto r = run_qbc(run + "--image " + shell_quote(dir_ / file) + " -p hi");
    EXPECT_EQ(r.exit_code, 2) << file << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, file)) << file << ": " << r.err;
    EXPECT_TRUE(contains(r.err, says)) << file << ": " << r.err;
  }
  std::vector<std::string> rows16;
  for (int y = 0; y < 32; ++y) {
    std::string row;
    for (int x = 0; x < 32 * 3; ++x)
      row += std::string(2, static_cast<char>((x * 5 + y * 3) & 0xff));
    rows16.push_back(row);
  }
  testing::write_file(dir_ / "deep.png", img::png_file(32, 32, 16, 2, rows16));
  const auto deep = run_qbc(run + "--image " + shell_quote(dir_ / "deep.png") + " -p hi");
  EXPECT_EQ(deep.exit_code, 0) << deep.err;
  // A text model takes no image.
  const fs::path tiny = dir_ / "tiny_run";
  ASSERT_EQ(run_qbc("random-model --tiny -o " + shell_quote(tiny)).exit_code, 0);
  ASSERT_EQ(run_qbc("compile " + shell_quote(tiny) + " -o " + shell_quote(dir_ / "tiny.mxq") +
                    " --use-random-calib --no-resume")
                .exit_code,
            0);
  const auto t = run_qbc("run " + shell_quote(dir_ / "tiny.mxq") + " --image " +
                         shell_quote(photo) + " -p hi -n 2");
  EXPECT_EQ(t.exit_code, 2) << t.err;
  EXPECT_TRUE(contains(t.err, "no vision part")) << t.err;
}

/// The "cached_prompt_tokens" of a --log-format json `qbc run`'s result event (stderr).
int64_t cached_tokens(const std::string& err) {
  const nlohmann::json r = last_event(err, "result");
  return r.contains("cached_prompt_tokens") ? r["cached_prompt_tokens"].get<int64_t>() : -1;
}

// A sequence with an image saved and loaded: the same image reuses the cache and continues as
// a fresh run; another image at the same tokens reuses only the text before it.
TEST_F(VlmCompile, SequenceCacheFilesRecordTheImage) {
  const std::vector<fs::path> photos = photographs(images_);
  const std::string run = "run " + shell_quote(dir_ / "a.mxq") + " --ignore-eos --log-format json ";
  const std::string prompt = " -p 'USER: <image>\nWhat is it? ASSISTANT:'";
  const fs::path cache = dir_ / "seq.bin";
  const auto saved = run_qbc(run + "--image " + shell_quote(photos[0]) + prompt + " -n 0" +
                             " --save-cache " + shell_quote(cache));
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  for (int i = 0; i < 2; ++i) {
    const fs::path& photo = photos[static_cast<size_t>(i)];
    const auto fresh = run_qbc(run + "--image " + shell_quote(photo) + prompt + " -n 5");
    const auto reused = run_qbc(run + "--image " + shell_quote(photo) + prompt + " -n 5" +
                                " --load-cache " + shell_quote(cache));
    ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
    ASSERT_EQ(reused.exit_code, 0) << reused.err;
    EXPECT_EQ(new_tokens(reused.err), new_tokens(fresh.err)) << photo;
    if (i == 0) {
      EXPECT_GT(cached_tokens(reused.err), 576) << "the same image: its rows come from the cache";
    } else {
      EXPECT_EQ(cached_tokens(reused.err), 6) << "another image: only 'USER: ' is reused";
    }
  }
  // A text prompt after the image sequence reuses nothing past the image's first token.
  const auto text = run_qbc(run + prompt + " -n 2 --load-cache " + shell_quote(cache));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_LE(cached_tokens(text.err), 6);
}

// `qbc eval --images`: the compiled VLM against its float folder on image-text pairs, each
// prompt built as `qbc run --image` builds it: per pair the feature SQNR of the image's rows and
// the text's KLD and top-1; against another model's folder of the same shapes the same report
// shows it; a pair without its text, a missing --reference and a model that is not a compiled
// VLM exit 2 naming what is wrong.
TEST_F(VlmCompile, EvalOnImageTextPairsComparesBothPartsWithTheFloatFolder) {
  const fs::path pairs = write_pairs(images_, dir_ / "llava_pairs", "");
  const nlohmann::json own = eval_pairs(dir_ / "a.mxq", model_, pairs);
  expect_close_to_float(own, 576);  // (336 / 14)^2, the CLS row dropped
  ASSERT_TRUE(own.is_object());
  EXPECT_EQ(own["tokens_scored"].get<int64_t>(),
            own["pairs"][0]["tokens_scored"].get<int64_t>() +
                own["pairs"][1]["tokens_scored"].get<int64_t>());
  // Another random model of the same shapes: the features and the text disagree.
  const fs::path other = dir_ / "llava_other";
  const fs::path config = testing::shared_dir() / "model-configs-new/llava-1.5-7b-hf/config.json";
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(other) +
                    " --layers 2 --hidden 64 --intermediate 128 --heads 4 --kv-heads 2 --vocab 512"
                    " --vision-layers 3 --vision-hidden 64 --vision-intermediate 128"
                    " --vision-heads 4 --dtype f32 --seed 4")
                .exit_code,
            0);
  const nlohmann::json wrong = eval_pairs(dir_ / "a.mxq", other, pairs);
  ASSERT_TRUE(wrong.is_object());
  EXPECT_LT(wrong["feature_sqnr_db"].get<double>(), 10.0) << wrong.dump();
  EXPECT_GT(wrong["kld_mean"].get<double>(), 10 * own["kld_mean"].get<double>()) << wrong.dump();
  // The table names each pair.
  const auto table = run_qbc("eval " + shell_quote(dir_ / "a.mxq") + " --reference " +
                             shell_quote(model_) + " --images " + shell_quote(pairs));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const fs::path& p : photographs(pairs))
    EXPECT_TRUE(contains(table.out, p.filename().string())) << table.out;
  EXPECT_TRUE(contains(table.out, "feature SQNR")) << table.out;
  // Refusals.
  const fs::path lone = dir_ / "llava_lone";
  fs::remove_all(lone);
  fs::create_directories(lone);
  fs::copy_file(photographs(images_).front(), lone / "x.png");
  const std::pair<std::string, std::string> cases[] = {
      {shell_quote(dir_ / "a.mxq") + " --reference " + shell_quote(model_) + " --images " +
           shell_quote(lone),
       "x.png has no text file x.txt"},
      {shell_quote(dir_ / "a.mxq") + " --images " + shell_quote(pairs),
       "--images needs --reference"},
      {shell_quote(model_) + " --reference " + shell_quote(model_) + " --images " +
           shell_quote(pairs),
       "is not one"},
      {shell_quote(dir_ / "a.mxq") + " --reference " + shell_quote(model_) + " --images " +
           shell_quote(dir_ / "no_such_folder"),
       "no_such_folder"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = run_qbc("eval " + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, needle)) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace qbc

namespace qbc {
namespace {

// SmolVLM-256M-Instruct (tests/assets/model-configs; Idefics3 classes): a random folder from
// its config compiles with its SigLIP tile tower and pixel-shuffle connector at 1024 (2 x 2
// tiles of 512 and the global view, 64 rows each); the MXQ's image span is the processor's
// text (tile markers, newlines, <global-img>) as the tokenizer encodes it; every photograph
// runs; eval against the float folder; calib prepare --images puts the span into samples;
// 1000 pixels (not whole tiles) exit 2 naming the key.
TEST_F(VlmCompile, ASmolVlmFolderCompilesTilesAndAGlobalViewAndRunsWithAnImage) {
  const fs::path config =
      testing::source_dir() / "tests/assets/model-configs/SmolVLM-256M-Instruct/config.json";
  const fs::path smol = dir_ / "smolvlm";
  ASSERT_EQ(run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(smol) +
                    " --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --vocab 512"
                    " --head-dim 16 --vision-layers 2 --vision-hidden 32 --vision-heads 2"
                    " --vision-intermediate 64 --dtype f32 --seed 5 --init-std 0.15")
                .exit_code,
            0);
  const fs::path out = dir_ / "smolvlm.mxq";
  const auto r = run_qbc("compile " + shell_quote(smol) + " -o " + shell_quote(out) +
                         " --preset multimodal --use-random-calib --no-resume --context 1024"
                         " --set calibration.numSamples=2 --set calibration.seqLength=32"
                         " --set vision.imageSize=1024 --images " +
                         shell_quote(images_) + " --log-format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "4 tiles and a global view of 64 feature rows x 64")) << r.err;
  const nlohmann::json s = summary_of(r.err);
  ASSERT_TRUE(s.contains("vision")) << r.err;
  EXPECT_EQ(s["vision"]["views_per_image"], 5) << r.err;
  EXPECT_FALSE(contains(r.err, "capitalize")) << r.err;  // the chat template is in the subset
  auto m = mxq::load_model(out.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_NE(m->vision, nullptr);
  const mxq::pb::VisionPart& v = m->meta.vision();
  EXPECT_EQ(v.family(), "idefics3");
  EXPECT_EQ(v.image_size(), 512);
  EXPECT_EQ(v.tiles_per_side(), 2);
  EXPECT_EQ(v.feature_rows(), 64);
  EXPECT_EQ(v.tokens_per_image(), 5 * 64);
  // The span: <fake><row_1_col_1> 64 x <image> <fake><row_1_col_2> 64 x <image> \n ... \n\n
  // <fake><global-img> 64 x <image> <fake>, the markers at the published offsets from <image>.
  const int32_t image = v.image_token_id(), fake = image - 1, global = image - 38;
  const std::vector<int32_t> span(v.image_span_ids().begin(), v.image_span_ids().end());
  ASSERT_GT(span.size(), 5u * 64 + 10) << span.size();
  EXPECT_EQ(std::count(span.begin(), span.end(), image), 5 * 64);
  EXPECT_EQ(span[0], fake);
  EXPECT_EQ(span[1], image - 37);  // <row_1_col_1>
  EXPECT_EQ(span[2], image);
  EXPECT_EQ(span[66], fake);
  EXPECT_EQ(span[67], image - 36);  // <row_1_col_2>
  EXPECT_EQ(span.back(), fake);
  EXPECT_EQ(span[span.size() - 66], global);
  EXPECT_EQ(std::count(span.begin(), span.end(), fake), 6);

  expect_tokens_differ_by_photograph(out, images_, "<image>Describe this image.", "");
  expect_close_to_float(
      eval_pairs(out, smol, write_pairs(images_, dir_ / "smolvlm_pairs", "<image>")), 5 * 64);
  const auto shown = run_qbc("inspect " + shell_quote(out));
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(contains(shown.out, "2 x 2 tiles and a global view")) << shown.out;
  const auto chat =
      run_qbc("run " + shell_quote(out) + " --image " + shell_quote(images_ / "rocket.jpg") +
              " --chat -p 'What is it?' -n 3 --ignore-eos --ids");
  EXPECT_EQ(chat.exit_code, 0) << chat.err;
  // The template's "User:" then "<image>", expanded to the span (its first marker after the
  // role text).
  EXPECT_TRUE(
      contains(chat.out, " " + std::to_string(fake) + " " + std::to_string(image - 37) + " "))
      << chat.out << chat.err;

  // Image-text calibration: the whole span (markers and feature rows) in every sample.
  QBC_REQUIRE_SHARED(text, "data/tinystories/tinystories_valid_head.clean.txt");
  const fs::path cal = dir_ / "smolvlm_cal";
  const auto prep = run_qbc("calib prepare " + shell_quote(smol) + " --text " + shell_quote(text) +
                            " --num-samples 2 --seq-len 400 --set vision.imageSize=1024 --images " +
                            shell_quote(images_) + " -o " + shell_quote(cal));
  ASSERT_EQ(prep.exit_code, 0) << prep.err;
  const auto short_prep =
      run_qbc("calib prepare " + shell_quote(smol) + " --text " + shell_quote(text) +
              " --num-samples 2 --seq-len 300 --set vision.imageSize=1024 --images " +
              shell_quote(images_) + " -o " + shell_quote(dir_ / "smolvlm_cal_short"));
  EXPECT_EQ(short_prep.exit_code, 2) << short_prep.err;
  EXPECT_TRUE(contains(short_prep.err, "--seq-len 300 holds no image")) << short_prep.err;

  // The llm preset with spinR1 forced: the language model's residual stream is rotated, so the
  // tower's projection is rotated alike and the features splice into the rotated stream (the
  // file records the seed; eval undoes it for the feature SQNR). Before, the features went in
  // unrotated: KLD 1.38 and top-1 0 % against the float folder on the same pairs.
  const fs::path llm = dir_ / "smolvlm_llm.mxq";
  const auto c = run_qbc("compile " + shell_quote(smol) + " -o " + shell_quote(llm) +
                         " --preset llm --calib " + shell_quote(cal) +
                         " --set equivalentTransformation.spinR1.policy=always"
                         " --set vision.imageSize=1024 --no-resume --context 1024 --images " +
                         shell_quote(images_));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto rotated = mxq::load_model(llm.string());
  ASSERT_TRUE(rotated.ok()) << rotated.status().to_string();
  EXPECT_TRUE(rotated->meta.vision().has_language_rotation_seed());
  expect_close_to_float(eval_pairs(llm, smol, dir_ / "smolvlm_pairs"), 5 * 64);

  const auto bad =
      run_qbc("compile " + shell_quote(smol) + " -o " + shell_quote(dir_ / "smolvlm_bad.mxq") +
              " --preset multimodal --use-random-calib --no-resume"
              " --set vision.imageSize=1000");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "vision.imageSize 1000")) << bad.err;
  EXPECT_TRUE(contains(bad.err, "tiles of 512")) << bad.err;
  EXPECT_FALSE(fs::exists(dir_ / "smolvlm_bad.mxq"));
  // A processor that does not split gives one view: more tiles per side is refused by name.
  const fs::path pre = smol / "preprocessor_config.json";
  nlohmann::json p = nlohmann::json::parse(testing::read_file(pre));
  p["do_image_splitting"] = false;
  testing::write_file(pre, p.dump(2));
  const auto nosplit =
      run_qbc("compile " + shell_quote(smol) + " -o " + shell_quote(dir_ / "smolvlm_nosplit.mxq") +
              " --preset multimodal --use-random-calib --no-resume"
              " --set vision.imageSize=1024");
  EXPECT_EQ(nosplit.exit_code, 2) << nosplit.err;
  EXPECT_TRUE(contains(nosplit.err, "do_image_splitting is false")) << nosplit.err;
  EXPECT_TRUE(contains(nosplit.err, "vision.imageSize=512")) << nosplit.err;
}

}  // namespace
}  // namespace qbc
