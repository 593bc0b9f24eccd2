// The tests' HF -> GGUF converter, written from llama.cpp's convert_hf_to_gguf.py (tensor
// names, Llama q/k row permutation, Gemma norm + 1, llama3 rope_freqs) and, for quantized
// tensors, the tests' reference K-quant quantizer. Never uses qbc's GGUF reader.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ggml_ref_quantizer.h"
#include "gguf_writer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/random_model.h"
#include "test_support.h"

namespace qbc::testing {

// HF → llama.cpp names, written out independently of the code under test.
inline std::string gguf_name(const std::string& hf, const std::string& arch) {
  static const std::map<std::string, std::string> globals = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  if (auto it = globals.find(hf); it != globals.end()) return it->second;
  std::map<std::string, std::string> block = {{"input_layernorm", "attn_norm"},
                                              {"self_attn.q_proj", "attn_q"},
                                              {"self_attn.k_proj", "attn_k"},
                                              {"self_attn.v_proj", "attn_v"},
                                              {"self_attn.o_proj", "attn_output"},
                                              {"self_attn.q_norm", "attn_q_norm"},
                                              {"self_attn.k_norm", "attn_k_norm"},
                                              {"mlp.gate_proj", "ffn_gate"},
                                              {"mlp.up_proj", "ffn_up"},
                                              {"mlp.down_proj", "ffn_down"},
                                              {"post_attention_layernorm", "ffn_norm"}};
  if (arch == "gemma2") {
    block["post_attention_layernorm"] = "post_attention_norm";
    block["pre_feedforward_layernorm"] = "ffn_norm";
    block["post_feedforward_layernorm"] = "post_ffw_norm";
  }
  // model.layers.N.<sub>.<leaf>
  const size_t n_begin = std::strlen("model.layers.");
  const size_t n_end = hf.find('.', n_begin);
  const size_t leaf = hf.rfind('.');
  const std::string sub = hf.substr(n_end + 1, leaf - n_end - 1);
  return "blk." + hf.substr(n_begin, n_end - n_begin) + "." + block.at(sub) + hf.substr(leaf);
}

// llama.cpp's permute(): reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).
inline std::vector<float> permute(const std::vector<float>& w, int64_t rows, int64_t heads) {
  const int64_t cols = static_cast<int64_t>(w.size()) / rows;
  const int64_t half = rows / heads / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < half; ++j)
        std::memcpy(&out[((h * half + j) * 2 + i) * cols], &w[((h * 2 + i) * half + j) * cols],
                    cols * sizeof(float));
  return out;
}

// llama.cpp's LlamaModel rope_freqs for rope_scaling llama3.
inline std::vector<float> llama3_rope_freqs(const frontend::RopeScaling& rs, double theta,
                                            int64_t dim) {
  std::vector<float> out;
  const double low_wavelen = rs.original_max_position_embeddings / rs.low_freq_factor;
  const double high_wavelen = rs.original_max_position_embeddings / rs.high_freq_factor;
  for (int64_t i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(theta, static_cast<double>(i) / dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(static_cast<float>(rs.factor));
    } else {
      const double smooth = (rs.original_max_position_embeddings / wavelen - rs.low_freq_factor) /
                            (rs.high_freq_factor - rs.low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1 - smooth) / rs.factor + smooth)));
    }
  }
  return out;
}

/// What convert_to_gguf() writes besides the defaults.
struct GgufConvertOptions {
  /// HF tensors left out.
  std::set<std::string> skip;
  /// The ggml type of each tensor by its GGUF name (F32 when unset); quantized with the tests'
  /// reference quantizer (ggml_ref_quantizer.h: F32, Q4_K, Q5_K, Q6_K).
  std::function<frontend::GgmlType(const std::string&)> type_of;
  /// Writes every tensor as F32 holding the values its `type_of` blocks decode to (the
  /// "dequantized float model" of the quantized file).
  bool dequantize = false;
  /// Writes the tokenizer keys; by default a "gpt2" vocabulary of tokens "t0", "t1", ...
  std::function<void(GgufWriter&)> tokenizer;
};

/// Converts an HF ModelSource to a GGUF file the way convert_hf_to_gguf.py (and, with
/// `type_of`, llama-quantize) would.
inline std::filesystem::path convert_to_gguf(const frontend::ModelSource& hf,
                                             const std::string& arch,
                                             const std::filesystem::path& out,
                                             const GgufConvertOptions& options = {}) {
  using namespace frontend;
  const HParams& hp = hf.hparams();
  GgufWriter w;
  w.str("general.architecture", arch);
  w.u32(arch + ".context_length", static_cast<uint32_t>(hp.max_position_embeddings));
  w.u32(arch + ".embedding_length", static_cast<uint32_t>(hp.hidden_size));
  w.u32(arch + ".block_count", static_cast<uint32_t>(hp.num_hidden_layers));
  w.u32(arch + ".feed_forward_length", static_cast<uint32_t>(hp.intermediate_size));
  w.u32(arch + ".attention.head_count", static_cast<uint32_t>(hp.num_attention_heads));
  w.u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(hp.num_key_value_heads));
  w.u32(arch + ".attention.key_length", static_cast<uint32_t>(hp.head_dim));
  w.u32(arch + ".attention.value_length", static_cast<uint32_t>(hp.head_dim));
  w.f32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(hp.rms_norm_eps));
  w.f32(arch + ".rope.freq_base", static_cast<float>(hp.rope_theta));
  if (arch == "gemma2") {
    w.u32(arch + ".attention.sliding_window", static_cast<uint32_t>(hp.layers[0].sliding_window));
    w.f32(arch + ".attn_logit_softcapping", static_cast<float>(hp.attn_logit_softcap));
    w.f32(arch + ".final_logit_softcapping", static_cast<float>(hp.final_logit_softcap));
  }
  if (options.tokenizer) {
    options.tokenizer(w);
  } else {
    w.str("tokenizer.ggml.model", "gpt2");
    w.tokens(hp.vocab_size);
  }
  if (hp.bos_token_id)
    w.u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*hp.bos_token_id));
  if (!hp.eos_token_ids.empty()) {
    w.u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(hp.eos_token_ids[0]));
  }
  if (arch == "llama" && hp.rope_scaling.type == RopeScalingType::kLlama3) {
    const std::vector<float> freqs = llama3_rope_freqs(hp.rope_scaling, hp.rope_theta, hp.head_dim);
    w.tensor("rope_freqs.weight", {static_cast<int64_t>(freqs.size())}, freqs);
  }
  std::vector<float> v;
  for (const TensorInfo& t : hf.tensors()) {
    if (options.skip.count(t.name) != 0) continue;
    EXPECT_TRUE(hf.read_f32(t.name, &v).ok()) << t.name;
    if (arch == "llama" && ::qbc::testing::contains(t.name, "self_attn.q_proj")) {
      v = permute(v, t.shape[0], hp.num_attention_heads);
    } else if (arch == "llama" && ::qbc::testing::contains(t.name, "self_attn.k_proj")) {
      v = permute(v, t.shape[0], hp.num_key_value_heads);
    } else if (arch == "gemma2" && t.name.size() > 11 &&
               t.name.compare(t.name.size() - 11, 11, "norm.weight") == 0) {
      for (float& x : v) x += 1.0f;
    }
    const std::string name = gguf_name(t.name, arch);
    const GgmlType type = options.type_of ? options.type_of(name) : GgmlType::kF32;
    RefQuantized q = ref_quantize(type, v);
    if (options.dequantize) {
      w.tensor(name, t.shape, q.values);
    } else {
      w.tensor(name, t.shape, type, std::move(q.bytes));
    }
  }
  write_file(out, w.build());
  return out;
}

// stories260K's SentencePiece vocabulary (512 tokens, the same size as the random model's), so
// the TinyStories eval text tokenizes as it does for that model. Only the tokenizer keys are
// copied; every tensor is written by the converter.
inline void stories_tokenizer(GgufWriter& w) {
  auto g = frontend::GgufFile::open(shared_dir() / "models/stories260k/stories260K.gguf");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto tokens = g->get_string_array("tokenizer.ggml.tokens");
  auto scores = g->get_float_array("tokenizer.ggml.scores");
  auto types = g->get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens.ok() && scores.ok() && types.ok());
  w.str("tokenizer.ggml.model", "llama");
  w.strings("tokenizer.ggml.tokens", *tokens);
  w.floats("tokenizer.ggml.scores", std::vector<float>(scores->begin(), scores->end()));
  w.ints("tokenizer.ggml.token_type", std::vector<int32_t>(types->begin(), types->end()));
  w.u32("tokenizer.ggml.unknown_token_id", 0);
  w.boolean("tokenizer.ggml.add_bos_token", true);
}

/// A "Q4_K_M"-like type plan, as llama-quantize mixes types: F32 norms, Q6_K output, attn_v and
/// ffn_down in Q6_K on block 0 and Q5_K on the others, everything else (embedding included) Q4_K.
inline frontend::GgmlType q4_k_m_like_type(const std::string& gguf_name) {
  auto has = [&](const char* s) { return gguf_name.find(s) != std::string::npos; };
  if (has("norm")) return frontend::GgmlType::kF32;
  if (gguf_name == "output.weight") return frontend::GgmlType::kQ6_K;
  if (has("attn_v") || has("ffn_down")) {
    return gguf_name.rfind("blk.0.", 0) == 0 ? frontend::GgmlType::kQ6_K
                                             : frontend::GgmlType::kQ5_K;
  }
  return frontend::GgmlType::kQ4_K;
}

/// A "Q6_K" type plan: F32 norms, every matrix Q6_K.
inline frontend::GgmlType q6_k_type(const std::string& gguf_name) {
  return gguf_name.find("norm") != std::string::npos ? frontend::GgmlType::kF32
                                                     : frontend::GgmlType::kQ6_K;
}

/// A random Llama HF model (float32) whose dimensions are multiples of 256, as K-quants need:
/// hidden 256, intermediate 512, 4 heads of 64 (2 KV heads), `vocab` tokens, 2 layers.
inline std::filesystem::path random_k_quant_llama(const std::filesystem::path& dir, int64_t vocab,
                                                  double init_std) {
  frontend::RandomModelOptions o;
  o.config_json = std::string(frontend::tiny_llama_config_json());
  o.output_dir = dir;
  o.seed = 25;
  o.init_std = init_std;
  o.overrides.num_hidden_layers = 2;
  o.overrides.hidden_size = 256;
  o.overrides.intermediate_size = 512;
  o.overrides.vocab_size = vocab;
  o.overrides.num_attention_heads = 4;
  o.overrides.num_key_value_heads = 2;
  o.overrides.head_dim = 64;
  const Status s = frontend::write_random_model(o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return dir;
}

}  // namespace qbc::testing
