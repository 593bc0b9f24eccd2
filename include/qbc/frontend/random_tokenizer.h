// The tokenizer `qbc random-model` writes beside a random model: a byte-level BPE (GPT-2's
// byte alphabet and pre-tokenizer, as Qwen and Llama 3 use) that covers every id of the
// config's vocabulary, so that whatever id a random model generates decodes to text.
//
//   the config's bos/eos ids     special tokens ("<|bos|>", "<|eos|>"; "<|endoftext|>" when one
//                                id is both), decoded only with skip_special off
//   ids 0..255                   one byte each (byte b at id b unless a special id is there; a
//                                byte pushed off goes to the first free id after them, and only
//                                control bytes may be dropped when the vocabulary is full)
//   every other id              a pseudo-word of consonant-vowel syllables ("ka", " ka", "kabe",
//                                " kabe", " kabemi", ...), each the merge of two earlier tokens,
//                                so its rank order is a valid BPE merge list
// Deterministic: the same config gives the same bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "qbc/frontend/hparams.h"

namespace qbc::frontend {

/// The HF `tokenizer.json` of the header comment for `hp` (vocab_size, bos_token_id,
/// eos_token_ids); "" when the vocabulary cannot hold every printable byte and the special
/// tokens (vocab_size below about 230).
/// `extra`: more special tokens by id (a VLM's image tokens, e.g. Gemma 3's
/// `<start_of_image>`), added where the id is inside the vocabulary and not taken.
std::string random_model_tokenizer_json(const HParams& hp,
                                        const std::map<int64_t, std::string>& extra = {});

}  // namespace qbc::frontend
