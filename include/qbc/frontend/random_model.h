// Random-weight HuggingFace models: the exact tensor list HF stores for a config, and a writer
// that produces `config.json` + `model.safetensors` with deterministic random weights.
//
// Used by tests and `make-tiny-model`: nothing can be downloaded on CI, so tiny models are
// generated, and the same seed always gives byte-identical files on every platform (the PRNG,
// normal sampler and float conversions are implemented here, not taken from <random>).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/frontend/hparams.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/support/status.h"
#include "qbc/tensorfile/dtype.h"

namespace qbc::frontend {

/// What a tensor is; decides its random initialization.
enum class TensorRole {
  kEmbedding,  ///< model.embed_tokens / lm_head: N(0, std).
  kLinear,     ///< Projection weights: N(0, std).
  kBias,       ///< Projection biases: N(0, std), so bias bugs are visible.
  kNorm,       ///< RMSNorm weights: 1 (0 for Gemma's 1+w style) plus N(0, std) noise.
  kUnitNorm,   ///< A vision tower's LayerNorm weights: 1 plus N(0, std), whatever the LLM's style.
};

/// One tensor of an HF checkpoint: its exact HF name, row-major shape and role.
struct HfTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::kLinear;

  /// Product of `shape`.
  int64_t num_elements() const;
};

/// Every tensor HF's `*ForCausalLM` stores for `hp`, sorted by name as safetensors does:
/// `model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight` (+ `.bias` when
/// qkv_bias), `q_norm`/`k_norm` (Qwen3, Gemma3), Gemma's `pre_feedforward_layernorm` and
/// `post_feedforward_layernorm`, Phi3's `qkv_proj`/`gate_up_proj`, `model.norm.weight`, and
/// `lm_head.weight` only when the embeddings are untied. Gemma3 uses the text-only
/// (Gemma3ForCausalLM) names. The element counts sum to `hp.param_counts().total()`.
std::vector<HfTensorSpec> hf_tensor_specs(const HParams& hp);

/// Every tensor of a Qwen2.5-VL checkpoint's vision part (`visual.patch_embed.proj.weight`
/// [width, 3, tp, p, p], `visual.blocks.N.*`, `visual.merger.*`), sorted by name; the element
/// counts sum to `vc.parameters()`. Empty for other towers.
std::vector<HfTensorSpec> hf_vision_tensor_specs(const VisionConfig& vc);

/// Values replacing `vision_config` keys of a VLM config.
struct VisionOverrides {
  std::optional<int64_t> depth;
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> intermediate_size;
  std::optional<int64_t> num_heads;
  std::optional<int64_t> out_hidden_size;
  std::optional<std::vector<int64_t>> fullatt_block_indexes;
  std::optional<std::vector<int64_t>> deepstack_visual_indexes;  ///< Qwen3-VL
};

/// Values replacing config.json keys, e.g. to shrink a real config to a test-sized model.
/// head_dim is not derived from an overridden hidden_size: override it too when the config
/// sets it (or the family defaults it, as Qwen3 and Gemma do).
struct ConfigOverrides {
  std::optional<int64_t>
      num_hidden_layers;  ///< Also truncates/cycles `layer_types`, `no_rope_layers`.
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> intermediate_size;
  std::optional<int64_t> vocab_size;
  std::optional<int64_t> num_attention_heads;
  std::optional<int64_t> num_key_value_heads;
  std::optional<int64_t> head_dim;
  std::optional<int64_t> max_position_embeddings;
  std::optional<int64_t> sliding_window;
  VisionOverrides vision;  ///< applied to `vision_config` (an error when the config has none)
};

/// Options of write_random_model().
struct RandomModelOptions {
  /// The source config.json. When empty, `config_json` is used instead.
  std::filesystem::path config_path;
  /// Source config text, used when `config_path` is empty; when both are empty the built-in
  /// tiny_llama_config_json() is used.
  std::string config_json;
  /// Folder receiving config.json and model.safetensors (created when missing).
  std::filesystem::path output_dir;
  /// Weight dtype: kF32, kF16 or kBF16.
  tensorfile::DType dtype = tensorfile::DType::kF32;
  /// PRNG seed; equal seeds give byte-identical files.
  uint64_t seed = 0;
  /// Keys replaced in the source config before anything is written.
  ConfigOverrides overrides;
  /// Standard deviation of the weights (and of the noise on norm weights).
  double init_std = 0.02;
};

/// Returns `config_json` with `overrides` applied and, when `dtype` is set, `torch_dtype`
/// updated ("float32", "float16", "bfloat16"); key order is preserved. `source` names the
/// config in errors (kInvalidArgument for bad JSON). A Qwen2(.5)-VL config stays valid when
/// shrunk: `rope_scaling.mrope_section` is rescaled to the new head_dim / 2 (each stream
/// floor(old · new / old sum), the width stream the rest: [16, 24, 24] -> [2, 3, 3] at
/// head_dim 16), and with a smaller vocab_size the image/video/vision token ids past it move to
/// its top ids (image_token_id to vocab - 1, then video, vision start, end, vision_token_id).
StatusOr<std::string> apply_config_overrides(std::string_view config_json, std::string_view source,
                                             const ConfigOverrides& overrides,
                                             std::optional<tensorfile::DType> dtype);

/// Writes `<output_dir>/config.json` (the source config with overrides applied and torch_dtype
/// updated) and `<output_dir>/model.safetensors` holding every tensor of hf_tensor_specs() with
/// deterministic random values, and a `tokenizer.json` covering the vocabulary
/// (random_model_tokenizer_json(), qbc/frontend/random_tokenizer.h). Tensors are generated and
/// written in chunks, so memory stays small even for multi-GB shapes. The config is validated with
/// parse_hparams() first. kUnimplemented for Gemma3ForConditionalGeneration (write the text model
/// instead) and for dtypes other than F32/F16/BF16; kInvalidArgument naming the path on I/O errors.
/// A Qwen2-VL or Qwen2.5-VL config (model_type qwen2_vl, qwen2_5_vl) writes the language model
/// and the vision part
/// (hf_vision_tensor_specs()) into the one model.safetensors, under the names transformers <
/// 4.52 uses (`model.layers.N.*`, `visual.*`).
Status write_random_model(const RandomModelOptions& options);

/// A tiny built-in Llama config: 2 layers, hidden 64, 4 heads, 2 kv heads, intermediate 128,
/// vocab 256, untied embeddings, float32.
std::string_view tiny_llama_config_json();

}  // namespace qbc::frontend
