// build_qwen_vision_graph: the Qwen2-VL, Qwen2.5-VL and Qwen3-VL vision towers and patch mergers
// as an MBLT graph (qbc/frontend/qwen_vision.h has the picture), following HF's
// Qwen2VisionTransformerPretrainedModel, Qwen2_5_VisionTransformerPretrainedModel and
// Qwen3VLVisionModel module by module: Qwen2-VL's blocks use LayerNorm (with bias) and an
// fc1/act/fc2 MLP and attend over the whole frame, Qwen2.5-VL's use RMSNorm, a SwiGLU MLP and
// windows, Qwen3-VL's are Qwen2-VL's with other names (linear_fc1/linear_fc2), a biased patch
// embedding, learned positions (the host's embed_base) and DeepStack mergers. The Conv3d patch
// embedding, whose kernel equals its stride, is a linear over the flattened (channel, frame, y,
// x) patch: the checkpoint's [width, 3, tp, p, p] weight read row-major as [width, 3·tp·p²].
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
        qwen3_(vc.tower == VisionTower::kQwen3Vit),
        layer_norms_(vc.tower != VisionTower::kQwen25Vit) {}

  /// Builds the graph; its outputs are outputs().
  Status build() {
    const int64_t n = layout_.grid.patches();
    const int64_t patch = kChannels * vc_.temporal_patch_size * vc_.patch_size * vc_.patch_size;
    QBC_ASSIGN_OR_RETURN(ValueId x, b_.input("patches", f32({1, n, patch})));
    QBC_ASSIGN_OR_RETURN(cos_, b_.input("rope_cos", f32({1, n, hd_ / 2})));
    QBC_ASSIGN_OR_RETURN(sin_, b_.input("rope_sin", f32({1, n, hd_ / 2})));
    QBC_ASSIGN_OR_RETURN(
        x, linear("vis.patch_embed", x, "visual.patch_embed.proj", vc_.width, patch, qwen3_));
    if (qwen3_) {  // fast_pos_embed_interpolate's rows, computed on the host
      QBC_ASSIGN_OR_RETURN(ValueId base, b_.input("embed_base", f32({1, n, vc_.width})));
      QBC_ASSIGN_OR_RETURN(x, b_.add("vis.embed", x, base, "visual.pos_embed"));
    }
    std::vector<ValueId> taps;  // Qwen3-VL: the blocks' outputs its DeepStack mergers read
    for (int64_t i = 0; i < vc_.depth; ++i) {
      b_.set_block(static_cast<int>(i));
      QBC_ASSIGN_OR_RETURN(x, block(i, x));
      const auto& layers = vc_.deepstack_layers;
      if (qwen3_ && std::find(layers.begin(), layers.end(), i) != layers.end()) taps.push_back(x);
    }
    // Every output is computed in the head (fp32 values, the backend's output buffer): the
    // merger, then the DeepStack mergers of the taps.
    b_.set_block(-1);
    b_.set_part(ir::Part::kHead);
    QBC_ASSIGN_OR_RETURN(ValueId out, merger(x));
    outputs_.push_back(out);
    for (size_t j = 0; j < taps.size(); ++j) {
      QBC_ASSIGN_OR_RETURN(ValueId d, deepstack_merger(static_cast<int64_t>(j), taps[j]));
      outputs_.push_back(d);
    }
    return ok_status();
  }

  /// image_features, then Qwen3-VL's DeepStack features in deepstack_visual_indexes order
  /// (increasing: the config reader checks it).
  const std::vector<ValueId>& outputs() const { return outputs_; }

 private:
  StatusOr<ValueId> norm(const std::string& name, ValueId x, const std::string& hf) {
    return norm(name, x, hf, vc_.width);
  }

  StatusOr<ValueId> norm(const std::string& name, ValueId x, const std::string& hf, int64_t width) {
    b_.weight(name + ".weight", f32({width}), hf + ".weight");
    if (!layer_norms_) return b_.rms_norm(name, x, name + ".weight", kNormEps, false, 0, hf);
    b_.weight(name + ".bias", f32({width}), hf + ".bias");
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
    if (vc_.tower == VisionTower::kQwen25Vit &&
        std::find(full.begin(), full.end(), i) == full.end())
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
    QBC_ASSIGN_OR_RETURN(ValueId down, layer_norms_ ? mlp(p, hf, h) : swiglu(p, hf, h));
    return b_.add(p + "ffn_residual", x, down, hf);
  }

  // Qwen2-VL's VisionMlp: fc2(act(fc1(x))), act = vision_config.hidden_act (quick_gelu);
  // Qwen3VLVisionMLP: the same as linear_fc2(act(linear_fc1(x))) (gelu_pytorch_tanh).
  StatusOr<ValueId> mlp(const std::string& p, const std::string& hf, ValueId h) {
    const int64_t w = vc_.width;
    const std::string fc1 = qwen3_ ? "mlp.linear_fc1" : "mlp.fc1";
    const std::string fc2 = qwen3_ ? "mlp.linear_fc2" : "mlp.fc2";
    QBC_ASSIGN_OR_RETURN(h, linear(p + "mlp.fc1", h, hf + fc1, vc_.ffn, w, true));
    QBC_ASSIGN_OR_RETURN(
        h, b_.gelu_approx(p + "mlp.act", h, vit_gelu_approx(vc_.hidden_act), hf + "mlp"));
    return linear(p + "mlp.fc2", h, hf + fc2, w, vc_.ffn, true);
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

  // PatchMerger (Qwen3VLVisionPatchMerger without the post-shuffle norm): the norm over each
  // patch, merge² patches side by side, linear, erf GELU, linear to the language width.
  StatusOr<ValueId> merger(ValueId x) {
    const int64_t unit = vc_.merge * vc_.merge, wide = vc_.width * unit;
    const std::string m = "visual.merger.";
    QBC_ASSIGN_OR_RETURN(x, norm("vis.merger.ln_q", x, m + (qwen3_ ? "norm" : "ln_q")));
    QBC_ASSIGN_OR_RETURN(x, b_.merge_rows("vis.merger.merge", x, unit, "visual.merger"));
    QBC_ASSIGN_OR_RETURN(
        x, linear("vis.merger.fc1", x, m + (qwen3_ ? "linear_fc1" : "mlp.0"), wide, wide, true));
    QBC_ASSIGN_OR_RETURN(x, b_.gelu("vis.merger.gelu", x, m + (qwen3_ ? "act_fn" : "mlp.1")));
    return linear("image_features", x, m + (qwen3_ ? "linear_fc2" : "mlp.2"), vc_.text_hidden, wide,
                  true);
  }

  // Qwen3-VL's DeepStack merger J (use_postshuffle_norm): merge² patches side by side first,
  // then the norm over the merged width, linear, erf GELU, linear.
  StatusOr<ValueId> deepstack_merger(int64_t j, ValueId x) {
    const int64_t unit = vc_.merge * vc_.merge, wide = vc_.width * unit;
    const std::string p = "vis.deepstack." + std::to_string(j) + ".";
    const std::string hf = "visual.deepstack_merger_list." + std::to_string(j) + ".";
    QBC_ASSIGN_OR_RETURN(x, b_.merge_rows(p + "merge", x, unit, hf));
    QBC_ASSIGN_OR_RETURN(x, norm(p + "norm", x, hf + "norm", wide));
    QBC_ASSIGN_OR_RETURN(x, linear(p + "fc1", x, hf + "linear_fc1", wide, wide, true));
    QBC_ASSIGN_OR_RETURN(x, b_.gelu(p + "gelu", x, hf + "act_fn"));
    return linear("deepstack_features." + std::to_string(j), x, hf + "linear_fc2", vc_.text_hidden,
                  wide, true);
  }

  const VisionConfig& vc_;
  const QwenVisionLayout& layout_;
  ir::Builder b_;
  int64_t hd_;
  bool qwen3_;
  bool layer_norms_;  ///< Qwen2-VL and Qwen3-VL: LayerNorm with bias and a GELU MLP
  ValueId cos_ = -1, sin_ = -1;
  std::vector<ValueId> outputs_;
};

}  // namespace

StatusOr<ir::Graph> build_qwen_vision_graph(const VisionConfig& vc,
                                            const QwenVisionLayout& layout) {
  if (!builds_qwen_vision_graph(vc.tower)) {
    return unimplemented("the Qwen vision graph of a ", vision_tower_name(vc.tower), " tower (",
                         vc.model_type,
                         "): Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's are built here");
  }
  int64_t previous = -1;
  for (int64_t layer : vc.deepstack_layers) {
    if (layer <= previous || layer >= vc.depth) {
      return invalid_argument(
          vc.model_type, " vision_config.deepstack_visual_indexes: ", layer,
          layer >= vc.depth ? " is not a block of a " : " is out of order in a ", vc.depth,
          "-block tower");
    }
    previous = layer;
  }
  if (vc.heads <= 0 || vc.width % vc.heads != 0 || vc.text_hidden <= 0 || vc.ffn <= 0) {
    return invalid_argument(vc.model_type, " vision_config: hidden_size ", vc.width, ", num_heads ",
                            vc.heads, ", intermediate_size ", vc.ffn, ", out_hidden_size ",
                            vc.text_hidden);
  }
  ir::Graph g(vc.tower == VisionTower::kQwen2Vit   ? "qwen2_vl_vision"
              : vc.tower == VisionTower::kQwen3Vit ? "qwen3_vl_vision"
                                                   : "qwen2_5_vl_vision");
  VisionBuilder vb(vc, layout, g);
  QBC_RETURN_IF_ERROR(vb.build());
  for (ValueId out : vb.outputs()) g.add_output(out);
  return g;
}

}  // namespace qbc::frontend
