// Test-sized random VLMs: the language model shrunk while the vision tower under test keeps
// the shape each test gives it (frontend::write_random_model from a real config).
#pragma once

#include "qbc/frontend/random_model.h"

namespace qbc::testing {

/// The language model of a random VLM at test size: 1 layer, width 24 (the width the
/// projector writes), FFN 32, 2 heads over 1 KV head, a 64-token vocabulary (the image token
/// ids move to its top). Families that set head_dim (Gemma 3) set it too.
inline void shrink_language_model(frontend::ConfigOverrides& o) {
  o.num_hidden_layers = 1;
  o.hidden_size = 24;
  o.intermediate_size = 32;
  o.num_attention_heads = 2;
  o.num_key_value_heads = 1;
  o.vocab_size = 64;
}

}  // namespace qbc::testing
