// Vocabulary loaders: HF tokenizer.json and GGUF metadata -> Vocab.
#pragma once

#include <filesystem>
#include <memory>

#include "qbc/frontend/gguf.h"
#include "qbc/support/status.h"
#include "tokenizer/vocab.h"

namespace qbc::frontend::tok {

/// Reads a HF `tokenizer.json`. `tokenizer_config` and `model_config` (tokenizer_config.json,
/// config.json) are optional (empty path = absent) and refine BOS/EOS and add_bos.
StatusOr<std::shared_ptr<const Vocab>> load_hf_vocab(const std::filesystem::path& tokenizer_json,
                                                     const std::filesystem::path& tokenizer_config,
                                                     const std::filesystem::path& model_config);

/// Reads `tokenizer.ggml.*` from GGUF metadata (models "llama" and "gpt2").
StatusOr<std::shared_ptr<const Vocab>> load_gguf_vocab(const GgufFile& file);

}  // namespace qbc::frontend::tok
