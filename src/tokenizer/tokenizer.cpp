// Tokenizer: the encode/decode pipeline around a Vocab.
//
// encode: [BOS] + for each fragment of the text (added tokens cut out first):
//   SentencePiece: prefix " ", " " -> "▁", (Metaspace split), BPE by score or rank.
//   Byte-level:    regex split, bytes -> GPT-2 unicode, ranked BPE.
// decode: per token, byte tokens -> bytes, "▁" -> " " or GPT-2 unicode -> bytes; then the
// leading space SentencePiece added is stripped.
#include "qbc/tokenizer/tokenizer.h"

#include "bpe.h"
#include "loaders.h"
#include "unicode.h"
#include "vocab.h"

namespace qbc::tokenizer {

namespace {

using tok::Vocab;
using tok::VocabData;

// A piece of the input: raw text, or an added token found in it.
struct Fragment {
  std::string_view text;
  int32_t id = -1;  // >= 0 for an added token
  bool at_start = false;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Cuts added tokens out of `text`, leftmost-longest first (HF's added-vocabulary matcher).
// Control and unknown tokens count only with `parse_special`; user-defined ones always.
std::vector<Fragment> partition(const Vocab& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> out;
  size_t raw_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    int32_t hit = -1;
    for (int32_t id : v.added_starting_with(static_cast<uint8_t>(text[i]))) {
      const tok::TokenInfo& t = v.token(id);
      if (!parse_special && t.type != TokenType::kUserDefined) continue;
      if (text.compare(i, t.text.size(), t.text) == 0) {
        hit = id;
        break;  // longest first
      }
    }
    if (hit < 0) continue;
    const tok::TokenInfo& t = v.token(hit);
    size_t raw_end = i;
    if (t.lstrip) {
      while (raw_end > raw_start && is_space(text[raw_end - 1])) --raw_end;
    }
    if (raw_end > raw_start) {
      out.push_back({text.substr(raw_start, raw_end - raw_start), -1, raw_start == 0});
    }
    out.push_back({text.substr(i, t.text.size()), hit, false});
    i += t.text.size();
    if (t.rstrip) {
      while (i < text.size() && is_space(text[i])) ++i;
    }
    raw_start = i;
    --i;  // the loop's ++i
  }
  if (raw_start < text.size()) out.push_back({text.substr(raw_start), -1, raw_start == 0});
  return out;
}

void encode_spm_fragment(const Vocab& v, const Fragment& f, std::vector<int32_t>& out) {
  const VocabData& d = v.data();
  std::string s;
  const bool has_space = !f.text.empty() && f.text[0] == ' ';
  const bool has_mark = f.text.substr(0, tok::kSpaceMark.size()) == tok::kSpaceMark;
  if (d.add_space_prefix && (!d.space_prefix_first_only || f.at_start) &&
      !(d.space_prefix_unless_present && (has_space || has_mark))) {
    s = " ";
  }
  s.append(f.text);
  if (d.escape_whitespace) s = tok::replace_all(s, " ", tok::kSpaceMark);

  std::vector<std::string_view> words;
  if (d.split_on_space_mark) {  // Metaspace split: a word starts at every "▁"
    std::string_view rest = s;
    while (!rest.empty()) {
      size_t next = rest.find(tok::kSpaceMark, 1);
      if (next == std::string_view::npos) next = rest.size();
      words.push_back(rest.substr(0, next));
      rest.remove_prefix(next);
    }
  } else {
    words.push_back(s);
  }
  for (std::string_view w : words) {
    for (std::string_view piece : v.splitter().split(w)) {
      if (d.merge_order == tok::MergeOrder::kByScore) {
        tok::spm_encode_scored(v, piece, out);
      } else {
        tok::bpe_encode_ranked(v, piece, out);
      }
    }
  }
}

void encode_byte_level_fragment(const Vocab& v, const Fragment& f, std::vector<int32_t>& out) {
  std::string s;
  if (v.data().byte_level_prefix_space && f.text[0] != ' ') s = " ";
  s.append(f.text);
  for (std::string_view piece : v.splitter().split(s)) {
    tok::bpe_encode_ranked(v, tok::bytes_to_unicode_text(piece), out);
  }
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const tok::Vocab> vocab) : vocab_(std::move(vocab)) {}

StatusOr<Tokenizer> Tokenizer::from_hf_dir(const std::filesystem::path& dir) {
  const auto json = dir / "tokenizer.json";
  if (!std::filesystem::exists(json)) {
    return not_found(dir.string(), ": no tokenizer.json (only tokenizer.json is supported)");
  }
  auto optional = [&](const char* name) {
    const auto p = dir / name;
    return std::filesystem::exists(p) ? p : std::filesystem::path();
  };
  QBC_ASSIGN_OR_RETURN(auto vocab, tok::load_hf_vocab(json, optional("tokenizer_config.json"),
                                                      optional("config.json")));
  return Tokenizer(std::move(vocab));
}

StatusOr<Tokenizer> Tokenizer::from_hf_json(const std::filesystem::path& tokenizer_json,
                                            const std::filesystem::path& tokenizer_config) {
  QBC_ASSIGN_OR_RETURN(auto vocab, tok::load_hf_vocab(tokenizer_json, tokenizer_config, {}));
  return Tokenizer(std::move(vocab));
}

StatusOr<Tokenizer> Tokenizer::from_hf_json_text(std::string_view tokenizer_json,
                                                 std::string_view tokenizer_config,
                                                 std::string_view model_config,
                                                 std::string_view source) {
  QBC_ASSIGN_OR_RETURN(auto vocab, tok::load_hf_vocab_text(tokenizer_json, tokenizer_config,
                                                           model_config, std::string(source)));
  return Tokenizer(std::move(vocab));
}

StatusOr<Tokenizer> Tokenizer::from_data(VocabData data, std::string_view source,
                                         bool strict_merges) {
  QBC_ASSIGN_OR_RETURN(auto vocab, Vocab::build(std::move(data), source, strict_merges));
  return Tokenizer(std::move(vocab));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  const VocabData& d = vocab_->data();
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && d.bos_id >= 0) out.push_back(d.bos_id);
  for (const Fragment& f : partition(*vocab_, text, parse_special)) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else if (d.kind == TokenizerKind::kByteLevel) {
      encode_byte_level_fragment(*vocab_, f, out);
    } else {
      encode_spm_fragment(*vocab_, f, out);
    }
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out = encode(text, add_bos_default(), /*parse_special=*/false);
  const VocabData& d = vocab_->data();
  if (d.add_eos && d.eos_id >= 0) out.push_back(d.eos_id);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (!vocab_->valid(id)) return {};
  const tok::TokenInfo& t = vocab_->token(id);
  switch (t.type) {
    case TokenType::kByte: {
      const int b = vocab_->byte_of_token(id);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : t.text;
    }
    case TokenType::kControl:
    case TokenType::kUnknown:
      return t.text;
    case TokenType::kUserDefined:
      if (kind() == TokenizerKind::kByteLevel) return t.text;
      return tok::replace_all(t.text, tok::kSpaceMark, " ");
    default:
      break;
  }
  if (kind() == TokenizerKind::kByteLevel) return tok::unicode_text_to_bytes(t.text);
  return vocab_->data().escape_whitespace ? tok::replace_all(t.text, tok::kSpaceMark, " ") : t.text;
}

std::string Tokenizer::decode(const int32_t* ids, size_t n, bool skip_special) const {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (!vocab_->valid(ids[i])) continue;
    const TokenType type = vocab_->token(ids[i]).type;
    if (skip_special && (type == TokenType::kControl || type == TokenType::kUnknown)) continue;
    out += token_to_piece(ids[i]);
  }
  if (vocab_->data().strip_leading_space_on_decode && !out.empty() && out[0] == ' ') {
    out.erase(0, 1);
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return decode(ids.data(), ids.size(), skip_special);
}

std::string Tokenizer::token_text(int32_t id) const {
  return vocab_->valid(id) ? vocab_->token(id).text : std::string();
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  const int32_t id = vocab_->find(text);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

TokenType Tokenizer::token_type(int32_t id) const {
  return vocab_->valid(id) ? vocab_->token(id).type : TokenType::kUndefined;
}

int32_t Tokenizer::bos_id() const { return vocab_->data().bos_id; }
int32_t Tokenizer::eos_id() const { return vocab_->data().eos_id; }
int32_t Tokenizer::unk_id() const { return vocab_->data().unk_id; }
int32_t Tokenizer::pad_id() const { return vocab_->data().pad_id; }
bool Tokenizer::add_bos_default() const { return vocab_->data().add_bos; }
bool Tokenizer::add_eos_default() const { return vocab_->data().add_eos; }
int32_t Tokenizer::vocab_size() const { return vocab_->size(); }
TokenizerKind Tokenizer::kind() const { return vocab_->data().kind; }
const std::string& Tokenizer::pre_tokenizer() const { return vocab_->data().pre_name; }

}  // namespace qbc::tokenizer
