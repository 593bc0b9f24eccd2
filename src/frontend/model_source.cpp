// ModelSource: opens an HF folder or a GGUF file behind one HF-shaped interface.
#include "qbc/frontend/model_source.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "gguf_codes.h"
#include "gguf_model.h"
#include "qbc/frontend/gguf.h"
#include "qbc/frontend/hf_names.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/support/file_util.h"
#include "qbc/support/hash.h"
#include "qbc/support/quote.h"

namespace qbc::frontend {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kExpected =
    "expected a HuggingFace model folder (config.json + model.safetensors or "
    "model.safetensors.index.json) or a .gguf file";

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

// Joins up to `limit` names, then "... and N more".
std::string join_limited(const std::vector<std::string>& items, size_t limit) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < limit; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > limit) out += ", ... and " + std::to_string(items.size() - limit) + " more";
  return out;
}

// Qwen2(.5)-VL checkpoints saved by transformers >= 4.52 name the language model
// `model.language_model.*` and the tower `model.visual.*`; older ones `model.*` and `visual.*`.
// Both read under the older names (name_in_file keeps the stored one).
std::string qwen_vl_canonical_name(const std::string& name) {
  constexpr std::string_view kLanguage = "model.language_model.", kVisual = "model.visual.";
  if (name.rfind(kLanguage, 0) == 0) return "model." + name.substr(kLanguage.size());
  if (name.rfind(kVisual, 0) == 0) return "visual." + name.substr(kVisual.size());
  return name;
}

// LLaVA checkpoints: `language_model.model.*` and `language_model.lm_head.*` (transformers <
// 4.52), or `model.language_model.*`, `lm_head.*`, `model.vision_tower.*` and
// `model.multi_modal_projector.*` (>= 4.52). The language model reads under the Llama names,
// the tower and projector under the older names (`vision_tower.*`, `multi_modal_projector.*`).
std::string llava_canonical_name(const std::string& name) {
  const std::pair<std::string_view, std::string_view> prefixes[] = {
      {"language_model.model.", "model."},
      {"language_model.lm_head.", "lm_head."},
      {"model.language_model.", "model."},
      {"model.vision_tower.", "vision_tower."},
      {"model.multi_modal_projector.", "multi_modal_projector."},
  };
  for (const auto& [from, to] : prefixes) {
    if (name.rfind(from, 0) == 0) return std::string(to) + name.substr(from.size());
  }
  return name;
}

// Idefics3 / SmolVLM checkpoints: `model.text_model.*` (read under the Llama names), `lm_head.*`,
// and the tower and connector under `model.vision_model.*` / `model.connector.*` (kept).
bool is_idefics3(const HParams& hp) {
  return hp.architecture == "Idefics3ForConditionalGeneration" ||
         hp.architecture == "SmolVLMForConditionalGeneration";
}
std::string idefics3_canonical_name(const std::string& name) {
  constexpr std::string_view kText = "model.text_model.";
  if (name.rfind(kText, 0) == 0) return "model." + name.substr(kText.size());
  return name;
}

// Gemma 3 VLM checkpoints use LLaVA's names (language_model.model.*, vision_tower.*,
// multi_modal_projector.*, or their transformers >= 4.52 forms).
bool is_llava(const HParams& hp) {
  return hp.architecture == "LlavaForConditionalGeneration" ||
         hp.architecture == "Gemma3ForConditionalGeneration";
}

bool is_vision_tensor(const HParams& hp, const std::string& name) {
  if (is_llava(hp))
    return name.rfind("vision_tower.", 0) == 0 || name.rfind("multi_modal_projector.", 0) == 0;
  if (is_idefics3(hp))
    return name.rfind("model.vision_model.", 0) == 0 || name.rfind("model.connector.", 0) == 0;
  return !hp.mrope_section.empty() && name.rfind("visual.", 0) == 0;
}

bool has_gguf_magic(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

}  // namespace

std::string_view transform_name(TensorTransform transform) {
  switch (transform) {
    case TensorTransform::kNone:
      return "none";
    case TensorTransform::kUnpermuteRopeRows:
      return "unpermute-rope-rows";
    case TensorTransform::kSubtractOne:
      return "subtract-one";
  }
  return "unknown";
}

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct ModelSource::Impl {
  std::string_view format;
  fs::path path;
  HParams hparams;
  std::string config_text;
  fs::path tokenizer_path;
  std::string chat_template;  // GGUF tokenizer.chat_template
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> index;
  std::vector<std::string> unmapped;  // Stored names without an HF mapping.
  std::vector<fs::path> input_files;  // For provenance, in a stable order.
  fs::path weights_label;             // The file named in "missing tensor ... in FILE".
  std::optional<SafetensorsCheckpoint> safetensors;
  std::optional<GgufFile> gguf;
  std::string gguf_arch;
  std::optional<PrequantConfig> prequant;
  std::vector<PackedTensorRef> packed;                          // Sorted by module.
  std::map<std::string, size_t, std::less<>> packed_by_weight;  // "<module>.weight" -> packed.

  void build_index() {
    index.clear();
    for (size_t i = 0; i < tensors.size(); ++i) index.emplace(tensors[i].name, i);
  }

  static StatusOr<std::unique_ptr<Impl>> open_hf(const fs::path& dir);
  Status reorder_interleaved_rope_rows();
  static StatusOr<std::unique_ptr<Impl>> open_gguf(const fs::path& file);
};

StatusOr<std::unique_ptr<ModelSource::Impl>> ModelSource::Impl::open_hf(const fs::path& dir) {
  std::error_code ec;
  const fs::path config = dir / "config.json";
  if (!fs::is_regular_file(config, ec)) {
    return invalid_argument(dir.string(), ": no config.json in this folder; ", kExpected);
  }
  auto impl = std::make_unique<Impl>();
  impl->format = "hf-safetensors";
  impl->path = dir;
  QBC_ASSIGN_OR_RETURN(impl->config_text, read_text_file(config.string()));
  QBC_ASSIGN_OR_RETURN(impl->hparams, parse_hparams(impl->config_text, config.string()));
  auto ckpt = SafetensorsCheckpoint::open(dir);
  if (!ckpt.ok()) {
    if (ckpt.status().code() == Code::kNotFound) {
      return invalid_argument(dir.string(), ": no model.safetensors or ",
                              "model.safetensors.index.json; ", kExpected, " (",
                              ckpt.status().message(), ")");
    }
    return ckpt.status();
  }
  impl->safetensors.emplace(std::move(ckpt).value());
  const SafetensorsCheckpoint& st = *impl->safetensors;

  impl->input_files.push_back(config);
  const fs::path index_file = dir / "model.safetensors.index.json";
  const bool sharded = fs::is_regular_file(index_file, ec);
  if (sharded) impl->input_files.push_back(index_file);
  for (const SafetensorsFile& shard : st.shards()) {
    impl->input_files.push_back(fs::absolute(shard.path(), ec));
  }
  if (sharded) {
    impl->weights_label = index_file;
  } else if (st.shards().size() == 1) {
    impl->weights_label = fs::absolute(st.shards().front().path(), ec);
  } else {
    impl->weights_label = dir;
  }
  const fs::path tokenizer = dir / "tokenizer.json";
  if (fs::is_regular_file(tokenizer, ec)) {
    impl->tokenizer_path = tokenizer;
    impl->input_files.push_back(tokenizer);
  }

  QBC_ASSIGN_OR_RETURN(impl->prequant, parse_prequant_config(impl->config_text, config.string()));
  std::set<std::string> hidden;
  if (impl->prequant) {
    QBC_ASSIGN_OR_RETURN(PrequantTensors found, find_packed_linears(st, *impl->prequant));
    hidden.insert(found.hidden.begin(), found.hidden.end());
    for (PackedTensorRef& ref : found.linears) {
      hidden.insert(ref.parts.begin(), ref.parts.end());
      TensorInfo info;
      info.name = ref.module + ".weight";
      info.shape = ref.shape;
      info.dtype =
          std::string(pack_layout_name(ref.layout)) + "-int" + std::to_string(ref.args.bits);
      info.file = fs::absolute(ref.file, ec);
      info.name_in_file = ref.parts.front();
      impl->packed_by_weight.emplace(info.name, impl->packed.size());
      impl->packed.push_back(std::move(ref));
      impl->tensors.push_back(std::move(info));
    }
  }
  const bool vlm = !impl->hparams.mrope_section.empty();
  for (const SafetensorsTensor& t : st.tensors()) {
    if (hidden.count(t.name) != 0) continue;
    TensorInfo info;
    info.name = vlm                          ? qwen_vl_canonical_name(t.name)
                : is_llava(impl->hparams)    ? llava_canonical_name(t.name)
                : is_idefics3(impl->hparams) ? idefics3_canonical_name(t.name)
                                             : t.name;
    info.shape = t.shape;
    info.dtype = std::string(tensorfile::dtype_name(t.dtype));
    info.file = fs::absolute(t.file, ec);
    info.name_in_file = t.name;
    impl->tensors.push_back(std::move(info));
  }
  std::sort(impl->tensors.begin(), impl->tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  impl->build_index();
  QBC_RETURN_IF_ERROR(impl->reorder_interleaved_rope_rows());
  return impl;
}

// Cohere2 rotates adjacent pairs (2i, 2i+1) of each q/k head; reading its q_proj/k_proj rows in
// the rotate_half order (pair i at rows i and i + head_dim/2: the inverse of llama.cpp's
// permute(), kUnpermuteRopeRows) gives the graph's rope the same rotation. q and k move alike, so
// every q·k and the attention output are unchanged; NoPE layers' scores too.
Status ModelSource::Impl::reorder_interleaved_rope_rows() {
  if (!hparams.rope_interleaved) return ok_status();
  if (prequant) {
    return unimplemented(path.string(), ": a pre-quantized ", hparams.architecture,
                         " checkpoint: its q/k codes would need the interleaved-RoPE row order "
                         "undone; use the float checkpoint");
  }
  for (int64_t i = 0; i < hparams.num_hidden_layers; ++i) {
    const HfLayerNames n = hf_layer_names(hparams, i);
    for (const auto& [module, heads] : {std::pair{n.q, hparams.num_attention_heads},
                                        std::pair{n.k, hparams.num_key_value_heads}}) {
      for (const char* part : {".weight", ".bias"}) {
        auto it = index.find(module + part);
        if (it == index.end()) continue;
        TensorInfo& t = tensors[it->second];
        t.transform = TensorTransform::kUnpermuteRopeRows;
        t.rope_heads = heads;
      }
    }
  }
  return ok_status();
}

StatusOr<std::unique_ptr<ModelSource::Impl>> ModelSource::Impl::open_gguf(const fs::path& file) {
  auto impl = std::make_unique<Impl>();
  impl->format = "gguf";
  impl->path = file;
  QBC_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::open(file));
  impl->gguf.emplace(std::move(gguf));
  const GgufFile& g = *impl->gguf;
  QBC_ASSIGN_OR_RETURN(impl->gguf_arch, g.get_string("general.architecture"));
  QBC_ASSIGN_OR_RETURN(impl->config_text, gguf_model::compose_config_json(g));
  QBC_ASSIGN_OR_RETURN(impl->hparams,
                       parse_hparams(impl->config_text, file.string() + " (composed config.json)"));
  QBC_ASSIGN_OR_RETURN(gguf_model::MappedTensors mapped, gguf_model::map_tensors(g, impl->hparams));
  impl->tensors = std::move(mapped.tensors);
  impl->unmapped = std::move(mapped.unmapped);
  impl->build_index();
  // Q8_0, Q5_0, Q5_1, Q4_0 and Q4_1 linears keep their integer codes (gguf_codes.h); their
  // TensorInfo keeps the ggml type, so provenance still names it.
  if (std::optional<gguf_codes::Found> found = gguf_codes::find_linears(impl->tensors, g)) {
    impl->prequant = std::move(found->config);
    for (PackedTensorRef& ref : found->linears) {
      impl->packed_by_weight.emplace(ref.module + ".weight", impl->packed.size());
      impl->packed.push_back(std::move(ref));
    }
  }
  impl->tokenizer_path = file;
  if (g.has("tokenizer.chat_template")) {
    QBC_ASSIGN_OR_RETURN(impl->chat_template, g.get_string("tokenizer.chat_template"));
  }
  impl->input_files.push_back(file);
  impl->weights_label = file;
  return impl;
}

StatusOr<ModelSource> ModelSource::open(const fs::path& path) {
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  const fs::file_status st = fs::status(abs, ec);
  if (!fs::exists(st)) {
    return not_found(abs.string(), ": no such file or folder; ", kExpected);
  }
  std::unique_ptr<Impl> impl;
  if (fs::is_directory(st)) {
    QBC_ASSIGN_OR_RETURN(impl, Impl::open_hf(abs));
  } else if (fs::is_regular_file(st) && has_gguf_magic(abs)) {
    QBC_ASSIGN_OR_RETURN(impl, Impl::open_gguf(abs));
  } else if (fs::is_regular_file(st) && abs.filename() == "config.json") {
    QBC_ASSIGN_OR_RETURN(impl, Impl::open_hf(abs.parent_path()));
  } else {
    return invalid_argument(abs.string(), ": neither a folder nor a GGUF file (no 'GGUF' magic); ",
                            kExpected);
  }
  return ModelSource(std::move(impl));
}

ModelSource::ModelSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ModelSource::ModelSource(ModelSource&&) noexcept = default;
ModelSource& ModelSource::operator=(ModelSource&&) noexcept = default;
ModelSource::~ModelSource() = default;

std::string_view ModelSource::format() const { return impl_->format; }
const fs::path& ModelSource::path() const { return impl_->path; }
const HParams& ModelSource::hparams() const { return impl_->hparams; }
const std::string& ModelSource::config_json_text() const { return impl_->config_text; }
const fs::path& ModelSource::tokenizer_path() const { return impl_->tokenizer_path; }
const std::string& ModelSource::chat_template() const { return impl_->chat_template; }
const std::vector<TensorInfo>& ModelSource::tensors() const { return impl_->tensors; }

const TensorInfo* ModelSource::find(std::string_view hf_name) const {
  auto it = impl_->index.find(hf_name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

Status ModelSource::read_f32(std::string_view hf_name, std::vector<float>* out) const {
  const TensorInfo* info = find(hf_name);
  if (info == nullptr) {
    return not_found(impl_->path.string(), ": no tensor ", quote_prefix(hf_name));
  }
  if (impl_->safetensors && impl_->packed_by_weight.count(info->name) != 0) {
    QBC_ASSIGN_OR_RETURN(PackedLinear p, read_packed(info->name));
    *out = dequantize(p);
    return ok_status();
  }
  if (impl_->safetensors) {
    QBC_RETURN_IF_ERROR(impl_->safetensors->read_f32(info->name_in_file, out));
    return gguf_model::apply_transform(*info, out);
  }
  const GgufFile& g = *impl_->gguf;
  QBC_ASSIGN_OR_RETURN(const GgufTensor* t, g.get_tensor(info->name_in_file));
  QBC_RETURN_IF_ERROR(g.read_f32(*t, out));
  return gguf_model::apply_transform(*info, out);
}

StatusOr<const uint8_t*> ModelSource::stored_view(std::string_view hf_name, const char* dtype,
                                                  size_t align) const {
  const TensorInfo* info = find(hf_name);
  if (info == nullptr) {
    return not_found(impl_->path.string(), ": no tensor ", quote_prefix(hf_name));
  }
  if (info->dtype != dtype || info->transform != TensorTransform::kNone) {
    const std::string transform =
        info->transform == TensorTransform::kNone
            ? std::string()
            : ", transform " + std::string(transform_name(info->transform));
    return failed_precondition(info->file.string(), ": tensor ", quote_prefix(info->name),
                               " has no zero-copy ", dtype, " view (stored ", info->dtype,
                               transform, "); use read_f32()");
  }
  ByteSpan data;
  if (impl_->safetensors) {
    data = impl_->safetensors->find(info->name_in_file)->data;
  } else {
    data = impl_->gguf->find_tensor(info->name_in_file)->data;
  }
  if (reinterpret_cast<uintptr_t>(data.data) % align != 0) {
    return failed_precondition(info->file.string(), ": tensor ", quote_prefix(info->name),
                               " is not ", align, "-byte aligned in the file; use read_f32()");
  }
  return reinterpret_cast<const uint8_t*>(data.data);
}

StatusOr<const float*> ModelSource::f32_view(std::string_view hf_name) const {
  QBC_ASSIGN_OR_RETURN(const uint8_t* p, stored_view(hf_name, "F32", alignof(float)));
  return reinterpret_cast<const float*>(p);
}

StatusOr<const uint16_t*> ModelSource::bf16_view(std::string_view hf_name) const {
  QBC_ASSIGN_OR_RETURN(const uint8_t* p, stored_view(hf_name, "BF16", alignof(uint16_t)));
  return reinterpret_cast<const uint16_t*>(p);
}

Status ModelSource::validate() const {
  const std::vector<HfTensorSpec> specs = hf_tensor_specs(impl_->hparams);
  std::vector<std::string> missing;
  std::vector<std::string> bad_shapes;
  for (const HfTensorSpec& spec : specs) {
    const TensorInfo* info = find(spec.name);
    if (info == nullptr) {
      std::string gguf_name;
      if (impl_->gguf) gguf_name = gguf_model::gguf_name_for(spec.name, impl_->gguf_arch);
      missing.push_back(gguf_name.empty() ? spec.name : spec.name + " (" + gguf_name + ")");
      continue;
    }
    if (info->shape != spec.shape) {
      bad_shapes.push_back(
          "tensor " + info->name +
          (info->name_in_file != info->name ? " (" + info->name_in_file + ")" : std::string()) +
          " in " + info->file.string() + " has shape " + shape_str(info->shape) + ", expected " +
          shape_str(spec.shape) + " from config.json");
    }
  }
  if (!missing.empty() || !bad_shapes.empty()) {
    std::string msg;
    if (!missing.empty()) {
      msg = (missing.size() == 1 ? "missing tensor " : "missing tensors ") +
            join_limited(missing, 20) + " in " + impl_->weights_label.string();
    }
    if (!bad_shapes.empty()) msg += (msg.empty() ? "" : "; ") + join_limited(bad_shapes, 10);
    return invalid_argument(msg);
  }
  for (const TensorInfo& info : impl_->tensors) {
    bool decodable = false;
    if (impl_->packed_by_weight.count(info.name) != 0) {
      decodable = true;
    } else if (impl_->safetensors) {
      const std::optional<tensorfile::DType> dt = tensorfile::parse_dtype(info.dtype);
      decodable = dt && tensorfile::dtype_converts_to_f32(*dt);
    } else {
      const GgufTensor* t = impl_->gguf->find_tensor(info.name_in_file);
      const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(t->type));
      decodable = traits != nullptr && traits->decodable;
    }
    if (!decodable) {
      return unimplemented(info.file.string(), ": tensor ", quote_prefix(info.name_in_file), " (",
                           quote_prefix(info.name), ") has dtype ", info.dtype,
                           ", which qbc cannot decode yet");
    }
  }
  return ok_status();
}

std::vector<std::string> ModelSource::unexpected_tensors() const {
  std::set<std::string> expected;
  for (const HfTensorSpec& spec : hf_tensor_specs(impl_->hparams)) expected.insert(spec.name);
  std::vector<std::string> out = impl_->unmapped;
  // A VLM's tower (visual.*; LLaVA's vision_tower.* and multi_modal_projector.*) is read by the
  // vision import, not the language graph.
  for (const TensorInfo& info : impl_->tensors) {
    if (is_vision_tensor(impl_->hparams, info.name)) continue;
    if (expected.count(info.name) == 0) out.push_back(info.name);
  }
  return out;
}

const PrequantConfig* ModelSource::prequant_config() const {
  return impl_->prequant ? &*impl_->prequant : nullptr;
}

const std::vector<PackedTensorRef>& ModelSource::packed_linears() const { return impl_->packed; }

StatusOr<PackedLinear> ModelSource::read_packed(std::string_view hf_name) const {
  auto it = impl_->packed_by_weight.find(hf_name);
  if (it == impl_->packed_by_weight.end()) {
    return not_found(impl_->path.string(), ": ", quote_prefix(hf_name),
                     " is not a pre-quantized linear of this checkpoint");
  }
  if (impl_->gguf)
    return gguf_codes::read_linear(*impl_->gguf, *find(hf_name), impl_->packed[it->second]);
  return unpack_linear(*impl_->safetensors, *impl_->prequant, impl_->packed[it->second]);
}

StatusOr<std::vector<SourceFileInfo>> ModelSource::files() const {
  std::vector<SourceFileInfo> out;
  for (const fs::path& p : impl_->input_files) {
    SourceFileInfo info;
    info.path = p;
    std::error_code ec;
    info.size_bytes = fs::file_size(p, ec);
    if (ec) return invalid_argument(p.string(), ": cannot stat: ", ec.message());
    QBC_ASSIGN_OR_RETURN(info.xxh3_128, xxh3_128_file(p));
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace qbc::frontend
