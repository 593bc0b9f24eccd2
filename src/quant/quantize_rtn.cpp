// quantize-rtn: linear -> qlinear with RTN per-output-channel weights and a
// calibrated static input scale; attention -> quantized KV cache.
//   %y = linear(%x, @w) : f32[?,?,64]
//   ==> %y = qlinear(%x, @y.wq, @y.wscale) {in_bits = 8, in_scale = 0.0123, out_fp16 = 1, w_bits =
//   8}
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "full_attention_quant.h"
#include "qbc/ir/phase_image.h"
#include "qbc/numerics/attention.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/quantizer.h"
#include "qbc/quant/gptq.h"
#include "qbc/quant/key_ranges.h"
#include "qbc/quant/quantize.h"
#include "qbc/tensorfile/safetensors_writer.h"

namespace qbc::quant {
namespace {

bool matches_any(const google::protobuf::RepeatedPtrField<std::string>& globs,
                 const std::string& name) {
  for (const std::string& g : globs) {
    if (fnmatch(g.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

// The projection a node name belongs to ("blk.3.attn.q_proj" -> query).
std::string projection(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has(".attn.q_proj")) return "query";
  if (has(".attn.k_proj")) return "key";
  if (has(".attn.v_proj")) return "value";
  if (has(".attn.qkv_proj")) return "qkv";
  if (has(".attn.o_proj")) return "output";
  if (has(".ffn.")) return "ffn";
  return "other";
}

/// `x` rounded to the fp32 a node's float attribute is used as.
double fp32(double x) { return static_cast<double>(static_cast<float>(x)); }

/// Midpoint of channel i's calibrated [min, max], rounded to fp32.
double channel_midpoint(const TensorStats& s, size_t i) {
  if (s.channel_min.size() <= i || !(s.channel_min[i] <= s.channel_max[i])) return 0.0;
  return fp32(0.5 *
              (static_cast<double>(s.channel_min[i]) + static_cast<double>(s.channel_max[i])));
}

/// Largest |x - offset| channel i reached in calibration.
double channel_reach(const TensorStats& s, size_t i, double offset) {
  if (s.channel_min.size() <= i || !(s.channel_min[i] <= s.channel_max[i])) {
    return static_cast<double>(s.channel_absmax[i]);
  }
  return std::max(std::fabs(s.channel_max[i] - offset), std::fabs(s.channel_min[i] - offset));
}

/// An i8 sidecar tensor holding `codes`.
tensorfile::TensorToWrite int8_tensor(const std::string& name, std::vector<int64_t> shape,
                                      const std::vector<int8_t>& codes) {
  tensorfile::TensorToWrite t;
  t.name = name;
  t.dtype = tensorfile::DType::kI8;
  t.shape = std::move(shape);
  t.data.assign(reinterpret_cast<const uint8_t*>(codes.data()),
                reinterpret_cast<const uint8_t*>(codes.data()) + codes.size());
  return t;
}

/// The static asymmetric input quantizer of the calibrated range [min x, max x]
/// (widened to hold 0, and clipped to ±`clip`, the observer's symmetric range for
/// calibration.mode 1 / 2; docs/numerics.md).
numerics::AffineParams static_affine(const TensorStats& s, float clip, int bits) {
  double lo = 0, hi = 0;
  for (size_t i = 0; i < s.channel_min.size() && i < s.channel_max.size(); ++i) {
    if (!(s.channel_min[i] <= s.channel_max[i])) continue;  // a channel never observed
    lo = std::min(lo, static_cast<double>(s.channel_min[i]));
    hi = std::max(hi, static_cast<double>(s.channel_max[i]));
  }
  lo = std::max(lo, -static_cast<double>(clip));
  hi = std::min(hi, static_cast<double>(clip));
  return numerics::affine_params(hi - lo, -lo, bits);
}

/// Whether every scale is an fp16 value (the compact grouped image can hold it exactly).
bool fp16_values(const std::vector<float>& scales) {
  return std::all_of(scales.begin(), scales.end(),
                     [](float s) { return numerics::round_fp16(s) == s; });
}

/// The quantized KV cache's scales and offsets of one attention node.
struct KvScales {
  std::vector<double> q_scale, k_scale, v_scale, k_offset, v_offset;
  std::vector<double> k_rot_offset;  // empty: none
  /// Scales 1 and offsets 0 of the right lengths: a graph's shape without its statistics.
  static KvScales placeholders(const ir::Node& n) {
    const size_t heads = static_cast<size_t>(n.attrs.get_int("num_heads"));
    const size_t width =
        static_cast<size_t>(n.attrs.get_int("num_kv_heads") * n.attrs.get_int("head_dim"));
    return KvScales{std::vector<double>(heads, 1.0), std::vector<double>(width, 1.0),
                    std::vector<double>(width, 1.0), std::vector<double>(width, 0.0),
                    std::vector<double>(width, 0.0), {}};
  }
};

/// Static K scales and offsets for the Hadamard-rotated keys (qk_hadamard): per KV head
/// the offsets rotated like the keys (still softmax-free), one scale for the head (the
/// rotation mixes its channels; the per-token multiplier sets the actual step), and Q's
/// static scale bounded by max|Hq|_c <= sum_c max|q_c| / sqrt(n) over each rotated block of
/// n channels (the head, or each key group of `block` channels: bit.kvCache.keyGroup).
void rotate_key_scales(KvScales& s, const TensorStats& q, int64_t kv_heads, int64_t hd,
                       int64_t block) {
  const int64_t n = block > 0 ? block : hd;
  const int64_t group = static_cast<int64_t>(s.q_scale.size()) / kv_heads;
  std::vector<double> head_scale(static_cast<size_t>(kv_heads), 0.0);
  for (int64_t h = 0; h < kv_heads; ++h) {
    double* o = s.k_offset.data() + h * hd;
    for (int64_t b = 0; b < hd; b += n) numerics::hadamard_inplace(o + b, n);
    for (int64_t c = 0; c < hd; ++c) {
      o[c] = fp32(o[c]);
      head_scale[static_cast<size_t>(h)] =
          std::max(head_scale[static_cast<size_t>(h)], s.k_scale[static_cast<size_t>(h * hd + c)]);
    }
    for (int64_t c = 0; c < hd; ++c)
      s.k_scale[static_cast<size_t>(h * hd + c)] = head_scale[static_cast<size_t>(h)];
  }
  for (size_t h = 0; h < s.q_scale.size(); ++h) {
    double l1 = 0;
    for (int64_t b = 0; b < hd; b += n) {
      double lb = 0;
      for (int64_t c = b; c < b + n; ++c)
        lb += static_cast<double>(
            q.channel_absmax[h * static_cast<size_t>(hd) + static_cast<size_t>(c)]);
      l1 = std::max(l1, lb);
    }
    const double reach =
        l1 / std::sqrt(static_cast<double>(n)) * head_scale[h / static_cast<size_t>(group)];
    s.q_scale[h] = std::max(reach / static_cast<double>(numerics::quant_max(8)), 1e-8);
  }
}

/// Writes the quantized-KV attributes (docs/numerics.md) on attention node `n`.
void set_kv_attrs(ir::Node& n, const config::CompileOptions& options, bool per_token, KvScales s) {
  const bool p16 = matches_any(options.bit().layer_overrides().activation16_bits(), n.name);
  n.attrs.set("k_bits", int64_t{options.bit().kv_cache().key()});
  n.attrs.set("v_bits", int64_t{options.bit().kv_cache().value()});
  n.attrs.set("p_bits", int64_t{p16 ? 16 : 8});
  n.attrs.set("q_scale", std::move(s.q_scale));
  if (per_token) n.attrs.set("q_dynamic", int64_t{1});
  n.attrs.set("k_scale", std::move(s.k_scale));
  n.attrs.set("v_scale", std::move(s.v_scale));
  n.attrs.set("k_offset", std::move(s.k_offset));
  n.attrs.set("v_offset", std::move(s.v_offset));
  if (!s.k_rot_offset.empty()) n.attrs.set("k_rot_offset", std::move(s.k_rot_offset));
  if (options.bit().kv_cache().key_token_scale()) n.attrs.set("k_token_scale", int64_t{1});
  if (options.bit().kv_cache().key_hadamard()) n.attrs.set("qk_hadamard", int64_t{1});
  if (options.bit().kv_cache().key_group() != 0)
    n.attrs.set("k_group", int64_t{options.bit().kv_cache().key_group()});
  if (options.bit().kv_cache().key_asymmetric()) n.attrs.set("k_asym", int64_t{1});
  if (options.bit().kv_cache().value_token_scale()) n.attrs.set("v_token_scale", int64_t{1});
}

/// `tensors` to `sink` when given, else to r.sidecar.
Status write_tensors(std::vector<tensorfile::TensorToWrite> tensors, const TensorSink& sink,
                     QuantizeResult& r) {
  for (tensorfile::TensorToWrite& t : tensors) {
    if (sink) {
      QBC_RETURN_IF_ERROR(sink(std::move(t)));
    } else {
      r.sidecar.push_back(std::move(t));
    }
  }
  return ok_status();
}

/// The integers of linear `name`'s second image `s` [rows, cols]: the phaseImages pass's
/// (in `second`), which it rounded before any pass replaced the float weights; else round to
/// nearest of the float weights `w` into `*rounded`, which are still the model's only when no
/// pass chose the main image (`chosen` null).
StatusOr<const FixedWeights*> second_image_codes(
    const std::string& name, const SecondImage& s, const FixedWeightMap* second,
    const FixedWeights* chosen, const std::vector<float>& w, int64_t rows, int64_t cols,
    const config::CompileOptions& options, FixedWeights* rounded) {
  if (second != nullptr) {
    const auto it = second->find(name);
    if (it != second->end()) return &it->second;
  }
  if (chosen != nullptr) {
    return failed_precondition(
        "node '", name, "': no ", ir::image_phase_name(s.phase),
        " image was rounded before a pass fixed its weights: the phaseImages pass must run "
        "before hessianQuant replaces them");
  }
  StatusOr<FixedWeights> rq = round_second_image(w, rows, cols, s, options);
  if (!rq.ok()) return rq.status().with_context("node '", name, "', its second image");
  *rounded = std::move(rq).value();
  return static_cast<const FixedWeights*>(rounded);
}

/// Writes linear `n`'s second image `s` [rows, cols]: the integers `q` (null: shapes only,
/// the weights are declared and no tensor is written) as weights NAME.<phase>.wq / .wscale /
/// .wzero, and the phase_* attributes (qbc/ir/phase_image.h).
Status add_second_image(ir::Node& n, ir::Graph& out, const SecondImage& s, const FixedWeights* q,
                        int64_t rows, int64_t cols, const config::CompileOptions& options,
                        const TensorSink& sink, QuantizeResult& r) {
  const int64_t groups = s.group > 0 ? (cols + s.group - 1) / s.group : 1;
  const std::vector<int64_t> scale_shape =
      s.group > 0 ? std::vector<int64_t>{rows, groups} : std::vector<int64_t>{rows};
  const bool zero = options.bit().weight_zero_point();
  const std::string base = n.name + "." + ir::image_phase_name(s.phase);
  const std::string wq = base + ".wq", ws = base + ".wscale", wz = base + ".wzero";
  // The compact image when every scale is an fp16 value; shapes only (no scales yet) as
  // compile will make it, like the main image's placeholder scales.
  bool f16 = numerics::fp16_weight_scales(s.bits, s.group);
  if (q != nullptr) {
    if (q->bits != s.bits || q->codes.size() != static_cast<size_t>(rows * cols) ||
        q->scales.size() != static_cast<size_t>(rows * groups) ||
        q->zeros.size() != (zero ? q->scales.size() : 0))
      return internal_error("node '", n.name, "': its ", ir::image_phase_name(s.phase),
                            " image of ", q->bits, " bits with ", q->codes.size(), " codes and ",
                            q->scales.size(), " scales does not match ", s.bits, "-bit [", rows,
                            ", ", cols, "] in ", groups, " scales a row");
    f16 = f16 && fp16_values(q->scales);
    std::vector<tensorfile::TensorToWrite> tensors;
    tensors.push_back(int8_tensor(wq, {rows, cols}, q->codes));
    tensors.push_back(tensorfile::make_tensor(ws, tensorfile::DType::kF32, scale_shape, q->scales));
    if (zero) tensors.push_back(int8_tensor(wz, scale_shape, q->zeros));
    QBC_RETURN_IF_ERROR(write_tensors(std::move(tensors), sink, r));
  }
  const ir::DType code_type = s.bits == 4 ? ir::DType::kI4 : ir::DType::kI8;
  out.add_weight(ir::Weight{wq, ir::TensorType{code_type, {rows, cols}}, ir::WeightSource::kSidecar,
                            wq, ir::WeightRole::kParameter});
  out.add_weight(ir::Weight{ws, ir::TensorType{ir::DType::kF32, scale_shape},
                            ir::WeightSource::kSidecar, ws, ir::WeightRole::kParameter});
  n.attrs.set("phase_image", std::string(ir::image_phase_name(s.phase)));
  n.attrs.set("phase_wq", wq);
  n.attrs.set("phase_wscale", ws);
  n.attrs.set("phase_w_bits", int64_t{s.bits});
  if (s.group > 0) n.attrs.set("phase_w_group", s.group);
  if (zero) {
    out.add_weight(ir::Weight{wz, ir::TensorType{code_type, scale_shape},
                              ir::WeightSource::kSidecar, wz, ir::WeightRole::kParameter});
    n.attrs.set("phase_wzero", wz);
    n.attrs.set("phase_w_zero", int64_t{1});
  }
  if (f16) n.attrs.set("phase_w_scale_f16", int64_t{1});
  ++r.second_images;
  return ok_status();
}

}  // namespace

std::optional<PhaseWeightKeys> phase_weight_keys(const config::CompileOptions& options) {
  const auto& b = options.bit();
  if (b.prefill().weight() != 0) return PhaseWeightKeys{ir::ImagePhase::kPrefill, &b.prefill()};
  if (b.decode().weight() != 0) return PhaseWeightKeys{ir::ImagePhase::kDecode, &b.decode()};
  return std::nullopt;
}

std::optional<SecondImage> second_image(const ir::Node& n, int bits, int64_t cols,
                                        const config::CompileOptions& options,
                                        const RtnRules& rules) {
  const std::optional<PhaseWeightKeys> pk = phase_weight_keys(options);
  if (!pk || n.part != ir::Part::kBody || n.block < 0 || bits == 16) return std::nullopt;
  const auto& b = options.bit();
  const config::PhaseWeightBits& p = *pk->keys;
  SecondImage s;
  s.phase = pk->phase;
  s.bits = matches_any(b.layer_overrides().weight8_bits(), n.name) ? 8 : p.weight();
  const int64_t g = p.weight_group_size() < 0 ? b.weight_group_size() : p.weight_group_size();
  s.group = g > 0 && g < cols ? g : 0;
  if (rules.per_channel_when_uneven && s.group > 0 && cols % s.group != 0) s.group = 0;
  if (s.bits == bits) return std::nullopt;
  return s;
}

StatusOr<FixedWeights> round_second_image(const std::vector<float>& w, int64_t rows, int64_t cols,
                                          const SecondImage& s,
                                          const config::CompileOptions& options) {
  GptqOptions o;
  o.bits = s.bits;
  o.group_size = s.group;
  o.zero_point = options.bit().weight_zero_point();
  o.num_threads = 0;  // rows in parallel; the result does not depend on the thread count
  QBC_ASSIGN_OR_RETURN(GptqResult r, rtn_quantize(w, rows, cols, o));
  FixedWeights f;
  f.bits = s.bits;
  f.codes = std::move(r.codes);
  f.scales = std::move(r.scales);
  f.zeros = std::move(r.zeros);
  return f;
}

int64_t weight_group(const config::CompileOptions& options, int64_t in) {
  const int64_t g = options.bit().weight_group_size();
  return g > 0 && g < in ? g : 0;  // a group as wide as the row is the per-channel rule
}

LinearBits linear_bits(const std::string& node_name, bool head,
                       const config::CompileOptions& options) {
  const auto& w = options.bit().transformer().weight();
  const auto& a = options.bit().transformer().activation();
  LinearBits b;
  const std::string p = head ? "head" : projection(node_name);
  if (p == "query")
    b = {w.query(), a.query()};
  else if (p == "key")
    b = {w.key(), a.key()};
  else if (p == "value")
    b = {w.value(), a.value()};
  else if (p == "qkv")
    b = {std::max({w.query(), w.key(), w.value()}), std::max({a.query(), a.key(), a.value()})};
  else if (p == "output")
    b = {w.output(), a.output()};
  else if (p == "ffn")
    b = {w.ffn(), a.ffn()};
  else if (p == "head")
    b = {w.head(), a.head()};
  const auto& lo = options.bit().layer_overrides();
  if (matches_any(lo.weight8_bits(), node_name)) b.weight = 8;
  if (matches_any(lo.weight16_bits(), node_name)) b.weight = 16;
  if (matches_any(lo.activation16_bits(), node_name)) b.activation = 16;
  return b;
}

Status check_supported(const config::CompileOptions& options) {
  const auto& c = options.calibration();
  if (c.output() != 0) {
    return unimplemented("calibration.output ", c.output(),
                         ": only per-layer activation scales (0) are implemented");
  }
  return ok_status();
}

StatusOr<QuantizeResult> quantize_rtn(const ir::Graph& g, const CalibStats& stats,
                                      const ir::WeightReader& weights,
                                      const config::CompileOptions& options, const TensorSink& sink,
                                      const FixedWeightMap* fixed, const RtnRules& rules,
                                      const FixedWeightMap* second) {
  QBC_RETURN_IF_ERROR(check_supported(options));
  QuantizeResult r;
  const config::ActivationScaling scaling = options.bit().activation_scaling();
  const bool per_token = scaling == config::ACTIVATION_SCALING_PER_TOKEN ||
                         scaling == config::ACTIVATION_SCALING_PER_TOKEN_ASYMMETRIC;
  const bool asym_inputs = options.calibration().method() >= 2 ||
                           scaling == config::ACTIVATION_SCALING_PER_TOKEN_ASYMMETRIC;
  // A weight source without values (shape_only): the same nodes, attributes and weights,
  // with placeholder scales (1) and offsets (0), no statistics read, no tensors written.
  const bool shapes = !weights;
  ir::Graph& out = r.graph;
  out = g;
  std::vector<float> w;
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(out.nodes().size()); ++id) {
    ir::Node& n = out.mutable_node(id);
    if (n.op == ir::Op::kLinear) {
      LinearBits bits = linear_bits(n.name, n.part == ir::Part::kHead, options);
      if (bits.weight == 16) {
        ++r.float_linears;
        continue;
      }
      const std::string& x_name = out.node(n.operands[0].value).name;
      auto st = stats.find(x_name);
      if (st == stats.end() && !shapes)
        return internal_error("no calibration statistics for '", x_name, "'");
      const float range =
          shapes ? 1.0f : activation_range(st->second, options.calibration(), bits.activation);
      const ir::Weight* wt = out.find_weight(n.operands[1].weight);
      const int64_t rows = wt->type.dims[0], cols = wt->type.dims[1];
      const FixedWeights* chosen = nullptr;
      if (fixed != nullptr) {
        auto it = fixed->find(n.name);
        if (it != fixed->end()) chosen = &it->second;
      }
      // Imported codes keep the checkpoint's width and groups (driver/imported_weights.h).
      if (chosen != nullptr && chosen->imported) bits.weight = chosen->bits;
      int64_t group = chosen != nullptr && chosen->imported
                          ? (chosen->group > 0 && chosen->group < cols ? chosen->group : 0)
                          : weight_group(options, cols);
      if (rules.per_channel_when_uneven && group > 0 && cols % group != 0) group = 0;
      const int64_t groups = group > 0 ? (cols + group - 1) / group : 1;
      std::vector<int8_t> q(shapes ? 0 : static_cast<size_t>(rows * cols));
      std::vector<float> scale(static_cast<size_t>(rows * groups));
      std::vector<int8_t> zero;  // empty: symmetric
      std::vector<float> mins;   // empty: no float offsets (only imported codes have them)
      if (shapes) {
        zero.resize(options.bit().weight_zero_point() ? scale.size() : 0);
      } else if (chosen !=
                 nullptr) {  // a pass (hessianQuant, searchWeightScale) chose the integers
        if (chosen->bits != bits.weight || chosen->codes.size() != q.size() ||
            chosen->scales.size() != scale.size()) {
          return internal_error("node '", n.name, "': weights fixed by a pass at ", chosen->bits,
                                " bits with ", chosen->codes.size(), " codes do not match ",
                                bits.weight, "-bit [", rows, ", ", cols, "]");
        }
        if (!chosen->zeros.empty() && chosen->zeros.size() != scale.size()) {
          return internal_error("node '", n.name, "': ", chosen->zeros.size(), " zero points for ",
                                scale.size(), " scales");
        }
        if (!chosen->mins.empty() && (chosen->mins.size() != scale.size() || group == 0)) {
          return internal_error("node '", n.name, "': ", chosen->mins.size(), " offsets for ",
                                scale.size(), " scales in groups of ", group);
        }
        q = chosen->codes;
        scale = chosen->scales;
        zero = chosen->zeros;
        mins = chosen->mins;
      } else {
        QBC_RETURN_IF_ERROR(weights(*wt, &w).with_context("node '", n.name, "'"));
      }
      if (chosen == nullptr &&
          !shapes) {  // round to nearest, scales by the rule of docs/numerics.md
        GptqOptions o;
        o.bits = bits.weight;
        o.group_size = group;
        o.zero_point = options.bit().weight_zero_point();
        o.num_threads = 0;  // rows in parallel; the result does not depend on the thread count
        StatusOr<GptqResult> rq = rtn_quantize(w, rows, cols, o);
        if (!rq.ok()) return rq.status().with_context("node '", n.name, "'");
        q = std::move(rq->codes);
        scale = std::move(rq->scales);
        zero = std::move(rq->zeros);
      }
      const std::vector<int64_t> scale_shape =
          group > 0 ? std::vector<int64_t>{rows, groups} : std::vector<int64_t>{rows};
      const std::string wq = n.name + ".wq", ws = n.name + ".wscale";
      const std::string wz = n.name + ".wzero", wm = n.name + ".wmin";
      std::vector<tensorfile::TensorToWrite> tensors;
      if (!shapes) {
        tensors.push_back(int8_tensor(wq, {rows, cols}, q));
        tensors.push_back(tensorfile::make_tensor(ws, tensorfile::DType::kF32, scale_shape, scale));
        if (!zero.empty()) tensors.push_back(int8_tensor(wz, scale_shape, zero));
        if (!mins.empty())
          tensors.push_back(
              tensorfile::make_tensor(wm, tensorfile::DType::kF32, scale_shape, mins));
      }
      QBC_RETURN_IF_ERROR(write_tensors(std::move(tensors), sink, r));
      const ir::DType code_type = bits.weight == 4 ? ir::DType::kI4 : ir::DType::kI8;
      out.add_weight(ir::Weight{wq, ir::TensorType{code_type, {rows, cols}},
                                ir::WeightSource::kSidecar, wq, ir::WeightRole::kParameter});
      out.add_weight(ir::Weight{ws, ir::TensorType{ir::DType::kF32, scale_shape},
                                ir::WeightSource::kSidecar, ws, ir::WeightRole::kParameter});
      const std::string old_weight = n.operands[1].weight;
      std::vector<ir::Operand> ops = {n.operands[0], ir::Operand::of_weight(wq),
                                      ir::Operand::of_weight(ws)};
      if (!zero.empty()) {
        out.add_weight(ir::Weight{wz, ir::TensorType{code_type, scale_shape},
                                  ir::WeightSource::kSidecar, wz, ir::WeightRole::kParameter});
        ops.push_back(ir::Operand::of_weight(wz));
      }
      if (!mins.empty()) {
        out.add_weight(ir::Weight{wm, ir::TensorType{ir::DType::kF32, scale_shape},
                                  ir::WeightSource::kSidecar, wm, ir::WeightRole::kParameter});
        ops.push_back(ir::Operand::of_weight(wm));
      }
      if (n.operands.size() == 3) ops.push_back(n.operands[2]);
      const std::optional<SecondImage> second_image_here =
          second_image(n, bits.weight, cols, options, rules);
      if (second_image_here && chosen != nullptr && chosen->imported) {
        return unimplemented("node '", n.name, "': bit.",
                             ir::image_phase_name(second_image_here->phase), ".weight ",
                             second_image_here->bits,
                             " on codes imported from a pre-quantized checkpoint; a second image "
                             "needs the float weights (compile from the float model)");
      }
      FixedWeights second_q;
      const FixedWeights* second_codes = nullptr;
      if (second_image_here && !shapes) {
        QBC_ASSIGN_OR_RETURN(second_codes,
                             second_image_codes(n.name, *second_image_here, second, chosen, w, rows,
                                                cols, options, &second_q));
      }
      n.op = ir::Op::kQLinear;
      n.operands = std::move(ops);
      n.attrs = ir::Attrs();
      n.attrs.set(
          "in_scale",
          shapes ? 1.0
                 : static_cast<double>(std::max(
                       range / static_cast<float>(numerics::quant_max(bits.activation)), 1e-8f)));
      n.attrs.set("in_bits", int64_t{bits.activation});
      if (per_token) n.attrs.set("in_dynamic", int64_t{1});
      if (asym_inputs) {  // calibration.method 2 / 3: a zero point per token, or a calibrated one
        n.attrs.set("in_asym", int64_t{1});
        if (!per_token) {
          const numerics::AffineParams a = shapes
                                               ? numerics::AffineParams{1.0f, 0}
                                               : static_affine(st->second, range, bits.activation);
          n.attrs.set("in_scale", static_cast<double>(a.scale));
          n.attrs.set("in_zero", int64_t{a.zero});
        }
      }
      n.attrs.set("w_bits", int64_t{bits.weight});
      if (group > 0) n.attrs.set("w_group", group);
      if (!zero.empty()) n.attrs.set("w_zero", int64_t{1});
      if (!mins.empty()) n.attrs.set("w_min", int64_t{1});
      if (numerics::fp16_weight_scales(bits.weight, group) && fp16_values(scale) &&
          fp16_values(mins))
        n.attrs.set("w_scale_f16", int64_t{1});
      n.attrs.set("out_fp16", int64_t{n.part == ir::Part::kHead ? 0 : 1});
      if (second_image_here) {
        QBC_RETURN_IF_ERROR(add_second_image(n, out, *second_image_here, second_codes, rows, cols,
                                             options, sink, r));
      }
      out.remove_weight(old_weight);
      ++r.quantized_linears;
    } else if (n.op == ir::Op::kFullAttention) {
      QBC_RETURN_IF_ERROR(set_full_attention_quant(n, out, shapes ? nullptr : &stats, options));
    } else if (n.op == ir::Op::kAttention && shapes) {
      set_kv_attrs(n, options, per_token, KvScales::placeholders(n));
    } else if (n.op == ir::Op::kAttention) {
      const int64_t heads = n.attrs.get_int("num_heads"), kvh = n.attrs.get_int("num_kv_heads");
      const int64_t hd = n.attrs.get_int("head_dim");
      const ir::Node& knode = out.node(n.operands[1].value);
      const int64_t rd = knode.op == ir::Op::kRope ? knode.attrs.get_int("rotary_dim") : 0;
      auto get = [&](int i) -> StatusOr<const TensorStats*> {
        const std::string& name = out.node(n.operands[static_cast<size_t>(i)].value).name;
        auto it = stats.find(name);
        if (it == stats.end()) return internal_error("no calibration statistics for '", name, "'");
        return &it->second;
      };
      QBC_ASSIGN_OR_RETURN(const TensorStats* qs, get(0));
      QBC_ASSIGN_OR_RETURN(const TensorStats* ks, get(1));
      QBC_ASSIGN_OR_RETURN(const TensorStats* vs, get(2));
      const int kb = options.bit().kv_cache().key(), vb = options.bit().kv_cache().value();
      const size_t kv_width = static_cast<size_t>(kvh * hd);
      // K offsets are centred unless the scores are soft-capped (see below).
      const bool k_centered = n.attrs.get_float("softcap") <= 0.0;
      // Key ranges over every position the cache serves (max_cache), derived from the
      // pre-RoPE statistics (key_ranges.h); calibration alone covers its own length only.
      std::vector<ChannelRange> k_range(kv_width);
      std::vector<double> k_rot_offset;  // rotating offsets (empty: none)
      if (knode.op == ir::Op::kRope) {
        const std::string& pre = out.node(knode.operands[0].value).name;
        auto it = stats.find(pre);
        if (it == stats.end()) return internal_error("no calibration statistics for '", pre, "'");
        if (options.bit().kv_cache().rotating_key_offsets()) {
          RotatingKeyOffsets ro =
              rotating_key_offsets(knode, it->second, n.attrs.get_int("max_cache"), k_centered);
          k_range = std::move(ro.ranges);
          if (ro.pairs > 0) k_rot_offset = std::move(ro.m);
        } else {
          k_range = rotated_key_ranges(knode, it->second, n.attrs.get_int("max_cache"));
        }
      } else {
        for (size_t i = 0; i < kv_width; ++i) k_range[i] = {ks->channel_min[i], ks->channel_max[i]};
      }
      // Offsets: the midpoint of each channel's range. A K offset shifts every key's score
      // by the same q.offset, which softmax cancels (not so under soft-capping, so it
      // stays 0 there); a V offset is added back after P.V.
      std::vector<double> k_offset(kv_width, 0.0), v_offset(kv_width, 0.0);
      for (size_t i = 0; i < kv_width; ++i) {
        if (k_centered) k_offset[i] = fp32(0.5 * (k_range[i].lo + k_range[i].hi));
        v_offset[i] = channel_midpoint(*vs, i);
      }
      auto k_reach = [&](size_t i) {
        return std::max(std::fabs(k_range[i].hi - k_offset[i]),
                        std::fabs(k_range[i].lo - k_offset[i]));
      };
      std::vector<double> k_scale(kv_width), v_scale(kv_width);
      for (int64_t h = 0; h < kvh; ++h) {
        for (int64_t c = 0; c < hd; ++c) {
          const size_t i = static_cast<size_t>(h * hd + c);
          // Rotary pairs (c, c + rd/2) share a K scale: RoPE moves energy between them.
          double range = k_reach(i);
          if (c < rd) {
            const size_t partner =
                static_cast<size_t>(h * hd + (c < rd / 2 ? c + rd / 2 : c - rd / 2));
            range = std::max(range, k_reach(partner));
          }
          k_scale[i] = std::max(range / static_cast<double>(numerics::quant_max(kb)), 1e-8);
          v_scale[i] = std::max(
              channel_reach(*vs, i, v_offset[i]) / static_cast<double>(numerics::quant_max(vb)),
              1e-8);
        }
      }
      // Q is multiplied by its KV head's K scales before its own 8-bit quantization.
      std::vector<double> q_scale(static_cast<size_t>(heads));
      const int64_t group = heads / kvh;
      for (int64_t h = 0; h < heads; ++h) {
        double m = 0;
        for (int64_t c = 0; c < hd; ++c) {
          m = std::max(m, static_cast<double>(qs->channel_absmax[static_cast<size_t>(h * hd + c)]) *
                              k_scale[static_cast<size_t>((h / group) * hd + c)]);
        }
        q_scale[static_cast<size_t>(h)] =
            std::max(m / static_cast<double>(numerics::quant_max(8)), 1e-8);
      }
      KvScales kv{std::move(q_scale),  std::move(k_scale),  std::move(v_scale),
                  std::move(k_offset), std::move(v_offset), std::move(k_rot_offset)};
      const auto& kvc = options.bit().kv_cache();
      if ((kvc.key_group() != 0 || kvc.key_asymmetric()) &&
          (!kvc.key_token_scale() || hd % std::max(kvc.key_group(), 1) != 0)) {
        return invalid_argument(n.name, ": bit.kvCache.keyGroup (", kvc.key_group(),
                                ") and keyAsymmetric need bit.kvCache.keyTokenScale and a group",
                                " dividing head_dim (", hd, ")");
      }
      if (kvc.key_asymmetric() && options.bit().kv_cache().key() != 4) {
        return invalid_argument(n.name, ": bit.kvCache.keyAsymmetric needs bit.kvCache.key 4 (its",
                                " zero point is an int16 in 1/256 steps of a 4-bit range)");
      }
      if (options.bit().kv_cache().key_hadamard()) {
        if (!options.bit().kv_cache().key_token_scale() || (hd & (hd - 1)) != 0) {
          return invalid_argument(n.name,
                                  ": bit.kvCache.keyHadamard needs bit.kvCache.keyTokenScale and",
                                  " a power-of-two head_dim (", hd, ")");
        }
        rotate_key_scales(kv, *qs, kvh, hd, kvc.key_group());
      }
      set_kv_attrs(n, options, per_token, std::move(kv));
    }
  }
  return r;
}

ir::WeightReader with_sidecar(ir::WeightReader base, const QuantizeResult& r) {
  return [base = std::move(base), &r](const ir::Weight& w, std::vector<float>* v) -> Status {
    for (const tensorfile::TensorToWrite& t : r.sidecar) {
      if (t.name != w.tensor) continue;
      v->clear();
      if (t.dtype == tensorfile::DType::kI8) {
        v->reserve(t.data.size());
        for (uint8_t b : t.data) v->push_back(static_cast<float>(static_cast<int8_t>(b)));
      } else if (t.dtype == tensorfile::DType::kF32) {
        v->resize(t.data.size() / sizeof(float));
        std::memcpy(v->data(), t.data.data(), t.data.size());
      } else {
        return internal_error("sidecar tensor '", t.name, "' of an unexpected dtype");
      }
      return ok_status();
    }
    return base(w, v);
  };
}

}  // namespace qbc::quant
