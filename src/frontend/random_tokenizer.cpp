// The tokenizer of random models (see qbc/frontend/random_tokenizer.h).
#include "qbc/frontend/random_tokenizer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

namespace qbc::frontend {
namespace {

using OrderedJson = nlohmann::ordered_json;

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others for U+0100
// onwards, in byte order. Returns the UTF-8 text of byte b's symbol.
std::vector<std::string> byte_symbols() {
  std::vector<std::string> out(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const int cp = printable ? b : next++;
    std::string u;
    if (cp < 0x80) {
      u += static_cast<char>(cp);
    } else {
      u += static_cast<char>(0xC0 | (cp >> 6));
      u += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[static_cast<size_t>(b)] = u;
  }
  return out;
}

// Control bytes other than tab, newline and carriage return: the only bytes a full
// vocabulary may leave out.
bool droppable(int b) { return (b < 32 && b != '\t' && b != '\n' && b != '\r') || b == 127; }

// The merges making pseudo-words, in rank order, until `count` of them: syllables, " "+syllable,
// two syllables, " "+two, " "+three, then three without the space.
std::vector<std::pair<std::string, std::string>> word_merges(size_t count,
                                                             const std::string& space) {
  static const char kConsonants[] = "bdfghklmnprstvz";
  static const char kVowels[] = "aeiou";
  std::vector<std::string> syl;
  for (const char* c = kConsonants; *c; ++c)
    for (const char* v = kVowels; *v; ++v) syl.push_back(std::string(1, *c) + *v);
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](std::string a, std::string b) {
    if (out.size() < count) out.emplace_back(std::move(a), std::move(b));
  };
  for (const std::string& s : syl) add(s.substr(0, 1), s.substr(1));
  for (const std::string& s : syl) add(space, s);
  for (const std::string& a : syl)
    for (const std::string& b : syl) add(a, b);
  for (const std::string& a : syl)
    for (const std::string& b : syl) add(space + a, b);
  for (const std::string& a : syl)
    for (const std::string& b : syl)
      for (const std::string& c : syl) add(space + a + b, c);
  for (const std::string& a : syl)
    for (const std::string& b : syl)
      for (const std::string& c : syl) add(a + b, c);
  return out;
}

}  // namespace

std::string random_model_tokenizer_json(const HParams& hp,
                                        const std::map<int64_t, std::string>& extra) {
  const int64_t vocab = hp.vocab_size;
  // Special tokens at the config's ids.
  std::map<int64_t, std::string> special;
  std::vector<int64_t> eos;
  for (int64_t e : hp.eos_token_ids) {
    if (e >= 0 && e < vocab && std::find(eos.begin(), eos.end(), e) == eos.end()) eos.push_back(e);
  }
  for (size_t k = 0; k < eos.size(); ++k)
    special[eos[k]] = k == 0 ? "<|eos|>" : "<|eos_" + std::to_string(k) + "|>";
  if (hp.bos_token_id && *hp.bos_token_id >= 0 && *hp.bos_token_id < vocab)
    special[*hp.bos_token_id] = special.count(*hp.bos_token_id) ? "<|endoftext|>" : "<|bos|>";
  for (const auto& [id, name] : extra) {
    if (id >= 0 && id < vocab && special.count(id) == 0) special[id] = name;
  }

  // Bytes at their own ids where free, the displaced ones at the next free ids.
  const std::vector<std::string> sym = byte_symbols();
  std::vector<std::string> text(static_cast<size_t>(std::max<int64_t>(vocab, 0)));
  for (const auto& [id, name] : special) text[static_cast<size_t>(id)] = name;
  std::vector<int> displaced;
  for (int b = 0; b < 256; ++b) {
    if (b < vocab && text[static_cast<size_t>(b)].empty()) {
      text[static_cast<size_t>(b)] = sym[static_cast<size_t>(b)];
    } else {
      displaced.push_back(b);
    }
  }
  size_t next = 0;
  for (int b : displaced) {
    while (next < text.size() && !text[next].empty()) ++next;
    if (next < text.size()) {
      text[next] = sym[static_cast<size_t>(b)];
    } else if (!droppable(b)) {
      return "";  // no room for a printable byte: no tokenizer
    }
  }
  // Every other id: a pseudo-word.
  size_t free_ids = 0;
  for (const std::string& t : text) free_ids += t.empty();
  const auto merges = word_merges(free_ids, sym[' ']);
  size_t m = 0;
  for (std::string& t : text) {
    if (t.empty() && m < merges.size()) {
      t = merges[m].first + merges[m].second;
      ++m;
    }
  }

  OrderedJson vocab_json = OrderedJson::object();
  for (size_t id = 0; id < text.size(); ++id) {
    if (!text[id].empty()) vocab_json[text[id]] = id;
  }
  OrderedJson added = OrderedJson::array();
  for (const auto& [id, name] : special) {
    added.push_back({{"id", id},
                     {"content", name},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  OrderedJson merge_json = OrderedJson::array();
  for (size_t i = 0; i < m; ++i) merge_json.push_back(merges[i].first + " " + merges[i].second);
  OrderedJson j = {{"version", "1.0"},
                   {"added_tokens", added},
                   {"normalizer", nullptr},
                   {"pre_tokenizer",
                    {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", true}}},
                   {"post_processor", nullptr},
                   {"decoder", {{"type", "ByteLevel"}}},
                   {"model", {{"type", "BPE"}, {"vocab", vocab_json}, {"merges", merge_json}}}};
  return j.dump(1) + "\n";
}

}  // namespace qbc::frontend
