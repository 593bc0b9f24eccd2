// Shape inference (infer_type) and the Builder that applies it to every node.
#include "qbc/ir/builder.h"

#include <sstream>

#include "qbc/ir/op_params.h"

namespace qbc::ir {
namespace {

// The type of operand `i`: a value's type or a weight's declared type.
StatusOr<TensorType> operand_type(const Graph& g, const Node& n, size_t i) {
  const Operand& o = n.operands[i];
  if (o.is_weight()) {
    const Weight* w = g.find_weight(o.weight);
    if (!w) return invalid_argument(describe(n), ": operand ", i, " names unknown weight '@", o.weight, "'");
    return w->type;
  }
  if (o.value < 0 || o.value >= static_cast<ValueId>(g.nodes().size())) {
    return invalid_argument(describe(n), ": operand ", i, " refers to no node (id ", o.value, ")");
  }
  return g.node(o.value).type;
}

bool is_float(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// Dims equal, treating a dynamic dim as matching anything.
bool dims_compatible(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && a[i] != kDynamic && b[i] != kDynamic) return false;
  }
  return true;
}

// A full_attention node's quantization attributes: all present or none, one q_scale per head,
// k_scale / v_scale (and offsets, if any) one per channel of the `width`, bits 8 or 16.
Status check_full_attention_quant(const Node& n, int64_t width) {
  const Attrs& a = n.attrs;
  const bool quant = a.has("k_bits");
  for (const char* key : {"v_bits", "p_bits", "q_scale", "k_scale", "v_scale"}) {
    if (a.has(key) != quant) return invalid_argument(describe(n), ": quantization attributes must all be present or none (", key, ")");
  }
  if (!quant) {
    if (a.has("k_offset") || a.has("v_offset")) return invalid_argument(describe(n), ": k_offset / v_offset need k_bits");
    return ok_status();
  }
  if (static_cast<int64_t>(a.get_floats("q_scale").size()) != a.get_int("num_heads")) {
    return invalid_argument(describe(n), ": q_scale needs ", a.get_int("num_heads"), " entries (one per head)");
  }
  for (const char* key : {"k_scale", "v_scale", "k_offset", "v_offset"}) {
    if (a.has(key) && static_cast<int64_t>(a.get_floats(key).size()) != width) {
      return invalid_argument(describe(n), ": ", key, " needs ", width, " entries (one per channel)");
    }
  }
  for (const char* key : {"k_bits", "v_bits", "p_bits"}) {
    if (a.get_int(key) != 8 && a.get_int(key) != 16) return invalid_argument(describe(n), ": ", key, " must be 8 or 16");
  }
  return ok_status();
}

}  // namespace

StatusOr<TensorType> infer_type(const Graph& g, const Node& n) {
  const OpInfo& info = op_info(n.op);
  const int count = static_cast<int>(n.operands.size());
  if (count < info.min_operands || count > info.max_operands) {
    return invalid_argument(describe(n), ": takes ", info.min_operands, "..", info.max_operands,
                            " operands, got ", count);
  }
  std::vector<TensorType> t;
  for (size_t i = 0; i < n.operands.size(); ++i) {
    QBC_ASSIGN_OR_RETURN(TensorType ty, operand_type(g, n, i));
    t.push_back(std::move(ty));
  }
  QBC_RETURN_IF_ERROR(check_attr_kinds(n));  // the getters below read checked attributes
  const Attrs& a = n.attrs;
  switch (n.op) {
    case Op::kInput:
      return n.type;
    case Op::kRmsNorm: {
      const int64_t group = a.get_int("group");
      const int64_t width = group > 0 ? group : t[0].dim(-1);
      if (t[0].rank() < 1 || t[1].rank() != 1 || t[1].dims[0] != width) {
        return invalid_argument(describe(n), ": weight ", t[1].to_string(), " does not match input ",
                                t[0].to_string(), (group > 0 ? " with group " + std::to_string(group) : ""));
      }
      if (group > 0 && t[0].dim(-1) % group != 0) {
        return invalid_argument(describe(n), ": last dim ", t[0].dim(-1), " is not a multiple of group ", group);
      }
      return t[0];
    }
    case Op::kLayerNorm: {
      const int64_t width = t[0].rank() < 1 ? -1 : t[0].dim(-1);
      for (size_t i = 1; i < t.size(); ++i) {
        if (t[i].rank() != 1 || t[i].dims[0] != width) {
          return invalid_argument(describe(n), ": ", i == 1 ? "weight " : "bias ", t[i].to_string(),
                                  " does not match input ", t[0].to_string());
        }
      }
      if (a.get_float("eps") < 0) return invalid_argument(describe(n), ": negative eps");
      return t[0];
    }
    case Op::kLinear: {
      if (t[0].rank() < 1 || t[1].rank() != 2 || t[0].dim(-1) != t[1].dims[1]) {
        return invalid_argument(describe(n), ": contraction mismatch: input ", t[0].to_string(), " vs weight ",
                                t[1].to_string(), " (weight is [out, in])");
      }
      if (count == 3 && (t[2].rank() != 1 || t[2].dims[0] != t[1].dims[0])) {
        return invalid_argument(describe(n), ": bias ", t[2].to_string(), " does not match ", t[1].dims[0],
                                " outputs");
      }
      TensorType out = t[0];
      out.dims.back() = t[1].dims[0];
      return out;
    }
    case Op::kQLinear: {
      const bool int_w = t[1].dtype == DType::kI8 || t[1].dtype == DType::kI4;
      if (!int_w) return invalid_argument(describe(n), ": weight must be i8 or i4, is ", t[1].to_string());
      if (t[0].rank() < 1 || t[1].rank() != 2 || t[0].dim(-1) != t[1].dims[1]) {
        return invalid_argument(describe(n), ": contraction mismatch: input ", t[0].to_string(), " vs weight ",
                                t[1].to_string(), " (weight is [out, in])");
      }
      const int64_t wg = a.get_int("w_group", 0);
      if (wg < 0) return invalid_argument(describe(n), ": w_group ", wg, " must be >= 0");
      if (wg == 0 && (t[2].rank() != 1 || t[2].dims[0] != t[1].dims[0] || t[2].dtype != DType::kF32)) {
        return invalid_argument(describe(n), ": weight scale ", t[2].to_string(), " must be f32[", t[1].dims[0], "]");
      }
      if (wg > 0) {
        const int64_t groups = (t[1].dims[1] + wg - 1) / wg;
        if (t[2].rank() != 2 || t[2].dims[0] != t[1].dims[0] || t[2].dims[1] != groups || t[2].dtype != DType::kF32) {
          return invalid_argument(describe(n), ": weight scale ", t[2].to_string(), " must be f32[", t[1].dims[0], ",",
                                  groups, "] for w_group ", wg);
        }
      }
      const int64_t wz = a.get_int("w_zero", 0);
      if (wz != 0 && wz != 1) return invalid_argument(describe(n), ": w_zero must be 0 or 1, got ", wz);
      if (wz == 1) {
        if (count < 4) return invalid_argument(describe(n), ": w_zero = 1 needs a zero-point operand after the scale");
        if (t[3].dims != t[2].dims || t[3].dtype != t[1].dtype) {
          return invalid_argument(describe(n), ": zero points ", t[3].to_string(), " must be ",
                                  dtype_name(t[1].dtype), " shaped like the scale ", t[2].to_string());
        }
      }
      const int64_t wm = a.get_int("w_min", 0);
      if (wm != 0 && wm != 1) return invalid_argument(describe(n), ": w_min must be 0 or 1, got ", wm);
      const int min_at = wz == 1 ? 4 : 3;
      if (wm == 1) {
        if (wg == 0) return invalid_argument(describe(n), ": w_min = 1 needs w_group > 0");
        if (count <= min_at) {
          return invalid_argument(describe(n), ": w_min = 1 needs an offset operand after the ",
                                  wz == 1 ? "zero points" : "scale");
        }
        if (t[static_cast<size_t>(min_at)].dims != t[2].dims || t[static_cast<size_t>(min_at)].dtype != DType::kF32) {
          return invalid_argument(describe(n), ": offsets ", t[static_cast<size_t>(min_at)].to_string(),
                                  " must be f32 shaped like the scale ", t[2].to_string());
        }
      }
      const int bias_at = min_at + (wm == 1 ? 1 : 0);
      if (count > bias_at + 1) {
        return invalid_argument(describe(n), ": takes at most ", bias_at + 1, " operands with w_zero = ", wz,
                                " and w_min = ", wm, ", got ", count);
      }
      if (count == bias_at + 1 && (t[static_cast<size_t>(bias_at)].rank() != 1 ||
                                   t[static_cast<size_t>(bias_at)].dims[0] != t[1].dims[0])) {
        return invalid_argument(describe(n), ": bias ", t[static_cast<size_t>(bias_at)].to_string(), " does not match ",
                                t[1].dims[0], " outputs");
      }
      const int64_t ib = a.get_int("in_bits"), wb = a.get_int("w_bits");
      if ((ib != 8 && ib != 16) || (wb != 4 && wb != 8) || a.get_float("in_scale") <= 0) {
        return invalid_argument(describe(n), ": in_bits ", ib, " (8|16), w_bits ", wb, " (4|8), in_scale ",
                                a.get_float("in_scale"), " (> 0)");
      }
      const int64_t asym = a.get_int("in_asym", 0);
      if (asym != 0 && asym != 1) return invalid_argument(describe(n), ": in_asym must be 0 or 1, got ", asym);
      if (asym == 1 && a.get_int("in_dynamic", 0) == 0) {
        const int64_t z = a.get_int("in_zero", 1 << 20), half = int64_t{1} << (ib - 1);
        if (z < -half || z >= half) {
          return invalid_argument(describe(n), ": static asymmetric input needs in_zero in [", -half, ", ", half - 1,
                                  "] for in_bits ", ib);
        }
      }
      if (a.has("in_dynamic") && a.get_int("in_dynamic") != 0 && a.get_int("in_dynamic") != 1) {
        return invalid_argument(describe(n), ": in_dynamic must be 0 or 1, got ", a.get_int("in_dynamic"));
      }
      TensorType out = t[0];
      out.dtype = DType::kF32;
      out.dims.back() = t[1].dims[0];
      return out;
    }
    case Op::kSlice: {
      const int64_t s = a.get_int("start"), e = a.get_int("end");
      if (s < 0 || e <= s || e > t[0].dim(-1)) {
        return invalid_argument(describe(n), ": slice [", s, ", ", e, ") is outside last dim ", t[0].dim(-1));
      }
      TensorType out = t[0];
      out.dims.back() = e - s;
      return out;
    }
    case Op::kRope: {
      const int64_t heads = a.get_int("num_heads"), hd = a.get_int("head_dim"), rd = a.get_int("rotary_dim");
      if (heads <= 0 || hd <= 0 || t[0].dim(-1) != heads * hd) {
        return invalid_argument(describe(n), ": input ", t[0].to_string(), " is not num_heads ", heads,
                                " x head_dim ", hd);
      }
      if (rd <= 0 || rd > hd || rd % 2 != 0 ||
          static_cast<int64_t>(a.get_floats("inv_freq").size()) != rd / 2) {
        return invalid_argument(describe(n), ": rotary_dim ", rd, " needs an even value <= head_dim and ",
                                rd / 2, " inv_freq entries, got ", a.get_floats("inv_freq").size());
      }
      const auto lf = a.get_floats("long_inv_freq");
      if (!lf.empty() && static_cast<int64_t>(lf.size()) != rd / 2) {
        return invalid_argument(describe(n), ": long_inv_freq needs ", rd / 2, " entries");
      }
      if (t[1].dtype != DType::kI64 || t[1].rank() != t[0].rank() - 1) {
        return invalid_argument(describe(n), ": positions must be i64 of rank ", t[0].rank() - 1, ", got ",
                                t[1].to_string());
      }
      return t[0];
    }
    case Op::kAttention: {
      const int64_t h = a.get_int("num_heads"), kv = a.get_int("num_kv_heads"), hd = a.get_int("head_dim");
      if (h <= 0 || kv <= 0 || hd <= 0 || h % kv != 0) {
        return invalid_argument(describe(n), ": num_heads ", h, " must be a positive multiple of num_kv_heads ", kv);
      }
      if (t[0].dim(-1) != h * hd || t[1].dim(-1) != kv * hd || t[2].dim(-1) != kv * hd) {
        return invalid_argument(describe(n), ": q ", t[0].to_string(), ", k ", t[1].to_string(), ", v ",
                                t[2].to_string(), " do not match ", h, " heads / ", kv, " kv heads of ", hd);
      }
      if (a.get_int("max_cache") <= 0) return invalid_argument(describe(n), ": max_cache must be positive");
      const bool quant = a.has("k_bits");
      for (const char* key : {"v_bits", "p_bits", "q_scale", "k_scale", "v_scale"}) {
        if (a.has(key) != quant) return invalid_argument(describe(n), ": KV quantization attributes must all be present or none (", key, ")");
      }
      if (!quant && (a.has("k_offset") || a.has("v_offset") || a.has("k_rot_offset") || a.has("k_token_scale") ||
                     a.has("qk_hadamard") || a.has("k_group") || a.has("k_asym") || a.has("v_token_scale"))) {
        return invalid_argument(describe(n), ": k_offset / v_offset / k_rot_offset / k_token_scale / qk_hadamard need a ",
                                "quantized KV cache (k_bits ...)");
      }
      if (a.has("k_rot_offset") && g.node(n.operands[1].value).op != Op::kRope) {
        return invalid_argument(describe(n), ": k_rot_offset needs K from a rope node (its offsets rotate with it)");
      }
      if (quant) {
        if (static_cast<int64_t>(a.get_floats("q_scale").size()) != h ||
            static_cast<int64_t>(a.get_floats("k_scale").size()) != kv * hd ||
            static_cast<int64_t>(a.get_floats("v_scale").size()) != kv * hd) {
          return invalid_argument(describe(n), ": q_scale needs ", h, " entries, k_scale and v_scale ", kv * hd);
        }
        for (const char* key : {"k_offset", "v_offset", "k_rot_offset"}) {
          if (a.has(key) && static_cast<int64_t>(a.get_floats(key).size()) != kv * hd) {
            return invalid_argument(describe(n), ": ", key, " needs ", kv * hd, " entries (one per KV channel)");
          }
        }
        if (a.has("k_offset") && a.get_float("softcap") > 0.0) {
          for (double o : a.get_floats("k_offset")) {
            if (o != 0.0) {
              return invalid_argument(describe(n), ": k_offset must be zero with softcap: the offset is only ",
                                      "softmax-invariant without score soft-capping");
            }
          }
        }
        for (const char* key : {"k_bits", "v_bits"}) {
          const int64_t b = a.get_int(key);
          if (b != 4 && b != 8 && b != 16) return invalid_argument(describe(n), ": ", key, " must be 4, 8 or 16");
        }
        for (const char* key : {"q_dynamic", "k_token_scale", "qk_hadamard", "k_asym", "v_token_scale"}) {
          if (a.has(key) && a.get_int(key) != 0 && a.get_int(key) != 1) {
            return invalid_argument(describe(n), ": ", key, " must be 0 or 1, got ", a.get_int(key));
          }
        }
        if (a.get_int("qk_hadamard", 0) == 1 && (a.get_int("k_token_scale", 0) != 1 || (hd & (hd - 1)) != 0)) {
          return invalid_argument(describe(n), ": qk_hadamard needs k_token_scale and a power-of-two head_dim (",
                                  hd, "): static key ranges do not bound the rotated keys");
        }
        const int64_t kg = a.get_int("k_group", 0);
        if ((kg != 0 || a.get_int("k_asym", 0) == 1) &&
            (a.get_int("k_token_scale", 0) != 1 || kg < 0 || (kg > 0 && hd % kg != 0))) {
          return invalid_argument(describe(n), ": k_group ", kg, " / k_asym need k_token_scale and a group ",
                                  "dividing head_dim ", hd);
        }
        if (a.get_int("k_asym", 0) == 1 && a.get_int("k_bits") != 4) {
          return invalid_argument(describe(n), ": k_asym needs k_bits 4 (its zero point is an int16 in 1/256 steps)");
        }
        if (a.get_int("p_bits") != 8 && a.get_int("p_bits") != 16) {
          return invalid_argument(describe(n), ": p_bits must be 8 or 16");
        }
      }
      if (a.get_int("window") < 0) return invalid_argument(describe(n), ": window must be >= 0");
      return t[0];
    }
    case Op::kGatedAct: {
      const std::string act = a.get_string("act");
      if (act != "silu" && act != "gelu_tanh") {
        return invalid_argument(describe(n), ": act '", act, "' is not silu or gelu_tanh");
      }
      if (!dims_compatible(t[0].dims, t[1].dims)) {
        return invalid_argument(describe(n), ": gate ", t[0].to_string(), " and up ", t[1].to_string(), " differ");
      }
      return t[0];
    }
    case Op::kAdd:
      if (!dims_compatible(t[0].dims, t[1].dims) || t[0].dtype != t[1].dtype) {
        return invalid_argument(describe(n), ": operands ", t[0].to_string(), " and ", t[1].to_string(), " differ");
      }
      return t[0];
    case Op::kScale:
    case Op::kSoftcap:
      if (!is_float(t[0].dtype)) return invalid_argument(describe(n), ": needs a float input");
      if (n.op == Op::kSoftcap && a.get_float("cap") <= 0) {
        return invalid_argument(describe(n), ": cap must be positive");
      }
      return t[0];
    case Op::kGelu:
      if (!is_float(t[0].dtype)) return invalid_argument(describe(n), ": needs a float input");
      if (a.has("approx") && a.get_string("approx") != "quick" && a.get_string("approx") != "tanh")
        return invalid_argument(describe(n), ": approx '", a.get_string("approx"), "' (only \"quick\", \"tanh\")");
      return t[0];
    case Op::kRopeTable: {
      const int64_t heads = a.get_int("num_heads"), hd = a.get_int("head_dim");
      if (heads <= 0 || hd <= 0 || hd % 2 != 0 || t[0].dim(-1) != heads * hd) {
        return invalid_argument(describe(n), ": input ", t[0].to_string(), " is not num_heads ", heads,
                                " x an even head_dim ", hd);
      }
      for (size_t i = 1; i < 3; ++i) {
        std::vector<int64_t> want = t[0].dims;
        want.back() = hd / 2;
        if (!is_float(t[i].dtype) || !dims_compatible(t[i].dims, want)) {
          return invalid_argument(describe(n), ": ", i == 1 ? "cos" : "sin", " table ", t[i].to_string(),
                                  " must be float shaped like the input with last dim head_dim / 2 = ", hd / 2);
        }
      }
      return t[0];
    }
    case Op::kFullAttention: {
      const int64_t h = a.get_int("num_heads"), hd = a.get_int("head_dim");
      if (h <= 0 || hd <= 0 || t[0].dim(-1) != h * hd || !dims_compatible(t[0].dims, t[1].dims) ||
          !dims_compatible(t[0].dims, t[2].dims) || t[0].rank() < 2) {
        return invalid_argument(describe(n), ": q ", t[0].to_string(), ", k ", t[1].to_string(), ", v ",
                                t[2].to_string(), " are not all [.., s, ", h, " heads x ", hd, "]");
      }
      if (a.has("segments")) {
        int64_t total = 0;
        for (int64_t len : a.get_ints("segments")) {
          if (len <= 0) return invalid_argument(describe(n), ": segment length ", len, " is not positive");
          total += len;
        }
        if (t[0].dim(-2) != kDynamic && total != t[0].dim(-2)) {
          return invalid_argument(describe(n), ": segments sum to ", total, " tokens, the input has ",
                                  t[0].dim(-2));
        }
      }
      QBC_RETURN_IF_ERROR(check_full_attention_quant(n, h * hd));
      return t[0];
    }
    case Op::kMergeRows: {
      const int64_t f = a.get_int("factor");
      if (f <= 0 || t[0].rank() < 2 || t[0].dim(-2) == kDynamic || t[0].dim(-2) % f != 0) {
        return invalid_argument(describe(n), ": factor ", f, " must be positive and divide the static rows of ",
                                t[0].to_string());
      }
      TensorType out = t[0];
      out.dims[out.dims.size() - 2] /= f;
      out.dims.back() *= f;
      return out;
    }
    case Op::kAvgPool: {
      const int64_t gw = a.get_int("grid_w"), k = a.get_int("kernel");
      const int64_t rows = t[0].rank() < 2 ? kDynamic : t[0].dim(-2);
      if (!is_float(t[0].dtype) || gw <= 0 || k <= 0 || rows == kDynamic || rows % gw != 0 ||
          gw % k != 0 || (rows / gw) % k != 0) {
        return invalid_argument(describe(n), ": kernel ", k, " must divide both sides of a grid ",
                                gw, " wide over the static float rows of ", t[0].to_string());
      }
      TensorType out = t[0];
      out.dims[out.dims.size() - 2] /= k * k;
      return out;
    }
  }
  return internal_error(describe(n), ": no type rule");
}

void Builder::weight(const std::string& name, TensorType type, const std::string& tensor, WeightRole role,
                     WeightSource source) {
  g_.add_weight(Weight{name, std::move(type), source, tensor, role});
}

StatusOr<ValueId> Builder::make(Op op, const std::string& name, std::vector<Operand> operands, Attrs attrs,
                                const std::string& origin) {
  Node n;
  n.op = op;
  n.name = name;
  n.operands = std::move(operands);
  n.attrs = std::move(attrs);
  n.origin = origin;
  n.block = block_;
  n.part = part_;
  if (g_.find(name) >= 0) return invalid_argument("node name '", name, "' is used twice");
  QBC_ASSIGN_OR_RETURN(n.type, infer_type(g_, n));
  return g_.append(std::move(n));
}

StatusOr<ValueId> Builder::input(const std::string& name, TensorType type) {
  Node n;
  n.op = Op::kInput;
  n.name = name;
  n.type = std::move(type);
  n.block = -1;
  n.part = Part::kBody;
  if (g_.find(name) >= 0) return invalid_argument("node name '", name, "' is used twice");
  return g_.append(std::move(n));
}

StatusOr<ValueId> Builder::rms_norm(const std::string& name, ValueId x, const std::string& weight, double eps,
                                    bool unit_offset, int64_t group, const std::string& origin) {
  Attrs a;
  a.set("eps", eps);
  a.set("unit_offset", int64_t{unit_offset ? 1 : 0});
  a.set("group", group);
  return make(Op::kRmsNorm, name, {Operand::of(x), Operand::of_weight(weight)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::layer_norm(const std::string& name, ValueId x, const std::string& weight,
                                      const std::string& bias, double eps, const std::string& origin) {
  Attrs a;
  a.set("eps", eps);
  std::vector<Operand> ops = {Operand::of(x), Operand::of_weight(weight)};
  if (!bias.empty()) ops.push_back(Operand::of_weight(bias));
  return make(Op::kLayerNorm, name, std::move(ops), std::move(a), origin);
}

StatusOr<ValueId> Builder::linear(const std::string& name, ValueId x, const std::string& weight,
                                  const std::string& bias, const std::string& origin) {
  std::vector<Operand> ops = {Operand::of(x), Operand::of_weight(weight)};
  if (!bias.empty()) ops.push_back(Operand::of_weight(bias));
  return make(Op::kLinear, name, std::move(ops), Attrs(), origin);
}

StatusOr<ValueId> Builder::slice(const std::string& name, ValueId x, int64_t start, int64_t end,
                                 const std::string& origin) {
  Attrs a;
  a.set("start", start);
  a.set("end", end);
  return make(Op::kSlice, name, {Operand::of(x)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::rope(const std::string& name, ValueId x, ValueId positions, const numerics::Rope& p,
                                const std::string& origin) {
  Attrs a;
  a.set("num_heads", p.heads);
  a.set("head_dim", p.head_dim);
  a.set("rotary_dim", p.rotary_dim);
  a.set("inv_freq", p.inv_freq);
  a.set("attention_factor", p.attention_factor);
  a.set("theta", p.theta);
  if (p.dynamic_factor > 0) a.set("dynamic_factor", p.dynamic_factor);
  if (p.original_max_positions > 0) a.set("original_max_positions", p.original_max_positions);
  if (!p.long_inv_freq.empty()) a.set("long_inv_freq", p.long_inv_freq);
  return make(Op::kRope, name, {Operand::of(x), Operand::of(positions)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::attention(const std::string& name, ValueId q, ValueId k, ValueId v,
                                     const AttentionParams& p, const std::string& origin) {
  Attrs a;
  a.set("num_heads", p.num_heads);
  a.set("num_kv_heads", p.num_kv_heads);
  a.set("head_dim", p.head_dim);
  a.set("scale", p.scale);
  a.set("softcap", p.softcap);
  a.set("window", p.window);
  a.set("max_cache", p.max_cache);
  return make(Op::kAttention, name, {Operand::of(q), Operand::of(k), Operand::of(v)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::gated_act(const std::string& name, ValueId gate, ValueId up, const std::string& act,
                                     const std::string& origin) {
  Attrs a;
  a.set("act", act);
  return make(Op::kGatedAct, name, {Operand::of(gate), Operand::of(up)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::add(const std::string& name, ValueId x, ValueId y, const std::string& origin) {
  return make(Op::kAdd, name, {Operand::of(x), Operand::of(y)}, Attrs(), origin);
}

StatusOr<ValueId> Builder::scale(const std::string& name, ValueId x, double factor, const std::string& origin) {
  Attrs a;
  a.set("factor", factor);
  return make(Op::kScale, name, {Operand::of(x)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::softcap(const std::string& name, ValueId x, double cap, const std::string& origin) {
  Attrs a;
  a.set("cap", cap);
  return make(Op::kSoftcap, name, {Operand::of(x)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::gelu(const std::string& name, ValueId x, const std::string& origin,
                                bool quick) {
  Attrs a;
  if (quick) a.set("approx", std::string("quick"));
  return make(Op::kGelu, name, {Operand::of(x)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::rope_table(const std::string& name, ValueId x, ValueId cos, ValueId sin,
                                      int64_t num_heads, int64_t head_dim, const std::string& origin) {
  Attrs a;
  a.set("num_heads", num_heads);
  a.set("head_dim", head_dim);
  return make(Op::kRopeTable, name, {Operand::of(x), Operand::of(cos), Operand::of(sin)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::full_attention(const std::string& name, ValueId q, ValueId k, ValueId v,
                                          int64_t num_heads, int64_t head_dim, double scale,
                                          const std::vector<int64_t>& segments, const std::string& origin) {
  Attrs a;
  a.set("num_heads", num_heads);
  a.set("head_dim", head_dim);
  a.set("scale", scale);
  if (!segments.empty()) a.set("segments", segments);
  return make(Op::kFullAttention, name, {Operand::of(q), Operand::of(k), Operand::of(v)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::gelu_approx(const std::string& name, ValueId x, const std::string& approx,
                                       const std::string& origin) {
  Attrs a;
  if (!approx.empty()) a.set("approx", approx);
  return make(Op::kGelu, name, {Operand::of(x)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::avg_pool(const std::string& name, ValueId x, int64_t grid_w, int64_t kernel,
                                    const std::string& origin) {
  Attrs a;
  a.set("grid_w", grid_w);
  a.set("kernel", kernel);
  return make(Op::kAvgPool, name, {Operand::of(x)}, std::move(a), origin);
}

StatusOr<ValueId> Builder::merge_rows(const std::string& name, ValueId x, int64_t factor, const std::string& origin) {
  Attrs a;
  a.set("factor", factor);
  return make(Op::kMergeRows, name, {Operand::of(x)}, std::move(a), origin);
}

}  // namespace qbc::ir
