// build_decoder_graph for every family: structure, verification, round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/random_model.h"
#include "qbc/ir/serialize.h"
#include "qbc/ir/text.h"
#include "qbc/ir/verifier.h"
#include "test_support.h"

namespace qbc::frontend {
namespace {

// Every weight of the graph names a tensor HF stores, with HF's shape.
void expect_weights_match_hf(const HParams& hp, const ir::Graph& g) {
  std::map<std::string, std::vector<int64_t>> hf;
  for (const auto& spec : hf_tensor_specs(hp)) hf[spec.name] = spec.shape;
  for (const auto& [name, w] : g.weights()) {
    auto it = hf.find(w.tensor);
    ASSERT_NE(it, hf.end()) << name << " -> " << w.tensor;
    EXPECT_EQ(it->second, w.type.dims) << name;
  }
}

TEST(Importer, EverySharedConfigBuildsAVerifiedGraph) {
  QBC_REQUIRE_SHARED(dir, "model-configs");
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().filename().string());
    auto hp = load_hparams(entry.path() / "config.json");
    ASSERT_TRUE(hp.ok()) << hp.status().message();
    auto g = build_decoder_graph(*hp, ImportOptions{4096});
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_TRUE(ir::verify(*g).ok());
    expect_weights_match_hf(*hp, *g);
    // Attention nodes: one per layer with that layer's window.
    int attn = 0;
    for (const ir::Node& n : g->nodes()) {
      if (n.op != ir::Op::kAttention) continue;
      EXPECT_EQ(n.attrs.get_int("window"), hp->layers[static_cast<size_t>(n.block)].sliding_window);
      EXPECT_EQ(n.attrs.get_int("max_cache"), 4096);
      ++attn;
    }
    EXPECT_EQ(attn, hp->num_hidden_layers);
    auto back = ir::parse_text(ir::print_text(*g), "text");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_TRUE(*back == *g);
    auto pb = ir::from_proto_bytes(ir::to_proto_bytes(*g), "proto");
    ASSERT_TRUE(pb.ok());
    EXPECT_TRUE(*pb == *g);
    ++count;
  }
  EXPECT_EQ(count, 13);
}

TEST(Importer, FamilyFeaturesAppearAsNodes) {
  QBC_REQUIRE_SHARED(gemma, "model-configs/gemma-2-2b-it/config.json");
  auto hp = load_hparams(gemma);
  ASSERT_TRUE(hp.ok());
  auto g = build_decoder_graph(*hp, ImportOptions{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_GE(g->find("embed_scale"), 0);
  EXPECT_GE(g->find("blk.0.attn.post_norm"), 0);
  EXPECT_GE(g->find("blk.0.ffn.post_norm"), 0);
  const ir::Node& logits = g->node(g->find("logits"));
  EXPECT_EQ(logits.op, ir::Op::kSoftcap);
  EXPECT_DOUBLE_EQ(logits.attrs.get_float("cap"), 30.0);
  EXPECT_EQ(g->node(g->find("blk.0.attn_norm")).attrs.get_int("unit_offset"), 1);
  EXPECT_EQ(g->find_weight("head.lm_head.weight")->tensor, "model.embed_tokens.weight");
  EXPECT_EQ(logits.part, ir::Part::kHead);

  QBC_REQUIRE_SHARED(qwen3, "model-configs/Qwen3-0.6B/config.json");
  auto q3 = load_hparams(qwen3);
  ASSERT_TRUE(q3.ok());
  auto g3 = build_decoder_graph(*q3, ImportOptions{});
  ASSERT_TRUE(g3.ok());
  const ir::Node& qn = g3->node(g3->find("blk.3.attn.q_norm"));
  EXPECT_EQ(qn.attrs.get_int("group"), q3->head_dim);
  EXPECT_EQ(qn.origin, "model.layers.3.self_attn.q_norm");
}

TEST(Importer, Llama3RopeScalingChangesLowFrequenciesOnly) {
  QBC_REQUIRE_SHARED(cfg, "model-configs/Llama-3.2-1B-Instruct/config.json");
  auto hp = load_hparams(cfg);
  ASSERT_TRUE(hp.ok());
  numerics::Rope p = rope_params(*hp, 0);
  ASSERT_EQ(p.inv_freq.size(), 32u);
  // Highest frequency untouched, lowest divided by the factor (32).
  EXPECT_NEAR(p.inv_freq[0], 1.0, 1e-12);
  const double base_low = 1.0 / std::pow(hp->rope_theta, 62.0 / 64.0);
  EXPECT_NEAR(p.inv_freq[31], base_low / 32.0, 1e-15);
}

}  // namespace
}  // namespace qbc::frontend
