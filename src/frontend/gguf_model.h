// GGUF → HF view for ModelSource (private to the frontend): composes an HF config.json from the
// GGUF metadata, maps llama.cpp tensor names to HF names, and undoes the converter's storage
// transforms (Llama q/k row permutation, Gemma's +1 on norm weights).
#pragma once

#include <algorithm>
#include <cstdint>
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

/// For a kUnpermuteRopeRows tensor whose `count` stored values are rows of info.shape[0]: the
/// stored row each HF row comes from (llama.cpp's q/k rope layout undone); empty for the other
/// transforms, which keep the rows where they are. kInvalidArgument naming the tensor when
/// the values do not fit the permutation.
StatusOr<std::vector<int64_t>> hf_row_sources(const TensorInfo& info, size_t count);

/// The rows of `values` (row-major, info.shape[0] rows, any element type: codes, scales, zero
/// points) in HF order; values are not changed, only moved (unlike apply_transform, which
/// also applies kSubtractOne).
template <typename T>
Status reorder_rows(const TensorInfo& info, std::vector<T>* values) {
  QBC_ASSIGN_OR_RETURN(std::vector<int64_t> sources, hf_row_sources(info, values->size()));
  if (sources.empty()) return ok_status();
  const size_t cols = values->size() / sources.size();
  std::vector<T> out(values->size());
  for (size_t row = 0; row < sources.size(); ++row) {
    std::copy_n(values->data() + static_cast<size_t>(sources[row]) * cols, cols,
                out.data() + row * cols);
  }
  values->swap(out);
  return ok_status();
}

}  // namespace qbc::frontend::gguf_model
