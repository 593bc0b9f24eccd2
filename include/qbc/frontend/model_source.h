// ModelSource: one read-only view of a model's hyperparameters and weights, whether the user gave
// a HuggingFace folder (config.json + safetensors) or a llama.cpp .gguf file.
//
// Everything downstream (importer, planner, provenance) sees HF semantics only: HParams parsed
// from a config.json (for GGUF, one composed from the metadata and run through the same
// parse_hparams()), tensors under their HF names with PyTorch shapes, and float32 values equal to
// what HF would load. GGUF-specific storage choices are undone on read: llama.cpp's row
// permutation of Llama q/k projections and Gemma's "+1" on norm weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/frontend/hparams.h"
#include "qbc/frontend/prequant.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// What read_f32() does to a tensor's stored values to get HF's values.
enum class TensorTransform {
  kNone,
  /// Inverse of llama.cpp's convert_hf_to_gguf `permute()` on Llama q_proj/k_proj rows (GGUF
  /// keeps rotary pairs interleaved, HF uses the rotate_half layout). `TensorInfo::rope_heads`
  /// gives the head count the rows are grouped by.
  kUnpermuteRopeRows,
  /// Subtracts 1: Gemma GGUFs store norm weights as (1 + w), HF stores w.
  kSubtractOne,
};

/// A stable lower-case name for `transform`, e.g. "unpermute-rope-rows".
std::string_view transform_name(TensorTransform transform);

/// One tensor of a model under its HF name, and where its bytes come from.
struct TensorInfo {
  /// HF canonical name, e.g. "model.layers.0.self_attn.q_proj.weight". A Qwen2(.5)-VL
  /// checkpoint's `model.language_model.X` and `model.visual.X` (transformers >= 4.52) are
  /// named `model.X` and `visual.X` here, as older versions store them.
  std::string name;
  /// Row-major (PyTorch) shape.
  std::vector<int64_t> shape;
  /// Stored element type: safetensors names ("F32", "BF16") or upper-case ggml names ("Q8_0").
  std::string dtype;
  /// Absolute path of the file holding the tensor (a shard of a sharded checkpoint).
  std::filesystem::path file;
  /// The tensor's name inside `file` (equal to `name` for safetensors).
  std::string name_in_file;
  /// Applied by read_f32() after decoding.
  TensorTransform transform = TensorTransform::kNone;
  /// For kUnpermuteRopeRows: the number of heads the rows are grouped by (else 0).
  int64_t rope_heads = 0;

  /// Product of `shape`.
  int64_t num_elements() const;
};

/// One input file of a model, for provenance records.
struct SourceFileInfo {
  /// Absolute path.
  std::filesystem::path path;
  /// Size in bytes.
  uint64_t size_bytes = 0;
  /// XXH3-128 of the contents as 32 hex digits (see support/hash.h).
  std::string xxh3_128;
};

/// A model opened for reading. Move-only; tensor data stays memory-mapped for the lifetime of the
/// object, so f32_view() pointers remain valid until it is destroyed (also across moves).
class ModelSource {
 public:
  /// Opens `path`, which is one of:
  ///  - a HF folder: config.json plus model.safetensors, model.safetensors.index.json (sharded),
  ///    or a single *.safetensors file;
  ///  - a GGUF file (recognised by its "GGUF" magic), architecture llama, qwen2, qwen3 or gemma2.
  /// kNotFound when `path` does not exist; kInvalidArgument naming the path and what was
  /// expected for anything else; kUnimplemented listing the supported architectures for other
  /// GGUF architectures; errors of the safetensors, GGUF and config.json readers otherwise.
  static StatusOr<ModelSource> open(const std::filesystem::path& path);

  ModelSource(ModelSource&&) noexcept;
  ModelSource& operator=(ModelSource&&) noexcept;
  ModelSource(const ModelSource&) = delete;
  ModelSource& operator=(const ModelSource&) = delete;
  ~ModelSource();

  /// "hf-safetensors" or "gguf".
  std::string_view format() const;
  /// The path given to open(), made absolute.
  const std::filesystem::path& path() const;
  /// Hyperparameters, parsed and validated by parse_hparams().
  const HParams& hparams() const;
  /// The config.json text hparams() was parsed from (for GGUF: the text composed from the
  /// metadata).
  const std::string& config_json_text() const;
  /// HF tokenizer.json when the folder has one; the .gguf itself for GGUF (its vocab lives in
  /// the metadata); empty when there is neither.
  const std::filesystem::path& tokenizer_path() const;
  /// The model's own chat template when the source stores it as a value: a GGUF's
  /// `tokenizer.chat_template` string. Empty otherwise (an HF folder keeps it in
  /// tokenizer_config.json or chat_template.jinja, which travel as files).
  const std::string& chat_template() const;

  /// Every tensor that maps to an HF name, sorted by name.
  const std::vector<TensorInfo>& tensors() const;
  /// The tensor called `hf_name`, or nullptr.
  const TensorInfo* find(std::string_view hf_name) const;
  /// True iff there is a tensor called `hf_name`.
  bool has_tensor(std::string_view hf_name) const { return find(hf_name) != nullptr; }

  /// Replaces `*out` by the tensor's values as float32 in row-major order, decoded or
  /// dequantized and transformed so they equal HF's. kNotFound naming the tensor and the model
  /// when there is no such tensor; kUnimplemented naming it for dtypes that cannot be decoded.
  Status read_f32(std::string_view hf_name, std::vector<float>* out) const;
  /// Zero-copy access to the stored values: only when the stored dtype is F32, no transform
  /// applies and the data is 4-byte aligned; kFailedPrecondition naming the tensor otherwise
  /// (use read_f32()), kNotFound when it does not exist.
  StatusOr<const float*> f32_view(std::string_view hf_name) const;
  /// The same for a tensor stored as BF16 (the raw bf16 bits, 2-byte aligned): what the
  /// backend's compile views the host embedding through instead of widening it to fp32.
  StatusOr<const uint16_t*> bf16_view(std::string_view hf_name) const;

  /// Checks the tensor table against hf_tensor_specs(hparams()): every required tensor present
  /// with the expected shape, and every tensor decodable. kInvalidArgument listing missing
  /// tensors ("missing tensor ... in FILE") or naming a tensor, its file, the expected and actual
  /// shapes; kUnimplemented for a dtype read_f32() cannot decode.
  Status validate() const;
  /// Tensors present but not expected for hparams() (HF names, or GGUF names without an HF
  /// mapping). A warning, not an error: validate() ignores them. A Qwen2(.5)-VL tower
  /// (`visual.*`) is not listed: the vision import reads it.
  std::vector<std::string> unexpected_tensors() const;

  /// The checkpoint's `quantization_config` when it is pre-quantized (docs/frontend.md,
  /// "Pre-quantized HF checkpoints"), else nullptr. Its packed linears appear in tensors() as
  /// one float tensor each ("<module>.weight", dtype "<layout>-int<bits>", e.g. "gptq-int4")
  /// whose read_f32() is the dequantized weight; their stored parts are hidden.
  const PrequantConfig* prequant_config() const;
  /// The imported linears (empty unless pre-quantized), sorted by module.
  const std::vector<PackedTensorRef>& packed_linears() const;
  /// The codes, scales and zero points of the imported linear whose weight is `hf_name`;
  /// kNotFound when `hf_name` is not an imported linear.
  StatusOr<PackedLinear> read_packed(std::string_view hf_name) const;

  /// The input files (config, index, weights, tokenizer) with sizes and XXH3-128 hashes. Reads
  /// every file on each call (at page-cache speed, several GB/s); errors name the file.
  StatusOr<std::vector<SourceFileInfo>> files() const;

 private:
  struct Impl;
  explicit ModelSource(std::unique_ptr<Impl> impl);
  /// The stored bytes of a tensor of `dtype` without a transform, aligned to `align`.
  StatusOr<const uint8_t*> stored_view(std::string_view hf_name, const char* dtype,
                                       size_t align) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qbc::frontend
