// The HF tensor-name prefixes of a model's modules (append ".weight" / ".bias"). Most families
// use Llama's names (model.layers.N.self_attn.q_proj); EXAONE 3.5 uses GPT-2-style names
// (transformer.h.N.attn.attention.q_proj). The graph builder and the random-model writer both
// read them from here, so a family's names are written down once.
#pragma once

#include <cstdint>
#include <string>

#include "qbc/frontend/hparams.h"

namespace qbc::frontend {

/// One decoder layer's module names. A norm the family does not have is still named (the
/// HParams flags decide which exist).
struct HfLayerNames {
  std::string block;           ///< "model.layers.3".
  std::string attn_pre_norm;   ///< Before attention (pre_norms).
  std::string attn_post_norm;  ///< After attention, before the residual add (post_norms).
  std::string ffn_pre_norm;    ///< Before the MLP (pre_norms).
  std::string ffn_post_norm;   ///< After the MLP, before the residual add (post_norms).
  std::string attn;            ///< The attention module ("…self_attn").
  std::string q, k, v, o, qkv, q_norm, k_norm, rotary;
  std::string mlp;  ///< The MLP module ("…mlp").
  std::string gate, up, down, gate_up, act;
};

/// The model-level names: embeddings, final norm and output head.
struct HfModelNames {
  std::string embed;       ///< "model.embed_tokens".
  std::string final_norm;  ///< "model.norm".
  std::string lm_head;     ///< "lm_head".
};

HfLayerNames hf_layer_names(const HParams& hp, int64_t layer);
HfModelNames hf_model_names(const HParams& hp);

}  // namespace qbc::frontend
