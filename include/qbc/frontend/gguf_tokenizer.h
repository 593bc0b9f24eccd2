// The tokenizer of a GGUF file: the vocabulary stored in its metadata (`tokenizer.ggml.*`,
// models "llama" and "gpt2"), read the way llama.cpp's llama_vocab::load does, as a
// qbc_tokenizer Tokenizer.
#pragma once

#include <filesystem>

#include "qbc/frontend/gguf.h"
#include "qbc/support/status.h"
#include "qbc/tokenizer/tokenizer.h"

namespace qbc::frontend {

/// Opens `path` and loads its vocabulary.
StatusOr<tokenizer::Tokenizer> tokenizer_from_gguf(const std::filesystem::path& path);
/// The same from an already opened GGUF file.
StatusOr<tokenizer::Tokenizer> tokenizer_from_gguf(const GgufFile& file);

}  // namespace qbc::frontend
