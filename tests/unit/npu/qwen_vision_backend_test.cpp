// Qwen2.5-VL's vision tower as an NPU program (docs/multimodal.md "The Qwen2.5-VL tower on the
// NPU"): a small random tower from the real Qwen2.5-VL-3B-Instruct config (window and full
// attention blocks, 2-D rope tables, the 2x2 merger), quantized with the vision recipe,
// compiled into a feature bundle whose output has a quarter of the input rows, and run in the
// executor; and Qwen2-VL's (tests/assets/model-configs/Qwen2-VL-2B-Instruct: LayerNorm blocks,
// a quick_gelu MLP, whole-image attention in every block). Its features must equal the fake-quant
// evaluator's bit for bit for every scheme, tile setting and activation-scale mode; merge_rows is a
// view (no instruction) whose consumers count their own rows; the SRAM plan does not depend on the
// image size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "feature_bundle_cases.h"
#include "qbc/config/config.h"
#include "qbc/frontend/qwen_vision.h"
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

/// A random Qwen2.5-VL folder with a tower of `width` columns (2 heads), 3 blocks (block 1
/// full attention, 0 and 2 windows), FFN 48 and an output of 24 columns; with `qwen2`, a
/// Qwen2-VL folder (every block full attention, FFN 2 x width).
class QwenTower {
 public:
  void write(const fs::path& dir, int64_t width, bool qwen2 = false) {
    QBC_REQUIRE_SHARED(shared_config, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
    frontend::RandomModelOptions o;
    o.config_path = qwen2 ? testing::source_dir() /
                                "tests/assets/model-configs/Qwen2-VL-2B-Instruct/config.json"
                          : shared_config;
    o.output_dir = dir;
    o.seed = 41;
    o.init_std = 0.1;
    o.overrides.vision.depth = 3;
    o.overrides.vision.hidden_size = width;
    o.overrides.vision.num_heads = 2;
    o.overrides.vision.intermediate_size = qwen2 ? 2 * width : 48;
    o.overrides.vision.out_hidden_size = 24;
    if (!qwen2) o.overrides.vision.fullatt_block_indexes = std::vector<int64_t>{1};
    testing::shrink_language_model(o.overrides);
    QBC_ASSERT_OK(frontend::write_random_model(o));
    auto vc = frontend::load_vision_config(dir / "config.json");
    QBC_ASSERT_OK(vc);
    ASSERT_TRUE(vc->has_value());
    vc_ = **vc;
    auto ck = frontend::SafetensorsCheckpoint::open(dir);
    QBC_ASSERT_OK(ck);
    auto ckpt = std::make_shared<frontend::SafetensorsCheckpoint>(std::move(*ck));
    reader_ = [ckpt](const ir::Weight& w, std::vector<float>* v) {
      return ckpt->read_f32(w.tensor, v);
    };
  }

  /// The layout of a grid of `h` x `w` patches.
  frontend::QwenVisionLayout layout(int64_t h, int64_t w) const {
    auto l = frontend::qwen_vision_layout(vc_, {1, h, w});
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    return l.ok() ? std::move(*l) : frontend::QwenVisionLayout{};
  }

  quant::FeatureSample sample(const frontend::QwenVisionLayout& l, uint32_t seed) const {
    return testing::qwen_random_image(vc_, l, seed);
  }

  /// The tower for `l`, quantized with `options` on two random images.
  std::shared_ptr<const quant::QuantizeResult> quantized(const frontend::QwenVisionLayout& l,
                                                         const config::CompileOptions& o) const {
    return testing::quantized_tower(frontend::build_qwen_vision_graph(vc_, l), reader_,
                                    {sample(l, 1), sample(l, 2)}, o);
  }

  frontend::VisionConfig vc_;
  ir::WeightReader reader_;
};

class QwenVisionBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    tower_.write(testing::temp_dir() / "qwen_vision_backend", 32);
    layout_ = tower_.layout(16, 24);  // 384 patches in 6 windows of 64, 96 merged rows
  }
  QwenTower tower_;
  frontend::QwenVisionLayout layout_;
};

// Bit-exactness: schemes x tile settings x activation-scale modes, on a held-out image.
void expect_bit_exact(const QwenTower& tower, const frontend::QwenVisionLayout& layout) {
  const quant::FeatureSample image = tower.sample(layout, 100);
  const int64_t rows = layout.grid.patches(), out_rows = rows / 4;
  for (const testing::ScaleMode& qm : testing::tower_scale_modes()) {
    auto q = tower.quantized(layout, qm.options());
    ASSERT_NE(q, nullptr) << qm.label;
    const ir::WeightReader qr = quant::with_sidecar(tower.reader_, *q);
    const std::vector<float> want = testing::evaluator_features(*q, qr, image);
    ASSERT_EQ(want.size(), static_cast<size_t>(out_rows * 24));
    for (const testing::Deployment& d : testing::tower_deployments()) {
      const std::string at = std::string(qm.label) + ", " + d.label();
      testing::expect_executor_matches(*q, qr, d, rows, image, want, at, [&](const isa::Bundle& b) {
        EXPECT_EQ(b.output_rows, out_rows) << at;
        ASSERT_EQ(b.feature_inputs.size(), 3u) << at;
        EXPECT_EQ(b.feature_inputs[0].name, "patches") << at;
      });
    }
  }
}

TEST_F(QwenVisionBackend, ExecutorFeaturesEqualTheFakeQuantEvaluatorBitForBit) {
  expect_bit_exact(tower_, layout_);
}

TEST(Qwen2VisionBackend, ExecutorFeaturesEqualTheFakeQuantEvaluatorBitForBit) {
  QwenTower tower;
  tower.write(testing::temp_dir() / "qwen2_vision_backend", 32, /*qwen2=*/true);
  ASSERT_EQ(tower.vc_.tower, frontend::VisionTower::kQwen2Vit);
  const frontend::QwenVisionLayout layout = tower.layout(16, 24);  // 384 patches, 96 merged
  EXPECT_TRUE(layout.window_tokens.empty());
  expect_bit_exact(tower, layout);
}

// The plan: merge_rows is a view of its input's rows (four dense rows read as one), the nodes
// after it count a quarter of the rows, a different image gives different features, and the
// SRAM stages do not depend on the image size: 32x32 and 32x48 patches (256 and 384 merged
// rows; a row tile is at most 128 rows, and fewer only when a call has fewer rows).
TEST_F(QwenVisionBackend, MergeRowsIsAViewAndSramDoesNotGrowWithTheImage) {
  const frontend::QwenVisionLayout layouts[2] = {tower_.layout(32, 32), tower_.layout(32, 48)};
  std::vector<npu::StagePlan> stages[2];
  for (int i = 0; i < 2; ++i) {
    auto q = tower_.quantized(layouts[i], config::defaults());
    ASSERT_NE(q, nullptr);
    const ir::WeightReader qr = quant::with_sidecar(tower_.reader_, *q);
    const int64_t rows = layouts[i].grid.patches();
    auto o = testing::feature_options("aries-rb", 0, isa::Scheme::kGlobal8, 8, rows);
    QBC_ASSERT_OK(o);
    npu::Plan plan;
    auto b = npu::run_pipeline("npu-compile", q->graph, *o, &qr, {}, {}, nullptr, &plan);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    stages[i] = plan.stages;
    size_t merge = 0;
    while (merge < plan.nodes.size() && plan.nodes[merge].op != "merge_rows") ++merge;
    ASSERT_LT(merge, plan.nodes.size());
    const npu::NodePlan& m = plan.nodes[merge];
    const npu::NodePlan& src = plan.nodes[static_cast<size_t>(m.alias)];
    EXPECT_EQ(m.row_div, 4);
    EXPECT_EQ(src.row_div, 1);
    EXPECT_EQ(m.place.buf, src.place.buf);
    EXPECT_EQ(m.place.col, src.place.col);
    EXPECT_EQ(m.place.stride, 4 * src.place.stride);
    EXPECT_EQ(m.place.width, 4 * src.place.width);
    EXPECT_EQ(plan.rows(merge), rows / 4);
    for (size_t k = merge + 1; k < plan.nodes.size(); ++k) {
      EXPECT_EQ(plan.nodes[k].row_div, 4) << plan.nodes[k].name;
      EXPECT_LE(plan.nodes[k].linear.t.mt, rows / 4) << plan.nodes[k].name;
    }
    EXPECT_EQ(b->output_rows, rows / 4);
    // No instruction is attributed to the view.
    for (const isa::CoreProgram& cp : b->modes[0].prefill.cores) {
      for (const isa::Instr& in : cp.code) EXPECT_NE(in.node, static_cast<int32_t>(merge));
    }
    if (i == 0) {
      runtime::DeviceOptions dopt;
      dopt.scheme = isa::Scheme::kGlobal8;
      auto s =
          runtime::FeatureSession::create(std::make_shared<const isa::Bundle>(std::move(*b)), dopt);
      QBC_ASSERT_OK(s);
      std::vector<float> a, c;
      QBC_ASSERT_OK((*s)->forward(tower_.sample(layouts[0], 100), &a));
      QBC_ASSERT_OK((*s)->forward(tower_.sample(layouts[0], 101), &c));
      EXPECT_NE(first_difference(a, c), -1);
    }
  }
  const int64_t peak = testing::expect_same_sram_stages(stages[0], stages[1]);
  std::printf("[qwen_vision_backend] SRAM peak %lld bytes at 1024 and at 1536 patches\n",
              static_cast<long long>(peak));
}

// The plan verifier's rules on row counts (docs/npu.md "The plan verifier"): a row_div that
// does not divide a call's rows (P1), a merge view that is not its input's dense rows read f at
// a time (P5), a row tile past the rows of a node after the merge (P3).
TEST_F(QwenVisionBackend, PlanVerifierChecksRowCountsAndTheMergeView) {
  auto q = tower_.quantized(layout_, config::defaults());
  ASSERT_NE(q, nullptr);
  const ir::WeightReader qr = quant::with_sidecar(tower_.reader_, *q);
  auto o = testing::feature_options("aries-rb", 0, isa::Scheme::kSingle, 1, layout_.grid.patches());
  QBC_ASSERT_OK(o);
  npu::Plan plan;
  QBC_ASSERT_OK(
      npu::run_pipeline("npu-compile", q->graph, *o, &qr, {}, {}, nullptr, &plan).status());
  QBC_ASSERT_OK(npu::verify_plan(plan));
  size_t merge = 0;
  while (merge < plan.nodes.size() && plan.nodes[merge].op != "merge_rows") ++merge;
  ASSERT_LT(merge + 1, plan.nodes.size());
  const auto broken = [&](const std::function<void(npu::Plan&)>& edit, const std::string& inv,
                          const std::string& what) {
    npu::Plan p = plan;
    edit(p);
    const Status st = npu::verify_plan(p);
    ASSERT_FALSE(st.ok()) << inv;
    EXPECT_EQ(st.message().rfind(inv + " (", 0), 0u) << st.message();
    EXPECT_TRUE(testing::contains(st.message(), what)) << st.message();
  };
  broken([&](npu::Plan& p) { p.nodes[merge].row_div = 5; }, "P1",
         "row_div 5 does not divide the 384 rows");
  broken([&](npu::Plan& p) { p.nodes[merge].place.stride *= 2; }, "P5",
         "merge_rows %vis.merger.merge");
  broken([&](npu::Plan& p) { p.nodes[merge].place.width /= 2; }, "P5",
         "merge_rows %vis.merger.merge");
  size_t fc1 = merge + 1;
  while (fc1 < plan.nodes.size() && plan.nodes[fc1].kind != npu::NodeKind::kLinear) ++fc1;
  ASSERT_LT(fc1, plan.nodes.size());
  broken([&](npu::Plan& p) { p.nodes[fc1].linear.t.mt = 128; }, "P3", "96 rows per call");
}

}  // namespace
}  // namespace qbc
