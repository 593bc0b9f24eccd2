// Source dtype provenance (qbc/driver/source_types.h).
#include "qbc/driver/source_types.h"

#include <nlohmann/json.hpp>

#include "qbc/quant/embedding_i8.h"

namespace qbc::driver {
namespace {

// The node of `g` that reads weight `name` as an operand, or nullptr.
const ir::Node* user_of(const ir::Graph& g, const std::string& name) {
  for (const ir::Node& n : g.nodes()) {
    for (const ir::Operand& o : n.operands) {
      if (o.is_weight() && o.weight == name) return &n;
    }
  }
  return nullptr;
}

bool is_float_dtype(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

std::string plural(int n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

void record_source_dtypes(const frontend::ModelSource& source, ir::Graph* graph) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [name, w] : graph->weights()) {
    if (w.source != ir::WeightSource::kModel) continue;
    const frontend::TensorInfo* info = source.find(w.tensor);
    if (info == nullptr) continue;
    j[info->name_in_file.empty() ? info->name : info->name_in_file] = info->dtype;
  }
  graph->metadata[kSourceDtypesKey] = j.dump();
}

std::map<std::string, std::string> parse_source_dtypes(const std::string& json) {
  std::map<std::string, std::string> out;
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  for (const auto& [name, dtype] : j.items()) {
    if (dtype.is_string()) out[name] = dtype.get<std::string>();
  }
  return out;
}

std::map<std::string, std::string> source_dtypes(const ir::Graph& graph) {
  auto it = graph.metadata.find(kSourceDtypesKey);
  return it == graph.metadata.end() ? std::map<std::string, std::string>()
                                    : parse_source_dtypes(it->second);
}

std::map<std::string, int> count_by_dtype(const std::map<std::string, std::string>& dtypes) {
  std::map<std::string, int> out;
  for (const auto& [name, dtype] : dtypes) ++out[dtype];
  return out;
}

std::vector<SourceTypeOutcome> source_type_outcomes(const frontend::ModelSource& source,
                                                    const ir::Graph& imported,
                                                    const ir::Graph& quantized,
                                                    const std::set<std::string>& kept_codes) {
  std::map<std::string, SourceTypeOutcome> by_dtype;
  for (const auto& [name, w] : imported.weights()) {
    if (w.source != ir::WeightSource::kModel) continue;
    const frontend::TensorInfo* info = source.find(w.tensor);
    if (info == nullptr) continue;
    SourceTypeOutcome& o = by_dtype[info->dtype];
    o.dtype = info->dtype;
    o.lossless_source = is_float_dtype(info->dtype);
    ++o.tensors;
    const ir::Node* user = user_of(imported, name);
    const ir::ValueId q = user == nullptr ? -1 : quantized.find(user->name);
    if (q >= 0 && quantized.node(q).op == ir::Op::kQLinear) {
      const int bits = static_cast<int>(quantized.node(q).attrs.get_int("w_bits"));
      ++(kept_codes.count(user->name) != 0 ? o.codes_kept : o.quantized)[bits];
    } else if (w.role == ir::WeightRole::kHostEmbedding) {
      ++o.host_embedding;
      o.host_embedding_i8 = quant::embedding_is_i8(quantized);
    } else {
      ++o.float_kept;
    }
  }
  std::vector<SourceTypeOutcome> out;
  for (auto& [dtype, o] : by_dtype) out.push_back(std::move(o));
  return out;
}

std::string describe(const SourceTypeOutcome& o) {
  std::vector<std::string> parts;
  const std::string re = o.lossless_source ? "quantized to W" : "dequantized and re-quantized to W";
  for (const auto& [bits, n] : o.codes_kept)
    parts.push_back(std::to_string(n) + " with codes kept as W" + std::to_string(bits));
  for (const auto& [bits, n] : o.quantized)
    parts.push_back(std::to_string(n) + " " + re + std::to_string(bits));
  if (o.host_embedding > 0 && o.host_embedding_i8) {
    parts.push_back(std::to_string(o.host_embedding) +
                    (o.lossless_source ? " quantized to the 8-bit host embedding (row scales)"
                                       : " dequantized and re-quantized to the 8-bit host "
                                         "embedding (row scales)"));
  } else if (o.host_embedding > 0) {
    parts.push_back(std::to_string(o.host_embedding) +
                    (o.lossless_source ? " kept as the float host embedding"
                                       : " dequantized to the float host embedding"));
  }
  if (o.float_kept > 0) {
    parts.push_back(std::to_string(o.float_kept) +
                    (o.lossless_source ? " kept float" : " dequantized and kept float"));
  }
  std::string text = o.dtype + ": " + plural(o.tensors, "tensor");
  if (parts.size() == 1) {
    // "3 tensors dequantized and re-quantized to W8": the count is the tensor count.
    return text + parts[0].substr(parts[0].find(' '));
  }
  text += ":";
  for (size_t i = 0; i < parts.size(); ++i) text += (i == 0 ? " " : ", ") + parts[i];
  return text;
}

}  // namespace qbc::driver
