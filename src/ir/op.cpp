// Static op descriptions: arity from ops.def, attribute schemas here.
#include "qbc/ir/op.h"

#include <array>

namespace qbc::ir {
namespace {

using K = AttrKind;

std::vector<AttrSpec> attrs_of(Op op) {
  switch (op) {
    case Op::kInput: return {};
    case Op::kRmsNorm: return {{"eps", K::kFloat, true}, {"unit_offset", K::kInt, true}, {"group", K::kInt, true}};
    case Op::kLinear: return {};
    case Op::kQLinear:
      return {{"in_scale", K::kFloat, true}, {"in_bits", K::kInt, true}, {"w_bits", K::kInt, true},
              {"out_fp16", K::kInt, true},
              // 1: per-token dynamic input scale (docs/numerics.md); in_scale then only
              // records the calibrated static scale.
              {"in_dynamic", K::kInt, false},
              // 1: asymmetric input codes, x ≈ s_x·(q − z_x): per token (in_dynamic) or with
              // the calibrated zero point in_zero (static).
              {"in_asym", K::kInt, false}, {"in_zero", K::kInt, false},
              // > 0: one weight scale per group of this many input columns (the last group
              // may be shorter); wscale is then f32[out, ceil(in / w_group)].
              {"w_group", K::kInt, false},
              // 1: operand 3 is the integer zero point per scale, ŵ = s·(q − z); the bias
              // (if any) is then operand 4.
              {"w_zero", K::kInt, false},
              // 1 (with w_group > 0): the operand after the scale (and zero points) is a float
              // offset per scale, ŵ = s·(q − z) + m (GGUF Q4_1 / Q5_1 codes kept); the bias
              // (if any) follows it.
              {"w_min", K::kInt, false},
              // 1: every wscale value is an fp16 value (4- and 8-bit groups, docs/numerics.md
              // "Compact grouped weights"); the backend then stores the scales as fp16 and the
              // zero points as codes of the weights' width (packed 4-bit, or int8).
              {"w_scale_f16", K::kInt, false},
              // A second weight image for one phase's programs (qbc/ir/phase_image.h,
              // docs/quantization.md "Precision per phase"): phase_image "prefill" or
              // "decode" names the phase; phase_wq, phase_wscale and phase_wzero (with
              // phase_w_zero = 1) name its weights; phase_w_bits, phase_w_group and
              // phase_w_scale_f16 are its w_bits, w_group and w_scale_f16.
              {"phase_image", K::kString, false}, {"phase_wq", K::kString, false},
              {"phase_wscale", K::kString, false}, {"phase_wzero", K::kString, false},
              {"phase_w_bits", K::kInt, false}, {"phase_w_group", K::kInt, false},
              {"phase_w_zero", K::kInt, false}, {"phase_w_scale_f16", K::kInt, false}};
    case Op::kSlice: return {{"start", K::kInt, true}, {"end", K::kInt, true}};
    case Op::kRope:
      return {{"num_heads", K::kInt, true},        {"head_dim", K::kInt, true},
              {"rotary_dim", K::kInt, true},       {"inv_freq", K::kFloats, true},
              {"attention_factor", K::kFloat, true}, {"theta", K::kFloat, true},
              {"dynamic_factor", K::kFloat, false}, {"original_max_positions", K::kInt, false},
              {"long_inv_freq", K::kFloats, false}};
    case Op::kAttention:
      return {{"num_heads", K::kInt, true}, {"num_kv_heads", K::kInt, true}, {"head_dim", K::kInt, true},
              {"scale", K::kFloat, true},   {"softcap", K::kFloat, true},    {"window", K::kInt, true},
              {"max_cache", K::kInt, true},
              // Quantized KV cache (docs/numerics.md); all present or none.
              {"k_bits", K::kInt, false}, {"v_bits", K::kInt, false}, {"p_bits", K::kInt, false},
              {"q_scale", K::kFloats, false}, {"k_scale", K::kFloats, false}, {"v_scale", K::kFloats, false},
              // Optional zero offsets of the quantized K and V codes (docs/numerics.md).
              {"k_offset", K::kFloats, false}, {"v_offset", K::kFloats, false},
              // Rotating key offsets: pre-RoPE per-channel m; the cache stores k − rope(m)
              // and scores add q·rope(m) (docs/numerics.md).
              {"k_rot_offset", K::kFloats, false},
              // 1: per-(token, head) dynamic Q scale; q_scale then records the static one.
              {"q_dynamic", K::kInt, false},
              // 1: per-(token, KV head) key multipliers; 1: online Q·K Hadamard (docs/numerics.md).
              {"k_token_scale", K::kInt, false}, {"qk_hadamard", K::kInt, false},
              {"k_group", K::kInt, false}, {"k_asym", K::kInt, false}, {"v_token_scale", K::kInt, false}};
    case Op::kGatedAct: return {{"act", K::kString, true}};
    case Op::kAdd: return {};
    case Op::kScale: return {{"factor", K::kFloat, true}};
    case Op::kSoftcap: return {{"cap", K::kFloat, true}};
    case Op::kLayerNorm: return {{"eps", K::kFloat, true}};
    case Op::kGelu: return {{"approx", K::kString, false}};  // absent: erf; "quick": CLIP's quick_gelu; "tanh"
    case Op::kRopeTable: return {{"num_heads", K::kInt, true}, {"head_dim", K::kInt, true}};
    case Op::kFullAttention:
      return {{"num_heads", K::kInt, true}, {"head_dim", K::kInt, true}, {"scale", K::kFloat, true},
              // Block-diagonal mask: consecutive runs of this many tokens attend within their run
              // (Qwen2.5-VL window attention); absent = every token attends to every token.
              {"segments", K::kInts, false},
              // Quantized Q, K, V (docs/numerics.md "full_attention"); all present or none.
              {"k_bits", K::kInt, false}, {"v_bits", K::kInt, false}, {"p_bits", K::kInt, false},
              {"q_scale", K::kFloats, false}, {"k_scale", K::kFloats, false}, {"v_scale", K::kFloats, false},
              {"k_offset", K::kFloats, false}, {"v_offset", K::kFloats, false}};
    case Op::kMergeRows: return {{"factor", K::kInt, true}};
    case Op::kAvgPool: return {{"grid_w", K::kInt, true}, {"kernel", K::kInt, true}};
  }
  return {};
}

const std::array<OpInfo, kNumOps>& table() {
  static const std::array<OpInfo, kNumOps> t = [] {
    std::array<OpInfo, kNumOps> out{};
    int i = 0;
#define QBC_OP(e, text, in_min, in_max) \
  out[i] = OpInfo{Op::k##e, text, in_min, in_max, attrs_of(Op::k##e)};  \
  ++i;
#include "qbc/ir/ops.def"
#undef QBC_OP
    return out;
  }();
  return t;
}

static_assert(kNumOps == 17, "update op tables: attrs_of, infer_type, ref evaluator, docs/ir.md");

}  // namespace

const OpInfo& op_info(Op op) { return table()[static_cast<size_t>(op)]; }

std::optional<Op> op_from_name(std::string_view name) {
  for (const OpInfo& info : table()) {
    if (info.name == name) return info.op;
  }
  return std::nullopt;
}

}  // namespace qbc::ir
