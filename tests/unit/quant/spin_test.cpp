// spinR1 / spinR2 leave the float logits unchanged on every family, refuse what they
// cannot rotate exactly (Gemma's post-norms, norms with a gain), really rotate the host
// embedding and the head, are deterministic and seed-dependent, and spread the residual
// stream's outliers (the reason they exist).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "qbc/quant/hadamard.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/transforms.h"
#include "qbc/quant/weight_store.h"
#include "transform_cases.h"

namespace qbc::quant {
namespace {

using ::qbc::testing::kLlamaFallback;
using ::qbc::testing::LoadedCase;
using ::qbc::testing::TransformCase;

constexpr uint64_t kSeedR1 = 7;
constexpr uint64_t kSeedR2 = 9;

/// A graph copy and its weight store, with passes run on them.
class Pipeline {
 public:
  explicit Pipeline(const LoadedCase& m)
      : store_(frontend::model_weight_reader(*m.source)), graph_(m.graph) {
    ctx_.graph = &graph_;
    ctx_.weights = &store_;
    ctx_.input_transforms = &input_transforms_;
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  Status run(bool norm_conv, bool r1, bool r2, uint64_t seed1 = kSeedR1, uint64_t seed2 = kSeedR2,
             std::vector<PassRecord>* records = nullptr) {
    std::vector<std::unique_ptr<Pass>> passes;
    if (norm_conv) passes.push_back(make_norm_conv());
    if (r1) passes.push_back(make_spin_r1(seed1));
    if (r2) passes.push_back(make_spin_r2(seed2));
    return run_passes(passes, ctx_, records);
  }
  const ir::Graph& graph() const { return graph_; }
  const WeightStore& store() const { return store_; }
  const std::vector<InputTransform>& input_transforms() const { return input_transforms_; }
  std::vector<float> weight(const std::string& name) const {
    std::vector<float> out;
    const ir::Weight* w = graph_.find_weight(name);
    EXPECT_NE(w, nullptr) << name;
    if (w != nullptr) {
      EXPECT_TRUE(store_.read(*w, &out).ok()) << name;
    }
    return out;
  }

 private:
  WeightStore store_;
  ir::Graph graph_;
  std::vector<InputTransform> input_transforms_;
  PassContext ctx_;
};

StatusOr<LoadedCase> load(const TransformCase& c) {
  return ::qbc::testing::load_transform_case(c, ::qbc::testing::shared_dir());
}

const TransformCase& find_case(const std::string& name) {
  return ::qbc::testing::find_transform_case(name);
}

bool has_post_norm(const ir::Graph& g) { return g.find("blk.0.attn.post_norm") >= 0; }

/// A LayerNorm on the residual stream (Cohere2): its mean subtraction does not commute with a
/// rotation of the stream, so spinR1 refuses the model (the pipeline skips it with a note).
bool has_layer_norm(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::Op::kLayerNorm) return true;
  }
  return false;
}

class SpinFamilies : public ::testing::TestWithParam<TransformCase> {};

TEST_P(SpinFamilies, LogitsUnchanged) {
  const TransformCase& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto m = load(c);
  QBC_ASSERT_OK(m);
  const std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(m->vocab);
  auto before =
      ::qbc::testing::float_logits(m->graph, frontend::model_weight_reader(*m->source), ids);
  QBC_ASSERT_OK(before);
  const bool post_norm = has_post_norm(m->graph);
  const bool layer_norm = has_layer_norm(m->graph);

  struct Combo {
    const char* label;
    bool norm_conv, r1, r2;
  };
  for (const Combo& combo :
       {Combo{"normConv+spinR1", true, true, false}, Combo{"spinR2", false, false, true},
        Combo{"normConv+spinR1+spinR2", true, true, true}}) {
    SCOPED_TRACE(combo.label);
    Pipeline p(*m);
    std::vector<PassRecord> records;
    const Status s = p.run(combo.norm_conv, combo.r1, combo.r2, kSeedR1, kSeedR2, &records);
    if (combo.r1 && post_norm) {
      // Gemma's post-norms write into the stream through a gain no linear can absorb.
      ASSERT_FALSE(s.ok()) << "spinR1 accepted a post-norm model";
      EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.to_string();
      EXPECT_NE(s.message().find("'blk.0.attn.post_norm'"), std::string::npos) << s.to_string();
      EXPECT_NE(s.message().find("spinR1"), std::string::npos) << s.to_string();
      std::printf("[%s] %s: refused: %s\n", combo.label, c.name.c_str(), s.message().c_str());
      continue;
    }
    if (combo.r1 && layer_norm) {
      ASSERT_FALSE(s.ok()) << "spinR1 accepted a LayerNorm model";
      EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.to_string();
      EXPECT_NE(s.message().find("layer_norm 'blk.0.attn_norm'"), std::string::npos)
          << s.to_string();
      std::printf("[%s] %s: refused: %s\n", combo.label, c.name.c_str(), s.message().c_str());
      continue;
    }
    QBC_ASSERT_OK(s);
    for (const PassRecord& r : records) EXPECT_TRUE(r.changed) << r.name;
    auto after = ::qbc::testing::float_logits(p.graph(), p.store().reader(), ids);
    QBC_ASSERT_OK(after);
    const double err = ::qbc::testing::max_relative_error(*before, *after);
    std::printf("[%s] %s: max relative logit error %.3g\n", combo.label, c.name.c_str(), err);
    EXPECT_LE(err, 1e-4);

    // What each pass rewrote.
    const ir::Graph& g = p.graph();
    if (combo.r1) {
      EXPECT_TRUE(p.store().rewritten("token_embd.weight"));
      EXPECT_TRUE(p.store().rewritten("head.lm_head.weight"));
    }
    for (const ir::Node& n : g.nodes()) {
      if (n.op != ir::Op::kLinear) continue;
      const bool vo = n.name.find("attn.v_proj") != std::string::npos ||
                      n.name.find("attn.qkv_proj") != std::string::npos ||
                      n.name.find("attn.o_proj") != std::string::npos;
      // spinR1 rotates every linear (each reads or writes the stream); spinR2 only V and O.
      const bool expect = combo.r1 || (combo.r2 && vo);
      EXPECT_EQ(p.store().rewritten(n.operands[1].weight), expect) << n.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, SpinFamilies, ::testing::ValuesIn(::qbc::testing::transform_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SpinR1, RefusedWithoutNormConvNamingTheNorm) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  auto m = load(find_case("stories260k"));
  QBC_ASSERT_OK(m);
  Pipeline p(*m);
  const Status s = p.run(/*norm_conv=*/false, /*r1=*/true, /*r2=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.to_string();
  EXPECT_NE(s.message().find("'blk.0.attn_norm'"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("normConv"), std::string::npos) << s.to_string();
  std::printf("refused: %s\n", s.message().c_str());
  // Nothing was rewritten by the refused pass.
  EXPECT_TRUE(p.store().rewritten_weights().empty());
}

TEST(SpinR1, Gemma2RefusedEvenWithoutNormConvAndSpinR2Works) {
  QBC_REQUIRE_FAMILY_CONFIG("model-configs/gemma-2-2b-it/config.json");
  auto m = load(find_case("gemma2_post_norm_softcap"));
  QBC_ASSERT_OK(m);
  {
    Pipeline p(*m);
    const Status s = p.run(false, true, false);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.to_string();
    // The first offender in graph order is the (non-unit) input norm.
    EXPECT_NE(s.message().find("'blk.0.attn_norm'"), std::string::npos) << s.to_string();
  }
  {
    Pipeline p(*m);
    std::vector<PassRecord> records;
    QBC_ASSERT_OK(p.run(false, false, true, kSeedR1, kSeedR2, &records));
    ASSERT_EQ(records.size(), 1u);
    EXPECT_TRUE(records[0].changed);
  }
}

// A LayerNorm model (Cohere2): normConv folds its layer_norms' gains into the linears (exact:
// the mean subtraction comes before the gain), spinR1 refuses naming the first layer_norm that
// reads the residual stream and rewrites nothing beyond what normConv did; spinR2 (v/o rows)
// still applies.
TEST(SpinR1, Cohere2LayerNormsAreRefused) {
  const TransformCase c{"cohere2_spin", "", "", R"({
      "architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 256, "layer_norm_eps": 1e-05,
      "logit_scale": 0.25, "sliding_window": 8, "sliding_window_pattern": 2,
      "tie_word_embeddings": true, "torch_dtype": "float32"})", "", ""};
  auto m = load(c);
  QBC_ASSERT_OK(m);
  {
    Pipeline p(*m);
    std::vector<PassRecord> records;
    const Status s =
        p.run(/*norm_conv=*/true, /*r1=*/true, /*r2=*/false, kSeedR1, kSeedR2, &records);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.to_string();
    EXPECT_NE(s.message().find("layer_norm 'blk.0.attn_norm'"), std::string::npos) << s.to_string();
    ASSERT_GE(records.size(), 1u);
    EXPECT_TRUE(records[0].changed);  // normConv
    Pipeline conv_only(*m);
    std::vector<PassRecord> conv_records;
    QBC_ASSERT_OK(conv_only.run(true, false, false, kSeedR1, kSeedR2, &conv_records));
    EXPECT_FALSE(p.store().rewritten_weights().empty());
    EXPECT_EQ(p.store().rewritten_weights(), conv_only.store().rewritten_weights());
  }
  {
    Pipeline p(*m);
    std::vector<PassRecord> records;
    QBC_ASSERT_OK(p.run(false, false, true, kSeedR1, kSeedR2, &records));
    ASSERT_EQ(records.size(), 1u);
    EXPECT_TRUE(records[0].changed);
  }
}

// E ← E·R and lm_head ← lm_head·R with R = random_hadamard(hidden, seed), on the tied
// model: the host table and the head (one tensor in the file) are rotated separately.
TEST(SpinR1, HostEmbeddingAndHeadAreRotated) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf-tied");
  auto m = load(find_case("stories260k_tied"));
  QBC_ASSERT_OK(m);
  Pipeline p(*m);
  QBC_ASSERT_OK(p.run(true, false, false));
  const std::vector<float> e0 = p.weight("token_embd.weight");
  const std::vector<float> h0 = p.weight("head.lm_head.weight");
  QBC_ASSERT_OK(p.run(false, true, false, /*seed1=*/5));
  const std::vector<float> e1 = p.weight("token_embd.weight");
  const std::vector<float> h1 = p.weight("head.lm_head.weight");
  const int64_t hidden = p.graph().find_weight("token_embd.weight")->type.dims[1];
  const int64_t vocab = p.graph().find_weight("token_embd.weight")->type.dims[0];
  ASSERT_EQ(static_cast<int64_t>(e0.size()), vocab * hidden);
  ASSERT_EQ(h0.size(), e0.size());
  auto r = random_hadamard(hidden, 5);
  QBC_ASSERT_OK(r);
  // R is orthogonal.
  double orth = 0;
  for (int64_t i = 0; i < hidden; ++i) {
    for (int64_t j = 0; j < hidden; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < hidden; ++k) dot += (*r)[i * hidden + k] * (*r)[j * hidden + k];
      orth = std::max(orth, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  }
  EXPECT_LE(orth, 1e-12);
  auto check_rows = [&](const std::vector<float>& before, const std::vector<float>& after,
                        const char* what) {
    for (int64_t row : {int64_t{0}, int64_t{1}, int64_t{37}, vocab - 1}) {
      double scale = 0, diff = 0, moved = 0;
      for (int64_t j = 0; j < hidden; ++j) {
        double expect = 0;
        for (int64_t k = 0; k < hidden; ++k)
          expect += before[row * hidden + k] * (*r)[k * hidden + j];
        scale = std::max(scale, std::fabs(expect));
        diff = std::max(diff, std::fabs(expect - after[row * hidden + j]));
        moved = std::max(moved, std::fabs(static_cast<double>(before[row * hidden + j]) -
                                          after[row * hidden + j]));
      }
      EXPECT_LE(diff, 1e-6 * scale) << what << " row " << row;
      EXPECT_GT(moved, 1e-3 * scale) << what << " row " << row << " did not change";
    }
  };
  check_rows(e0, e1, "host embedding");
  check_rows(h0, h1, "lm_head");
  // Embeddings made outside the graph (calibration .npy files hold rows of the original
  // table) go through the input transform spinR1 registered: they become rows of E·R.
  ASSERT_EQ(p.input_transforms().size(), 1u);
  const std::vector<int64_t> rows = {3, 0, 37, vocab - 1};
  std::vector<float> x;
  for (int64_t row : rows)
    x.insert(x.end(), e0.begin() + row * hidden, e0.begin() + (row + 1) * hidden);
  QBC_ASSERT_OK(p.input_transforms()[0](&x, static_cast<int64_t>(rows.size())));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t j = 0; j < hidden; ++j) {
      ASSERT_NEAR(x[i * hidden + j], e1[rows[i] * hidden + j], 1e-6) << "row " << rows[i];
    }
  }
  std::vector<float> bad(3);
  EXPECT_FALSE(p.input_transforms()[0](&bad, 1).ok());
  // Untied: the head had absorbed the final norm, so the two differ.
  EXPECT_NE(e1, h1);
}

// Llama with biases everywhere: q/k/v/gate/up biases sit on the output side (R1 leaves
// them alone), o/down biases are rotated by Rᵀ; the v bias is rotated per head by R2.
TEST(Spin, BiasesOnEveryProjection) {
  QBC_REQUIRE_FAMILY_CONFIG("model-configs/Llama-3.2-1B-Instruct/config.json");
  const TransformCase c{"llama32_all_biases",
                        "",
                        "model-configs/Llama-3.2-1B-Instruct/config.json",
                        "",
                        R"({"attention_bias": true, "mlp_bias": true})",
                        kLlamaFallback};
  auto m = load(c);
  QBC_ASSERT_OK(m);
  ASSERT_NE(m->graph.find_weight("blk.0.attn.o_proj.bias"), nullptr);
  ASSERT_NE(m->graph.find_weight("blk.0.ffn.down_proj.bias"), nullptr);
  const std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(m->vocab);
  auto before =
      ::qbc::testing::float_logits(m->graph, frontend::model_weight_reader(*m->source), ids);
  QBC_ASSERT_OK(before);
  Pipeline p(*m);
  QBC_ASSERT_OK(p.run(true, true, true));
  auto after = ::qbc::testing::float_logits(p.graph(), p.store().reader(), ids);
  QBC_ASSERT_OK(after);
  const double err = ::qbc::testing::max_relative_error(*before, *after);
  std::printf("[normConv+spinR1+spinR2] llama32_all_biases: max relative logit error %.3g\n", err);
  EXPECT_LE(err, 1e-4);
  for (int b = 0; b < 2; ++b) {
    const std::string blk = "blk." + std::to_string(b) + ".";
    EXPECT_TRUE(p.store().rewritten(blk + "attn.o_proj.bias"));
    EXPECT_TRUE(p.store().rewritten(blk + "ffn.down_proj.bias"));
    EXPECT_TRUE(p.store().rewritten(blk + "attn.v_proj.bias"));
    EXPECT_FALSE(p.store().rewritten(blk + "attn.q_proj.bias"));
    EXPECT_FALSE(p.store().rewritten(blk + "attn.k_proj.bias"));
    EXPECT_FALSE(p.store().rewritten(blk + "ffn.up_proj.bias"));
  }
}

// hidden 50 and head_dim 10 are no Hadamard orders: both passes fall back to a seeded
// dense random orthogonal matrix and stay exact.
TEST(Spin, NonHadamardSizesFallBackToDenseRotations) {
  QBC_REQUIRE_FAMILY_CONFIG("model-configs/Llama-3.2-1B-Instruct/config.json");
  const TransformCase c{
      "llama32_size50",
      "",
      "model-configs/Llama-3.2-1B-Instruct/config.json",
      "",
      R"({"hidden_size": 50, "head_dim": 10, "num_attention_heads": 5, "num_key_value_heads": 5})",
      kLlamaFallback};
  ASSERT_FALSE(hadamard_supported(50));
  ASSERT_FALSE(hadamard_supported(10));
  auto m = load(c);
  QBC_ASSERT_OK(m);
  ASSERT_EQ(m->graph.find_weight("token_embd.weight")->type.dims[1], 50);
  ASSERT_EQ(m->graph.node(m->graph.find("blk.0.attn.sdpa")).attrs.get_int("head_dim"), 10);
  const std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(m->vocab);
  auto before =
      ::qbc::testing::float_logits(m->graph, frontend::model_weight_reader(*m->source), ids);
  QBC_ASSERT_OK(before);
  Pipeline p(*m);
  QBC_ASSERT_OK(p.run(true, true, true));
  auto after = ::qbc::testing::float_logits(p.graph(), p.store().reader(), ids);
  QBC_ASSERT_OK(after);
  const double err = ::qbc::testing::max_relative_error(*before, *after);
  std::printf(
      "[normConv+spinR1+spinR2] llama32_size50 (dense rotations): max relative logit error %.3g\n",
      err);
  EXPECT_LE(err, 1e-4);
  EXPECT_TRUE(p.store().rewritten("token_embd.weight"));
}

std::map<std::string, std::vector<float>> rewritten_after(const LoadedCase& m, uint64_t s1,
                                                          uint64_t s2) {
  Pipeline p(m);
  const Status s = p.run(true, true, true, s1, s2);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return p.store().rewritten_weights();
}

TEST(Spin, DeterministicAndSeedDependent) {
  QBC_REQUIRE_FAMILY_CONFIG("model-configs/Llama-3.2-1B-Instruct/config.json");
  auto m = load(find_case("llama32_gqa_tied"));
  QBC_ASSERT_OK(m);
  const auto a = rewritten_after(*m, 1, 2);
  const auto b = rewritten_after(*m, 1, 2);
  EXPECT_EQ(a, b);                           // bit-identical
  const auto c = rewritten_after(*m, 3, 2);  // another R1 seed
  const auto d = rewritten_after(*m, 1, 4);  // another R2 seed
  EXPECT_NE(a.at("token_embd.weight"), c.at("token_embd.weight"));
  EXPECT_EQ(a.at("token_embd.weight"), d.at("token_embd.weight"));
  EXPECT_NE(a.at("blk.0.attn.v_proj.weight"), d.at("blk.0.attn.v_proj.weight"));
  EXPECT_NE(a.at("blk.1.attn.o_proj.weight"), d.at("blk.1.attn.o_proj.weight"));
  EXPECT_EQ(a.at("blk.0.attn.q_proj.weight"), d.at("blk.0.attn.q_proj.weight"));
}

// spinR2 really changes V and O, and per head the V→O map W_o[:, head]·W_v[kv(head)]
// (query head -> its GQA KV head) is unchanged: the orientation R2ᵀ on V rows, R2 on O
// columns is the one that cancels.
TEST(SpinR2, PerLayerRotationOfVRowsAndOColumns) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  auto m = load(find_case("stories260k"));
  QBC_ASSERT_OK(m);
  Pipeline p(*m);
  const std::vector<float> v0 = p.weight("blk.0.attn.v_proj.weight");
  const std::vector<float> o0 = p.weight("blk.0.attn.o_proj.weight");
  QBC_ASSERT_OK(p.run(false, false, true));
  const std::vector<float> v1 = p.weight("blk.0.attn.v_proj.weight");
  const std::vector<float> o1 = p.weight("blk.0.attn.o_proj.weight");
  const ir::Node& a = p.graph().node(p.graph().find("blk.0.attn.sdpa"));
  const int64_t d = a.attrs.get_int("head_dim"), kv = a.attrs.get_int("num_kv_heads"),
                h = a.attrs.get_int("num_heads");
  const int64_t in = static_cast<int64_t>(v0.size()) / (kv * d);
  const int64_t out = static_cast<int64_t>(o0.size()) / (h * d);
  for (int64_t head = 0; head < h; ++head) {
    const int64_t kvh = head / (h / kv);
    double scale = 0, diff = 0;
    for (int64_t r = 0; r < out; r += 7) {
      for (int64_t c = 0; c < in; c += 5) {
        double before = 0, after = 0;
        for (int64_t i = 0; i < d; ++i) {
          before += static_cast<double>(o0[r * h * d + head * d + i]) * v0[(kvh * d + i) * in + c];
          after += static_cast<double>(o1[r * h * d + head * d + i]) * v1[(kvh * d + i) * in + c];
        }
        scale = std::max(scale, std::fabs(before));
        diff = std::max(diff, std::fabs(before - after));
      }
    }
    EXPECT_LE(diff, 1e-5 * scale) << "head " << head;
  }
  EXPECT_NE(v0, v1);
  EXPECT_NE(o0, o1);
}

/// Mean over rows of max|x| / rms(x) for a [rows, n] matrix: ≈ √(2 ln n) for Gaussian
/// rows, large when a few channels carry outliers.
double max_over_rms(const std::vector<float>& x, int64_t n) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = 0, ss = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double v = x[r * n + j];
      mx = std::max(mx, std::fabs(v));
      ss += v * v;
    }
    total += ss > 0 ? mx / std::sqrt(ss / static_cast<double>(n)) : 0.0;
  }
  return rows > 0 ? total / static_cast<double>(rows) : 0.0;
}

/// q/k/v/gate/up/lm_head: the linears spinR1 right-multiplies by R.
bool reads_stream(const ir::Node& n) {
  for (const char* s :
       {"q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "lm_head"}) {
    const std::string suffix = std::string(".") + s;
    if (n.name.size() >= suffix.size() &&
        n.name.compare(n.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return true;
    }
  }
  return false;
}

TEST(SpinR1, SpreadsOutliersOnStories260K) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  auto m = load(find_case("stories260k"));
  QBC_ASSERT_OK(m);
  const std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(m->vocab, 64);
  Pipeline plain(*m), rotated(*m);
  QBC_ASSERT_OK(plain.run(true, false, false));
  QBC_ASSERT_OK(rotated.run(true, true, false));

  // Residual-stream activations: every residual add, per token.
  auto stream_ratio = [&](const Pipeline& p, double* worst) -> double {
    auto s = ref::Session::create(p.graph(), p.store().reader());
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok()) return 0;
    (*s)->set_keep_activations(true);
    std::vector<float> logits;
    EXPECT_TRUE((*s)->forward(ids, &logits).ok());
    double sum = 0;
    int count = 0;
    *worst = 0;
    for (const ir::Node& n : p.graph().nodes()) {
      if (n.op != ir::Op::kAdd) continue;
      std::vector<float> x;
      std::vector<int64_t> shape;
      const Status st = (*s)->activation(n.name, &x, &shape);
      EXPECT_TRUE(st.ok()) << st.to_string();
      if (!st.ok() || shape.empty()) continue;
      const int64_t hidden = shape.back();
      const double r = max_over_rms(x, hidden);
      sum += r;
      ++count;
      // The single worst token-channel, relative to its token's RMS.
      for (size_t t = 0; t < x.size() / static_cast<size_t>(hidden); ++t) {
        std::vector<float> row(x.begin() + static_cast<int64_t>(t) * hidden,
                               x.begin() + static_cast<int64_t>(t + 1) * hidden);
        *worst = std::max(*worst, max_over_rms(row, hidden));
      }
    }
    return count > 0 ? sum / count : 0.0;
  };
  double worst_before = 0, worst_after = 0;
  const double act_before = stream_ratio(plain, &worst_before);
  const double act_after = stream_ratio(rotated, &worst_after);

  // Weights of the linears reading the stream, per output row (the per-channel
  // quantization group): max|w| / rms(w) over the input (hidden) dimension.
  auto weight_ratio = [&](const Pipeline& p) {
    double sum = 0;
    int count = 0;
    for (const ir::Node& n : p.graph().nodes()) {
      if (n.op != ir::Op::kLinear || !reads_stream(n)) continue;
      const ir::Weight* w = p.graph().find_weight(n.operands[1].weight);
      sum += max_over_rms(p.weight(w->name), w->type.dims[1]);
      ++count;
    }
    return count > 0 ? sum / count : 0.0;
  };
  const double w_before = weight_ratio(plain);
  const double w_after = weight_ratio(rotated);
  std::printf(
      "stories260K residual stream max/RMS per token: mean %.3f -> %.3f, worst %.3f -> %.3f\n",
      act_before, act_after, worst_before, worst_after);
  std::printf("stories260K stream-reading weights max/RMS per row: mean %.3f -> %.3f\n", w_before,
              w_after);
  EXPECT_LT(act_after, act_before);
  EXPECT_LT(worst_after, worst_before);
  EXPECT_LT(w_after, w_before);
}

}  // namespace
}  // namespace qbc::quant
