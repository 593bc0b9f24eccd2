// imported_weights: the codes of a pre-quantized checkpoint as qbc weights (FixedWeights), and
// the report of what was kept, what was re-quantized and why.
#include "qbc/driver/imported_weights.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
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
  if (!p.g_idx.empty()) {
    return "act-order groups (g_idx): not whole groups, or the graph cannot permute this "
           "linear's input";
  }
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
  for (float m : p.mins) {
    if (!std::isfinite(m)) return "a non-finite offset (block minimum)";
  }
  if (!p.mins.empty() && f->group == 0) return "float offsets without groups";
  f->scales = p.scales;
  f->mins = p.mins;
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

// The column order that makes the act-order groups of `p` contiguous (columns sorted by group,
// stable), when every group holds exactly the inputs a contiguous group would (group_size, the
// last one the rest); empty otherwise.
std::vector<int64_t> group_order(const frontend::PackedLinear& p) {
  std::vector<int64_t> count(static_cast<size_t>(p.num_groups), 0);
  for (int32_t g : p.g_idx) ++count[static_cast<size_t>(g)];
  for (int64_t g = 0; g < p.num_groups; ++g) {
    if (count[static_cast<size_t>(g)] != std::min(p.group_size, p.in - g * p.group_size)) return {};
  }
  std::vector<int64_t> perm(static_cast<size_t>(p.in));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return p.g_idx[static_cast<size_t>(a)] < p.g_idx[static_cast<size_t>(b)];
  });
  return perm;
}

// How many operands and graph outputs read value `v`.
int value_uses(const ir::Graph& g, ir::ValueId v) {
  int n = 0;
  for (const ir::Node& x : g.nodes()) {
    for (const ir::Operand& o : x.operands) n += !o.is_weight() && o.value == v;
  }
  for (ir::ValueId out : g.outputs()) n += out == v;
  return n;
}

// The weights (and biases) of the linears whose output rows can be permuted to permute the
// input of `node`: the gate and up linears of a gated_act only `node` reads, each read only
// by it. Empty when the graph cannot permute that input (attention outputs, norms, slices).
std::vector<std::string> permutable_input(const ir::Graph& g, const ir::Node& node) {
  const ir::ValueId x = node.operands[0].value;
  const ir::Node& act = g.node(x);
  if (act.op != ir::Op::kGatedAct || value_uses(g, x) != 1) return {};
  std::vector<std::string> rows;
  for (const ir::Operand& o : act.operands) {
    if (o.is_weight()) return {};
    const ir::Node& lin = g.node(o.value);
    if (lin.op != ir::Op::kLinear || value_uses(g, o.value) != 1) return {};
    for (size_t i = 1; i < lin.operands.size(); ++i) {
      if (!lin.operands[i].is_weight()) return {};
      rows.push_back(lin.operands[i].weight);
    }
  }
  if (act.operands[0].value == act.operands[1].value) return {};
  return rows;
}

// Rows of `f` (codes, scales, zero points) in the order `perm`: new row j = old row perm[j].
void permute_rows(quant::FixedWeights& f, const std::vector<int64_t>& perm) {
  auto apply = [&](auto& v) {
    if (v.empty()) return;
    const size_t width = v.size() / perm.size();
    auto old = v;
    for (size_t j = 0; j < perm.size(); ++j) {
      std::copy_n(old.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(perm[j]) * width),
                  width, v.begin() + static_cast<std::ptrdiff_t>(j * width));
    }
  };
  apply(f.codes);
  apply(f.scales);
  apply(f.zeros);
  apply(f.mins);
}

// Columns of `p`'s codes in the order `perm` (new column j = old column perm[j]); the groups
// become contiguous, so the g_idx goes.
void permute_columns(frontend::PackedLinear& p, const std::vector<int64_t>& perm) {
  const std::vector<int32_t> old = p.codes;
  for (int64_t o = 0; o < p.out; ++o) {
    for (int64_t j = 0; j < p.in; ++j) {
      p.codes[static_cast<size_t>(o * p.in + j)] =
          old[static_cast<size_t>(o * p.in + perm[static_cast<size_t>(j)])];
    }
  }
  p.g_idx.clear();
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
  if (!permutations.empty() || act_order_requantized > 0) {
    os << "; act-order: " << permutations.size()
       << " kept as a column permutation (folded into the rows of the linears before them), "
       << act_order_requantized << " re-quantized";
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
  if (!permutations.empty() || act_order_requantized > 0) {
    j["act_order"] = {{"permuted", permutations.size()}, {"requantized", act_order_requantized}};
  }
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
    // Act order: kept as a column permutation where the groups are whole and the graph can
    // permute the linear's input; otherwise re-quantized.
    ColumnPermutation perm;
    if (!p.g_idx.empty()) {
      perm.row_weights = permutable_input(model.graph, *node);
      if (!perm.row_weights.empty()) perm.perm = group_order(p);
      if (perm.perm.empty()) {
        ++iw.act_order_requantized;
      } else {
        permute_columns(p, perm.perm);
        perm.weight = node->operands[1].weight;
      }
    }
    quant::FixedWeights f;
    const std::string why = to_fixed(p, &f);
    if (!why.empty()) {
      if (!perm.weight.empty()) ++iw.act_order_requantized;
      ++kind.why_not[why + " (dequantized and re-quantized with the configured recipe)"];
      continue;
    }
    ++kind.kept;
    iw.fixed.emplace(node->name, std::move(f));
    if (!perm.weight.empty()) iw.permutations.push_back(std::move(perm));
  }
  // The linears before a permuted one give their rows in the permuted order; kept codes too.
  for (const ColumnPermutation& perm : iw.permutations) {
    for (const ir::Node& n : model.graph.nodes()) {
      if (n.op != ir::Op::kLinear || n.operands.size() < 2 || !n.operands[1].is_weight() ||
          std::find(perm.row_weights.begin(), perm.row_weights.end(), n.operands[1].weight) ==
              perm.row_weights.end()) {
        continue;
      }
      auto it = iw.fixed.find(n.name);
      if (it != iw.fixed.end()) permute_rows(it->second, perm.perm);
    }
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

namespace {

// Rewrites weight `name` of the quantize run with its rows (dim 0) or, `columns`, its last
// dimension in the order `perm`.
Status permute_weight(quant::PassContext& ctx, const std::string& name,
                      const std::vector<int64_t>& perm, bool columns) {
  const ir::Weight* w = ctx.graph->find_weight(name);
  if (w == nullptr) return internal_error("act-order permutation: no weight '@", name, "'");
  std::vector<float> v;
  QBC_RETURN_IF_ERROR(ctx.weights->read(*w, &v));
  const int64_t n = static_cast<int64_t>(perm.size());
  const int64_t lead = columns ? w->type.dims.back() : w->type.dims.front();
  if (lead != n || static_cast<int64_t>(v.size()) % n != 0) {
    return internal_error("act-order permutation of ", n, " does not fit weight '@", name, "' ",
                          w->type.to_string());
  }
  const int64_t other = static_cast<int64_t>(v.size()) / n;
  std::vector<float> out(v.size());
  for (int64_t a = 0; a < other; ++a) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = perm[static_cast<size_t>(j)];
      if (columns) {
        out[static_cast<size_t>(a * n + j)] = v[static_cast<size_t>(a * n + p)];
      } else {
        out[static_cast<size_t>(j * other + a)] = v[static_cast<size_t>(p * other + a)];
      }
    }
  }
  quant::rewrite_weight(ctx, name, std::move(out));
  return ctx.weights->status();
}

}  // namespace

Status permute_act_order_inputs(const ImportedWeights& iw, quant::PassContext& ctx) {
  for (const ColumnPermutation& p : iw.permutations) {
    QBC_RETURN_IF_ERROR(permute_weight(ctx, p.weight, p.perm, true));
    for (const std::string& w : p.row_weights)
      QBC_RETURN_IF_ERROR(permute_weight(ctx, w, p.perm, false));
  }
  return ok_status();
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
