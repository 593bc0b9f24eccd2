// build_qwen_vision_graph: the Qwen2-VL and Qwen2.5-VL vision towers and patch mergers as an
// MBLT graph (qbc/frontend/qwen_vision.h has the picture), following HF's
// Qwen2VisionTransformerPretrainedModel and Qwen2_5_VisionTransformerPretrainedModel module by
// module: Qwen2-VL's blocks use LayerNorm (with bias) and an fc1/act/fc2 MLP and attend over
// the whole frame, Qwen2.5-VL's use RMSNorm, a SwiGLU MLP and windows. The Conv3d patch embedding,
// whose kernel equals its stride, is a linear over the flattened (channel, frame, y, x) patch: the
// checkpoint's [width, 3, tp, p, p] weight read row-major as [width, 3·tp·p²].
#include <algorithm>
#include <cmath>

#include "qbc/frontend/qwen_vision.h"
#include "qbc/ir/builder.h"
#include "vit_layers.h"

namespace qbc::frontend {
namespace {

using ir::DType;
using ir::TensorType;
using ir::ValueId;

// HF hard-codes eps=1e-6 in both towers' norms (Qwen2RMSNorm, nn.LayerNorm) and the merger's.
constexpr double kNormEps = 1e-6;
constexpr int64_t kChannels = 3;  // in_chans

TensorType f32(std::vector<int64_t> dims) { return TensorType{DType::kF32, std::move(dims)}; }

class VisionBuilder {
 public:
  VisionBuilder(const VisionConfig& vc, const QwenVisionLayout& layout, ir::Graph& g)
      : vc_(vc),
        layout_(layout),
        b_(g),
        hd_(vc.width / vc.heads),
        qwen2_(vc.tower == VisionTower::kQwen2Vit) {}

  StatusOr<ValueId> build() {
    const int64_t n = layout_.grid.patches();
    const int64_t patch = kChannels * vc_.temporal_patch_size * vc_.patch_size * vc_.patch_size;
    QBC_ASSIGN_OR_RETURN(ValueId x, b_.input("patches", f32({1, n, patch})));
    QBC_ASSIGN_OR_RETURN(cos_, b_.input("rope_cos", f32({1, n, hd_ / 2})));
    QBC_ASSIGN_OR_RETURN(sin_, b_.input("rope_sin", f32({1, n, hd_ / 2})));
    QBC_ASSIGN_OR_RETURN(
        x, linear("vis.patch_embed", x, "visual.patch_embed.proj", vc_.width, patch, false));
    for (int64_t i = 0; i < vc_.depth; ++i) {
      b_.set_block(static_cast<int>(i));
      QBC_ASSIGN_OR_RETURN(x, block(i, x));
    }
    b_.set_block(-1);
    b_.set_part(ir::Part::kHead);
    return merger(x);
  }

 private:
  StatusOr<ValueId> norm(const std::string& name, ValueId x, const std::string& hf) {
    b_.weight(name + ".weight", f32({vc_.width}), hf + ".weight");
    if (!qwen2_) return b_.rms_norm(name, x, name + ".weight", kNormEps, false, 0, hf);
    b_.weight(name + ".bias", f32({vc_.width}), hf + ".bias");
    return b_.layer_norm(name, x, name + ".weight", name + ".bias", kNormEps, hf);
  }

  StatusOr<ValueId> linear(const std::string& name, ValueId x, const std::string& hf, int64_t out,
                           int64_t in, bool bias) {
    b_.weight(name + ".weight", f32({out, in}), hf + ".weight");
    if (bias) b_.weight(name + ".bias", f32({out}), hf + ".bias");
    return b_.linear(name, x, name + ".weight", bias ? name + ".bias" : "", hf);
  }

  // Full attention in the fullatt blocks (one segment per frame), window attention elsewhere;
  // Qwen2-VL's blocks are all full.
  std::vector<int64_t> segments(int64_t i) const {
    const auto& full = vc_.full_attention_blocks;
    if (!qwen2_ && std::find(full.begin(), full.end(), i) == full.end())
      return layout_.window_tokens;
    if (layout_.grid.t == 1) return {};
    return std::vector<int64_t>(static_cast<size_t>(layout_.grid.t),
                                layout_.grid.h * layout_.grid.w);
  }

  StatusOr<ValueId> block(int64_t i, ValueId x) {
    const std::string p = "vis.blk." + std::to_string(i) + ".";
    const std::string hf = "visual.blocks." + std::to_string(i) + ".";
    const int64_t w = vc_.width;
    QBC_ASSIGN_OR_RETURN(ValueId h, norm(p + "norm1", x, hf + "norm1"));
    QBC_ASSIGN_OR_RETURN(ValueId qkv, linear(p + "attn.qkv", h, hf + "attn.qkv", 3 * w, w, true));
    QBC_ASSIGN_OR_RETURN(ValueId q, b_.slice(p + "attn.q", qkv, 0, w, hf + "attn.qkv"));
    QBC_ASSIGN_OR_RETURN(ValueId k, b_.slice(p + "attn.k", qkv, w, 2 * w, hf + "attn.qkv"));
    QBC_ASSIGN_OR_RETURN(ValueId v, b_.slice(p + "attn.v", qkv, 2 * w, 3 * w, hf + "attn.qkv"));
    QBC_ASSIGN_OR_RETURN(
        q, b_.rope_table(p + "attn.q_rope", q, cos_, sin_, vc_.heads, hd_, hf + "attn"));
    QBC_ASSIGN_OR_RETURN(
        k, b_.rope_table(p + "attn.k_rope", k, cos_, sin_, vc_.heads, hd_, hf + "attn"));
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd_));
    QBC_ASSIGN_OR_RETURN(ValueId a, b_.full_attention(p + "attn.attention", q, k, v, vc_.heads, hd_,
                                                      scale, segments(i), hf + "attn"));
    QBC_ASSIGN_OR_RETURN(a, linear(p + "attn.proj", a, hf + "attn.proj", w, w, true));
    QBC_ASSIGN_OR_RETURN(x, b_.add(p + "attn_residual", x, a, hf));
    QBC_ASSIGN_OR_RETURN(h, norm(p + "norm2", x, hf + "norm2"));
    QBC_ASSIGN_OR_RETURN(ValueId down, qwen2_ ? mlp(p, hf, h) : swiglu(p, hf, h));
    return b_.add(p + "ffn_residual", x, down, hf);
  }

  // Qwen2-VL's VisionMlp: fc2(act(fc1(x))), act = vision_config.hidden_act (quick_gelu).
  StatusOr<ValueId> mlp(const std::string& p, const std::string& hf, ValueId h) {
    const int64_t w = vc_.width;
    QBC_ASSIGN_OR_RETURN(h, linear(p + "mlp.fc1", h, hf + "mlp.fc1", vc_.ffn, w, true));
    QBC_ASSIGN_OR_RETURN(
        h, b_.gelu_approx(p + "mlp.act", h, vit_gelu_approx(vc_.hidden_act), hf + "mlp"));
    return linear(p + "mlp.fc2", h, hf + "mlp.fc2", w, vc_.ffn, true);
  }

  // Qwen2.5-VL's Qwen2_5_VLMLP: down(silu(gate(x)) · up(x)).
  StatusOr<ValueId> swiglu(const std::string& p, const std::string& hf, ValueId h) {
    const int64_t w = vc_.width;
    QBC_ASSIGN_OR_RETURN(ValueId gate,
                         linear(p + "mlp.gate_proj", h, hf + "mlp.gate_proj", vc_.ffn, w, true));
    QBC_ASSIGN_OR_RETURN(ValueId up,
                         linear(p + "mlp.up_proj", h, hf + "mlp.up_proj", vc_.ffn, w, true));
    QBC_ASSIGN_OR_RETURN(ValueId act, b_.gated_act(p + "mlp.act", gate, up, "silu", hf + "mlp"));
    return linear(p + "mlp.down_proj", act, hf + "mlp.down_proj", w, vc_.ffn, true);
  }

  StatusOr<ValueId> merger(ValueId x) {
    const int64_t unit = vc_.merge * vc_.merge, wide = vc_.width * unit;
    QBC_ASSIGN_OR_RETURN(x, norm("vis.merger.ln_q", x, "visual.merger.ln_q"));
    QBC_ASSIGN_OR_RETURN(x, b_.merge_rows("vis.merger.merge", x, unit, "visual.merger"));
    QBC_ASSIGN_OR_RETURN(x, linear("vis.merger.fc1", x, "visual.merger.mlp.0", wide, wide, true));
    QBC_ASSIGN_OR_RETURN(x, b_.gelu("vis.merger.gelu", x, "visual.merger.mlp.1"));
    return linear("image_features", x, "visual.merger.mlp.2", vc_.text_hidden, wide, true);
  }

  const VisionConfig& vc_;
  const QwenVisionLayout& layout_;
  ir::Builder b_;
  int64_t hd_;
  bool qwen2_;
  ValueId cos_ = -1, sin_ = -1;
};

}  // namespace

StatusOr<ir::Graph> build_qwen_vision_graph(const VisionConfig& vc,
                                            const QwenVisionLayout& layout) {
  if (!builds_qwen_vision_graph(vc.tower)) {
    return unimplemented("the vision graph of the ", vision_tower_name(vc.tower), " tower (",
                         vc.model_type,
                         ": learned position grid, DeepStack features into the first decoder "
                         "layers) is not built yet (docs/multimodal.md)");
  }
  if (vc.heads <= 0 || vc.width % vc.heads != 0 || vc.text_hidden <= 0 || vc.ffn <= 0) {
    return invalid_argument(vc.model_type, " vision_config: hidden_size ", vc.width, ", num_heads ",
                            vc.heads, ", intermediate_size ", vc.ffn, ", out_hidden_size ",
                            vc.text_hidden);
  }
  ir::Graph g(vc.tower == VisionTower::kQwen2Vit ? "qwen2_vl_vision" : "qwen2_5_vl_vision");
  VisionBuilder vb(vc, layout, g);
  QBC_ASSIGN_OR_RETURN(ValueId out, vb.build());
  g.add_output(out);
  return g;
}

}  // namespace qbc::frontend
