// Typed readers of node attributes (see qbc/ir/op_params.h). The rules of each op's
// attributes are those of docs/ir.md and docs/numerics.md; Builder writes them.
#include "qbc/ir/op_params.h"

#include <cmath>
#include <utility>

namespace qbc::ir {
namespace {

// The value of `key` as alternative T: nullptr when absent, an error when of another kind.
template <typename T>
StatusOr<const T*> typed(const Node& n, const std::string& key, AttrKind want) {
  const AttrValue* v = n.attrs.find(key);
  if (v == nullptr) return static_cast<const T*>(nullptr);
  if (const T* x = std::get_if<T>(v)) return x;
  return invalid_argument(describe(n), ": attribute '", key, "' must be ", attr_kind_name(want),
                          ", is ", attr_kind_name(attr_kind(*v)));
}

template <typename T>
StatusOr<T> required(const Node& n, const std::string& key, AttrKind want) {
  QBC_ASSIGN_OR_RETURN(const T* v, typed<T>(n, key, want));
  if (v == nullptr) return invalid_argument(describe(n), ": missing attribute '", key, "'");
  return *v;
}

template <typename T>
StatusOr<T> optional(const Node& n, const std::string& key, AttrKind want, T fallback) {
  QBC_ASSIGN_OR_RETURN(const T* v, typed<T>(n, key, want));
  return v == nullptr ? std::move(fallback) : *v;
}

// A 0/1 flag; absent is 0.
StatusOr<bool> flag(const Node& n, const std::string& key) {
  QBC_ASSIGN_OR_RETURN(const int64_t v, optional_int(n, key, 0));
  return v != 0;
}

// fp32 copies of `values`, each checked by `ok` ("scales must be positive and finite").
StatusOr<std::vector<float>> floats32(const Node& n, const std::string& key,
                                      const std::vector<double>& values, bool positive) {
  std::vector<float> out;
  out.reserve(values.size());
  for (double d : values) {
    const float f = static_cast<float>(d);
    if (positive && (!(f > 0.0f) || !std::isfinite(f))) {
      return invalid_argument(describe(n), ": ", key, " holds ", d,
                              "; scales must be positive and finite");
    }
    if (!positive && !std::isfinite(d)) {
      return invalid_argument(describe(n), ": ", key, " holds ", d, "; offsets must be finite");
    }
    out.push_back(f);
  }
  return out;
}

// The quantized-KV attributes of an attention node (all present or none: k_bits decides).
Status kv_quant_params(const Node& n, numerics::Attention* a) {
  a->quantized = true;
  QBC_ASSIGN_OR_RETURN(const int64_t k_bits, required_int(n, "k_bits"));
  QBC_ASSIGN_OR_RETURN(const int64_t v_bits, required_int(n, "v_bits"));
  QBC_ASSIGN_OR_RETURN(const int64_t p_bits, required_int(n, "p_bits"));
  a->k_bits = static_cast<int>(k_bits);
  a->v_bits = static_cast<int>(v_bits);
  a->p_bits = static_cast<int>(p_bits);
  QBC_ASSIGN_OR_RETURN(a->q_dynamic, flag(n, "q_dynamic"));
  QBC_ASSIGN_OR_RETURN(a->k_token_scale, flag(n, "k_token_scale"));
  QBC_ASSIGN_OR_RETURN(a->qk_hadamard, flag(n, "qk_hadamard"));
  QBC_ASSIGN_OR_RETURN(a->k_asym, flag(n, "k_asym"));
  QBC_ASSIGN_OR_RETURN(a->v_token_scale, flag(n, "v_token_scale"));
  QBC_ASSIGN_OR_RETURN(a->k_group, optional_int(n, "k_group", 0));
  const std::pair<const char*, std::vector<float>*> scales[] = {
      {"q_scale", &a->q_scale}, {"k_scale", &a->k_scale}, {"v_scale", &a->v_scale}};
  for (const auto& [key, dst] : scales) {
    QBC_ASSIGN_OR_RETURN(const std::vector<double> v, required_floats(n, key));
    QBC_ASSIGN_OR_RETURN(*dst, floats32(n, key, v, /*positive=*/true));
  }
  const size_t width = a->k_scale.size();
  const std::pair<const char*, std::vector<float>*> offsets[] = {{"k_offset", &a->k_offset},
                                                                 {"v_offset", &a->v_offset}};
  for (const auto& [key, dst] : offsets) {
    QBC_ASSIGN_OR_RETURN(std::vector<double> v, optional_floats(n, key, {}));
    if (v.size() > width) v.resize(width);
    QBC_ASSIGN_OR_RETURN(*dst, floats32(n, key, v, /*positive=*/false));
    dst->resize(width, 0.0f);
  }
  QBC_ASSIGN_OR_RETURN(const std::vector<double> m, optional_floats(n, "k_rot_offset", {}));
  if (!m.empty() && m.size() != width) {
    return invalid_argument(describe(n), ": k_rot_offset has ", m.size(), " values, K has ", width,
                            " channels");
  }
  QBC_ASSIGN_OR_RETURN(a->k_rot_offset, floats32(n, "k_rot_offset", m, /*positive=*/false));
  return ok_status();
}

}  // namespace

Status check_attr_kinds(const Node& n) {
  for (const AttrSpec& spec : op_info(n.op).attrs) {
    const AttrValue* v = n.attrs.find(spec.name);
    if (v == nullptr && spec.required)
      return invalid_argument(describe(n), ": missing attribute '", spec.name, "'");
    if (v != nullptr && attr_kind(*v) != spec.kind) {
      return invalid_argument(describe(n), ": attribute '", spec.name, "' must be ",
                              attr_kind_name(spec.kind), ", is ", attr_kind_name(attr_kind(*v)));
    }
  }
  return ok_status();
}

StatusOr<int64_t> required_int(const Node& n, const std::string& key) {
  return required<int64_t>(n, key, AttrKind::kInt);
}
StatusOr<double> required_float(const Node& n, const std::string& key) {
  return required<double>(n, key, AttrKind::kFloat);
}
StatusOr<std::string> required_string(const Node& n, const std::string& key) {
  return required<std::string>(n, key, AttrKind::kString);
}
StatusOr<std::vector<double>> required_floats(const Node& n, const std::string& key) {
  return required<std::vector<double>>(n, key, AttrKind::kFloats);
}
StatusOr<int64_t> optional_int(const Node& n, const std::string& key, int64_t fallback) {
  return optional<int64_t>(n, key, AttrKind::kInt, fallback);
}
StatusOr<double> optional_float(const Node& n, const std::string& key, double fallback) {
  return optional<double>(n, key, AttrKind::kFloat, fallback);
}
StatusOr<std::vector<double>> optional_floats(const Node& n, const std::string& key,
                                              std::vector<double> fallback) {
  return optional<std::vector<double>>(n, key, AttrKind::kFloats, std::move(fallback));
}

StatusOr<QLinearParams> qlinear_params(const Node& n) {
  QLinearParams p;
  numerics::QLinear& q = p.linear;
  QBC_ASSIGN_OR_RETURN(const double in_scale, required_float(n, "in_scale"));
  QBC_ASSIGN_OR_RETURN(const int64_t in_bits, required_int(n, "in_bits"));
  QBC_ASSIGN_OR_RETURN(const int64_t w_bits, required_int(n, "w_bits"));
  QBC_ASSIGN_OR_RETURN(const int64_t out_fp16, required_int(n, "out_fp16"));
  QBC_ASSIGN_OR_RETURN(q.in_dynamic, flag(n, "in_dynamic"));
  QBC_ASSIGN_OR_RETURN(const int64_t in_asym, optional_int(n, "in_asym", 0));
  QBC_ASSIGN_OR_RETURN(q.group, optional_int(n, "w_group", 0));
  QBC_ASSIGN_OR_RETURN(const int64_t w_zero, optional_int(n, "w_zero", 0));
  QBC_ASSIGN_OR_RETURN(const int64_t w_min, optional_int(n, "w_min", 0));
  q.in_scale = static_cast<float>(in_scale);
  q.in_bits = static_cast<int>(in_bits);
  q.out_fp16 = out_fp16 != 0;
  q.in_asym = in_asym == 1;
  if (q.in_asym && !q.in_dynamic) {  // a static zero point only with static asymmetric codes
    QBC_ASSIGN_OR_RETURN(const int64_t z, required_int(n, "in_zero"));
    q.in_zero = static_cast<int32_t>(z);
  }
  p.w_bits = static_cast<int>(w_bits);
  p.w_zero = w_zero == 1;
  p.w_min = w_min == 1;
  p.min_at = p.w_zero ? 4 : 3;
  p.bias_at = p.min_at + (p.w_min ? 1 : 0);
  if (p.w_min && q.group <= 0)
    return invalid_argument(describe(n), ": w_min = 1 needs w_group > 0");
  if (!(q.in_scale > 0.0f) || !std::isfinite(q.in_scale)) {
    return invalid_argument(describe(n), ": in_scale ", in_scale,
                            " is not a positive finite fp32 value");
  }
  return p;
}

StatusOr<numerics::Attention> attention_params(const Node& n) {
  numerics::Attention a;
  QBC_ASSIGN_OR_RETURN(a.heads, required_int(n, "num_heads"));
  QBC_ASSIGN_OR_RETURN(a.kv_heads, required_int(n, "num_kv_heads"));
  QBC_ASSIGN_OR_RETURN(a.head_dim, required_int(n, "head_dim"));
  QBC_ASSIGN_OR_RETURN(a.scale, required_float(n, "scale"));
  QBC_ASSIGN_OR_RETURN(a.softcap, required_float(n, "softcap"));
  QBC_ASSIGN_OR_RETURN(a.window, required_int(n, "window"));
  QBC_ASSIGN_OR_RETURN(a.max_cache, required_int(n, "max_cache"));
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.max_cache <= 0) {
    return invalid_argument(describe(n), ": num_heads ", a.heads,
                            " is not a multiple of num_kv_heads ", a.kv_heads, " or max_cache ",
                            a.max_cache, " is not positive");
  }
  if (n.attrs.has("k_bits")) QBC_RETURN_IF_ERROR(kv_quant_params(n, &a));
  return a;
}

StatusOr<FullAttentionParams> full_attention_params(const Node& n) {
  FullAttentionParams f;
  numerics::Attention& a = f.attention;
  QBC_ASSIGN_OR_RETURN(a.heads, required_int(n, "num_heads"));
  QBC_ASSIGN_OR_RETURN(a.head_dim, required_int(n, "head_dim"));
  QBC_ASSIGN_OR_RETURN(a.scale, required_float(n, "scale"));
  a.kv_heads = a.heads;
  if (a.heads <= 0 || a.head_dim <= 0) {
    return invalid_argument(describe(n), ": num_heads ", a.heads, " and head_dim ", a.head_dim,
                            " must be positive");
  }
  if (n.attrs.has("segments")) {
    const AttrValue* v = n.attrs.find("segments");
    if (attr_kind(*v) != AttrKind::kInts)
      return invalid_argument(describe(n), ": attribute 'segments' must be ints");
    f.segments = n.attrs.get_ints("segments");
  }
  if (n.attrs.has("k_bits")) QBC_RETURN_IF_ERROR(kv_quant_params(n, &a));
  return f;
}

StatusOr<numerics::Rope> rope_params(const Node& n) {
  numerics::Rope r;
  QBC_ASSIGN_OR_RETURN(r.heads, required_int(n, "num_heads"));
  QBC_ASSIGN_OR_RETURN(r.head_dim, required_int(n, "head_dim"));
  QBC_ASSIGN_OR_RETURN(r.rotary_dim, required_int(n, "rotary_dim"));
  QBC_ASSIGN_OR_RETURN(r.inv_freq, required_floats(n, "inv_freq"));
  QBC_ASSIGN_OR_RETURN(r.attention_factor, required_float(n, "attention_factor"));
  QBC_ASSIGN_OR_RETURN(r.theta, required_float(n, "theta"));
  QBC_ASSIGN_OR_RETURN(r.long_inv_freq, optional_floats(n, "long_inv_freq", {}));
  QBC_ASSIGN_OR_RETURN(r.dynamic_factor, optional_float(n, "dynamic_factor", 0.0));
  QBC_ASSIGN_OR_RETURN(r.original_max_positions, optional_int(n, "original_max_positions", 0));
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 != 0 || r.rotary_dim > r.head_dim ||
      static_cast<int64_t>(r.inv_freq.size()) != r.rotary_dim / 2 ||
      (!r.long_inv_freq.empty() && r.long_inv_freq.size() != r.inv_freq.size())) {
    return invalid_argument(describe(n), ": rotary_dim ", r.rotary_dim, " does not fit head_dim ",
                            r.head_dim, " and ", r.inv_freq.size(), " inverse frequencies");
  }
  return r;
}

}  // namespace qbc::ir
