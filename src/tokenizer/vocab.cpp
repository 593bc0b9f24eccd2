#include "vocab.h"

#include <algorithm>
#include <cstdio>

#include "unicode.h"

namespace qbc::tokenizer::tok {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// "<0x0A>" -> 10; -1 when `text` is not of that form.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

bool is_added(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

}  // namespace

StatusOr<std::shared_ptr<const Vocab>> Vocab::build(VocabData data, std::string_view source,
                                                    bool strict_merges) {
  if (data.tokens.empty()) return invalid_argument(source, ": the vocabulary is empty");
  std::shared_ptr<Vocab> v(new Vocab(std::move(data)));
  const VocabData& d = v->data_;
  const int32_t n = v->size();

  v->text_to_id_.reserve(d.tokens.size());
  for (int32_t id = 0; id < n; ++id) {
    const TokenInfo& t = d.tokens[id];
    if (t.type == TokenType::kUnused && t.text.empty()) continue;  // hole in the id space
    // On duplicates the first id wins, like HF's vocab map and llama.cpp's token_to_id.
    v->text_to_id_.emplace(t.text, id);
  }

  for (auto* id : {&v->data_.bos_id, &v->data_.eos_id, &v->data_.unk_id, &v->data_.pad_id}) {
    if (*id >= n || *id < -1) *id = -1;
  }

  v->byte_tokens_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = v->find(hex);
    if (id < 0 && d.kind == TokenizerKind::kSentencePiece) id = v->find(std::string(1, char(b)));
    if (id < 0 && d.kind == TokenizerKind::kByteLevel) {
      id = v->find(byte_to_unicode(static_cast<uint8_t>(b)));
    }
    v->byte_tokens_[b] = id;
  }

  v->merges_.reserve(d.merges.size());
  for (size_t rank = 0; rank < d.merges.size(); ++rank) {
    const auto& [a, b] = d.merges[rank];
    const int32_t left = v->find(a);
    const int32_t right = v->find(b);
    const int32_t merged = v->find(a + b);
    if (left < 0 || right < 0 || merged < 0) {
      if (!strict_merges) continue;
      return invalid_argument(source, ": merges[", rank, "] '", a, " ", b,
                              "' names a token that is not in the vocabulary");
    }
    v->merges_.emplace(pair_key(left, right),
                       std::make_pair(static_cast<int32_t>(rank), merged));  // first wins
  }

  for (int32_t id = 0; id < n; ++id) {
    const TokenInfo& t = d.tokens[id];
    if (is_added(t.type) && !t.text.empty())
      v->added_[static_cast<uint8_t>(t.text[0])].push_back(id);
  }
  for (auto& list : v->added_) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return d.tokens[a].text.size() > d.tokens[b].text.size();
    });
  }

  auto splitter = RegexSplitter::compile(d.split_regexes);
  if (!splitter.ok()) return splitter.status().with_context(source);
  v->splitter_ = std::move(splitter).value();
  return std::shared_ptr<const Vocab>(std::move(v));
}

int32_t Vocab::find(std::string_view text) const {
  const auto it = text_to_id_.find(std::string(text));
  return it == text_to_id_.end() ? -1 : it->second;
}

int32_t Vocab::merge_rank(int32_t left, int32_t right, int32_t& merged) const {
  const auto it = merges_.find(pair_key(left, right));
  if (it == merges_.end()) return -1;
  merged = it->second.second;
  return it->second.first;
}

int Vocab::byte_of_token(int32_t id) const {
  if (!valid(id) || token(id).type != TokenType::kByte) return -1;
  return parse_byte_token(token(id).text);
}

}  // namespace qbc::tokenizer::tok
