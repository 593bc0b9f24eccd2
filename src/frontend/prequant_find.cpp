// find_packed_linears: which modules of a pre-quantized checkpoint are stored packed, under
// which scheme of quantization_config, and from which tensors.
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "qbc/frontend/prequant.h"
#include "qbc/support/quote.h"

namespace qbc::frontend {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// compressed-tensors target / ignore syntax: "re:<regex>" matched at the start of the module
// name (Python's re.match), "Linear" for any linear, else the exact module name. With
// `substring` (AWQ's and GPTQ's modules_to_not_convert) a plain name matches anywhere in it.
bool matches(const std::string& pattern, const std::string& module, bool substring) {
  if (pattern.rfind("re:", 0) == 0) {
    try {
      return std::regex_search(module, std::regex(pattern.substr(3)),
                               std::regex_constants::match_continuous);
    } catch (const std::regex_error&) {
      return false;
    }
  }
  if (pattern == "Linear") return true;
  if (substring) return module.find(pattern) != std::string::npos;
  return module == pattern || ends_with(module, "." + pattern);
}

bool in_ignore(const PrequantConfig& c, const std::string& module) {
  const bool substring = c.method != "compressed-tensors";
  for (const std::string& p : c.ignore) {
    if (matches(p, module, substring)) return true;
  }
  return false;
}

std::string scheme_key(const PrequantConfig& c, const PrequantScheme& s) {
  if (c.method == "compressed-tensors") return "quantization_config.config_groups." + s.name;
  return "quantization_config";
}

// The scheme covering `module`, or an error naming the tensor and the key.
StatusOr<const PrequantScheme*> scheme_for(const PrequantConfig& c, const std::string& module,
                                           const SafetensorsTensor& t) {
  const std::string where =
      t.file.string() + ": tensor " + quote_prefix(t.name) + " (module " + module + ")";
  if (in_ignore(c, module)) {
    return invalid_argument(where, " is stored quantized, but ", c.source,
                            ": key 'quantization_config.",
                            c.method == "compressed-tensors" ? "ignore" : "modules_to_not_convert",
                            "' lists it as float");
  }
  for (const PrequantScheme& s : c.schemes) {
    if (s.targets.empty()) return &s;
    for (const std::string& target : s.targets) {
      if (matches(target, module, false)) return &s;
    }
  }
  return invalid_argument(where, " is stored quantized, but no scheme of ", c.source,
                          ": key 'quantization_config.config_groups' targets it");
}

// The rank-1 integer tensor `t` as int64 values (I32 or I64).
StatusOr<std::vector<int64_t>> read_shape_tensor(const SafetensorsTensor& t) {
  const size_t width = t.dtype == tensorfile::DType::kI64   ? 8
                       : t.dtype == tensorfile::DType::kI32 ? 4
                                                            : 0;
  if (width == 0 || t.shape.size() != 1 || t.shape[0] != 2) {
    return invalid_argument(t.file.string(), ": tensor ", quote_prefix(t.name),
                            " must be I32 or I64 of shape [2] (out, in)");
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < 2; ++i) {
    int64_t v = 0;
    if (width == 8) {
      std::memcpy(&v, t.data.data + 8 * i, 8);
    } else {
      int32_t v32 = 0;
      std::memcpy(&v32, t.data.data + 4 * i, 4);
      v = v32;
    }
    if (v <= 0 || v > (int64_t{1} << 40)) {
      return invalid_argument(t.file.string(), ": tensor ", quote_prefix(t.name),
                              " holds the dimension ", v, " (expected 1 to 2^40)");
    }
    out.push_back(v);
  }
  return out;
}

Status require(const SafetensorsCheckpoint& ck, const std::string& name, const std::string& why) {
  if (ck.find(name) != nullptr) return ok_status();
  return invalid_argument(ck.path().string(), ": missing tensor ", quote_prefix(name), " (", why,
                          ")");
}

// Fills `ref`'s shape and parts from the tensors of its layout.
Status describe_module(const SafetensorsCheckpoint& ck, const SafetensorsTensor& main,
                       PackedTensorRef& ref) {
  const std::string& m = ref.module;
  const std::string layout(pack_layout_name(ref.layout));
  for (int64_t d : main.shape) {
    if (d < 1) {
      return invalid_argument(main.file.string(), ": tensor ", quote_prefix(main.name),
                              " has an empty dimension");
    }
  }
  auto add_optional = [&](const char* suffix) {
    if (ck.find(m + suffix) != nullptr) ref.parts.push_back(m + suffix);
  };
  switch (ref.layout) {
    case PackLayout::kCtPacked: {
      QBC_RETURN_IF_ERROR(require(ck, m + ".weight_shape", layout + " needs it"));
      QBC_ASSIGN_OR_RETURN(ref.shape, read_shape_tensor(*ck.find(m + ".weight_shape")));
      ref.parts = {m + ".weight_packed", m + ".weight_shape"};
      break;
    }
    case PackLayout::kCtInt:
      ref.shape = main.shape;
      ref.parts = {m + ".weight"};
      break;
    case PackLayout::kGgufBlocks:
      return invalid_argument(main.file.string(), ": GGUF blocks are not stored in safetensors");
    case PackLayout::kGptq:
    case PackLayout::kAwqGemm: {
      if (main.shape.size() != 2) {
        return invalid_argument(main.file.string(), ": tensor ", quote_prefix(main.name),
                                " must be 2-D for ", layout);
      }
      const int64_t b = ref.args.bits;
      ref.shape = ref.layout == PackLayout::kGptq
                      ? std::vector<int64_t>{main.shape[1], main.shape[0] * 32 / b}
                      : std::vector<int64_t>{main.shape[1] * 8, main.shape[0]};
      ref.parts = {m + ".qweight"};
      QBC_RETURN_IF_ERROR(require(ck, m + ".scales", layout + " needs it"));
      ref.parts.push_back(m + ".scales");
      if (ref.layout == PackLayout::kAwqGemm || !ref.args.symmetric) {
        QBC_RETURN_IF_ERROR(require(ck, m + ".qzeros", layout + " needs it"));
      }
      add_optional(".qzeros");
      add_optional(".g_idx");
      return ok_status();
    }
  }
  if (ref.shape.size() != 2) {
    return invalid_argument(main.file.string(), ": tensor ", quote_prefix(main.name),
                            " must stand for a 2-D weight");
  }
  QBC_RETURN_IF_ERROR(require(ck, m + ".weight_scale", layout + " needs it"));
  ref.parts.push_back(m + ".weight_scale");
  if (!ref.args.symmetric) {
    QBC_RETURN_IF_ERROR(require(ck, m + ".weight_zero_point", "asymmetric weights need it"));
  }
  add_optional(".weight_zero_point");
  add_optional(".weight_g_idx");
  return ok_status();
}

// The module and layout a stored tensor announces, or nullopt for plain tensors.
std::optional<std::pair<std::string, PackLayout>> packed_module(const SafetensorsCheckpoint& ck,
                                                                const SafetensorsTensor& t) {
  const std::string& n = t.name;
  auto strip = [&](std::string_view suffix) { return n.substr(0, n.size() - suffix.size()); };
  if (ends_with(n, ".weight_packed"))
    return std::make_pair(strip(".weight_packed"), PackLayout::kCtPacked);
  if (ends_with(n, ".qweight")) return std::make_pair(strip(".qweight"), PackLayout::kGptq);
  if (ends_with(n, ".weight") && t.dtype == tensorfile::DType::kI8 &&
      ck.find(strip(".weight") + ".weight_scale") != nullptr) {
    return std::make_pair(strip(".weight"), PackLayout::kCtInt);
  }
  return std::nullopt;
}

bool is_redundant_scale(const std::string& name) {
  for (const char* s : {".k_scale", ".v_scale", ".input_scale", ".output_scale",
                        ".input_zero_point", ".output_zero_point"}) {
    if (ends_with(name, s)) return true;
  }
  return false;
}

// GPTQModel `dynamic`: the first rule whose pattern matches the module sets its args; a "-:"
// rule says the module is float, which a packed tensor contradicts.
Status apply_dynamic(const PrequantConfig& c, const SafetensorsTensor& t, PackedTensorRef& ref) {
  for (const ModuleRule& r : c.dynamic) {
    if (!matches("re:" + r.regex, ref.module, false)) continue;
    if (r.exclude) {
      return invalid_argument(t.file.string(), ": tensor ", quote_prefix(t.name),
                              " is stored quantized, but ", c.source,
                              ": key 'quantization_config.dynamic' pattern ", quote_prefix(r.key),
                              " keeps ", ref.module, " in float");
    }
    ref.args = r.args;
    return ok_status();
  }
  return ok_status();
}

}  // namespace

StatusOr<PrequantTensors> find_packed_linears(const SafetensorsCheckpoint& ck,
                                              const PrequantConfig& c) {
  PrequantTensors out;
  for (const SafetensorsTensor& t : ck.tensors()) {
    if (is_redundant_scale(t.name)) {
      out.hidden.push_back(t.name);
      continue;
    }
    auto found = packed_module(ck, t);
    if (!found) continue;
    PackedTensorRef ref;
    ref.module = found->first;
    ref.file = t.file;
    QBC_ASSIGN_OR_RETURN(const PrequantScheme* s, scheme_for(c, ref.module, t));
    ref.args = s->args;
    for (const auto& [name, args] : c.overrides) {
      if (name == ref.module) ref.args = args;
    }
    QBC_RETURN_IF_ERROR(apply_dynamic(c, t, ref));
    if (ref.args.bits > 8) {
      return invalid_argument(
          t.file.string(), ": tensor ", quote_prefix(t.name), " is stored quantized, but ",
          c.source, ": key 'quantization_config.extra_config' keeps ", ref.module, " in float");
    }
    const bool layout_ok = found->second == PackLayout::kGptq ? (s->layout == PackLayout::kGptq ||
                                                                 s->layout == PackLayout::kAwqGemm)
                                                              : s->layout == found->second;
    if (!layout_ok) {
      return invalid_argument(t.file.string(), ": tensor ", quote_prefix(t.name), " is ",
                              pack_layout_name(found->second), ", but ", c.source, ": key '",
                              scheme_key(c, *s), "' says ", pack_layout_name(s->layout));
    }
    ref.layout = s->layout;
    QBC_RETURN_IF_ERROR(describe_module(ck, t, ref));
    out.linears.push_back(std::move(ref));
  }
  return out;
}

}  // namespace qbc::frontend
