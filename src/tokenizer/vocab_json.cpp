// The vocabulary asset qbc_vocab.json (docs/mxq.md, "Host assets"): every field of a VocabData,
// so a tokenizer whose source has no tokenizer.json (a GGUF vocabulary) travels in an MXQ and
// loads back without the GGUF reader. Written by Tokenizer::to_vocab_json(), read by
// Tokenizer::from_vocab_json().
//
//   {"format": "qbc-vocab", "version": 1, "kind": "sentencepiece" | "byte-level",
//    "merge_order": "rank" | "score", <the bool settings>, "split_regexes": [...],
//    "pre_name": "...", "bos_id": ..., "eos_id": ..., "unk_id": ..., "pad_id": ...,
//    "tokens": [text, ...], "scores": [float, ...], "types": [int, ...],
//    "lstrip": [id, ...], "rstrip": [id, ...], "merges": [[left, right], ...]}
//
// A string that is not valid UTF-8 (a GGUF vocabulary may hold raw bytes) is written as
// {"hex": "<two hex digits a byte>"}.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "qbc/support/json_parse.h"
#include "qbc/support/quote.h"
#include "qbc/tokenizer/tokenizer.h"
#include "vocab.h"

namespace qbc::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kFormat = "qbc-vocab";
constexpr int kVersion = 1;

// The bool settings, by their key.
struct Flag {
  const char* key;
  bool VocabData::*field;
};
constexpr Flag kFlags[] = {
    {"byte_fallback", &VocabData::byte_fallback},
    {"fuse_unk", &VocabData::fuse_unk},
    {"ignore_merges", &VocabData::ignore_merges},
    {"add_space_prefix", &VocabData::add_space_prefix},
    {"space_prefix_first_only", &VocabData::space_prefix_first_only},
    {"space_prefix_unless_present", &VocabData::space_prefix_unless_present},
    {"escape_whitespace", &VocabData::escape_whitespace},
    {"split_on_space_mark", &VocabData::split_on_space_mark},
    {"byte_level_prefix_space", &VocabData::byte_level_prefix_space},
    {"strip_leading_space_on_decode", &VocabData::strip_leading_space_on_decode},
    {"add_bos", &VocabData::add_bos},
    {"add_eos", &VocabData::add_eos},
};

struct Id {
  const char* key;
  int32_t VocabData::*field;
};
constexpr Id kIds[] = {{"bos_id", &VocabData::bos_id},
                       {"eos_id", &VocabData::eos_id},
                       {"unk_id", &VocabData::unk_id},
                       {"pad_id", &VocabData::pad_id}};

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are what nlohmann refuses too.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
      return false;
    i += n + 1;
  }
  return true;
}

Json text_value(const std::string& s) {
  if (valid_utf8(s)) return s;
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : s) {
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 15]);
  }
  return Json{{"hex", hex}};
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads the values of one file, each error located by `source` and the JSON path.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Status error(const std::string& path, const std::string& what) const {
    return invalid_argument(source_, ": ", path, ": ", what);
  }

  StatusOr<std::string> text(const Json& j, const std::string& path) const {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.size() == 1 && j.contains("hex") && j["hex"].is_string()) {
      const std::string& hex = j["hex"].get_ref<const std::string&>();
      if (hex.size() % 2 != 0) return error(path, "hex text of odd length");
      std::string out;
      for (size_t i = 0; i < hex.size(); i += 2) {
        const int hi = hex_digit(hex[i]), lo = hex_digit(hex[i + 1]);
        if (hi < 0 || lo < 0) return error(path, "hex text " + quote_prefix(hex));
        out.push_back(static_cast<char>(hi * 16 + lo));
      }
      return out;
    }
    return error(path, "expected a string or {\"hex\": ...}");
  }

  StatusOr<const Json*> array(const Json& root, const char* key, bool required) const {
    auto it = root.find(key);
    if (it == root.end()) {
      if (required) return error(key, "missing");
      return static_cast<const Json*>(nullptr);
    }
    if (!it->is_array()) return error(key, "expected an array");
    return &*it;
  }

  StatusOr<int64_t> integer(const Json& j, const std::string& path, int64_t lo, int64_t hi) const {
    if (!j.is_number_integer()) return error(path, "expected an integer");
    const auto v =
        j.is_number_unsigned()
            ? static_cast<int64_t>(std::min<uint64_t>(j.get<uint64_t>(), uint64_t{INT64_MAX}))
            : j.get<int64_t>();
    if (v < lo || v > hi)
      return error(path, std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "]");
    return v;
  }

 private:
  std::string source_;
};

}  // namespace

std::string Tokenizer::to_vocab_json() const {
  const VocabData& d = vocab_->data();
  Json j;
  j["format"] = std::string(kFormat);
  j["version"] = kVersion;
  j["kind"] = d.kind == TokenizerKind::kByteLevel ? "byte-level" : "sentencepiece";
  j["merge_order"] = d.merge_order == MergeOrder::kByScore ? "score" : "rank";
  for (const Flag& f : kFlags) j[f.key] = d.*f.field;
  Json regexes = Json::array();
  for (const std::string& r : d.split_regexes) regexes.push_back(text_value(r));
  j["split_regexes"] = std::move(regexes);
  j["pre_name"] = text_value(d.pre_name);
  for (const Id& id : kIds) j[id.key] = d.*id.field;
  Json tokens = Json::array(), scores = Json::array(), types = Json::array();
  Json lstrip = Json::array(), rstrip = Json::array();
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    const TokenInfo& t = d.tokens[i];
    tokens.push_back(text_value(t.text));
    scores.push_back(static_cast<double>(t.score));
    types.push_back(static_cast<int>(t.type));
    if (t.lstrip) lstrip.push_back(i);
    if (t.rstrip) rstrip.push_back(i);
  }
  j["tokens"] = std::move(tokens);
  j["scores"] = std::move(scores);
  j["types"] = std::move(types);
  j["lstrip"] = std::move(lstrip);
  j["rstrip"] = std::move(rstrip);
  Json merges = Json::array();
  for (const auto& [l, r] : d.merges) merges.push_back(Json::array({text_value(l), text_value(r)}));
  j["merges"] = std::move(merges);
  return j.dump() + "\n";
}

StatusOr<Tokenizer> Tokenizer::from_vocab_json(std::string_view text, std::string_view source) {
  const std::string src(source);
  QBC_ASSIGN_OR_RETURN(const Json root, parse_json_text<Json>(text, src));
  Reader rd(src);
  if (!root.is_object()) return rd.error("(top level)", "expected an object");
  auto str = [&](const char* key) -> StatusOr<std::string> {
    auto it = root.find(key);
    if (it == root.end()) return rd.error(key, "missing");
    return rd.text(*it, key);
  };
  QBC_ASSIGN_OR_RETURN(const std::string format, str("format"));
  if (format != kFormat)
    return rd.error("format", quote_prefix(format) + " is not \"" + std::string(kFormat) + "\"");
  auto vit = root.find("version");
  if (vit == root.end()) return rd.error("version", "missing");
  QBC_ASSIGN_OR_RETURN(const int64_t version, rd.integer(*vit, "version", 0, INT32_MAX));
  if (version != kVersion)
    return rd.error("version", "version " + std::to_string(version) + " (this reader reads " +
                                   std::to_string(kVersion) + ")");
  VocabData d;
  QBC_ASSIGN_OR_RETURN(const std::string kind, str("kind"));
  if (kind == "sentencepiece")
    d.kind = TokenizerKind::kSentencePiece;
  else if (kind == "byte-level")
    d.kind = TokenizerKind::kByteLevel;
  else
    return rd.error("kind", quote_prefix(kind) + " (expected sentencepiece or byte-level)");
  QBC_ASSIGN_OR_RETURN(const std::string order, str("merge_order"));
  if (order == "rank")
    d.merge_order = MergeOrder::kByRank;
  else if (order == "score")
    d.merge_order = MergeOrder::kByScore;
  else
    return rd.error("merge_order", quote_prefix(order) + " (expected rank or score)");
  for (const Flag& f : kFlags) {
    auto it = root.find(f.key);
    if (it == root.end()) return rd.error(f.key, "missing");
    if (!it->is_boolean()) return rd.error(f.key, "expected true or false");
    d.*f.field = it->get<bool>();
  }
  QBC_ASSIGN_OR_RETURN(const Json* regexes, rd.array(root, "split_regexes", true));
  for (size_t i = 0; i < regexes->size(); ++i) {
    QBC_ASSIGN_OR_RETURN(std::string r,
                         rd.text((*regexes)[i], "split_regexes[" + std::to_string(i) + "]"));
    d.split_regexes.push_back(std::move(r));
  }
  QBC_ASSIGN_OR_RETURN(d.pre_name, str("pre_name"));

  QBC_ASSIGN_OR_RETURN(const Json* tokens, rd.array(root, "tokens", true));
  QBC_ASSIGN_OR_RETURN(const Json* scores, rd.array(root, "scores", true));
  QBC_ASSIGN_OR_RETURN(const Json* types, rd.array(root, "types", true));
  const size_t n = tokens->size();  // bounded by the text: each entry takes bytes
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) return rd.error("tokens", "bad size");
  if (scores->size() != n)
    return rd.error(
        "scores", std::to_string(scores->size()) + " entries for " + std::to_string(n) + " tokens");
  if (types->size() != n)
    return rd.error(
        "types", std::to_string(types->size()) + " entries for " + std::to_string(n) + " tokens");
  d.tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    TokenInfo& t = d.tokens[i];
    QBC_ASSIGN_OR_RETURN(t.text, rd.text((*tokens)[i], "tokens" + at));
    const Json& s = (*scores)[i];
    if (!s.is_number()) return rd.error("scores" + at, "expected a number");
    t.score = static_cast<float>(s.get<double>());
    QBC_ASSIGN_OR_RETURN(const int64_t type, rd.integer((*types)[i], "types" + at, 0, 6));
    t.type = static_cast<TokenType>(type);
  }
  for (const char* key : {"lstrip", "rstrip"}) {
    QBC_ASSIGN_OR_RETURN(const Json* ids, rd.array(root, key, true));
    for (size_t i = 0; i < ids->size(); ++i) {
      QBC_ASSIGN_OR_RETURN(const int64_t id,
                           rd.integer((*ids)[i], std::string(key) + "[" + std::to_string(i) + "]",
                                      0, static_cast<int64_t>(n) - 1));
      (key[0] == 'l' ? d.tokens[id].lstrip : d.tokens[id].rstrip) = true;
    }
  }
  for (const Id& id : kIds) {
    auto it = root.find(id.key);
    if (it == root.end()) return rd.error(id.key, "missing");
    QBC_ASSIGN_OR_RETURN(const int64_t v, rd.integer(*it, id.key, -1, static_cast<int64_t>(n) - 1));
    d.*id.field = static_cast<int32_t>(v);
  }
  QBC_ASSIGN_OR_RETURN(const Json* merges, rd.array(root, "merges", true));
  d.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string at = "merges[" + std::to_string(i) + "]";
    const Json& m = (*merges)[i];
    if (!m.is_array() || m.size() != 2) return rd.error(at, "expected [left, right]");
    QBC_ASSIGN_OR_RETURN(std::string l, rd.text(m[0], at + "[0]"));
    QBC_ASSIGN_OR_RETURN(std::string r, rd.text(m[1], at + "[1]"));
    d.merges.emplace_back(std::move(l), std::move(r));
  }
  // Non-strict like the GGUF loader: a merge the source dropped is dropped again.
  return from_data(std::move(d), src, /*strict_merges=*/false);
}

}  // namespace qbc::tokenizer
