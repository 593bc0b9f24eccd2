// HF tensor names per family: Llama's layout for most, EXAONE 3.5's GPT-2-style layout
// (transformer.wte, transformer.h.N.ln_1, attn.attention.out_proj, mlp.c_fc_0/c_fc_1/c_proj).
#include "qbc/frontend/hf_names.h"

namespace qbc::frontend {
namespace {

HfLayerNames exaone_layer(int64_t layer) {
  HfLayerNames n;
  n.block = "transformer.h." + std::to_string(layer);
  const std::string p = n.block + ".";
  n.attn_pre_norm = p + "ln_1";
  n.ffn_pre_norm = p + "ln_2";
  n.attn = p + "attn.attention";
  n.q = n.attn + ".q_proj";
  n.k = n.attn + ".k_proj";
  n.v = n.attn + ".v_proj";
  n.o = n.attn + ".out_proj";
  n.rotary = n.attn + ".rotary";
  n.mlp = p + "mlp";
  n.gate = n.mlp + ".c_fc_0";
  n.up = n.mlp + ".c_fc_1";
  n.down = n.mlp + ".c_proj";
  n.act = n.mlp + ".act";
  return n;
}

HfLayerNames llama_layer(const HParams& hp, int64_t layer) {
  HfLayerNames n;
  n.block = "model.layers." + std::to_string(layer);
  const std::string p = n.block + ".";
  n.attn_pre_norm = p + "input_layernorm";
  // Llama names its pre-MLP norm post_attention_layernorm; families with norms after the
  // sublayers (Gemma, EXAONE 4) use that name for the post-attention norm.
  // HyperCLOVAX keeps Llama's names and calls its Peri-LN output norms post_norm1 / post_norm2.
  if (hp.family == ModelFamily::kHyperClovax) {
    n.ffn_pre_norm = p + "post_attention_layernorm";
    n.attn_post_norm = p + "post_norm1";
    n.ffn_post_norm = p + "post_norm2";
  } else if (hp.post_norms) {
    n.attn_post_norm = p + "post_attention_layernorm";
    n.ffn_pre_norm = p + "pre_feedforward_layernorm";
    n.ffn_post_norm = p + "post_feedforward_layernorm";
  } else {
    n.ffn_pre_norm = p + "post_attention_layernorm";
    n.ffn_post_norm = p + "post_feedforward_layernorm";
  }
  n.attn = p + "self_attn";
  n.q = n.attn + ".q_proj";
  n.k = n.attn + ".k_proj";
  n.v = n.attn + ".v_proj";
  n.o = n.attn + ".o_proj";
  n.qkv = n.attn + ".qkv_proj";
  n.q_norm = n.attn + ".q_norm";
  n.k_norm = n.attn + ".k_norm";
  n.rotary = n.attn + ".rotary_emb";
  n.mlp = p + "mlp";
  n.gate = n.mlp + ".gate_proj";
  n.up = n.mlp + ".up_proj";
  n.down = n.mlp + ".down_proj";
  n.gate_up = n.mlp + ".gate_up_proj";
  n.act = n.mlp + ".act_fn";
  return n;
}

}  // namespace

HfLayerNames hf_layer_names(const HParams& hp, int64_t layer) {
  return hp.family == ModelFamily::kExaone ? exaone_layer(layer) : llama_layer(hp, layer);
}

HfModelNames hf_model_names(const HParams& hp) {
  if (hp.family == ModelFamily::kExaone) return {"transformer.wte", "transformer.ln_f", "lm_head"};
  return {"model.embed_tokens", "model.norm", "lm_head"};
}

}  // namespace qbc::frontend
