// Random-weight HF models: tensor lists per family, and generation of the weights, streamed in
// chunks through SafetensorsStreamWriter so memory stays small for multi-GB shapes.
#include "qbc/frontend/random_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/hf_names.h"
#include "qbc/frontend/idefics3_vision.h"
#include "qbc/frontend/qwen_vision.h"
#include "qbc/frontend/random_tokenizer.h"
#include "qbc/support/check.h"
#include "qbc/support/file_util.h"
#include "qbc/support/json_parse.h"
#include "qbc/support/logging.h"
#include "qbc/support/random.h"
#include "qbc/tensorfile/safetensors_writer.h"

namespace qbc::frontend {
namespace {

using OrderedJson = nlohmann::ordered_json;

// --- Deterministic PRNG: splitmix64 seeding, xoshiro256**, Box-Muller ---------------------

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) {
    for (uint64_t& word : s_) word = splitmix64(seed);
  }

  /// A standard normal sample (Box-Muller; both outputs of each pair are used).
  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1] so log(u1) is finite; u2 in [0, 1).
    const double u1 = static_cast<double>((next_u64() >> 11) + 1) * 0x1.0p-53;
    const double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 6.283185307179586 * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  uint64_t s_[4] = {};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// --- Tensor specs -------------------------------------------------------------------------

void add(std::vector<HfTensorSpec>& out, std::string name, std::vector<int64_t> shape,
         TensorRole role) {
  out.push_back(HfTensorSpec{std::move(name), std::move(shape), role});
}

void add_linear(std::vector<HfTensorSpec>& out, const std::string& module, int64_t rows,
                int64_t cols, bool bias) {
  add(out, module + ".weight", {rows, cols}, TensorRole::kLinear);
  if (bias) add(out, module + ".bias", {rows}, TensorRole::kBias);
}

void add_block(const HParams& hp, int64_t i, std::vector<HfTensorSpec>& out) {
  const HfLayerNames n = hf_layer_names(hp, i);
  const int64_t h = hp.hidden_size, inter = hp.intermediate_size;
  const int64_t q = hp.q_dim(), kv = hp.kv_dim();
  if (hp.pre_norms) {
    add(out, n.attn_pre_norm + ".weight", {h}, TensorRole::kNorm);
    // A parallel block (Cohere2) has one input norm for attention and MLP.
    if (!hp.parallel_block) add(out, n.ffn_pre_norm + ".weight", {h}, TensorRole::kNorm);
  }
  if (hp.post_norms) {
    add(out, n.attn_post_norm + ".weight", {h}, TensorRole::kNorm);
    add(out, n.ffn_post_norm + ".weight", {h}, TensorRole::kNorm);
  }
  if (hp.fused_qkv) {
    add_linear(out, n.qkv, q + 2 * kv, h, hp.qkv_bias);
  } else {
    add_linear(out, n.q, q, h, hp.qkv_bias);
    add_linear(out, n.k, kv, h, hp.qkv_bias);
    add_linear(out, n.v, kv, h, hp.qkv_bias);
  }
  add_linear(out, n.o, h, q, hp.o_bias);
  if (hp.qk_norm) {
    add(out, n.q_norm + ".weight", {hp.head_dim}, TensorRole::kNorm);
    add(out, n.k_norm + ".weight", {hp.head_dim}, TensorRole::kNorm);
  }
  if (hp.fused_gate_up) {
    add_linear(out, n.gate_up, 2 * inter, h, hp.mlp_bias);
  } else {
    add_linear(out, n.gate, inter, h, hp.mlp_bias);
    add_linear(out, n.up, inter, h, hp.mlp_bias);
  }
  add_linear(out, n.down, h, inter, hp.mlp_bias);
}

// --- Weights ---------------------------------------------------------------------------------

/// A progress event every this many tensors (and after the last one).
constexpr size_t kProgressEveryTensors = 16;

size_t element_bytes(tensorfile::DType dtype) { return dtype == tensorfile::DType::kF32 ? 4 : 2; }

void encode(float v, tensorfile::DType dtype, uint8_t* dst) {
  if (dtype == tensorfile::DType::kF32) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int b = 0; b < 4; ++b) dst[b] = static_cast<uint8_t>(bits >> (8 * b));
    return;
  }
  const uint16_t bits =
      dtype == tensorfile::DType::kF16 ? tensorfile::f32_to_fp16(v) : tensorfile::f32_to_bf16(v);
  dst[0] = static_cast<uint8_t>(bits);
  dst[1] = static_cast<uint8_t>(bits >> 8);
}

// Generates `spec`'s values (seeded by the global seed and the tensor name, so a tensor does not
// depend on the others) and streams them to `out` in chunks.
Status write_tensor(tensorfile::SafetensorsStreamWriter& out, const HfTensorSpec& spec,
                    const RandomModelOptions& o, float norm_base) {
  uint64_t seed_state = o.seed ^ fnv1a64(spec.name);
  NormalSampler rng(splitmix64(seed_state));
  const size_t width = element_bytes(o.dtype);
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint8_t> buffer(static_cast<size_t>(kChunk) * width);
  const double base = spec.role == TensorRole::kNorm       ? norm_base
                      : spec.role == TensorRole::kUnitNorm ? 1.0
                                                           : 0.0;
  for (int64_t done = 0, n = spec.num_elements(); done < n; done += kChunk) {
    const int64_t count = std::min(kChunk, n - done);
    for (int64_t i = 0; i < count; ++i) {
      encode(static_cast<float>(base + o.init_std * rng.next()), o.dtype, &buffer[i * width]);
    }
    QBC_RETURN_IF_ERROR(out.write(spec.name, buffer.data(), static_cast<size_t>(count) * width));
  }
  return ok_status();
}

Status write_model_safetensors(const std::filesystem::path& path,
                               const std::vector<HfTensorSpec>& specs, const RandomModelOptions& o,
                               float norm_base) {
  std::vector<tensorfile::TensorSpec> tensors;
  std::unordered_map<std::string_view, const HfTensorSpec*> by_name;
  for (const HfTensorSpec& s : specs) {
    tensors.push_back(tensorfile::TensorSpec{s.name, o.dtype, s.shape});
    by_name[s.name] = &s;
  }
  QBC_ASSIGN_OR_RETURN(
      tensorfile::SafetensorsStreamWriter out,
      tensorfile::SafetensorsStreamWriter::create(path, std::move(tensors), {{"format", "pt"}}));
  const size_t total = out.tensors().size();
  for (size_t i = 0; i < total; ++i) {
    const auto spec = by_name.find(out.tensors()[i].name);
    QBC_CHECK(spec != by_name.end()) << "writer lost tensor '" << out.tensors()[i].name << "'";
    QBC_RETURN_IF_ERROR(write_tensor(out, *spec->second, o, norm_base));
    if ((i + 1) % kProgressEveryTensors == 0 || i + 1 == total) {
      events::progress("frontend", static_cast<int64_t>(i + 1), static_cast<int64_t>(total));
    }
  }
  return out.finish();
}

std::string_view torch_dtype_of(tensorfile::DType dtype) {
  switch (dtype) {
    case tensorfile::DType::kF16:
      return "float16";
    case tensorfile::DType::kBF16:
      return "bfloat16";
    default:
      return "float32";
  }
}

StatusOr<std::string> read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path.string(), ": cannot open config file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status create_output_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return invalid_argument(dir.string(), ": cannot create folder: ", ec.message());
  return ok_status();
}

// A shrunk Qwen2(.5)-VL keeps a valid config: `rope_scaling.mrope_section` rescaled to the new
// head_dim / 2 (each stream floor(old * new / old_sum), the width stream the rest), and the
// image and vision token ids that fall outside a smaller vocabulary moved to its top ids.
void fit_vlm_keys(OrderedJson& j, const ConfigOverrides& ov) {
  // The language keys: under text_config when it holds the rope scaling (Qwen3-VL).
  OrderedJson& t = j.contains("text_config") && j["text_config"].is_object() &&
                           j["text_config"].contains("rope_scaling")
                       ? j["text_config"]
                       : j;
  auto get = [&t](const char* key) {
    return t.contains(key) && t[key].is_number_integer() ? t[key].get<int64_t>() : int64_t{0};
  };
  const int64_t heads = get("num_attention_heads");
  const int64_t head_dim = get("head_dim") > 0 ? get("head_dim")
                           : heads > 0         ? get("hidden_size") / heads
                                               : 0;
  if (t.contains("rope_scaling") && t["rope_scaling"].is_object() &&
      t["rope_scaling"].contains("mrope_section") &&
      t["rope_scaling"]["mrope_section"].is_array() &&
      t["rope_scaling"]["mrope_section"].size() == 3) {
    OrderedJson& sec = t["rope_scaling"]["mrope_section"];
    int64_t old_sum = 0;
    for (const auto& v : sec)
      old_sum += v.is_number_integer() ? v.get<int64_t>() : -(int64_t{1} << 40);
    const int64_t half = head_dim / 2;
    if (old_sum > 0 && half > 0 && old_sum != half) {
      const int64_t t = sec[0].get<int64_t>() * half / old_sum,
                    h = sec[1].get<int64_t>() * half / old_sum;
      sec = OrderedJson::array({t, h, half - t - h});
    }
  }
  if (!ov.vocab_size) return;
  int64_t next = *ov.vocab_size - 1;
  for (const char* key :
       {"image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
        "vision_end_token_id", "vision_token_id", "boi_token_index", "eoi_token_index"}) {
    if (j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() >= *ov.vocab_size &&
        next >= 0)
      j[key] = next--;
  }
}

}  // namespace

int64_t HfTensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<HfTensorSpec> hf_tensor_specs(const HParams& hp) {
  std::vector<HfTensorSpec> out;
  const HfModelNames names = hf_model_names(hp);
  add(out, names.embed + ".weight", {hp.vocab_size, hp.hidden_size}, TensorRole::kEmbedding);
  for (int64_t i = 0; i < hp.num_hidden_layers; ++i) add_block(hp, i, out);
  add(out, names.final_norm + ".weight", {hp.hidden_size}, TensorRole::kNorm);
  if (!hp.tie_word_embeddings) {
    add(out, names.lm_head + ".weight", {hp.vocab_size, hp.hidden_size}, TensorRole::kEmbedding);
  }
  std::sort(out.begin(), out.end(),
            [](const HfTensorSpec& a, const HfTensorSpec& b) { return a.name < b.name; });
  return out;
}

namespace {

// LLaVA's CLIP tower and projector under transformers < 4.52's names (CLIPVisionModel inside
// `vision_tower`, LlavaMultiModalProjector): every layer, post_layernorm included, as the
// checkpoint stores them even where the penultimate-layer features leave them unused.
std::vector<HfTensorSpec> clip_tensor_specs(const VisionConfig& vc) {
  std::vector<HfTensorSpec> out;
  const int64_t w = vc.width, p = vc.patch_size;
  const std::string m = "vision_tower.vision_model.";
  add(out, m + "embeddings.class_embedding", {w}, TensorRole::kEmbedding);
  add(out, m + "embeddings.patch_embedding.weight", {w, 3, p, p}, TensorRole::kLinear);
  add(out, m + "embeddings.position_embedding.weight", {vc.position_embeddings, w},
      TensorRole::kEmbedding);
  auto norm = [&](const std::string& name) {
    add(out, name + ".weight", {w}, TensorRole::kNorm);
    add(out, name + ".bias", {w}, TensorRole::kBias);
  };
  norm(m + "pre_layrnorm");
  for (int64_t i = 0; i < vc.depth; ++i) {
    const std::string b = m + "encoder.layers." + std::to_string(i) + ".";
    norm(b + "layer_norm1");
    norm(b + "layer_norm2");
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"})
      add_linear(out, b + "self_attn." + proj, w, w, /*bias=*/true);
    add_linear(out, b + "mlp.fc1", vc.ffn, w, /*bias=*/true);
    add_linear(out, b + "mlp.fc2", w, vc.ffn, /*bias=*/true);
  }
  norm(m + "post_layernorm");
  add_linear(out, "multi_modal_projector.linear_1", vc.text_hidden, w, /*bias=*/true);
  add_linear(out, "multi_modal_projector.linear_2", vc.text_hidden, vc.text_hidden, true);
  std::sort(out.begin(), out.end(),
            [](const HfTensorSpec& a, const HfTensorSpec& b) { return a.name < b.name; });
  return out;
}

// Gemma 3's SigLIP tower (SiglipVisionModel inside `vision_tower`, no head) and
// Gemma3MultiModalProjector under transformers < 4.52's names. The projector's weight is
// [vision width, text width] (HF multiplies by it); mm_soft_emb_norm is Gemma's 1 + w style.
// A SigLIP tower (SiglipVisionTransformer, no head) under prefix `m`: the patch embedding with
// bias, the position table, the encoder layers and post_layernorm (Gemma 3's and Idefics3's).
void add_siglip_tower(std::vector<HfTensorSpec>& out, const VisionConfig& vc,
                      const std::string& m) {
  const int64_t w = vc.width, p = vc.patch_size;
  add(out, m + "embeddings.patch_embedding.weight", {w, 3, p, p}, TensorRole::kLinear);
  add(out, m + "embeddings.patch_embedding.bias", {w}, TensorRole::kBias);
  add(out, m + "embeddings.position_embedding.weight", {vc.position_embeddings, w},
      TensorRole::kEmbedding);
  auto norm = [&](const std::string& name) {
    add(out, name + ".weight", {w}, TensorRole::kUnitNorm);
    add(out, name + ".bias", {w}, TensorRole::kBias);
  };
  for (int64_t i = 0; i < vc.depth; ++i) {
    const std::string b = m + "encoder.layers." + std::to_string(i) + ".";
    norm(b + "layer_norm1");
    norm(b + "layer_norm2");
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"})
      add_linear(out, b + "self_attn." + proj, w, w, /*bias=*/true);
    add_linear(out, b + "mlp.fc1", vc.ffn, w, /*bias=*/true);
    add_linear(out, b + "mlp.fc2", w, vc.ffn, /*bias=*/true);
  }
  norm(m + "post_layernorm");
}

// LLaVA with a SigLIP tower (llava-interleave, LLaVA-OneVision's tower): SiglipVisionModel
// inside `vision_tower` (no head) and LlavaMultiModalProjector, transformers < 4.52's names.
std::vector<HfTensorSpec> llava_siglip_tensor_specs(const VisionConfig& vc) {
  std::vector<HfTensorSpec> out;
  add_siglip_tower(out, vc, "vision_tower.vision_model.");
  add_linear(out, "multi_modal_projector.linear_1", vc.text_hidden, vc.width, /*bias=*/true);
  add_linear(out, "multi_modal_projector.linear_2", vc.text_hidden, vc.text_hidden, true);
  std::sort(out.begin(), out.end(),
            [](const HfTensorSpec& a, const HfTensorSpec& b) { return a.name < b.name; });
  return out;
}

std::vector<HfTensorSpec> siglip_gemma3_tensor_specs(const VisionConfig& vc) {
  std::vector<HfTensorSpec> out;
  const int64_t w = vc.width;
  add_siglip_tower(out, vc, "vision_tower.vision_model.");
  add(out, "multi_modal_projector.mm_soft_emb_norm.weight", {w}, TensorRole::kNorm);
  add(out, "multi_modal_projector.mm_input_projection_weight", {w, vc.text_hidden},
      TensorRole::kLinear);
  std::sort(out.begin(), out.end(),
            [](const HfTensorSpec& a, const HfTensorSpec& b) { return a.name < b.name; });
  return out;
}

// Idefics3VisionTransformer under `model.vision_model.` (no head) and Idefics3Connector's
// modality_projection.proj (no bias) over scale_factor² patches side by side.
std::vector<HfTensorSpec> idefics3_tensor_specs(const VisionConfig& vc) {
  std::vector<HfTensorSpec> out;
  const int64_t w = vc.width;
  const Idefics3VisionNames names;
  add_siglip_tower(out, vc, names.tower);
  add_linear(out, names.connector + "modality_projection.proj", vc.text_hidden,
             vc.merge * vc.merge * w, /*bias=*/false);
  std::sort(out.begin(), out.end(),
            [](const HfTensorSpec& a, const HfTensorSpec& b) { return a.name < b.name; });
  return out;
}

// Qwen3VLVisionModel: a biased Conv3d patch embedding, the learned position grid, LayerNorm
// blocks with a linear_fc1 / linear_fc2 MLP, the merger (norm over one patch) and one DeepStack
// merger (norm over the merged width) per deepstack_visual_indexes entry.
std::vector<HfTensorSpec> qwen3_tensor_specs(const VisionConfig& vc) {
  std::vector<HfTensorSpec> out;
  const int64_t w = vc.width, f = vc.ffn, wide = w * vc.merge * vc.merge;
  add(out, "visual.patch_embed.proj.weight",
      {w, 3, vc.temporal_patch_size, vc.patch_size, vc.patch_size}, TensorRole::kLinear);
  add(out, "visual.patch_embed.proj.bias", {w}, TensorRole::kBias);
  add(out, "visual.pos_embed.weight", {vc.position_embeddings, w}, TensorRole::kEmbedding);
  auto norm = [&](const std::string& m, int64_t width) {
    add(out, m + ".weight", {width}, TensorRole::kUnitNorm);
    add(out, m + ".bias", {width}, TensorRole::kBias);
  };
  for (int64_t i = 0; i < vc.depth; ++i) {
    const std::string b = "visual.blocks." + std::to_string(i) + ".";
    norm(b + "norm1", w);
    norm(b + "norm2", w);
    add_linear(out, b + "attn.qkv", 3 * w, w, /*bias=*/true);
    add_linear(out, b + "attn.proj", w, w, /*bias=*/true);
    add_linear(out, b + "mlp.linear_fc1", f, w, /*bias=*/true);
    add_linear(out, b + "mlp.linear_fc2", w, f, /*bias=*/true);
  }
  auto merger = [&](const std::string& m, int64_t norm_width) {
    norm(m + "norm", norm_width);
    add_linear(out, m + "linear_fc1", wide, wide, /*bias=*/true);
    add_linear(out, m + "linear_fc2", vc.text_hidden, wide, /*bias=*/true);
  };
  merger("visual.merger.", w);
  for (size_t j = 0; j < vc.deepstack_layers.size(); ++j)
    merger("visual.deepstack_merger_list." + std::to_string(j) + ".", wide);
  std::sort(out.begin(), out.end(),
            [](const HfTensorSpec& a, const HfTensorSpec& b) { return a.name < b.name; });
  return out;
}

}  // namespace

std::vector<HfTensorSpec> hf_vision_tensor_specs(const VisionConfig& vc) {
  std::vector<HfTensorSpec> out;
  if (builds_clip_vision_graph(vc))
    return vc.tower == VisionTower::kSiglip ? llava_siglip_tensor_specs(vc) : clip_tensor_specs(vc);
  if (builds_gemma3_vision_graph(vc)) return siglip_gemma3_tensor_specs(vc);
  if (builds_idefics3_vision_graph(vc)) return idefics3_tensor_specs(vc);
  if (!builds_qwen_vision_graph(vc.tower)) return out;
  if (vc.tower == VisionTower::kQwen3Vit) return qwen3_tensor_specs(vc);
  const bool qwen2 = vc.tower == VisionTower::kQwen2Vit;
  const int64_t w = vc.width, f = vc.ffn, wide = w * vc.merge * vc.merge;
  add(out, "visual.patch_embed.proj.weight",
      {w, 3, vc.temporal_patch_size, vc.patch_size, vc.patch_size}, TensorRole::kLinear);
  auto linear = [&](const std::string& m, int64_t rows, int64_t cols) {
    add_linear(out, m, rows, cols, /*bias=*/true);
  };
  // Qwen2-VL's norms are LayerNorms with a bias, Qwen2.5-VL's RMSNorms.
  auto norm = [&](const std::string& m) {
    add(out, m + ".weight", {w}, TensorRole::kNorm);
    if (qwen2) add(out, m + ".bias", {w}, TensorRole::kBias);
  };
  for (int64_t i = 0; i < vc.depth; ++i) {
    const std::string b = "visual.blocks." + std::to_string(i) + ".";
    norm(b + "norm1");
    norm(b + "norm2");
    linear(b + "attn.qkv", 3 * w, w);
    linear(b + "attn.proj", w, w);
    if (qwen2) {
      linear(b + "mlp.fc1", f, w);
      linear(b + "mlp.fc2", w, f);
    } else {
      linear(b + "mlp.gate_proj", f, w);
      linear(b + "mlp.up_proj", f, w);
      linear(b + "mlp.down_proj", w, f);
    }
  }
  norm("visual.merger.ln_q");
  linear("visual.merger.mlp.0", wide, wide);
  linear("visual.merger.mlp.2", vc.text_hidden, wide);
  std::sort(out.begin(), out.end(),
            [](const HfTensorSpec& a, const HfTensorSpec& b) { return a.name < b.name; });
  return out;
}

namespace {

/// Qwen3-VL: a shallower tower keeps its DeepStack taps at the same relative depths,
/// floor(i · new / old), sorted, repeats dropped (24 blocks [5, 11, 17] -> 3 blocks [0, 1, 2]);
/// a config without the keys has Qwen3VLVisionConfig's defaults (27 blocks, [8, 16, 24]).
void scale_deepstack_taps(OrderedJson& j, int64_t depth) {
  if (!j.contains("model_type") || j["model_type"] != "qwen3_vl" || !j.contains("vision_config") ||
      !j["vision_config"].is_object())
    return;
  OrderedJson& v = j["vision_config"];
  const int64_t old_depth =
      v.contains("depth") && v["depth"].is_number_integer() ? v["depth"].get<int64_t>() : 27;
  std::vector<int64_t> old = {8, 16, 24};
  if (v.contains("deepstack_visual_indexes") && v["deepstack_visual_indexes"].is_array()) {
    old.clear();
    for (const OrderedJson& i : v["deepstack_visual_indexes"])
      if (i.is_number_integer()) old.push_back(i.get<int64_t>());
  }
  if (old_depth <= 0) return;
  std::sort(old.begin(), old.end());
  OrderedJson taps = OrderedJson::array();
  for (int64_t i : old) {
    const int64_t scaled = i * depth / old_depth;
    if (scaled >= 0 && scaled < depth && (taps.empty() || taps.back().get<int64_t>() < scaled))
      taps.push_back(scaled);
  }
  v["deepstack_visual_indexes"] = taps;
}

}  // namespace

StatusOr<std::string> apply_config_overrides(std::string_view config_json, std::string_view source,
                                             const ConfigOverrides& ov,
                                             std::optional<tensorfile::DType> dtype) {
  QBC_ASSIGN_OR_RETURN(OrderedJson j, parse_json_text<OrderedJson>(config_json, source));
  if (!j.is_object()) return invalid_argument(source, ": expected a JSON object at the top");
  const std::pair<const char*, const std::optional<int64_t>*> ints[] = {
      {"num_hidden_layers", &ov.num_hidden_layers},
      {"hidden_size", &ov.hidden_size},
      {"intermediate_size", &ov.intermediate_size},
      {"vocab_size", &ov.vocab_size},
      {"num_attention_heads", &ov.num_attention_heads},
      {"num_key_value_heads", &ov.num_key_value_heads},
      {"head_dim", &ov.head_dim},
      {"max_position_embeddings", &ov.max_position_embeddings},
      {"sliding_window", &ov.sliding_window},
  };
  // LLaVA and Gemma 3: the language model's keys live under text_config (vocab_size at the top
  // too); their towers (CLIP, SigLIP) share CLIPVisionConfig's key names.
  const bool llava = j.contains("model_type") &&
                     (j["model_type"] == "llava" || j["model_type"] == "gemma3" ||
                      j["model_type"] == "idefics3" || j["model_type"] == "smolvlm") &&
                     j.contains("text_config") && j["text_config"].is_object();
  // Qwen3-VL (and Qwen2.5-VL as newer transformers write it) nest the language keys under
  // text_config too: a key found there, and not at the top, is overridden there.
  const bool nested = j.contains("text_config") && j["text_config"].is_object();
  for (const auto& [key, value] : ints) {
    if (!value->has_value()) continue;
    if (llava || (nested && !j.contains(key) && j["text_config"].contains(key))) {
      j["text_config"][key] = **value;
      if (std::string_view(key) == "vocab_size" && j.contains(key)) j[key] = **value;
      continue;
    }
    // EXAONE 3.5 spells num_hidden_layers num_layers.
    const bool alias = std::string_view(key) == "num_hidden_layers" && j.contains("num_layers") &&
                       !j.contains("num_hidden_layers");
    j[alias ? "num_layers" : key] = **value;
  }
  // Per-layer lists (layer_types, SmolLM3's no_rope_layers) must keep one entry per layer:
  // truncate, or repeat the existing pattern.
  for (const char* key : {"layer_types", "no_rope_layers"}) {
    if (!ov.num_hidden_layers || !j.contains(key) || !j[key].is_array() || j[key].empty()) continue;
    const OrderedJson old = j[key];
    OrderedJson list = OrderedJson::array();
    for (int64_t i = 0; i < *ov.num_hidden_layers; ++i) list.push_back(old[i % old.size()]);
    j[key] = list;
  }
  const VisionOverrides& vo = ov.vision;
  if (vo.depth && !vo.deepstack_visual_indexes) scale_deepstack_taps(j, *vo.depth);
  const std::pair<const char*, const std::optional<int64_t>*> vision_ints[] = {
      {"depth", &vo.depth},
      {"hidden_size", &vo.hidden_size},
      {"intermediate_size", &vo.intermediate_size},
      {"num_heads", &vo.num_heads},
      {"out_hidden_size", &vo.out_hidden_size},
  };
  // Qwen2VLVisionConfig: the tower's width is embed_dim, its MLP embed_dim · mlp_ratio, and
  // hidden_size is the merger's output (the language model's width).
  const bool qwen2_vl = j.contains("model_type") && j["model_type"] == "qwen2_vl";
  for (auto [key, value] : vision_ints) {
    if (!value->has_value()) continue;
    if (!j.contains("vision_config") || !j["vision_config"].is_object())
      return invalid_argument(source, ": vision_config.", key,
                              " overridden, but there is no vision_config");
    if (qwen2_vl) {
      const std::string_view k(key);
      if (k == "hidden_size") key = "embed_dim";
      if (k == "out_hidden_size") key = "hidden_size";
      if (k == "intermediate_size") continue;  // mlp_ratio, below
    }
    if (llava) {  // CLIPVisionConfig's key names; the projector writes the text width
      const std::string_view k(key);
      if (k == "out_hidden_size")
        return invalid_argument(source,
                                ": a LLaVA projector writes text_config.hidden_size; "
                                "override hidden_size instead of vision out_hidden_size");
      if (k == "depth") key = "num_hidden_layers";
      if (k == "num_heads") key = "num_attention_heads";
    }
    j["vision_config"][key] = **value;
  }
  if (qwen2_vl && vo.intermediate_size) {
    const OrderedJson& v = j["vision_config"];
    const int64_t width = v.contains("embed_dim") && v["embed_dim"].is_number_integer()
                              ? v["embed_dim"].get<int64_t>()
                              : 1280;
    if (*vo.intermediate_size % width != 0)
      return invalid_argument(source, ": a Qwen2-VL tower's MLP is embed_dim x mlp_ratio; ",
                              "intermediate_size ", *vo.intermediate_size,
                              " is not a multiple of embed_dim ", width);
    j["vision_config"]["mlp_ratio"] = *vo.intermediate_size / width;
  }
  // A Qwen-VL merger writes the language model's width: a smaller language model takes the
  // tower's out_hidden_size (Qwen2-VL: hidden_size) with it (unless that is overridden too).
  const char* out_key = qwen2_vl ? "hidden_size" : "out_hidden_size";
  if (ov.hidden_size && !vo.out_hidden_size && !llava && j.contains("vision_config") &&
      j["vision_config"].is_object() && j["vision_config"].contains(out_key))
    j["vision_config"][out_key] = *ov.hidden_size;
  for (const auto& [key, list] :
       {std::pair{"fullatt_block_indexes", &vo.fullatt_block_indexes},
        std::pair{"deepstack_visual_indexes", &vo.deepstack_visual_indexes}}) {
    if (!list->has_value()) continue;
    if (!j.contains("vision_config") || !j["vision_config"].is_object())
      return invalid_argument(source, ": vision_config.", key,
                              " overridden, but there is no vision_config");
    j["vision_config"][key] = **list;
  }
  fit_vlm_keys(j, ov);
  if (dtype) {
    j["torch_dtype"] = std::string(torch_dtype_of(*dtype));
    if (j.contains("dtype")) j["dtype"] = j["torch_dtype"];
  }
  return j.dump(2) + "\n";
}

Status write_random_model(const RandomModelOptions& o) {
  if (o.dtype != tensorfile::DType::kF32 && o.dtype != tensorfile::DType::kF16 &&
      o.dtype != tensorfile::DType::kBF16) {
    return unimplemented("random model dtype ", tensorfile::dtype_name(o.dtype),
                         " is not supported (use F32, F16 or BF16)");
  }
  if (!(o.init_std >= 0.0)) return invalid_argument("init_std must be >= 0");
  std::string source = "<built-in tiny llama config>";
  std::string text(tiny_llama_config_json());
  if (!o.config_path.empty()) {
    source = o.config_path.string();
    QBC_ASSIGN_OR_RETURN(text, read_text(o.config_path));
  } else if (!o.config_json.empty()) {
    source = "<config json>";
    text = o.config_json;
  }
  QBC_ASSIGN_OR_RETURN(std::string config,
                       apply_config_overrides(text, source, o.overrides, o.dtype));
  // Other VLMs stop in parse_hparams, which names what it cannot read.
  QBC_ASSIGN_OR_RETURN(HParams hp, parse_hparams(config, source + " (with overrides)"));
  std::vector<HfTensorSpec> specs = hf_tensor_specs(hp);
  // Qwen2.5-VL: the tower's weights next to the language model's (older transformers' names).
  const StatusOr<std::optional<VisionConfig>> vision = parse_vision_config(config, source);
  // A vision_config of a family qbc reads must be right; other families' are not read here.
  if (!vision.ok() && vision.status().code() != Code::kUnimplemented) return vision.status();
  // LLaVA: the language model under `language_model.` (transformers < 4.52), CLIP next to it.
  if (hp.architecture == "LlavaForConditionalGeneration" ||
      hp.architecture == "Gemma3ForConditionalGeneration") {
    for (HfTensorSpec& s : specs) s.name = "language_model." + s.name;
  }
  // Idefics3 / SmolVLM: the language model under `model.text_model.`, lm_head at the top.
  if (hp.architecture == "Idefics3ForConditionalGeneration" ||
      hp.architecture == "SmolVLMForConditionalGeneration") {
    for (HfTensorSpec& s : specs)
      if (s.name.rfind("model.", 0) == 0) s.name = "model.text_model." + s.name.substr(6);
  }
  if (hp.architecture == "Gemma3ForConditionalGeneration" && !(vision.ok() && *vision)) {
    return unimplemented(source,
                         ": a random multimodal Gemma3 checkpoint needs the config's "
                         "vision_config (or use a Gemma3ForCausalLM text config)");
  }
  if (vision.ok() && *vision && !hf_vision_tensor_specs(**vision).empty()) {
    for (HfTensorSpec& v : hf_vision_tensor_specs(**vision)) specs.push_back(std::move(v));
    std::sort(specs.begin(), specs.end(),
              [](const HfTensorSpec& a, const HfTensorSpec& b) { return a.name < b.name; });
  }
  QBC_RETURN_IF_ERROR(create_output_dir(o.output_dir));
  const float norm_base = hp.norm_style == NormStyle::kOnePlusWeight ? 0.0f : 1.0f;
  QBC_RETURN_IF_ERROR(
      write_model_safetensors(o.output_dir / "model.safetensors", specs, o, norm_base));
  // A byte-level BPE covering every id of the vocabulary (qbc/frontend/random_tokenizer.h), so
  // `qbc run` on the random model prints text for whatever ids it picks.
  // Gemma 3: its image tokens as special tokens, under the names of the published tokenizer.
  std::map<int64_t, std::string> image_tokens;
  if (vision.ok() && *vision && (*vision)->projector == VisionProjector::kGemmaSoftEmb) {
    image_tokens[(*vision)->image_token_id] = "<image_soft_token>";
    image_tokens[(*vision)->image_start_token_id] = "<start_of_image>";
    image_tokens[(*vision)->image_end_token_id] = "<end_of_image>";
  }
  if (vision.ok() && *vision && (*vision)->projector == VisionProjector::kLlavaMlp &&
      (*vision)->image_token_id >= 0)
    image_tokens[(*vision)->image_token_id] = "<image>";
  // Idefics3 / SmolVLM: <image> and the markers its processor writes around each tile, at the
  // published tokenizer's offsets from <image> (<global-img> 38 below, <row_1_col_1> ..
  // <row_6_col_6> 37 .. 2 below, <fake_token_around_image> 1 below).
  if (vision.ok() && *vision && (*vision)->projector == VisionProjector::kPixelShuffle &&
      (*vision)->image_token_id >= 38) {
    const int64_t img = (*vision)->image_token_id;
    image_tokens[img] = "<image>";
    image_tokens[img - 1] = "<fake_token_around_image>";
    image_tokens[img - 38] = "<global-img>";
    for (int r = 1; r <= 6; ++r)
      for (int c = 1; c <= 6; ++c)
        image_tokens[img - 37 + (r - 1) * 6 + (c - 1)] =
            "<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">";
  }
  if (vision.ok() && *vision && (*vision)->projector == VisionProjector::kQwenMerger) {
    image_tokens[(*vision)->image_token_id] = "<|image_pad|>";
    image_tokens[(*vision)->image_start_token_id] = "<|vision_start|>";
    image_tokens[(*vision)->image_end_token_id] = "<|vision_end|>";
  }
  if (const std::string tok = random_model_tokenizer_json(hp, image_tokens); !tok.empty())
    QBC_RETURN_IF_ERROR(write_file_atomic((o.output_dir / "tokenizer.json").string(), tok));
  // A VLM's processor files beside the source config (preprocessing, chat template) come
  // along: the compile packs them, and `qbc run --image` follows them.
  if (!o.config_path.empty() && vision.ok() && *vision) {
    for (const char* name : {"preprocessor_config.json", "processor_config.json",
                             "chat_template.json", "generation_config.json"}) {
      const std::filesystem::path from = o.config_path.parent_path() / name;
      std::error_code ec;
      if (!std::filesystem::is_regular_file(from, ec)) continue;
      QBC_ASSIGN_OR_RETURN(const std::string bytes, read_text(from));
      QBC_RETURN_IF_ERROR(write_file_atomic((o.output_dir / name).string(), bytes));
    }
  }
  // The config goes last, so a folder with a config.json always has its weights too.
  return write_file_atomic((o.output_dir / "config.json").string(), config);
}

std::string_view tiny_llama_config_json() {
  return R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 16,
  "vocab_size": 256,
  "max_position_embeddings": 512,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "rope_scaling": null,
  "hidden_act": "silu",
  "tie_word_embeddings": false,
  "attention_bias": false,
  "mlp_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "torch_dtype": "float32"
}
)";
}

}  // namespace qbc::frontend
