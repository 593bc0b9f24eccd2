// Gemma 3's vision tower as an NPU program (docs/multimodal.md "Gemma 3", "On the NPU"): a small
// random SigLIP tower and soft-embedding projector written from the real gemma-3-4b-it config
// (tanh GELU, bidirectional attention, the 4 x 4 average pool, the (1 + w) RMSNorm, the
// transposed projector weight), built at 224 and 448 pixels instead of 896 (16 x 16 and 32 x 32
// patches, pooled by 4 to 16 and 64 tokens) so each compile is small, quantized with the vision
// recipe and compiled into a feature bundle. Its features must equal the fake-quant evaluator's
// bit for bit for every scheme, tile setting and activation-scale mode; avg_pool's row tiles
// are whole bands of windows; the SRAM plan does not depend on the image size.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "feature_bundle_cases.h"
#include "qbc/config/config.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/plan.h"
#include "qbc/quant/vision_quant.h"
#include "small_case.h"
#include "small_vlm.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;

/// A random Gemma 3 folder whose tower has 2 layers of width 32 (2 heads, FFN 43: no group size
/// divides it, as none divides SigLIP's 4304) and a language model of width 24.
class Gemma3Tower {
 public:
  void write(const fs::path& dir) {
    QBC_REQUIRE_SHARED(config, "model-configs-new/gemma-3-4b-it/config.json");
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir;
    o.seed = 23;
    o.init_std = 0.1;
    o.overrides.vision.depth = 2;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;
    o.overrides.vision.intermediate_size = 43;
    testing::shrink_language_model(o.overrides);
    o.overrides.head_dim = 12;
    QBC_ASSERT_OK(frontend::write_random_model(o));
    auto vc = frontend::load_vision_config(dir / "config.json");
    QBC_ASSERT_OK(vc);
    ASSERT_TRUE(vc->has_value());
    vc_ = **vc;
    auto ck = frontend::SafetensorsCheckpoint::open(dir);
    QBC_ASSERT_OK(ck);
    auto ckpt = std::make_shared<frontend::SafetensorsCheckpoint>(std::move(*ck));
    const frontend::TensorFloats read = [ckpt](const std::string& n, std::vector<float>* v) {
      return ckpt->read_f32(n, v);
    };
    reader_ = [read](const ir::Weight& w, std::vector<float>* v) {
      return frontend::gemma3_read_vision_weight(read, w, v);
    };
  }

  /// The tower's config at `side` pixels (the pool stays 4).
  frontend::VisionConfig at(int64_t side) const {
    frontend::VisionConfig vc = vc_;
    vc.image_size = side;
    return vc;
  }

  /// Random inputs for `side`: smoothed normalized pixels in [-1, 1] (Gemma's mean/std 0.5) as
  /// patch rows, and a random position table.
  quant::FeatureSample sample(int64_t side, uint32_t seed) const {
    const int64_t n = (side / vc_.patch_size) * (side / vc_.patch_size);
    const int64_t width = 3 * vc_.patch_size * vc_.patch_size;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> rows(static_cast<size_t>(n * width));
    float prev = 0.0f;
    for (float& v : rows) {
      prev = 0.7f * prev + 0.3f * u(rng);
      v = prev;
    }
    std::vector<float> base(static_cast<size_t>(n * vc_.width));
    std::mt19937 brng(7);  // one position table for every image
    std::normal_distribution<float> g(0.0f, 0.1f);
    for (float& v : base) v = g(brng);
    return {rows, base};
  }

  std::shared_ptr<const quant::QuantizeResult> quantized(int64_t side,
                                                         const config::CompileOptions& o) const {
    return testing::quantized_tower(frontend::build_gemma3_vision_graph(at(side)), reader_,
                                    {sample(side, 1), sample(side, 2)}, o);
  }

  frontend::VisionConfig vc_;
  ir::WeightReader reader_;
};

class Gemma3VisionBackend : public ::testing::Test {
 protected:
  void SetUp() override { tower_.write(testing::temp_dir() / "gemma3_vision_backend"); }
  Gemma3Tower tower_;
};

/// Whether `b`'s programs hold an instruction of type T that `pred` accepts.
template <class T, class P>
bool has_instr(const isa::Bundle& b, P pred) {
  for (const isa::Mode& m : b.modes) {
    for (const isa::CoreProgram& cp : m.prefill.cores) {
      for (const isa::Instr& in : cp.code) {
        if (const T* op = std::get_if<T>(&in.op); op != nullptr && pred(*op)) return true;
      }
    }
  }
  return false;
}

// Bit-exactness: schemes x tile settings x activation-scale modes, on a held-out image; the
// programs pool with avg_pool and run SigLIP's GELU as the tanh form.
TEST_F(Gemma3VisionBackend, ExecutorFeaturesEqualTheFakeQuantEvaluatorBitForBit) {
  ASSERT_EQ(tower_.vc_.pool, 4);
  const int64_t side = 224, rows = 16 * 16, out_rows = rows / 16;
  const quant::FeatureSample image = tower_.sample(side, 100);
  for (const testing::ScaleMode& qm : testing::tower_scale_modes()) {
    auto q = tower_.quantized(side, qm.options());
    ASSERT_NE(q, nullptr) << qm.label;
    const ir::WeightReader qr = quant::with_sidecar(tower_.reader_, *q);
    const std::vector<float> want = testing::evaluator_features(*q, qr, image);
    ASSERT_EQ(want.size(), static_cast<size_t>(out_rows * 24));
    for (const testing::Deployment& d : testing::tower_deployments()) {
      const std::string at = std::string(qm.label) + ", " + d.label();
      testing::expect_executor_matches(*q, qr, d, rows, image, want, at, [&](const isa::Bundle& b) {
        EXPECT_EQ(b.output_rows, out_rows) << at;
        ASSERT_EQ(b.feature_inputs.size(), 2u) << at;
        EXPECT_EQ(b.feature_inputs[0].name, "patches") << at;
        EXPECT_EQ(b.feature_inputs[1].name, "embed_base") << at;
        EXPECT_TRUE(has_instr<isa::AvgPool>(b, [](const isa::AvgPool& p) {
          return p.kernel == 4 && p.grid_w == 16;
        })) << at;
        EXPECT_TRUE(has_instr<isa::Eltwise>(b, [](const isa::Eltwise& e) {
          return e.op == isa::EltOp::kGeluTanh;
        })) << at;
        EXPECT_FALSE(has_instr<isa::Eltwise>(b, [](const isa::Eltwise& e) {
          return e.op == isa::EltOp::kGeluQuick;
        })) << at;
      });
    }
  }
}

// The plan: avg_pool's row tiles are whole bands of grid_w / kernel windows, the nodes after it
// count a sixteenth of the rows, and, on a 48 KiB core where the bands must be tiled, the SRAM
// stages do not depend on the image size (672 and 896 pixels: 2304 and 4096 patch rows) except
// avg_pool's own, which is its band tile: kernel grid rows, so it grows with the grid's width.
TEST_F(Gemma3VisionBackend, AvgPoolTilesAreWholeBandsAndOnlyTheirSramFollowsTheGridWidth) {
  std::vector<npu::StagePlan> stages[2];
  const int64_t sides[2] = {672, 896};
  for (int i = 0; i < 2; ++i) {
    auto q = tower_.quantized(sides[i], config::defaults());
    ASSERT_NE(q, nullptr);
    const ir::WeightReader qr = quant::with_sidecar(tower_.reader_, *q);
    const int64_t grid = sides[i] / 14, rows = grid * grid, ow = grid / 4;
    auto o = testing::feature_options("aries-rb", 48 * 1024, isa::Scheme::kGlobal8, 8, rows);
    QBC_ASSERT_OK(o);
    npu::Plan plan;
    auto b = npu::run_pipeline("npu-compile", q->graph, *o, &qr, {}, {}, nullptr, &plan);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    size_t pool = 0;
    while (pool < plan.nodes.size() && plan.nodes[pool].op != "avg_pool") ++pool;
    ASSERT_LT(pool, plan.nodes.size());
    const npu::NodePlan& p = plan.nodes[pool];
    EXPECT_EQ(p.row_div, 16);
    EXPECT_EQ(plan.rows(pool), rows / 16);
    EXPECT_EQ(p.rows_mt % ow, 0) << p.rows_mt;
    EXPECT_LT(p.rows_mt, rows / 16);  // more than one tile on 48 KiB
    for (size_t k = pool + 1; k < plan.nodes.size(); ++k)
      EXPECT_EQ(plan.nodes[k].row_div, 16) << plan.nodes[k].name;
    EXPECT_EQ(b->output_rows, rows / 16);
    for (const npu::StagePlan& st : plan.stages) {
      if (st.node != static_cast<int32_t>(pool)) {
        stages[i].push_back(st);
        continue;
      }
      // Its tile's input and output rows: (kernel² + 1) fp16 rows of 32 per output row.
      EXPECT_EQ(st.planned, p.rows_mt * 17 * 32 * 2);
      EXPECT_LE(2 * st.planned + 256, 48 * 1024);
    }
  }
  testing::expect_same_sram_stages(stages[0], stages[1]);
}

// A pool whose windows do not tile its rows (the 224-pixel tower's 256 rows said to be a grid 24
// wide) is refused before any lowering, naming the node; a call's rows are always the graph's
// (a feature graph's inputs are [1, chunk, width]), so they are whole bands once this holds.
TEST_F(Gemma3VisionBackend, APoolWhoseWindowsDoNotTileItsRowsIsRefused) {
  auto q = tower_.quantized(224, config::defaults());
  ASSERT_NE(q, nullptr);
  const ir::WeightReader qr = quant::with_sidecar(tower_.reader_, *q);
  auto o = testing::feature_options("aries-rb", 0, isa::Scheme::kSingle, 1, 256);
  QBC_ASSERT_OK(o);
  ir::Graph g = q->graph;
  for (ir::Node& n : g.mutable_nodes()) {
    if (n.op == ir::Op::kAvgPool) n.attrs.set("grid_w", ir::AttrValue(int64_t{24}));
  }
  auto b = npu::compile(g, qr, *o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("'vis.proj.pool'"), std::string::npos)
      << b.status().to_string();
  EXPECT_NE(b.status().message().find("must divide both sides of a grid 24 wide"),
            std::string::npos)
      << b.status().to_string();
}

}  // namespace
}  // namespace qbc
