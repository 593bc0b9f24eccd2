// The vocabulary stored in GGUF metadata, read the way llama.cpp's llama_vocab::load does
// (qbc/frontend/gguf_tokenizer.h).
//
//   tokenizer.ggml.model       "llama" (SentencePiece BPE by score) or "gpt2" (byte-level BPE)
//   tokenizer.ggml.tokens      token texts, indexed by id
//   tokenizer.ggml.scores      SPM merge priorities (optional for gpt2)
//   tokenizer.ggml.token_type  TokenType per id (optional: all normal)
//   tokenizer.ggml.merges      "left right" strings in rank order (gpt2 only)
//   tokenizer.ggml.pre         names the pre-tokenizer regex set (gpt2 only)
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id, add_bos_token, add_eos_token,
//   add_space_prefix           optional overrides of the per-model defaults
#include <cstdint>
#include <string>
#include <vector>

#include "qbc/support/quote.h"
#include "qbc/frontend/gguf_tokenizer.h"
#include "qbc/tokenizer/vocab_data.h"

namespace qbc::frontend {

namespace {

using tokenizer::MergeOrder;
using tokenizer::TokenInfo;
using tokenizer::TokenizerKind;
using tokenizer::TokenType;
using tokenizer::VocabData;

constexpr std::string_view kModel = "tokenizer.ggml.model";
constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kScores = "tokenizer.ggml.scores";
constexpr std::string_view kTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kMerges = "tokenizer.ggml.merges";
constexpr std::string_view kPre = "tokenizer.ggml.pre";

// Overrides `*id` with an optional id key; out-of-range values (e.g. u32 -1 as "none") keep
// the default, as llama.cpp does.
Status read_id(const GgufFile& f, std::string_view key, int32_t n_tokens, int32_t* id) {
  if (!f.has(key)) return ok_status();
  QBC_ASSIGN_OR_RETURN(const int64_t v, f.get_int(key));
  if (v >= 0 && v < n_tokens) *id = static_cast<int32_t>(v);
  return ok_status();
}

Status read_flag(const GgufFile& f, std::string_view key, bool* flag) {
  if (!f.has(key)) return ok_status();
  QBC_ASSIGN_OR_RETURN(*flag, f.get_bool(key));
  return ok_status();
}

}  // namespace

StatusOr<tokenizer::Tokenizer> tokenizer_from_gguf(const GgufFile& f) {
  const std::string source = f.path().string();
  QBC_ASSIGN_OR_RETURN(const std::string model, f.get_string(kModel));
  VocabData d;
  if (model == "llama") {
    d.kind = TokenizerKind::kSentencePiece;
    d.merge_order = MergeOrder::kByScore;
    d.byte_fallback = true;
    d.add_space_prefix = true;
    d.escape_whitespace = true;
    d.strip_leading_space_on_decode = true;
    d.bos_id = 1, d.eos_id = 2, d.unk_id = 0;
    d.add_bos = true;
  } else if (model == "gpt2") {
    d.kind = TokenizerKind::kByteLevel;
    d.merge_order = MergeOrder::kByRank;
  } else {
    return unimplemented(source, ": ", kModel, ": unsupported tokenizer model ",
                         quote_prefix(model), " (supported: llama, gpt2)");
  }

  QBC_ASSIGN_OR_RETURN(std::vector<std::string> texts, f.get_string_array(kTokens));
  const auto n = static_cast<int64_t>(texts.size());
  if (n == 0 || n > INT32_MAX) return invalid_argument(source, ": ", kTokens, ": bad size ", n);
  std::vector<double> scores;
  if (f.has(kScores)) {
    QBC_ASSIGN_OR_RETURN(scores, f.get_float_array(kScores));
    if (static_cast<int64_t>(scores.size()) != n) {
      return invalid_argument(source, ": ", kScores, ": ", scores.size(), " entries for ", n,
                              " tokens");
    }
  } else if (d.merge_order == MergeOrder::kByScore) {
    return not_found(source, ": ", kScores, ": missing (required by the llama tokenizer)");
  }
  std::vector<int64_t> types;
  if (f.has(kTypes)) {
    QBC_ASSIGN_OR_RETURN(types, f.get_int_array(kTypes));
    if (static_cast<int64_t>(types.size()) != n) {
      return invalid_argument(source, ": ", kTypes, ": ", types.size(), " entries for ", n,
                              " tokens");
    }
  }
  d.tokens.resize(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    TokenInfo& t = d.tokens[i];
    t.text = std::move(texts[i]);
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";  // llama.cpp's rename
    t.score = scores.empty() ? 0.0f : static_cast<float>(scores[i]);
    const int64_t type = types.empty() ? 1 : types[i];
    t.type = type >= 1 && type <= 6 ? static_cast<TokenType>(type) : TokenType::kUndefined;
  }

  if (d.kind == TokenizerKind::kByteLevel) {
    QBC_ASSIGN_OR_RETURN(const std::vector<std::string> merges, f.get_string_array(kMerges));
    d.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const size_t space = merges[i].find(' ', 1);
      if (space == std::string::npos) {
        return invalid_argument(source, ": ", kMerges, "[", i, "]: ", quote_prefix(merges[i]),
                                " is not 'left right'");
      }
      d.merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
    }
    std::string pre;
    if (f.has(kPre)) {
      QBC_ASSIGN_OR_RETURN(pre, f.get_string(kPre));
    }
    auto patterns = tokenizer::pre_tokenizer_patterns(pre);
    if (!patterns) {
      return unimplemented(source, ": ", kPre, ": unsupported pre-tokenizer ", quote_prefix(pre));
    }
    d.split_regexes = std::move(*patterns);
    d.pre_name = pre.empty() ? "default" : pre;
    // llama.cpp: Llama 3 style vocabularies emit a whole word that is a token as is, and
    // add BOS by default.
    if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" ||
        pre == "pixtral") {
      d.ignore_merges = true;
      d.add_bos = true;
    }
  }

  const auto n32 = static_cast<int32_t>(n);
  QBC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.bos_token_id", n32, &d.bos_id));
  QBC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eos_token_id", n32, &d.eos_id));
  QBC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.unknown_token_id", n32, &d.unk_id));
  QBC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.padding_token_id", n32, &d.pad_id));
  QBC_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_bos_token", &d.add_bos));
  QBC_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_eos_token", &d.add_eos));
  QBC_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix));
  if (d.kind == TokenizerKind::kSentencePiece) {
    d.strip_leading_space_on_decode = d.add_space_prefix;
  }
  return tokenizer::Tokenizer::from_data(std::move(d), source, /*strict_merges=*/false);
}

StatusOr<tokenizer::Tokenizer> tokenizer_from_gguf(const std::filesystem::path& path) {
  QBC_ASSIGN_OR_RETURN(const GgufFile file, GgufFile::open(path));
  return tokenizer_from_gguf(file);
}

}  // namespace qbc::frontend
