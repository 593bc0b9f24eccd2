// VitLayers: the encoder stack CLIP and SigLIP towers share (vit_layers.h).
#include "vit_layers.h"

#include <cmath>
#include <utility>

namespace qbc::frontend {
namespace {

ir::TensorType f32(std::vector<int64_t> dims) {
  return ir::TensorType{ir::DType::kF32, std::move(dims)};
}

}  // namespace

Status check_vit_tower(const VisionConfig& vc, int64_t group, const char* group_key) {
  const std::string& act = vc.hidden_act;
  if (act != "gelu_pytorch_tanh" && act != "gelu_new" && act != "gelu" && act != "quick_gelu") {
    return unimplemented(vc.model_type, " vision_config.hidden_act '", act,
                         "' (gelu_pytorch_tanh, gelu_new, gelu and quick_gelu are built)");
  }
  const int64_t side = vc.patch_size > 0 ? vc.tower_size() / vc.patch_size : 0;
  if (vc.heads <= 0 || vc.width % vc.heads != 0 || vc.text_hidden <= 0 || vc.ffn <= 0 ||
      group <= 0 || side <= 0 || side % group != 0) {
    return invalid_argument(vc.model_type, " vision_config: hidden_size ", vc.width,
                            ", num_attention_heads ", vc.heads, ", intermediate_size ", vc.ffn,
                            ", text hidden_size ", vc.text_hidden, ", ", group_key, " ", group,
                            " over a patch grid ", side, " wide");
  }
  return ok_status();
}

std::string vit_gelu_approx(const std::string& hidden_act) {
  if (hidden_act == "gelu") return "";
  if (hidden_act == "quick_gelu") return "quick";
  return "tanh";
}

VitLayers::VitLayers(const VisionConfig& vc, std::string tower, ir::Builder& b)
    : vc_(vc), tower_(std::move(tower)), b_(b), head_dim_(vc.width / vc.heads) {}

StatusOr<ir::ValueId> VitLayers::layers(ir::ValueId x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    b_.set_block(static_cast<int>(i));
    QBC_ASSIGN_OR_RETURN(x, layer(i, x));
  }
  b_.set_block(-1);
  return x;
}

StatusOr<ir::ValueId> VitLayers::norm(const std::string& name, ir::ValueId x,
                                      const std::string& hf) {
  b_.weight(name + ".weight", f32({vc_.width}), hf + ".weight");
  b_.weight(name + ".bias", f32({vc_.width}), hf + ".bias");
  return b_.layer_norm(name, x, name + ".weight", name + ".bias", vc_.norm_eps, hf);
}

StatusOr<ir::ValueId> VitLayers::linear(const std::string& name, ir::ValueId x,
                                        const std::string& hf, int64_t out, int64_t in, bool bias) {
  b_.weight(name + ".weight", f32({out, in}), hf + ".weight");
  if (bias) b_.weight(name + ".bias", f32({out}), hf + ".bias");
  return b_.linear(name, x, name + ".weight", bias ? name + ".bias" : "", hf);
}

StatusOr<ir::ValueId> VitLayers::layer(int64_t i, ir::ValueId x) {
  using ir::ValueId;
  const std::string p = "vis.blk." + std::to_string(i) + ".";
  const std::string hf = tower_ + "encoder.layers." + std::to_string(i) + ".";
  const int64_t w = vc_.width;
  QBC_ASSIGN_OR_RETURN(ValueId h, norm(p + "norm1", x, hf + "layer_norm1"));
  QBC_ASSIGN_OR_RETURN(ValueId q, linear(p + "attn.q", h, hf + "self_attn.q_proj", w, w, true));
  QBC_ASSIGN_OR_RETURN(ValueId k, linear(p + "attn.k", h, hf + "self_attn.k_proj", w, w, true));
  QBC_ASSIGN_OR_RETURN(ValueId v, linear(p + "attn.v", h, hf + "self_attn.v_proj", w, w, true));
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  QBC_ASSIGN_OR_RETURN(ValueId a, b_.full_attention(p + "attn.attention", q, k, v, vc_.heads,
                                                    head_dim_, scale, {}, hf + "self_attn"));
  QBC_ASSIGN_OR_RETURN(a, linear(p + "attn.out", a, hf + "self_attn.out_proj", w, w, true));
  QBC_ASSIGN_OR_RETURN(x, b_.add(p + "attn_residual", x, a, hf));
  QBC_ASSIGN_OR_RETURN(h, norm(p + "norm2", x, hf + "layer_norm2"));
  QBC_ASSIGN_OR_RETURN(h, linear(p + "mlp.fc1", h, hf + "mlp.fc1", vc_.ffn, w, true));
  QBC_ASSIGN_OR_RETURN(
      h, b_.gelu_approx(p + "mlp.act", h, vit_gelu_approx(vc_.hidden_act), hf + "mlp"));
  QBC_ASSIGN_OR_RETURN(h, linear(p + "mlp.fc2", h, hf + "mlp.fc2", w, vc_.ffn, true));
  return b_.add(p + "ffn_residual", x, h, hf);
}

}  // namespace qbc::frontend
