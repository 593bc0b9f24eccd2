// GGUF → HF view for ModelSource (private to the frontend): composes an HF config.json from the
// GGUF metadata, maps llama.cpp tensor names to HF names, and undoes the converter's storage
// transforms (Llama q/k row permutation, Gemma's +1 on norm weights).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "qbc/frontend/gguf.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/model_source.h"
#include "qbc/support/status.h"

namespace qbc::frontend::gguf_model {

/// The `general.architecture` values ModelSource supports, in a fixed order.
const std::vector<std::string_view>& supported_architectures();

/// The HF `architectures` entry for a GGUF architecture; kUnimplemented listing the supported
/// ones (naming the file) otherwise.
StatusOr<std::string> hf_architecture(const GgufFile& gguf);

/// Builds the config.json text an HF checkpoint of this model would carry, from the `{arch}.*`
/// and `tokenizer.ggml.*` metadata and the tensor table. Errors name the file and the key.
StatusOr<std::string> compose_config_json(const GgufFile& gguf);

/// The tensor table under HF names.
struct MappedTensors {
  /// Tensors with an HF name, sorted by HF name.
  std::vector<TensorInfo> tensors;
  /// GGUF tensor names with no HF counterpart (e.g. vision towers), in file order.
  std::vector<std::string> unmapped;
};

/// Maps every tensor of `gguf` to its HF name, shape and read transform. kInvalidArgument naming
/// the tensor when a permuted q/k tensor's rows cannot be split into its heads.
StatusOr<MappedTensors> map_tensors(const GgufFile& gguf, const HParams& hp);

/// The llama.cpp name of HF tensor `hf_name` in a GGUF of `arch` (e.g. "blk.1.ffn_down.weight"),
/// or "" when there is none. For error messages.
std::string gguf_name_for(std::string_view hf_name, std::string_view arch);

/// Applies `info.transform` to `values` (the stored values in row-major order) in place.
/// kInvalidArgument naming the tensor when the values do not fit the permutation.
Status apply_transform(const TensorInfo& info, std::vector<float>* values);

}  // namespace qbc::frontend::gguf_model
