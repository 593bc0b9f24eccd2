// imported_weights: the codes of a pre-quantized checkpoint as qbc weights (FixedWeights), and
// the report of what was kept, what was re-quantized and why.
#include "qbc/driver/imported_weights.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

namespace qbc::driver {
namespace {

// "model.layers.3.self_attn.q_proj" -> "self_attn.q_proj"; other modules keep their name.
std::string kind_of(const std::string& module) {
  const std::string prefix = "model.layers.";
  if (module.rfind(prefix, 0) != 0) return module;
  const size_t dot = module.find('.', prefix.size());
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

// The codes of `p` in qbc's convention (signed codes and zero points in a 4- or 8-bit range,
// w = s * (q - z)), or the reason they cannot be.
std::string to_fixed(const frontend::PackedLinear& p, quant::FixedWeights* f) {
  if (!p.g_idx.empty()) return "act-order groups (g_idx) are not contiguous";
  f->imported = true;
  f->bits = p.bits <= 4 ? 4 : 8;
  f->group = p.group_size >= p.in ? 0 : p.group_size;
  const int32_t lo = -(1 << (f->bits - 1)), hi = (1 << (f->bits - 1)) - 1;
  // GPTQ and AWQ store unsigned codes and zero points: both move down by 2^(b-1).
  const bool unsigned_codes =
      p.layout == frontend::PackLayout::kGptq || p.layout == frontend::PackLayout::kAwqGemm;
  const int32_t shift = unsigned_codes ? 1 << (p.bits - 1) : 0;
  f->codes.resize(p.codes.size());
  for (size_t i = 0; i < p.codes.size(); ++i) {
    const int32_t q = p.codes[i] - shift;
    if (q < lo || q > hi) return "a code outside the " + std::to_string(f->bits) + "-bit range";
    f->codes[i] = static_cast<int8_t>(q);
  }
  bool all_zero = true;
  f->zeros.resize(p.zeros.size());
  for (size_t i = 0; i < p.zeros.size(); ++i) {
    const int32_t z = p.zeros[i] - shift;
    if (z < lo || z > hi)
      return "a zero point outside the " + std::to_string(f->bits) + "-bit range";
    f->zeros[i] = static_cast<int8_t>(z);
    all_zero = all_zero && z == 0;
  }
  if (all_zero) f->zeros.clear();
  for (float s : p.scales) {
    if (!(std::fabs(s) >= 1e-8f)) return "a scale below 1e-8";
  }
  f->scales = p.scales;
  return "";
}

// The linear node of `graph` reading model tensor `tensor` with shape [out, in].
const ir::Node* linear_reading(const ir::Graph& graph, const std::string& tensor,
                               const std::vector<int64_t>& shape) {
  for (const ir::Node& n : graph.nodes()) {
    if (n.op != ir::Op::kLinear || n.operands.size() < 2 || !n.operands[1].is_weight()) continue;
    const ir::Weight* w = graph.find_weight(n.operands[1].weight);
    if (w != nullptr && w->source == ir::WeightSource::kModel && w->tensor == tensor &&
        w->type.dims == shape) {
      return &n;
    }
  }
  return nullptr;
}

ImportedKind& kind_entry(std::vector<ImportedKind>& kinds, const std::string& kind) {
  for (ImportedKind& k : kinds) {
    if (k.kind == kind) return k;
  }
  kinds.push_back(ImportedKind{kind, 0, 0, {}});
  return kinds.back();
}

}  // namespace

int ImportedWeights::imported() const {
  int n = 0;
  for (const ImportedKind& k : kinds) n += k.imported;
  return n;
}

int ImportedWeights::kept() const {
  int n = 0;
  for (const ImportedKind& k : kinds) n += k.kept;
  return n;
}

std::string ImportedWeights::summary_text() const {
  std::ostringstream os;
  os << "pre-quantized " << config << ": codes kept " << kept() << " of " << imported() << " (";
  for (size_t i = 0; i < kinds.size(); ++i) {
    const ImportedKind& k = kinds[i];
    os << (i ? ", " : "") << k.kind << " " << k.kept << " of " << k.imported;
    for (const auto& [why, count] : k.why_not) os << "; " << count << " re-quantized: " << why;
  }
  os << ")";
  if (!skipped_passes.empty()) {
    os << "; skipped for the imported linears: ";
    for (size_t i = 0; i < skipped_passes.size(); ++i) os << (i ? ", " : "") << skipped_passes[i];
  }
  if (!kv_note.empty()) os << "; " << kv_note;
  return os.str();
}

std::string ImportedWeights::json() const {
  nlohmann::ordered_json j;
  j["config"] = config;
  j["imported"] = imported();
  j["kept"] = kept();
  nlohmann::ordered_json ks = nlohmann::ordered_json::array();
  for (const ImportedKind& k : kinds) {
    ks.push_back(
        {{"kind", k.kind}, {"imported", k.imported}, {"kept", k.kept}, {"requantized", k.why_not}});
  }
  j["kinds"] = ks;
  j["skipped_passes"] = skipped_passes;
  if (!kv_note.empty()) j["kv_cache"] = kv_note;
  return j.dump();
}

StatusOr<std::optional<ImportedWeights>> imported_weights(const LoadedModel& model,
                                                          const config::CompileOptions& options) {
  if (!model.source || model.source->prequant_config() == nullptr) {
    return std::optional<ImportedWeights>();
  }
  const frontend::PrequantConfig& pc = *model.source->prequant_config();
  ImportedWeights iw;
  iw.config = pc.describe();
  for (const frontend::PackedTensorRef& ref : model.source->packed_linears()) {
    ImportedKind& kind = kind_entry(iw.kinds, kind_of(ref.module));
    ++kind.imported;
    const ir::Node* node = linear_reading(model.graph, ref.module + ".weight", ref.shape);
    if (node == nullptr) {
      ++kind.why_not["the graph does not read it as one linear"];
      continue;
    }
    if (quant::linear_bits(node->name, node->part == ir::Part::kHead, options).weight == 16) {
      ++kind.why_not["the recipe keeps this layer in float (dequantized)"];
      continue;
    }
    QBC_ASSIGN_OR_RETURN(frontend::PackedLinear p,
                         model.source->read_packed(ref.module + ".weight"));
    quant::FixedWeights f;
    const std::string why = to_fixed(p, &f);
    if (!why.empty()) {
      ++kind.why_not[why + " (dequantized and re-quantized with the configured recipe)"];
      continue;
    }
    ++kind.kept;
    iw.fixed.emplace(node->name, std::move(f));
  }
  if (pc.kv_cache_bits > 0) {
    const auto& kv = options.bit().kv_cache();
    iw.kv_note = "kv_cache_scheme " + pc.kv_cache_scheme +
                 ": the KV cache is calibrated by qbc at " + "k" + std::to_string(kv.key()) + "v" +
                 std::to_string(kv.value()) +
                 " (bit.kvCache), the checkpoint's k/v scales are not used";
  }
  return std::optional<ImportedWeights>(std::move(iw));
}

config::CompileOptions without_weight_passes(const config::CompileOptions& options,
                                             ImportedWeights& iw) {
  config::CompileOptions o = options;
  auto* et = o.mutable_equivalent_transformation();
  auto off = [&](const char* name, bool on, auto clear) {
    if (!on) return;
    iw.skipped_passes.push_back(name);
    clear();
  };
  off("normConv", et->norm_conv().apply(), [&] { et->mutable_norm_conv()->set_apply(false); });
  off("spinR1", et->spin_r1().apply(), [&] { et->mutable_spin_r1()->set_apply(false); });
  off("spinR2", et->spin_r2().apply(), [&] { et->mutable_spin_r2()->set_apply(false); });
  off("qkRotation", et->qk_rotation().apply(),
      [&] { et->mutable_qk_rotation()->set_apply(false); });
  off("qk", et->qk().apply(), [&] { et->mutable_qk()->set_apply(false); });
  off("vo", et->vo().apply(), [&] { et->mutable_vo()->set_apply(false); });
  off("ud", et->ud().apply(), [&] { et->mutable_ud()->set_apply(false); });
  off("normSmooth", et->norm_smooth().apply(),
      [&] { et->mutable_norm_smooth()->set_apply(false); });
  off("searchWeightScale", o.search_weight_scale().apply(),
      [&] { o.mutable_search_weight_scale()->set_apply(false); });
  off("hessianQuant", o.hessian_quant().apply(),
      [&] { o.mutable_hessian_quant()->set_apply(false); });
  return o;
}

}  // namespace qbc::driver
