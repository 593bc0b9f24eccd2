// Vocabulary loaders of qbc_tokenizer: HF tokenizer.json -> Vocab (the GGUF vocabulary is
// qbc_frontend's, the qbc_vocab.json asset is vocab_json.cpp).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "qbc/support/status.h"
#include "vocab.h"

namespace qbc::tokenizer::tok {

/// Reads a HF `tokenizer.json`. `tokenizer_config` and `model_config` (tokenizer_config.json,
/// config.json) are optional (empty path = absent) and refine BOS/EOS and add_bos.
StatusOr<std::shared_ptr<const Vocab>> load_hf_vocab(const std::filesystem::path& tokenizer_json,
                                                     const std::filesystem::path& tokenizer_config,
                                                     const std::filesystem::path& model_config);

/// The same from the files' contents ("" = absent for the two optional ones); `source` names
/// the origin in errors, suffixed by the file name for the optional ones.
StatusOr<std::shared_ptr<const Vocab>> load_hf_vocab_text(std::string_view tokenizer_json,
                                                          std::string_view tokenizer_config,
                                                          std::string_view model_config,
                                                          const std::string& source);

}  // namespace qbc::tokenizer::tok
