// quantization_config of config.json -> PrequantConfig: compressed-tensors, GPTQ, AWQ and
// auto-round, and a clear exit 3 for every other method or format.
#include <algorithm>
#include <cctype>
#include <regex>
#include <sstream>

#include "hparams_reader.h"
#include "qbc/frontend/prequant.h"
#include "qbc/support/json_parse.h"
#include "qbc/support/quote.h"

namespace qbc::frontend {
namespace {

using hparams_internal::ConfigReader;

constexpr std::string_view kUseFloat = "; use the float checkpoint";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

Status unsupported(const ConfigReader& q, std::string_view key, std::string_view what) {
  return unimplemented(q.where(key), ": ", what, " is not supported by qbc", kUseFloat);
}

StatusOr<int> get_bits(const ConfigReader& q, std::string_view key, int fallback,
                       std::string_view method) {
  QBC_ASSIGN_OR_RETURN(int64_t bits, q.get_int_or(key, fallback));
  if (bits < 2 || bits > 8) {
    return unimplemented(q.where(key), ": ", method, " with ", bits,
                         "-bit weights is not supported (2 to 8 bits are)", kUseFloat);
  }
  return static_cast<int>(bits);
}

// group_size as GPTQ/AWQ/auto-round write it: -1 or 0 = one group per channel.
StatusOr<int64_t> get_group_size(const ConfigReader& q, std::string_view key) {
  QBC_ASSIGN_OR_RETURN(int64_t g, q.get_int_or(key, -1));
  if (g < -1) return q.bad_value(key, "must be -1 (per channel) or a positive group size");
  return g <= 0 ? 0 : g;
}

StatusOr<std::vector<std::string>> get_strings(const ConfigReader& q, std::string_view key) {
  std::vector<std::string> out;
  const nlohmann::json* v = q.find(key);
  if (v == nullptr) return out;
  if (!v->is_array()) return q.wrong_type(key, "an array of strings");
  for (const nlohmann::json& s : *v) {
    if (!s.is_string()) return q.wrong_type(key, "an array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// compressed-tensors QuantizationArgs of `weights`.
StatusOr<WeightQuantArgs> parse_ct_weights(const ConfigReader& w) {
  WeightQuantArgs a;
  QBC_ASSIGN_OR_RETURN(std::string type, w.get_string_or("type", "int"));
  if (type != "int") {
    return unimplemented(w.where("type"), ": ", type,
                         " weights (fp8 / fp4) are not supported by qbc", kUseFloat);
  }
  QBC_ASSIGN_OR_RETURN(a.bits, get_bits(w, "num_bits", 8, "compressed-tensors"));
  QBC_ASSIGN_OR_RETURN(a.symmetric, w.get_bool_or("symmetric", true));
  QBC_ASSIGN_OR_RETURN(std::string strategy, w.get_string_or("strategy", "tensor"));
  if (strategy == "channel") {
    a.group_size = 0;
  } else if (strategy == "group") {
    QBC_ASSIGN_OR_RETURN(a.group_size, w.get_positive("group_size"));
  } else if (strategy == "tensor") {
    a.group_size = -1;
  } else {
    return unsupported(w, "strategy", "strategy " + quote_prefix(strategy));
  }
  const nlohmann::json* actorder = w.find("actorder");
  if (actorder != nullptr && !actorder->is_boolean() && !actorder->is_string()) {
    return w.wrong_type("actorder", "null, a boolean or \"group\" / \"weight\"");
  }
  a.act_order = actorder != nullptr && (actorder->is_string() || actorder->get<bool>());
  QBC_ASSIGN_OR_RETURN(bool dynamic, w.get_bool_or("dynamic", false));
  if (dynamic) return unsupported(w, "dynamic", "dynamic weight quantization");
  return a;
}

StatusOr<PackLayout> ct_layout(const ConfigReader& q, std::string_view key,
                               const std::string& format) {
  if (format == "pack-quantized") return PackLayout::kCtPacked;
  if (format == "int-quantized" || format == "naive-quantized") return PackLayout::kCtInt;
  return unsupported(q, key, "compressed-tensors format " + quote_prefix(format));
}

Status parse_kv_cache_scheme(const ConfigReader& q, PrequantConfig& c) {
  if (!q.has("kv_cache_scheme")) return ok_status();
  QBC_ASSIGN_OR_RETURN(ConfigReader kv, q.child("kv_cache_scheme"));
  QBC_ASSIGN_OR_RETURN(std::string type, kv.get_string_or("type", "int"));
  QBC_ASSIGN_OR_RETURN(int64_t bits, kv.get_int_or("num_bits", 8));
  QBC_ASSIGN_OR_RETURN(std::string strategy, kv.get_string_or("strategy", "tensor"));
  QBC_ASSIGN_OR_RETURN(bool sym, kv.get_bool_or("symmetric", true));
  if (bits < 1 || bits > 16) return kv.bad_value("num_bits", "must be in [1, 16]");
  c.kv_cache_bits = static_cast<int>(bits);
  c.kv_cache_scheme =
      type + std::to_string(bits) + " " + strategy + " " + (sym ? "symmetric" : "asymmetric");
  return ok_status();
}

StatusOr<PrequantConfig> parse_compressed_tensors(const ConfigReader& q) {
  PrequantConfig c;
  c.method = "compressed-tensors";
  QBC_ASSIGN_OR_RETURN(c.format, q.get_string_or("format", "dense"));
  if (q.has("sparsity_config")) {
    QBC_ASSIGN_OR_RETURN(ConfigReader sp, q.child("sparsity_config"));
    QBC_ASSIGN_OR_RETURN(std::string sformat, sp.get_string_or("format", "dense"));
    if (sformat != "dense") {
      return unsupported(sp, "format", "sparse checkpoint format " + quote_prefix(sformat));
    }
  }
  if (q.has("transform_config")) {
    return unsupported(q, "transform_config", "an online transform (rotation) of the weights");
  }
  QBC_ASSIGN_OR_RETURN(c.ignore, get_strings(q, "ignore"));
  QBC_RETURN_IF_ERROR(parse_kv_cache_scheme(q, c));
  if (c.format == "dense") return c;  // Float weights: nothing to unpack.
  if (c.format != "mixed-precision") {
    QBC_RETURN_IF_ERROR(ct_layout(q, "format", c.format).status());
  }
  QBC_ASSIGN_OR_RETURN(ConfigReader groups, q.child("config_groups"));
  for (const auto& [name, group] : groups.object().items()) {
    QBC_ASSIGN_OR_RETURN(ConfigReader g, groups.child(name));
    if (!g.has("weights")) continue;  // Activation-only groups leave the weights in float.
    PrequantScheme s;
    s.name = name;
    QBC_ASSIGN_OR_RETURN(ConfigReader w, g.child("weights"));
    QBC_ASSIGN_OR_RETURN(s.args, parse_ct_weights(w));
    QBC_ASSIGN_OR_RETURN(std::string format, g.get_string_or("format", c.format));
    QBC_ASSIGN_OR_RETURN(s.layout, ct_layout(g.has("format") ? g : q, "format", format));
    if (s.layout == PackLayout::kCtPacked && s.args.group_size < 0) {
      return unsupported(w, "strategy", "pack-quantized with one scale per tensor");
    }
    QBC_ASSIGN_OR_RETURN(s.targets, get_strings(g, "targets"));
    c.schemes.push_back(std::move(s));
  }
  return c;
}

// The bits / group_size / sym / desc_act shared by GPTQ, AWQ and auto-round configs.
StatusOr<WeightQuantArgs> parse_flat_args(const ConfigReader& q, std::string_view method,
                                          std::string_view sym_key) {
  WeightQuantArgs a;
  QBC_ASSIGN_OR_RETURN(a.bits, get_bits(q, q.has("bits") ? "bits" : "w_bit", 4, method));
  QBC_ASSIGN_OR_RETURN(a.group_size,
                       get_group_size(q, q.has("group_size") ? "group_size" : "q_group_size"));
  QBC_ASSIGN_OR_RETURN(a.symmetric, q.get_bool_or(sym_key, true));
  QBC_ASSIGN_OR_RETURN(a.act_order, q.get_bool_or("desc_act", false));
  return a;
}

// The keys of quantization_config.dynamic in the order the file writes them (the first
// matching rule wins, and nlohmann::json sorts keys).
std::vector<std::string> dynamic_key_order(std::string_view text) {
  std::vector<std::string> keys;
  const auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return keys;
  const auto q = j.find("quantization_config");
  if (q == j.end() || !q->is_object()) return keys;
  const auto d = q->find("dynamic");
  if (d == q->end() || !d->is_object()) return keys;
  for (const auto& [k, _] : d->items()) keys.push_back(k);
  return keys;
}

// GPTQModel `dynamic`: {"-:<regex>": {}, "+:<regex>" or "<regex>": {bits, group_size, sym,
// desc_act}} (GPTQModel's README; vLLM gptq_utils.get_dynamic_override reads it the same way).
Status parse_gptq_dynamic(const ConfigReader& q, const std::vector<std::string>& order,
                          PrequantConfig& c) {
  const nlohmann::json* d = q.find("dynamic");
  if (d == nullptr || d->is_null() || d->empty()) return ok_status();
  if (!d->is_object()) return q.wrong_type("dynamic", "an object of module patterns");
  QBC_ASSIGN_OR_RETURN(ConfigReader dyn, q.child("dynamic"));
  for (const std::string& key : order) {
    ModuleRule r;
    r.key = key;
    r.exclude = key.rfind("-:", 0) == 0;
    r.regex = key.rfind("-:", 0) == 0 || key.rfind("+:", 0) == 0 ? key.substr(2) : key;
    try {
      (void)std::regex(r.regex);
    } catch (const std::regex_error&) {
      return unsupported(
          dyn, key,
          "the module pattern " + quote_prefix(key) + " (not a regular expression qbc can read)");
    }
    const nlohmann::json* v = dyn.find(key);
    if (v == nullptr || !v->is_object()) return dyn.wrong_type(key, "an object of overrides");
    QBC_ASSIGN_OR_RETURN(ConfigReader m, dyn.child(key));
    r.args = c.schemes.front().args;
    if (!r.exclude) {
      QBC_ASSIGN_OR_RETURN(r.args.bits, get_bits(m, "bits", r.args.bits, "gptq"));
      if (m.has("group_size")) {
        QBC_ASSIGN_OR_RETURN(r.args.group_size, get_group_size(m, "group_size"));
      }
      QBC_ASSIGN_OR_RETURN(r.args.symmetric, m.get_bool_or("sym", r.args.symmetric));
      QBC_ASSIGN_OR_RETURN(r.args.act_order, m.get_bool_or("desc_act", r.args.act_order));
      QBC_ASSIGN_OR_RETURN(std::string pack, m.get_string_or("pack_dtype", "int32"));
      if (pack != "int32") {
        return unsupported(m, "pack_dtype",
                           "module pattern " + quote_prefix(key) + " packed in " + pack);
      }
    }
    c.dynamic.push_back(std::move(r));
  }
  return ok_status();
}

StatusOr<PrequantConfig> parse_gptq(const ConfigReader& q,
                                    const std::vector<std::string>& dynamic_order) {
  PrequantConfig c;
  c.method = "gptq";
  QBC_ASSIGN_OR_RETURN(bool marlin, q.get_bool_or("is_marlin_format", false));
  if (marlin) return unsupported(q, "is_marlin_format", "the GPTQ marlin layout");
  QBC_ASSIGN_OR_RETURN(c.format, q.get_string_or("checkpoint_format", "gptq"));
  c.format = lower(c.format);
  if (c.format != "gptq" && c.format != "gptq_v2") {
    return unsupported(q, "checkpoint_format", "GPTQ checkpoint format " + quote_prefix(c.format));
  }
  c.zero_minus_one = c.format == "gptq";
  PrequantScheme s;
  s.name = "gptq";
  s.layout = PackLayout::kGptq;
  QBC_ASSIGN_OR_RETURN(s.args, parse_flat_args(q, "gptq", "sym"));
  c.schemes.push_back(std::move(s));
  QBC_RETURN_IF_ERROR(parse_gptq_dynamic(q, dynamic_order, c));
  QBC_ASSIGN_OR_RETURN(c.ignore, get_strings(q, "modules_to_not_convert"));
  return c;
}

StatusOr<PrequantConfig> parse_awq(const ConfigReader& q) {
  PrequantConfig c;
  c.method = "awq";
  QBC_ASSIGN_OR_RETURN(c.format, q.get_string_or("version", "gemm"));
  c.format = lower(c.format);
  if (c.format != "gemm") {
    return unsupported(q, "version", "the AWQ " + quote_prefix(c.format) + " layout");
  }
  PrequantScheme s;
  s.name = "awq";
  s.layout = PackLayout::kAwqGemm;
  QBC_ASSIGN_OR_RETURN(s.args, parse_flat_args(q, "awq", "sym"));
  QBC_ASSIGN_OR_RETURN(bool zero_point, q.get_bool_or("zero_point", true));
  s.args.symmetric = !zero_point;
  if (s.args.bits != 4) return unsupported(q, "bits", "AWQ with other than 4 bits");
  c.schemes.push_back(std::move(s));
  QBC_ASSIGN_OR_RETURN(c.ignore, get_strings(q, "modules_to_not_convert"));
  return c;
}

Status parse_auto_round_overrides(const ConfigReader& q, PrequantConfig& c) {
  if (!q.has("extra_config")) return ok_status();
  QBC_ASSIGN_OR_RETURN(ConfigReader extra, q.child("extra_config"));
  for (const auto& [module, _] : extra.object().items()) {
    QBC_ASSIGN_OR_RETURN(ConfigReader m, extra.child(module));
    WeightQuantArgs a = c.schemes.front().args;
    QBC_ASSIGN_OR_RETURN(int64_t bits, m.get_int_or("bits", a.bits));
    if (bits >= 16) {
      a.bits = 16;
    } else {
      QBC_ASSIGN_OR_RETURN(a.bits, get_bits(m, "bits", a.bits, "auto-round"));
    }
    if (m.has("group_size")) {
      QBC_ASSIGN_OR_RETURN(a.group_size, get_group_size(m, "group_size"));
    }
    QBC_ASSIGN_OR_RETURN(a.symmetric, m.get_bool_or("sym", a.symmetric));
    QBC_ASSIGN_OR_RETURN(std::string dt, m.get_string_or("data_type", "int"));
    if (dt != "int" && bits < 16) {
      return unsupported(m, "data_type", "auto-round data type " + quote_prefix(dt));
    }
    c.overrides.emplace_back(module, a);
  }
  return ok_status();
}

StatusOr<PrequantConfig> parse_auto_round(const ConfigReader& q) {
  PrequantConfig c;
  c.method = "auto-round";
  const char* key = q.has("packing_format") ? "packing_format" : "backend";
  QBC_ASSIGN_OR_RETURN(c.format, q.get_string_or(key, "auto_round:auto_gptq"));
  QBC_ASSIGN_OR_RETURN(std::string data_type, q.get_string_or("data_type", "int"));
  if (data_type != "int") {
    return unsupported(q, "data_type", "auto-round data type " + quote_prefix(data_type));
  }
  PrequantScheme s;
  s.name = "auto-round";
  QBC_ASSIGN_OR_RETURN(s.args, parse_flat_args(q, "auto-round", "sym"));
  const std::string f = lower(c.format);
  if (f.find("awq") != std::string::npos) {
    s.layout = PackLayout::kAwqGemm;
  } else if (f.find("gptqmodel") != std::string::npos || f == "auto_round") {
    s.layout = PackLayout::kGptq;  // auto-round's own layout stores zero points as they are.
  } else if (f.find("gptq") != std::string::npos) {
    s.layout = PackLayout::kGptq;
    c.zero_minus_one = true;  // AutoGPTQ's packing: zero points minus one.
  } else {
    return unsupported(q, key, "auto-round packing format " + quote_prefix(c.format));
  }
  if (s.layout == PackLayout::kAwqGemm && s.args.bits != 4) {
    return unsupported(q, "bits", "auto-round's AWQ export with other than 4 bits");
  }
  c.schemes.push_back(std::move(s));
  QBC_RETURN_IF_ERROR(parse_auto_round_overrides(q, c));
  return c;
}

}  // namespace

std::string_view pack_layout_name(PackLayout layout) {
  switch (layout) {
    case PackLayout::kCtPacked:
      return "pack-quantized";
    case PackLayout::kCtInt:
      return "int-quantized";
    case PackLayout::kGptq:
      return "gptq";
    case PackLayout::kAwqGemm:
      return "awq-gemm";
    case PackLayout::kGgufBlocks:
      return "gguf-blocks";
  }
  return "unknown";
}

std::string PrequantConfig::describe() const {
  std::ostringstream os;
  os << method << " (" << format;
  for (const PrequantScheme& s : schemes) {
    os << "; " << (schemes.size() > 1 ? s.name + ": " : "") << "int" << s.args.bits << ' ';
    if (s.args.group_size > 0) {
      os << "group " << s.args.group_size;
    } else {
      os << (s.args.group_size == 0 ? "per channel" : "per tensor");
    }
    os << (s.args.symmetric ? " symmetric" : " asymmetric")
       << (s.args.act_order ? " act-order" : "");
  }
  if (!ignore.empty()) os << "; ignore " << ignore.size();
  if (!dynamic.empty())
    os << "; dynamic " << dynamic.size() << (dynamic.size() == 1 ? " rule" : " rules");
  if (!kv_cache_scheme.empty()) os << "; kv cache " << kv_cache_scheme;
  os << ')';
  return os.str();
}

StatusOr<std::optional<PrequantConfig>> parse_prequant_config(std::string_view config_json,
                                                              std::string_view source_view) {
  const std::string source(source_view);
  QBC_ASSIGN_OR_RETURN(nlohmann::json root, parse_json_text(config_json, source));
  const ConfigReader top(root, source);
  if (!root.is_object() || !top.has("quantization_config")) {
    return std::optional<PrequantConfig>();
  }
  QBC_ASSIGN_OR_RETURN(ConfigReader q, top.child("quantization_config"));
  QBC_ASSIGN_OR_RETURN(std::string method, q.get_string_or("quant_method", ""));
  const std::string m = lower(method);
  StatusOr<PrequantConfig> c = [&]() -> StatusOr<PrequantConfig> {
    if (m == "compressed-tensors") return parse_compressed_tensors(q);
    if (m == "gptq") return parse_gptq(q, dynamic_key_order(config_json));
    if (m == "awq") return parse_awq(q);
    if (m == "auto-round" || m == "intel/auto-round") return parse_auto_round(q);
    if (m.empty()) return q.missing("quant_method");
    return unsupported(q, "quant_method",
                       "quantization method " + quote_prefix(method) +
                           " (qbc reads compressed-tensors, gptq, awq and auto-round)");
  }();
  if (!c.ok()) return c.status();
  c->source = source;
  return std::optional<PrequantConfig>(std::move(c).value());
}

}  // namespace qbc::frontend
