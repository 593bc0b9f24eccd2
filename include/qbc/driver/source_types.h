// Provenance of the weights' storage types: which dtype each source tensor had in the file the
// model was imported from (a GGUF's ggml types such as "Q4_K" / "Q6_K", a safetensors file's
// "BF16"), recorded in the graph's metadata at import, carried into the quantized MBLT and the
// MXQ, and summarised per type after quantization ("Q6_K: 3 tensors dequantized and
// re-quantized to W8").
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "qbc/frontend/model_source.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// Graph metadata key of the source dtypes: a JSON object {tensor name in the source file:
/// dtype} with an entry per model weight of the graph.
inline constexpr const char* kSourceDtypesKey = "qbc.source_dtypes";

/// Records kSourceDtypesKey for every model weight of `graph`, read from `source`.
void record_source_dtypes(const frontend::ModelSource& source, ir::Graph* graph);

/// The recorded map, or an empty one (a graph from before the key existed, or bad JSON).
std::map<std::string, std::string> source_dtypes(const ir::Graph& graph);

/// The same map from the JSON text of the metadata value (also what the MXQ stores).
std::map<std::string, std::string> parse_source_dtypes(const std::string& json);

/// Tensors per dtype, in dtype order.
std::map<std::string, int> count_by_dtype(const std::map<std::string, std::string>& dtypes);

/// What quantization did to the tensors of one source dtype.
struct SourceTypeOutcome {
  std::string dtype;               ///< "Q4_K", "F32", ...
  int tensors = 0;                 ///< Model weights of this dtype.
  std::map<int, int> quantized;    ///< Weight bits -> tensors re-quantized to that width.
  std::map<int, int> codes_kept;   ///< Weight bits -> tensors whose integer codes were kept.
  int host_embedding = 0;          ///< Kept float as the host embedding table.
  bool host_embedding_i8 = false;  ///< ... or as its 8-bit form (bit.embedding 8).
  int float_kept = 0;              ///< Kept float in the graph (norms, float linears).
  bool lossless_source = false;    ///< F32/F16/BF16: nothing was dequantized.
};

/// Per source dtype (looked up in `source`): the imported graph's model weights and what the
/// quantized graph made from it does with them (matched by node name: a qlinear, the host
/// embedding, or a float node). `kept_codes` names the linear nodes that kept the source's
/// integer codes (driver/imported_weights.h), when there are any.
std::vector<SourceTypeOutcome> source_type_outcomes(const frontend::ModelSource& source,
                                                    const ir::Graph& imported,
                                                    const ir::Graph& quantized,
                                                    const std::set<std::string>& kept_codes = {});

/// One line per dtype: "Q6_K: 3 tensors dequantized and re-quantized to W8", "Q8_0: 8 tensors
/// with codes kept as W8",
/// "Q4_K: 11 tensors: 10 dequantized and re-quantized to W8, 1 dequantized to the float host
/// embedding", "F32: 5 tensors kept float".
std::string describe(const SourceTypeOutcome& o);

}  // namespace qbc::driver
