// The shape of a quantized graph (see qbc/quant/shape_only.h). Mirrors the node rewrites of
// quantize_rtn.cpp: the attribute set and weight types, not the values.
#include "qbc/quant/shape_only.h"

#include "qbc/numerics/quantizer.h"
#include "qbc/quant/quantize.h"

namespace qbc::quant {

StatusOr<ir::Graph> shape_only(const ir::Graph& g, const config::CompileOptions& options) {
  QBC_RETURN_IF_ERROR(check_supported(options));
  const config::ActivationScaling scaling = options.bit().activation_scaling();
  const bool per_token = scaling == config::ACTIVATION_SCALING_PER_TOKEN ||
                         scaling == config::ACTIVATION_SCALING_PER_TOKEN_ASYMMETRIC;
  const bool asym_inputs = options.calibration().method() >= 2 ||
                           scaling == config::ACTIVATION_SCALING_PER_TOKEN_ASYMMETRIC;
  ir::Graph out = g;
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(out.nodes().size()); ++id) {
    ir::Node& n = out.mutable_node(id);
    if (n.op == ir::Op::kLinear) {
      const LinearBits bits = linear_bits(n.name, n.part == ir::Part::kHead, options);
      if (bits.weight == 16) continue;
      const ir::Weight* wt = out.find_weight(n.operands[1].weight);
      const int64_t rows = wt->type.dims[0], cols = wt->type.dims[1];
      const int64_t group = weight_group(options, cols);
      const int64_t groups = group > 0 ? (cols + group - 1) / group : 1;
      const std::vector<int64_t> scale_shape =
          group > 0 ? std::vector<int64_t>{rows, groups} : std::vector<int64_t>{rows};
      const ir::DType code_type = bits.weight == 4 ? ir::DType::kI4 : ir::DType::kI8;
      const std::string wq = n.name + ".wq", ws = n.name + ".wscale", wz = n.name + ".wzero";
      out.add_weight(ir::Weight{wq, ir::TensorType{code_type, {rows, cols}},
                                ir::WeightSource::kSidecar, wq, ir::WeightRole::kParameter});
      out.add_weight(ir::Weight{ws, ir::TensorType{ir::DType::kF32, scale_shape},
                                ir::WeightSource::kSidecar, ws, ir::WeightRole::kParameter});
      const std::string old_weight = n.operands[1].weight;
      std::vector<ir::Operand> ops = {n.operands[0], ir::Operand::of_weight(wq),
                                      ir::Operand::of_weight(ws)};
      const bool zero = options.bit().weight_zero_point();
      if (zero) {
        out.add_weight(ir::Weight{wz, ir::TensorType{code_type, scale_shape},
                                  ir::WeightSource::kSidecar, wz, ir::WeightRole::kParameter});
        ops.push_back(ir::Operand::of_weight(wz));
      }
      if (n.operands.size() == 3) ops.push_back(n.operands[2]);
      n.op = ir::Op::kQLinear;
      n.operands = std::move(ops);
      n.attrs = ir::Attrs();
      n.attrs.set("in_scale", 1.0);
      n.attrs.set("in_bits", int64_t{bits.activation});
      if (per_token) n.attrs.set("in_dynamic", int64_t{1});
      if (asym_inputs) {
        n.attrs.set("in_asym", int64_t{1});
        if (!per_token) n.attrs.set("in_zero", int64_t{0});
      }
      n.attrs.set("w_bits", int64_t{bits.weight});
      if (group > 0) n.attrs.set("w_group", group);
      if (zero) n.attrs.set("w_zero", int64_t{1});
      if (numerics::fp16_weight_scales(bits.weight, group)) n.attrs.set("w_scale_f16", int64_t{1});
      n.attrs.set("out_fp16", int64_t{n.part == ir::Part::kHead ? 0 : 1});
      out.remove_weight(old_weight);
    } else if (n.op == ir::Op::kAttention) {
      const int64_t heads = n.attrs.get_int("num_heads"), kvh = n.attrs.get_int("num_kv_heads");
      const size_t kv_width = static_cast<size_t>(kvh * n.attrs.get_int("head_dim"));
      n.attrs.set("k_bits", int64_t{options.bit().kv_cache().key()});
      n.attrs.set("v_bits", int64_t{options.bit().kv_cache().value()});
      n.attrs.set("p_bits", int64_t{8});
      n.attrs.set("q_scale", std::vector<double>(static_cast<size_t>(heads), 1.0));
      if (per_token) n.attrs.set("q_dynamic", int64_t{1});
      n.attrs.set("k_scale", std::vector<double>(kv_width, 1.0));
      n.attrs.set("v_scale", std::vector<double>(kv_width, 1.0));
      n.attrs.set("k_offset", std::vector<double>(kv_width, 0.0));
      n.attrs.set("v_offset", std::vector<double>(kv_width, 0.0));
    }
  }
  return out;
}

}  // namespace qbc::quant
