// Small-model settings shared by the frontend tests that write random HF models.
#pragma once

#include <cstdint>

#include "qbc/frontend/random_model.h"

namespace qbc::testing {

/// Overrides that shrink any supported config to a few-KB model: `layers` layers, hidden 64,
/// intermediate 96, vocab 256, 4 query / 2 KV heads of dim 16.
inline frontend::ConfigOverrides shrink(int64_t layers = 2) {
  frontend::ConfigOverrides o;
  o.num_hidden_layers = layers;
  o.hidden_size = 64;
  o.intermediate_size = 96;
  o.vocab_size = 256;
  o.num_attention_heads = 4;
  o.num_key_value_heads = 2;
  o.head_dim = 16;
  return o;
}

}  // namespace qbc::testing
