// LLaVA-1.5's CLIP vision tower as an NPU program (docs/multimodal.md "The vision tower on
// the NPU"): a small random tower from the real llava-1.5-7b-hf config, quantized with the
// vision recipe (quant::quantize_vision), compiled by the backend into a feature bundle
// (docs/npu.md "Feature bundles") and run in the executor (runtime::FeatureSession). The
// feature rows must equal the fake-quant evaluator's bit for bit for every scheme, tile
// setting and activation-scale mode; the SRAM plan must not depend on the patch count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "feature_bundle_cases.h"
#include "qbc/config/config.h"
#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/isa/verify.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/plan.h"
#include "qbc/quant/fakequant.h"
#include "qbc/quant/vision_quant.h"
#include "qbc/runtime/feature_session.h"
#include "small_case.h"
#include "small_vlm.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;

using testing::first_difference;

class VisionBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/llava-1.5-7b-hf/config.json");
    dir_ = testing::temp_dir() / "vision_backend_random";
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 29;
    o.init_std = 0.1;
    o.overrides.vision.depth = 3;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;
    o.overrides.vision.intermediate_size = 48;
    testing::shrink_language_model(o.overrides);  // the projector writes its width
    QBC_ASSERT_OK(frontend::write_random_model(o));
    auto vc = frontend::load_vision_config(dir_ / "config.json");
    QBC_ASSERT_OK(vc);
    ASSERT_TRUE(vc->has_value());
    vc_ = **vc;
    auto ck = frontend::SafetensorsCheckpoint::open(dir_);
    QBC_ASSERT_OK(ck);
    auto ckpt = std::make_shared<frontend::SafetensorsCheckpoint>(std::move(*ck));
    reader_ = [ckpt](const ir::Weight& w, std::vector<float>* v) {
      return ckpt->read_f32(w.tensor, v);
    };
    auto base = frontend::clip_embed_base(
        vc_, [ckpt](const std::string& n, std::vector<float>* v) { return ckpt->read_f32(n, v); });
    QBC_ASSERT_OK(base);
    base_ = std::move(*base);
  }

  /// The tower at `image_size` (rows 1 + (image_size / 14)^2).
  frontend::VisionConfig at_size(int64_t image_size) const {
    frontend::VisionConfig vc = vc_;
    vc.image_size = image_size;
    return vc;
  }

  /// Random inputs of the tower: patch rows in [-1.8, 2.1] (the CLIP-normalised pixel range)
  /// with the CLS row zero, and the checkpoint's CLS + position rows (a random table of the
  /// same range at another size).
  quant::FeatureSample sample(const frontend::VisionConfig& vc, uint32_t seed) const {
    const int64_t side = vc.image_size / vc.patch_size, rows = 1 + side * side;
    const int64_t patch = 3 * vc.patch_size * vc.patch_size;
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-1.8f, 2.1f);
    std::vector<float> patches(static_cast<size_t>(rows * patch), 0.0f);
    for (size_t i = static_cast<size_t>(patch); i < patches.size(); ++i) patches[i] = u(gen);
    std::vector<float> base = base_;
    if (vc.image_size != vc_.image_size) {
      std::uniform_real_distribution<float> ub(-0.3f, 0.3f);
      base.assign(static_cast<size_t>(rows * vc.width), 0.0f);
      for (float& x : base) x = ub(gen);
    }
    return {patches, base};
  }

  /// The tower at `image_size`, quantized with `options` on two random calibration images.
  std::shared_ptr<const quant::QuantizeResult> quantized(
      int64_t image_size, const config::CompileOptions& options) const {
    const frontend::VisionConfig vc = at_size(image_size);
    return testing::quantized_tower(frontend::build_clip_vision_graph(vc), reader_,
                                    {sample(vc, 1), sample(vc, 2)}, options);
  }

  fs::path dir_;
  frontend::VisionConfig vc_;
  ir::WeightReader reader_;
  std::vector<float> base_;
};

// Bit-exactness: schemes x tile settings x activation-scale modes, on a held-out image.
TEST_F(VisionBackend, ExecutorFeaturesEqualTheFakeQuantEvaluatorBitForBit) {
  const quant::FeatureSample image = sample(vc_, 100);
  const int64_t rows = 1 + (vc_.image_size / vc_.patch_size) * (vc_.image_size / vc_.patch_size);
  for (const testing::ScaleMode& qm : testing::tower_scale_modes()) {
    auto q = quantized(vc_.image_size, qm.options());
    ASSERT_NE(q, nullptr) << qm.label;
    const ir::WeightReader qr = quant::with_sidecar(reader_, *q);
    const std::vector<float> want = testing::evaluator_features(*q, qr, image);
    ASSERT_EQ(want.size(), static_cast<size_t>(rows * vc_.text_hidden));
    for (const testing::Deployment& d : testing::tower_deployments()) {
      const std::string at = std::string(qm.label) + ", " + d.label();
      testing::expect_executor_matches(*q, qr, d, rows, image, want, at, [&](const isa::Bundle& b) {
        EXPECT_EQ(b.output_rows, rows) << at;
        ASSERT_EQ(b.feature_inputs.size(), 2u) << at;
        EXPECT_EQ(b.feature_inputs[0].name, "patches") << at;
        EXPECT_EQ(b.feature_inputs[1].name, "embed_base") << at;
      });
    }
  }
}

// The tiles differ between the deployments above (so the test covers tile invariance), and
// a different image gives different features (so equality is not vacuous).
TEST_F(VisionBackend, TileSettingsDifferAndFeaturesDependOnTheImage) {
  auto q = quantized(vc_.image_size, config::defaults());
  ASSERT_NE(q, nullptr);
  const ir::WeightReader qr = quant::with_sidecar(reader_, *q);
  const int64_t rows = 1 + (vc_.image_size / vc_.patch_size) * (vc_.image_size / vc_.patch_size);
  npu::Plan big, small;
  for (auto [sram, plan] : {std::pair{int64_t{0}, &big}, std::pair{int64_t{48 * 1024}, &small}}) {
    auto o = testing::feature_options("aries-rb", sram, isa::Scheme::kSingle, 1, rows);
    QBC_ASSERT_OK(o);
    auto b = npu::run_pipeline("npu-compile", q->graph, *o, &qr, {}, {}, nullptr, plan);
    QBC_ASSERT_OK(b);
  }
  bool differ = false;
  for (size_t i = 0; i < big.nodes.size(); ++i) {
    differ = differ || big.nodes[i].linear.t.mt != small.nodes[i].linear.t.mt ||
             big.nodes[i].linear.t.nt != small.nodes[i].linear.t.nt ||
             big.nodes[i].attention.t.bc != small.nodes[i].attention.t.bc ||
             big.nodes[i].rows_mt != small.nodes[i].rows_mt;
  }
  EXPECT_TRUE(differ) << "the 48 KiB SRAM setting chose the same tiles";
  auto o = testing::feature_options("aries-rb", 0, isa::Scheme::kSingle, 1, rows);
  QBC_ASSERT_OK(o);
  auto b = npu::compile(q->graph, qr, *o);
  QBC_ASSERT_OK(b);
  runtime::DeviceOptions dopt;
  auto s =
      runtime::FeatureSession::create(std::make_shared<const isa::Bundle>(std::move(*b)), dopt);
  QBC_ASSERT_OK(s);
  std::vector<float> a, c;
  QBC_ASSERT_OK((*s)->forward(sample(vc_, 100), &a));
  QBC_ASSERT_OK((*s)->forward(sample(vc_, 101), &c));
  EXPECT_NE(first_difference(a, c), -1);
}

// SRAM depends on the tiles, not on the patch count: the tower at 224 (257 rows) and at 336
// (577 rows) plans the same SRAM stages on the same target.
TEST_F(VisionBackend, SramPeakIsTheSameForTwoImageSizes) {
  std::vector<npu::StagePlan> stages[2];
  int64_t io[2] = {0, 0};
  const int64_t sizes[2] = {224, 336};
  for (int i = 0; i < 2; ++i) {
    auto q = quantized(sizes[i], config::defaults());
    ASSERT_NE(q, nullptr);
    const ir::WeightReader qr = quant::with_sidecar(reader_, *q);
    const int64_t side = sizes[i] / vc_.patch_size;
    auto o = testing::feature_options("aries-rb", 0, isa::Scheme::kGlobal8, 8, 1 + side * side);
    QBC_ASSERT_OK(o);
    npu::Plan plan;
    auto b = npu::run_pipeline("npu-compile", q->graph, *o, &qr, {}, {}, nullptr, &plan);
    ASSERT_TRUE(b.ok()) << sizes[i] << ": " << b.status().to_string();
    stages[i] = plan.stages;
    io[i] = plan.regions.io;
  }
  const int64_t peak = testing::expect_same_sram_stages(stages[0], stages[1]);
  EXPECT_LT(io[0], io[1]);  // DRAM grows with the rows
  std::printf("[vision_backend] SRAM peak %lld bytes at 257 and at 577 rows; io %lld vs %lld\n",
              static_cast<long long>(peak), static_cast<long long>(io[0]),
              static_cast<long long>(io[1]));
}

}  // namespace
}  // namespace qbc
