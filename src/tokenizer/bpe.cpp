// Ranked BPE over token ids (HF `BPE` model and GGUF "gpt2" vocabularies).
//
// A word starts as its UTF-8 characters, each looked up as a token. Adjacent pairs found in
// the merge list are queued by rank; the lowest rank (leftmost on ties) merges first, as in
// HF tokenizers' Word::merge_all and llama.cpp's llm_tokenizer_bpe.
#include "bpe.h"

#include <algorithm>
#include <queue>

#include "unicode.h"

namespace qbc::tokenizer::tok {

namespace {

struct Symbol {
  int32_t id;  // -1: a character that is not a token (never merges)
  size_t start;
  size_t len;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t merged;
};

// Lowest rank first; on equal ranks the leftmost pair.
struct CandidateLess {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void emit_unknown(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out,
                  bool& last_was_unk) {
  const VocabData& d = vocab.data();
  if (d.byte_fallback || d.kind == TokenizerKind::kByteLevel) {
    // Byte-level words are already mapped to GPT-2's alphabet: go back to the raw bytes.
    const std::string raw =
        d.kind == TokenizerKind::kByteLevel ? unicode_text_to_bytes(text) : std::string(text);
    std::vector<int32_t> bytes;
    for (char c : raw) {
      const int32_t id = vocab.byte_token(static_cast<uint8_t>(c));
      if (id < 0) break;
      bytes.push_back(id);
    }
    if (bytes.size() == raw.size()) {
      out.insert(out.end(), bytes.begin(), bytes.end());
      last_was_unk = false;
      return;
    }
  }
  if (d.unk_id < 0) return;
  if (!(d.fuse_unk && last_was_unk)) out.push_back(d.unk_id);
  last_was_unk = true;
}

void bpe_encode_ranked(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out) {
  if (word.empty()) return;
  if (vocab.data().ignore_merges) {
    const int32_t whole = vocab.find(word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }

  std::vector<Symbol> syms;
  syms.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = utf8_char_len(word, pos);
    const auto index = static_cast<int32_t>(syms.size());
    syms.push_back({vocab.find(word.substr(pos, len)), pos, len, index - 1,
                    pos + len == word.size() ? -1 : index + 1});
    pos += len;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateLess> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t a = syms[left].id;
    const int32_t b = syms[right].id;
    if (a < 0 || b < 0) return;
    int32_t merged = -1;
    const int32_t rank = vocab.merge_rank(a, b, merged);
    if (rank < 0) return;
    queue.push({rank, left, right, a, b, merged});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = syms[c.left];
    Symbol& right = syms[c.right];
    // Stale entry: a side was merged away or changed since it was queued.
    if (left.len == 0 || right.len == 0 || left.next != c.right || left.id != c.left_id ||
        right.id != c.right_id) {
      continue;
    }
    left.id = c.merged;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.left;
    try_add(left.prev, c.left);
    try_add(c.left, left.next);
  }

  bool last_was_unk = false;
  for (int32_t i = 0; i != -1; i = syms[i].next) {
    if (syms[i].id >= 0) {
      out.push_back(syms[i].id);
      last_was_unk = false;
    } else {
      emit_unknown(vocab, word.substr(syms[i].start, syms[i].len), out, last_was_unk);
    }
  }
}

}  // namespace qbc::tokenizer::tok
