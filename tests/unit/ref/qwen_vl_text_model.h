// A random Qwen-VL checkpoint's language model opened for the float reference session, shared
// by the Qwen2(.5)-VL and Qwen3-VL language tests: the source, graph sessions for given
// HParams, the checkpoint's tensors by HF name, the dims of the naive float64 forward pass, and
// a prompt's embeddings with deterministic pseudo-features at the image placeholders.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "naive_qwen2_vl_text.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/ir/verifier.h"
#include "qbc/ref/session.h"
#include "test_support.h"

namespace qbc::ref::testing {

class QwenVlTextModel {
 public:
  explicit QwenVlTextModel(frontend::ModelSource source) : source_(std::move(source)) {}

  const frontend::ModelSource& source() const { return source_; }
  const frontend::HParams& hp() const { return source_.hparams(); }

  /// A float (or float64) reference session of `hp`'s graph over this checkpoint's weights.
  std::unique_ptr<ref::Session> session(const frontend::HParams& hp, bool f64) const {
    auto g = frontend::build_decoder_graph(hp, frontend::ImportOptions{64});
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    if (!g.ok()) return nullptr;
    EXPECT_TRUE(ir::verify(*g).ok());
    const ir::WeightReader reader = [this](const ir::Weight& w, std::vector<float>* out) {
      return source_.read_f32(w.tensor, out);
    };
    ref::SessionOptions so;
    so.float64 = f64;
    auto s = ref::Session::create(*g, reader, so);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::vector<float> hf(const std::string& name) const {
    std::vector<float> v;
    const Status s = source_.read_f32(name, &v);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return v;
  }

  /// The naive pass's dims for this model (Qwen2(.5)-VL's switches; a test sets Qwen3-VL's).
  NaiveQwen2VlDims dims() const {
    NaiveQwen2VlDims d;
    d.layers = hp().num_hidden_layers;
    d.hidden = hp().hidden_size;
    d.heads = hp().num_attention_heads;
    d.kv_heads = hp().num_key_value_heads;
    d.head_dim = hp().head_dim;
    d.ffn = hp().intermediate_size;
    d.vocab = hp().vocab_size;
    d.eps = hp().rms_norm_eps;
    d.theta = hp().rope_theta;
    d.mrope_section = {hp().mrope_section[0], hp().mrope_section[1], hp().mrope_section[2]};
    d.tied = hp().tie_word_embeddings;
    return d;
  }

  /// `tokens`' embedding rows, with a deterministic "image feature" in [-1, 1) (an LCG seeded by
  /// `seed`) at each `image_token`.
  std::vector<float> embeds(const std::vector<int32_t>& tokens, int32_t image_token,
                            uint64_t seed) const {
    const int64_t h = hp().hidden_size, n = static_cast<int64_t>(tokens.size());
    const std::vector<float> table = hf("model.embed_tokens.weight");
    std::vector<float> out(static_cast<size_t>(n * h));
    uint64_t state = seed;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < h; ++c) {
        float v;
        if (tokens[static_cast<size_t>(i)] == image_token) {
          state = state * 6364136223846793005ULL + 1442695040888963407ULL;
          v = static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        } else {
          v = table[static_cast<size_t>(tokens[static_cast<size_t>(i)] * h + c)];
        }
        out[static_cast<size_t>(i * h + c)] = v;
      }
    }
    return out;
  }

 private:
  frontend::ModelSource source_;
};

}  // namespace qbc::ref::testing
