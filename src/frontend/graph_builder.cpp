// build_decoder_graph: one builder for every supported family, driven by
// HParams flags (Gemma's extra norms, Qwen3's q/k norms, Phi3's fused
// projections, SmolLM3's NoPE layers, Cohere2's LayerNorms, parallel block and logit scale), as
// llama.cpp's model builder handles variants.
//
//   %inputs_embeds ─ [scale √hidden] ─┐
//   per block N:  x ─ [attn_norm] ─ q/k/v_proj ─ [q/k_norm] ─ [rope] ─ attention ─ o_proj ─ [post_norm] ─ [scale] ─ + x
//                 x ─ [ffn_norm] ─ gate/up_proj ─ gated_act ─ down_proj ─ [post_norm] ─ [scale] ─ + x
//   (scale: HyperCLOVAX's residual_multiplier)
//   parallel (Cohere2): n = attn_norm(x);  x + attention(n) + mlp(n)  (added in that order)
//   head:         output_norm ─ lm_head ─ [softcap | logit scale] ─ %logits
//   M-RoPE (Qwen2-VL, Qwen2.5-VL): q/k go through rope_table with the host's %rope_cos, %rope_sin
//   [b, s, head_dim/2] instead of rope; the table parameters go to metadata mrope.*.
//   DeepStack (Qwen3-VL): after block J < deepstack_layers, x + %deepstack.J [b, s, hidden] (the
//   image's DeepStack rows at its tokens, zero elsewhere).
#include <cmath>
#include <cstdio>

#include "qbc/frontend/hf_names.h"
#include "qbc/frontend/importer.h"
#include "qbc/ir/host_inputs.h"

namespace qbc::frontend {
namespace {

using ir::DType;
using ir::TensorType;
using ir::ValueId;

TensorType f32(std::vector<int64_t> dims) { return TensorType{DType::kF32, std::move(dims)}; }

class DecoderBuilder {
 public:
  DecoderBuilder(const HParams& hp, const ImportOptions& opt, ir::Graph& g) : hp_(hp), opt_(opt), b_(g) {}

  StatusOr<ValueId> build() {
    const int64_t h = hp_.hidden_size;
    QBC_ASSIGN_OR_RETURN(ValueId x, b_.input("inputs_embeds", f32({ir::kDynamic, ir::kDynamic, h})));
    QBC_ASSIGN_OR_RETURN(positions_, b_.input("positions", TensorType{DType::kI64, {ir::kDynamic, ir::kDynamic}}));
    if (!hp_.mrope_section.empty()) {  // M-RoPE: the host computes the tables (mrope.h)
      const TensorType table = f32({ir::kDynamic, ir::kDynamic, hp_.head_dim / 2});
      QBC_ASSIGN_OR_RETURN(rope_cos_, b_.input("rope_cos", table));
      QBC_ASSIGN_OR_RETURN(rope_sin_, b_.input("rope_sin", table));
    }
    const std::string embed = hf_model_names(hp_).embed;
    b_.weight("token_embd.weight", f32({hp_.vocab_size, h}), embed + ".weight", ir::WeightRole::kHostEmbedding);
    if (hp_.embedding_scale != 1.0) {
      QBC_ASSIGN_OR_RETURN(x, b_.scale("embed_scale", x, hp_.embedding_scale, embed));
    }
    std::vector<ValueId> deepstack;
    for (int64_t j = 0; j < hp_.deepstack_layers; ++j) {
      QBC_ASSIGN_OR_RETURN(ValueId d, b_.input(ir::deepstack_input_name(j),
                                               f32({ir::kDynamic, ir::kDynamic, h})));
      deepstack.push_back(d);
    }
    for (int64_t i = 0; i < hp_.num_hidden_layers; ++i) {
      b_.set_block(static_cast<int>(i));
      QBC_ASSIGN_OR_RETURN(x, block(i, x));
      if (i < static_cast<int64_t>(deepstack.size())) {  // Qwen3VLTextModel._deepstack_process
        QBC_ASSIGN_OR_RETURN(x, b_.add("blk." + std::to_string(i) + ".deepstack", x,
                                       deepstack[static_cast<size_t>(i)], "deepstack"));
      }
    }
    b_.set_block(-1);
    b_.set_part(ir::Part::kHead);
    return head(x);
  }

 private:
  // A norm over the last dim (group 0) or per head (group = head_dim).
  StatusOr<ValueId> norm(const std::string& name, ValueId x, const std::string& hf_module, int64_t width,
                         int64_t group) {
    b_.weight(name + ".weight", f32({width}), hf_module + ".weight");
    if (hp_.layer_norm) {  // Cohere2: LayerNorm without bias over the last dim
      return b_.layer_norm(name, x, name + ".weight", "", hp_.rms_norm_eps, hf_module);
    }
    return b_.rms_norm(name, x, name + ".weight", hp_.rms_norm_eps,
                       hp_.norm_style == NormStyle::kOnePlusWeight, group, hf_module);
  }

  StatusOr<ValueId> linear(const std::string& name, ValueId x, const std::string& hf_module, int64_t out,
                           int64_t in, bool bias) {
    b_.weight(name + ".weight", f32({out, in}), hf_module + ".weight");
    if (bias) b_.weight(name + ".bias", f32({out}), hf_module + ".bias");
    return b_.linear(name, x, name + ".weight", bias ? name + ".bias" : "", hf_module);
  }

  StatusOr<ValueId> block(int64_t i, ValueId x) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const HfLayerNames hf = hf_layer_names(hp_, i);
    const int64_t h = hp_.hidden_size, qd = hp_.q_dim(), kvd = hp_.kv_dim(), hd = hp_.head_dim;

    // Attention.
    ValueId n1 = x;
    if (hp_.pre_norms) {
      QBC_ASSIGN_OR_RETURN(n1, norm(p + "attn_norm", x, hf.attn_pre_norm, h, 0));
    }
    ValueId q, k, v;
    if (hp_.fused_qkv) {
      QBC_ASSIGN_OR_RETURN(ValueId qkv, linear(p + "attn.qkv_proj", n1, hf.qkv, qd + 2 * kvd, h, hp_.qkv_bias));
      QBC_ASSIGN_OR_RETURN(q, b_.slice(p + "attn.q", qkv, 0, qd, hf.qkv));
      QBC_ASSIGN_OR_RETURN(k, b_.slice(p + "attn.k", qkv, qd, qd + kvd, hf.qkv));
      QBC_ASSIGN_OR_RETURN(v, b_.slice(p + "attn.v", qkv, qd + kvd, qd + 2 * kvd, hf.qkv));
    } else {
      QBC_ASSIGN_OR_RETURN(q, linear(p + "attn.q_proj", n1, hf.q, qd, h, hp_.qkv_bias));
      QBC_ASSIGN_OR_RETURN(k, linear(p + "attn.k_proj", n1, hf.k, kvd, h, hp_.qkv_bias));
      QBC_ASSIGN_OR_RETURN(v, linear(p + "attn.v_proj", n1, hf.v, kvd, h, hp_.qkv_bias));
    }
    if (hp_.qk_norm) {
      QBC_ASSIGN_OR_RETURN(q, norm(p + "attn.q_norm", q, hf.q_norm, hd, hd));
      QBC_ASSIGN_OR_RETURN(k, norm(p + "attn.k_norm", k, hf.k_norm, hd, hd));
    }
    if (!hp_.mrope_section.empty()) {
      QBC_ASSIGN_OR_RETURN(q, b_.rope_table(p + "attn.q_rope", q, rope_cos_, rope_sin_, hp_.num_attention_heads,
                                            hd, hf.rotary));
      QBC_ASSIGN_OR_RETURN(k, b_.rope_table(p + "attn.k_rope", k, rope_cos_, rope_sin_, hp_.num_key_value_heads,
                                            hd, hf.rotary));
    } else if (hp_.layers[static_cast<size_t>(i)].use_rope) {  // NoPE layers (SmolLM3, EXAONE 4) skip RoPE
      numerics::Rope rq = rope_params(hp_, i);
      numerics::Rope rk = rq;
      rk.heads = hp_.num_key_value_heads;
      QBC_ASSIGN_OR_RETURN(q, b_.rope(p + "attn.q_rope", q, positions_, rq, hf.rotary));
      QBC_ASSIGN_OR_RETURN(k, b_.rope(p + "attn.k_rope", k, positions_, rk, hf.rotary));
    }
    ir::AttentionParams ap;
    ap.num_heads = hp_.num_attention_heads;
    ap.num_kv_heads = hp_.num_key_value_heads;
    ap.head_dim = hd;
    ap.scale = hp_.query_scale;
    ap.softcap = hp_.attn_logit_softcap;
    ap.window = hp_.layers[static_cast<size_t>(i)].sliding_window;
    ap.max_cache = opt_.max_cache_length;
    QBC_ASSIGN_OR_RETURN(ValueId att, b_.attention(p + "attn.sdpa", q, k, v, ap, hf.attn));
    QBC_ASSIGN_OR_RETURN(ValueId o, linear(p + "attn.o_proj", att, hf.o, h, qd, hp_.o_bias));
    if (hp_.post_norms) {
      QBC_ASSIGN_OR_RETURN(o, norm(p + "attn.post_norm", o, hf.attn_post_norm, h, 0));
    }
    if (hp_.residual_multiplier != 1.0) {
      QBC_ASSIGN_OR_RETURN(
          o, b_.scale(p + "attn.residual_scale", o, hp_.residual_multiplier, "residual_multiplier"));
    }
    QBC_ASSIGN_OR_RETURN(x, b_.add(p + "attn.residual", x, o, hf.block));

    // Feed-forward.
    ValueId n2 = x;
    if (hp_.parallel_block) {
      n2 = n1;  // the MLP reads the attention's input norm
    } else if (hp_.pre_norms) {
      QBC_ASSIGN_OR_RETURN(n2, norm(p + "ffn_norm", x, hf.ffn_pre_norm, h, 0));
    }
    const int64_t f = hp_.intermediate_size;
    ValueId gate, up;
    if (hp_.fused_gate_up) {
      QBC_ASSIGN_OR_RETURN(ValueId gu, linear(p + "ffn.gate_up_proj", n2, hf.gate_up, 2 * f, h, hp_.mlp_bias));
      QBC_ASSIGN_OR_RETURN(gate, b_.slice(p + "ffn.gate", gu, 0, f, hf.gate_up));
      QBC_ASSIGN_OR_RETURN(up, b_.slice(p + "ffn.up", gu, f, 2 * f, hf.gate_up));
    } else {
      QBC_ASSIGN_OR_RETURN(gate, linear(p + "ffn.gate_proj", n2, hf.gate, f, h, hp_.mlp_bias));
      QBC_ASSIGN_OR_RETURN(up, linear(p + "ffn.up_proj", n2, hf.up, f, h, hp_.mlp_bias));
    }
    const std::string act = hp_.activation == Activation::kSilu ? "silu" : "gelu_tanh";
    QBC_ASSIGN_OR_RETURN(ValueId a, b_.gated_act(p + "ffn.act", gate, up, act, hf.act));
    QBC_ASSIGN_OR_RETURN(ValueId d, linear(p + "ffn.down_proj", a, hf.down, h, f, hp_.mlp_bias));
    if (hp_.post_norms) {
      QBC_ASSIGN_OR_RETURN(d, norm(p + "ffn.post_norm", d, hf.ffn_post_norm, h, 0));
    }
    if (hp_.residual_multiplier != 1.0) {
      QBC_ASSIGN_OR_RETURN(
          d, b_.scale(p + "ffn.residual_scale", d, hp_.residual_multiplier, "residual_multiplier"));
    }
    return b_.add(p + "ffn.residual", x, d, hf.block);
  }

  StatusOr<ValueId> head(ValueId x) {
    const HfModelNames names = hf_model_names(hp_);
    QBC_ASSIGN_OR_RETURN(x, norm("output_norm", x, names.final_norm, hp_.hidden_size, 0));
    const std::string tensor = (hp_.tie_word_embeddings ? names.embed : names.lm_head) + ".weight";
    b_.weight("head.lm_head.weight", f32({hp_.vocab_size, hp_.hidden_size}), tensor);
    const bool cap = hp_.final_logit_softcap > 0, scaled = hp_.logit_scale != 1.0;
    QBC_ASSIGN_OR_RETURN(x, b_.linear(cap || scaled ? "head.lm_head" : "logits", x, "head.lm_head.weight", "",
                                      names.lm_head));
    if (cap) {
      QBC_ASSIGN_OR_RETURN(x, b_.softcap("logits", x, hp_.final_logit_softcap, "final_logit_softcapping"));
    } else if (scaled) {
      QBC_ASSIGN_OR_RETURN(x, b_.scale("logits", x, hp_.logit_scale, "logit_scale"));
    }
    return x;
  }

  const HParams& hp_;
  const ImportOptions& opt_;
  ir::Builder b_;
  ValueId positions_ = -1;
  ValueId rope_cos_ = -1, rope_sin_ = -1;
};

// M-RoPE's table parameters, for the host that computes rope_cos / rope_sin.
void record_mrope(const HParams& hp, ir::Graph& g) {
  std::string section;
  for (int64_t s : hp.mrope_section) section += (section.empty() ? "" : ",") + std::to_string(s);
  char theta[32];
  std::snprintf(theta, sizeof theta, "%.17g", hp.rope_theta);
  g.metadata["mrope.section"] = section;
  g.metadata["mrope.theta"] = theta;
  g.metadata["mrope.head_dim"] = std::to_string(hp.head_dim);
}

}  // namespace

StatusOr<ir::Graph> build_decoder_graph(const HParams& hp, const ImportOptions& options) {
  if (options.max_cache_length <= 0) return invalid_argument("max cache length must be positive");
  ir::Graph g(std::string(family_name(hp.family)));
  DecoderBuilder builder(hp, options, g);
  QBC_ASSIGN_OR_RETURN(ir::ValueId logits, builder.build());
  g.add_output(logits);
  g.metadata["architecture"] = hp.architecture;
  if (!hp.mrope_section.empty()) record_mrope(hp, g);
  // Interleaved M-RoPE (Qwen3-VL): the host's tables take the streams in turn (runner/mrope.h).
  if (hp.mrope_interleaved) g.metadata["mrope.interleaved"] = "1";
  if (hp.image_span_tokens > 0)
    g.metadata[kImageSpanMetadata] = std::to_string(hp.image_span_tokens);
  return g;
}

}  // namespace qbc::frontend
