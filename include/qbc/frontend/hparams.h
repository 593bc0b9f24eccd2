// Typed hyperparameters of a HuggingFace causal LM, read from its config.json.
//
// One HParams struct covers every supported family (Llama, Mistral, Qwen2, Qwen3, Gemma2,
// Gemma3, Phi3, SmolLM3, EXAONE 3.5 and 4.0, Cohere2, HyperCLOVAX): the differences between them
// are flags and per-layer vectors, so the graph builder and the shape-only planner need no
// per-family switch for most decisions. Defaults follow each family's HF `*Config` class. Errors
// name the file and the key at fault.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::frontend {

/// The model families qbc can import. Each maps to one HF `architectures` entry.
enum class ModelFamily {
  kLlama,    ///< LlamaForCausalLM (Llama 2/3.x, SmolLM2).
  kMistral,  ///< MistralForCausalLM.
  kQwen2,    ///< Qwen2ForCausalLM (Qwen2, Qwen2.5); the language model of Qwen2(.5)-VL.
  kQwen3,    ///< Qwen3ForCausalLM (dense).
  kGemma2,   ///< Gemma2ForCausalLM.
  kGemma3,   ///< Gemma3ForCausalLM, or the text part of Gemma3ForConditionalGeneration.
  kPhi3,     ///< Phi3ForCausalLM.
  kSmolLM3,  ///< SmolLM3ForCausalLM (Llama block, NoPE on every `no_rope_layer_interval`-th layer).
  kExaone,   ///< ExaoneForCausalLM (EXAONE 3.0/3.5: the Llama block under GPT-2-style names).
  kExaone4,  ///< Exaone4ForCausalLM (q/k norms, norms after the sublayers, NoPE global layers).
  kCohere2,  ///< Cohere2ForCausalLM (Command R7B: LayerNorm, parallel block, logit scale).
  kHyperClovax,  ///< HyperCLOVAXForCausalLM (HyperCLOVA X SEED: Granite's μP multipliers, Peri-LN).
};

/// A stable lower-case name for `family`, e.g. "qwen2".
std::string_view family_name(ModelFamily family);

/// The HF architecture names accepted in config.json `architectures`, in a fixed order.
const std::vector<std::string_view>& supported_architectures();

/// How RoPE frequencies are rescaled for long contexts (`rope_scaling.rope_type`).
enum class RopeScalingType {
  kNone,      ///< No rope_scaling, or rope_type "default".
  kLinear,    ///< Positions divided by `factor`.
  kDynamic,   ///< Dynamic NTK scaling.
  kYarn,      ///< YaRN.
  kLlama3,    ///< Llama 3.1 frequency-band scaling.
  kLongRope,  ///< Phi-3 LongRoPE (per-dimension short/long factors).
};

/// A stable lower-case name for `type`, as spelled in config.json ("none" for kNone).
std::string_view rope_scaling_name(RopeScalingType type);

/// The parsed `rope_scaling` object. Only the fields of `type` are meaningful.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  /// Context extension factor (linear, dynamic, yarn, llama3; longrope: derived).
  double factor = 1.0;
  /// llama3: wavelength band limits.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  /// llama3, yarn, dynamic, longrope: the pre-extension context length.
  int64_t original_max_position_embeddings = 0;
  /// yarn: ramp boundaries in rotations.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  /// yarn, longrope: cos/sin multiplier; given in the config or derived as HF does.
  double attention_factor = 1.0;
  /// yarn: optional DeepSeek-style mscale terms (0 when absent).
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  /// longrope: per-frequency divisors for short and long contexts (rotary_dim / 2 each).
  std::vector<double> short_factor;
  std::vector<double> long_factor;
};

/// How an RMSNorm applies its weight.
enum class NormStyle {
  kWeight,         ///< x̂ · w (Llama, Qwen, Mistral, Phi3).
  kOnePlusWeight,  ///< x̂ · (1 + w) (Gemma); a freshly initialized weight is 0.
};

/// The MLP gate activation.
enum class Activation {
  kSilu,      ///< "silu" / "swish".
  kGeluTanh,  ///< "gelu_pytorch_tanh" / "gelu_new" (tanh approximation).
};

/// Per-layer attention settings (the vectors that differ between layers).
struct LayerAttention {
  /// Sliding-window size in tokens, or 0 for global attention.
  int64_t sliding_window = 0;
  /// RoPE base frequency used by this layer.
  double rope_theta = 10000.0;
  /// True iff `HParams::rope_scaling` applies to this layer (Gemma3: global layers only).
  bool rope_scaled = false;
  /// False for a NoPE layer: q and k reach attention without RoPE (SmolLM3 `no_rope_layers`
  /// entries 0).
  bool use_rope = true;
};

/// Parameter counts of a model, split by part. Counts are elements, not bytes.
struct ParamCounts {
  int64_t num_blocks = 0;
  /// model.embed_tokens.
  int64_t embedding = 0;
  /// One decoder block's attention projections, including biases.
  int64_t attention_per_block = 0;
  /// One decoder block's MLP projections, including biases.
  int64_t mlp_per_block = 0;
  /// One decoder block's norms, including q/k norms.
  int64_t norms_per_block = 0;
  /// The final norm (model.norm).
  int64_t final_norm = 0;
  /// lm_head; 0 when tied to the embedding.
  int64_t head = 0;

  /// All norm parameters (per-block norms times blocks, plus the final norm).
  int64_t norms() const { return num_blocks * norms_per_block + final_norm; }
  /// All parameters of one decoder block.
  int64_t per_block() const { return attention_per_block + mlp_per_block + norms_per_block; }
  /// All parameters of the model, counting tied weights once.
  int64_t total() const { return embedding + num_blocks * per_block() + final_norm + head; }
  /// Bytes to store `params` at `bits_per_param` bits each, rounded up to whole bytes.
  static int64_t bytes(int64_t params, int bits_per_param);
  /// Bytes to store the whole model at `bits_per_param` bits per parameter.
  int64_t total_bytes(int bits_per_param) const { return bytes(total(), bits_per_param); }
};

/// Limits on the sizes a config.json may declare (parse_hparams refuses larger ones, naming the
/// key). They are far above every released model (Llama 3.1 405B: 126 layers, hidden 16384,
/// intermediate 53248, 128 heads; Gemma 3: vocabulary 262208; Llama 4 Scout: 10M positions) and
/// keep every derived size in int64: vocab x hidden <= 2^44, a block's parameters < 2^44, the
/// model's parameters < 2^54 and its bytes at 64 bits per parameter < 2^60. They also stop a
/// hostile count (num_hidden_layers = 2^31) before anything is allocated per layer.
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxModelDim = int64_t{1}
                                        << 20;  ///< hidden, intermediate, head_dim, q/kv dims.
inline constexpr int64_t kMaxHeads = 4096;
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
inline constexpr int64_t kMaxPositions = int64_t{1} << 30;

/// Typed hyperparameters of one model. Built by parse_hparams(); all fields are resolved
/// (defaults applied, derived values computed), so consumers never re-read config.json.
struct HParams {
  std::string architecture;  ///< e.g. "LlamaForCausalLM".
  ModelFamily family = ModelFamily::kLlama;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  ///< Defaults to num_attention_heads.
  int64_t head_dim = 0;             ///< Defaults to hidden_size / num_attention_heads.
  int64_t rotary_dim = 0;           ///< head_dim × partial_rotary_factor (Phi3), else head_dim.
  int64_t max_position_embeddings = 0;

  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;  ///< Base frequency of global layers.
  RopeScaling rope_scaling;
  std::vector<LayerAttention> layers;  ///< One entry per decoder layer.

  bool tie_word_embeddings = false;
  bool attention_bias = false;  ///< The raw config key (false when absent).
  bool qkv_bias = false;        ///< q/k/v projections carry a bias.
  bool o_bias = false;          ///< o_proj carries a bias.
  bool mlp_bias = false;        ///< gate/up/down projections carry a bias.
  bool qk_norm = false;         ///< Per-head RMSNorm on q and k (Qwen3, Gemma3).
  bool pre_norms = true;        ///< Norms before attention and MLP (all but EXAONE 4).
  bool post_norms = false;      ///< Norms after attention and MLP (Gemma, EXAONE 4).
  bool fused_qkv = false;       ///< One qkv_proj instead of q/k/v (Phi3).
  bool fused_gate_up = false;   ///< One gate_up_proj instead of gate/up (Phi3).
  NormStyle norm_style = NormStyle::kWeight;
  /// Norms are LayerNorms without bias (mean subtracted; Cohere2), not RMSNorms.
  bool layer_norm = false;
  /// Attention and MLP both read the one input norm and the block adds both to the residual:
  /// x + attn(n) + mlp(n), n = norm(x) (Cohere2). No ffn norm.
  bool parallel_block = false;
  /// HF rotates adjacent pairs (2i, 2i+1) of each head (Cohere2's interleaved RoPE). The model
  /// source reorders the q/k projection rows to the rotate_half layout on read (pair i at rows
  /// i and i + head_dim/2), which leaves every q·k unchanged; the graph's rope is then the usual.
  bool rope_interleaved = false;
  Activation activation = Activation::kSilu;
  /// M-RoPE (Qwen2-VL, Qwen2.5-VL: `rope_scaling.mrope_section`): how many of the head_dim / 2
  /// rotary frequencies follow the temporal, height and width position streams, in that order
  /// (sum head_dim / 2). The graph then takes host-computed cos/sin tables (docs/multimodal.md,
  /// "The language graph"). Empty: 1-D RoPE from the token position.
  std::vector<int64_t> mrope_section;
  /// Qwen3-VL (`rope_scaling.mrope_interleaved`): the streams take the rotary frequencies in
  /// turn (t, h, w, t, h, w, ...) instead of in sections (graph metadata `mrope.interleaved`).
  bool mrope_interleaved = false;
  /// Gemma 3's VLM (Gemma3ForConditionalGeneration): the tokens of one image attend to each
  /// other bidirectionally (HF's token_type_ids mask); its tokens per image
  /// (mm_tokens_per_image), recorded as graph metadata "attention.image_span". 0: causal only.
  int64_t image_span_tokens = 0;
  /// Qwen3-VL: the image's DeepStack rows (one per vision_config.deepstack_visual_indexes entry)
  /// are added to the hidden states after decoder layers 0 .. deepstack_layers − 1 (the
  /// language graph's inputs deepstack.J, zero at text tokens). 0: none.
  int64_t deepstack_layers = 0;

  double attn_logit_softcap = 0.0;   ///< 0 = no soft-capping.
  double final_logit_softcap = 0.0;  ///< 0 = no soft-capping.
  double query_scale = 0.0;      ///< Multiplies q·k: 1/√head_dim or query_pre_attn_scalar^-½.
  double embedding_scale = 1.0;  ///< Multiplies embeddings: √hidden_size for Gemma.
  double logit_scale = 1.0;      ///< Multiplies the logits (Cohere2's logit_scale).
  /// Multiplies each sublayer's output before it is added to the residual stream
  /// (HyperCLOVAX's residual_multiplier): x + residual_multiplier · attn(...).
  double residual_multiplier = 1.0;

  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  ///< `eos_token_id` may be an int or a list.
  std::string torch_dtype;             ///< e.g. "bfloat16"; empty when absent.

  /// Width of the q projection output: num_attention_heads × head_dim.
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  /// Width of the k and v projection outputs: num_key_value_heads × head_dim.
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  /// True iff layer `i` (0 <= i < num_hidden_layers) uses a sliding window.
  bool is_sliding(int64_t i) const { return layers[static_cast<size_t>(i)].sliding_window > 0; }
  /// Parameter counts by part, matching the tensors HF stores.
  ParamCounts param_counts() const;
};

/// Parses config.json text. `source` names the file in error messages.
/// Errors: kInvalidArgument (bad JSON with line/column, wrong types, bad values),
/// kNotFound (missing required key), kUnimplemented (unsupported architecture or option).
StatusOr<HParams> parse_hparams(std::string_view json_text, std::string_view source);

/// Reads and parses a config.json file (kNotFound when it cannot be read).
StatusOr<HParams> load_hparams(const std::filesystem::path& config_path);

/// Bits per element of an HF `torch_dtype` string ("float32", "bfloat16", "float16").
StatusOr<int> torch_dtype_bits(std::string_view torch_dtype);

}  // namespace qbc::frontend
