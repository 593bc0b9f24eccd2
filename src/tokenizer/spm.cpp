// SentencePiece-style BPE by token score, the algorithm of llama.cpp's llm_tokenizer_spm.
//
// The text is cut into UTF-8 characters (a broken sequence counts byte by byte, where
// llama.cpp would let its lead byte swallow the next bytes; valid text is unaffected);
// every adjacent pair whose concatenation is a token is queued by that token's score; the
// best pair is merged and its new neighbours are queued, until nothing merges. Symbols that
// are not tokens at the end (single characters) fall back to `<0xNN>` byte tokens.
#include <algorithm>
#include <queue>

#include "bpe.h"
#include "unicode.h"

namespace qbc::tokenizer::tok {

namespace {

struct Symbol {
  size_t start;
  size_t len;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  size_t len;
};

// Highest score first; on equal scores the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void spm_encode_scored(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = utf8_char_len(text, pos);
    const auto index = static_cast<int32_t>(syms.size());
    syms.push_back({pos, len, index - 1, pos + len == text.size() ? -1 : index + 1});
    pos += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t len = syms[left].len + syms[right].len;
    const int32_t id = vocab.find(text.substr(syms[left].start, len));
    if (id < 0) return;
    queue.push({vocab.token(id).score, left, right, len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = syms[b.left];
    Symbol& right = syms[b.right];
    // Stale entry: one side was merged away or grew since it was queued.
    if (left.len == 0 || right.len == 0 || left.next != b.right || left.len + right.len != b.len) {
      continue;
    }
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }

  bool last_was_unk = false;
  for (int32_t i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
    const std::string_view piece = text.substr(syms[i].start, syms[i].len);
    const int32_t id = vocab.find(piece);
    if (id >= 0) {
      out.push_back(id);
      last_was_unk = false;
    } else {
      emit_unknown(vocab, piece, out, last_was_unk);
    }
  }
}

}  // namespace qbc::tokenizer::tok
