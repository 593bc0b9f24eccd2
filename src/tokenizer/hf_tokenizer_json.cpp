// HuggingFace tokenizer.json (BPE models) -> VocabData.
//
// Supported pieces, which cover Llama 1/2/3, Mistral, Qwen2/3, GPT-2, SmolLM2 and stories260K:
//   model         BPE (vocab, merges as "a b" or ["a","b"], byte_fallback, fuse_unk,
//                 ignore_merges, unk_token)
//   normalizer    null, Sequence, Prepend("▁"), Replace(" " -> "▁"), NFC (treated as identity)
//   pre_tokenizer null, Sequence, Metaspace, ByteLevel, Split(Isolated), Digits
//   post_processor TemplateProcessing (BOS/EOS), Sequence, ByteLevel, Roberta/BertProcessing
//   decoder       only read to learn byte-level vs. "▁" decoding and leading-space stripping
// Anything else is kUnimplemented naming the file and the key.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "qbc/support/json_parse.h"
#include "qbc/support/quote.h"
#include "loaders.h"
#include "pretokenize.h"
#include "unicode.h"

namespace qbc::tokenizer::tok {

namespace {

using Json = nlohmann::json;

// Unused ids a vocabulary may leave between its entries (HF vocabularies are dense; a few models
// pad the table). Bounds the token table by the entries the file holds.
constexpr size_t kMaxTokenIdHoles = 1 << 16;

StatusOr<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path.string(), ": cannot open file");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The member `key` of object `j`, or nullptr when `j` is not an object or lacks it.
const Json* member(const Json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(std::string(key));
  return it == j.end() ? nullptr : &*it;
}

bool flag(const Json& j, std::string_view key, bool fallback) {
  const Json* m = member(j, key);
  return m != nullptr && m->is_boolean() ? m->get<bool>() : fallback;
}

std::string text_of(const Json& j, std::string_view key) {
  const Json* m = member(j, key);
  return m != nullptr && m->is_string() ? m->get<std::string>() : std::string();
}

// A special-token field of tokenizer_config.json: "text" or {"content": "text"}.
std::string token_field(const Json& j, std::string_view key) {
  const Json* m = member(j, key);
  if (m == nullptr) return {};
  if (m->is_string()) return m->get<std::string>();
  return text_of(*m, "content");
}

int32_t find_text(const VocabData& d, std::string_view text) {
  if (text.empty()) return -1;
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    if (d.tokens[i].text == text) return static_cast<int32_t>(i);
  }
  return -1;
}

class HfParser {
 public:
  explicit HfParser(std::string source) : src_(std::move(source)) {}

  Status parse(const Json& root) {
    if (!root.is_object()) return invalid_argument(src_, ": the top level is not an object");
    root_ = &root;
    const Json* model = member(root, "model");
    if (model == nullptr || !model->is_object()) {
      return invalid_argument(src_, ": missing key 'model'");
    }
    QBC_RETURN_IF_ERROR(parse_model(*model));
    if (const Json* added = member(root, "added_tokens")) QBC_RETURN_IF_ERROR(parse_added(*added));
    if (const Json* n = member(root, "normalizer")) QBC_RETURN_IF_ERROR(parse_normalizer(*n));
    if (const Json* p = member(root, "pre_tokenizer")) QBC_RETURN_IF_ERROR(parse_pre(*p));
    if (const Json* p = member(root, "post_processor")) QBC_RETURN_IF_ERROR(parse_post(*p));
    if (const Json* dec = member(root, "decoder")) parse_decoder(*dec);
    if (d_.kind == TokenizerKind::kSentencePiece && d_.escape_whitespace && !saw_decoder_strip_) {
      d_.strip_leading_space_on_decode = d_.add_space_prefix;
    }
    d_.pre_name = d_.kind == TokenizerKind::kByteLevel ? "hf-json" : "";
    return ok_status();
  }

  VocabData& data() { return d_; }

 private:
  Status bad(std::string_view key, std::string_view what) const {
    return invalid_argument(src_, ": ", key, ": ", what);
  }
  Status unsupported(std::string_view key, std::string_view what) const {
    return unimplemented(src_, ": ", key, ": unsupported ", what);
  }

  Status parse_model(const Json& m) {
    std::string type = text_of(m, "type");
    if (type.empty() && member(m, "merges") != nullptr) type = "BPE";
    if (type != "BPE") {
      return unsupported("model.type", "tokenizer model " + quote_prefix(type) + " (supported: BPE)");
    }
    const Json* vocab = member(m, "vocab");
    if (vocab == nullptr || !vocab->is_object() || vocab->empty()) {
      return bad("model.vocab", "missing or not a non-empty object");
    }
    int64_t max_id = -1;
    for (const auto& [text, id] : vocab->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX) {
        return bad("model.vocab", "bad id for token " + quote_prefix(text));
      }
      max_id = std::max(max_id, id.get<int64_t>());
    }
    // Ids index a table allocated here, so they are bounded by the entries the file holds.
    const Json* added = member(*root_, "added_tokens");
    max_slots_ = vocab->size() + (added != nullptr && added->is_array() ? added->size() : 0) +
                 kMaxTokenIdHoles;
    if (static_cast<uint64_t>(max_id) >= max_slots_) {
      return bad("model.vocab", "token id " + std::to_string(max_id) + " is beyond the " +
                                    std::to_string(vocab->size()) + " vocabulary entries (+" +
                                    std::to_string(kMaxTokenIdHoles) + " unused ids at most)");
    }
    d_.tokens.assign(static_cast<size_t>(max_id + 1), TokenInfo{"", 0.0f, TokenType::kUnused});
    for (const auto& [text, id] : vocab->items()) {
      d_.tokens[id.get<size_t>()] = TokenInfo{text, 0.0f, TokenType::kNormal};
    }
    if (const Json* merges = member(m, "merges")) {
      if (!merges->is_array()) return bad("model.merges", "not an array");
      d_.merges.reserve(merges->size());
      for (size_t i = 0; i < merges->size(); ++i) {
        const Json& e = (*merges)[i];
        if (e.is_string()) {
          const std::string s = e.get<std::string>();
          const size_t space = s.find(' ');
          if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
            return bad("model.merges[" + std::to_string(i) + "]", quote_prefix(s) + " is not 'a b'");
          }
          d_.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
          d_.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
        } else {
          return bad("model.merges[" + std::to_string(i) + "]", "not a string or a pair");
        }
      }
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (!text_of(m, key).empty()) return unsupported(std::string("model.") + key, "BPE option");
    }
    d_.merge_order = MergeOrder::kByRank;
    d_.byte_fallback = flag(m, "byte_fallback", false);
    d_.fuse_unk = flag(m, "fuse_unk", false);
    d_.ignore_merges = flag(m, "ignore_merges", false);
    d_.unk_id = find_text(d_, text_of(m, "unk_token"));
    if (d_.byte_fallback) {  // "<0xNN>" entries decode to their byte
      for (TokenInfo& t : d_.tokens) {
        if (t.text.size() == 6 && t.text.compare(0, 3, "<0x") == 0 && t.text[5] == '>') {
          t.type = TokenType::kByte;
        }
      }
    }
    return ok_status();
  }

  Status parse_added(const Json& added) {
    if (!added.is_array()) return bad("added_tokens", "not an array");
    for (size_t i = 0; i < added.size(); ++i) {
      const Json& a = added[i];
      const Json* id = member(a, "id");
      const std::string content = text_of(a, "content");
      if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() >= INT32_MAX || content.empty()) {
        return bad("added_tokens[" + std::to_string(i) + "]", "needs an id and a content");
      }
      const auto index = id->get<size_t>();
      if (index >= max_slots_) {
        return bad("added_tokens[" + std::to_string(i) + "]",
                   "id " + std::to_string(index) + " is beyond the vocabulary and added tokens");
      }
      if (index >= d_.tokens.size()) {
        d_.tokens.resize(index + 1, TokenInfo{"", 0.0f, TokenType::kUnused});
      }
      TokenInfo& t = d_.tokens[index];
      t.text = content;
      t.type = flag(a, "special", false) ? TokenType::kControl : TokenType::kUserDefined;
      t.lstrip = flag(a, "lstrip", false);
      t.rstrip = flag(a, "rstrip", false);
    }
    return ok_status();
  }

  Status parse_normalizer(const Json& n) {
    if (n.is_null()) return ok_status();
    const std::string type = text_of(n, "type");
    if (type == "Sequence") {
      const Json* list = member(n, "normalizers");
      if (list == nullptr || !list->is_array()) return bad("normalizer.normalizers", "not a list");
      for (const Json& e : *list) QBC_RETURN_IF_ERROR(parse_normalizer(e));
      return ok_status();
    }
    if (type == "Prepend" && text_of(n, "prepend") == kSpaceMark) {
      d_.add_space_prefix = true;  // "▁" before escaping == " " before escaping
      return ok_status();
    }
    if (type == "Replace") {
      const Json* pattern = member(n, "pattern");
      if (pattern != nullptr && text_of(*pattern, "String") == " " &&
          text_of(n, "content") == kSpaceMark) {
        d_.escape_whitespace = true;
        return ok_status();
      }
    }
    if (type == "NFC") return ok_status();  // TODO(tokenizer): NFC; inputs are assumed NFC
    return unsupported("normalizer.type", "normalizer " + quote_prefix(type));
  }

  Status parse_pre(const Json& p) {
    if (p.is_null()) return ok_status();
    const std::string type = text_of(p, "type");
    if (type == "Sequence") {
      const Json* list = member(p, "pretokenizers");
      if (list == nullptr || !list->is_array()) {
        return bad("pre_tokenizer.pretokenizers", "not a list");
      }
      for (const Json& e : *list) QBC_RETURN_IF_ERROR(parse_pre(e));
      return ok_status();
    }
    if (type == "Metaspace") {
      if (text_of(p, "replacement") != kSpaceMark) {
        return unsupported("pre_tokenizer.replacement", "Metaspace replacement");
      }
      std::string scheme = text_of(p, "prepend_scheme");
      if (scheme.empty()) scheme = flag(p, "add_prefix_space", true) ? "always" : "never";
      d_.escape_whitespace = true;
      d_.add_space_prefix = scheme != "never";
      d_.space_prefix_first_only = scheme == "first";
      d_.space_prefix_unless_present = true;
      d_.split_on_space_mark = flag(p, "split", true);
      return ok_status();
    }
    if (type == "ByteLevel") {
      d_.kind = TokenizerKind::kByteLevel;
      d_.byte_level_prefix_space = flag(p, "add_prefix_space", false);
      if (flag(p, "use_regex", true)) d_.split_regexes.emplace_back(gpt2_pattern());
      return ok_status();
    }
    if (type == "Split") {
      if (text_of(p, "behavior") != "Isolated" || flag(p, "invert", false)) {
        return unsupported("pre_tokenizer.behavior", "Split behavior (only Isolated)");
      }
      const Json* pattern = member(p, "pattern");
      if (pattern != nullptr && member(*pattern, "Regex") != nullptr) {
        d_.split_regexes.push_back(text_of(*pattern, "Regex"));
      } else if (pattern != nullptr && member(*pattern, "String") != nullptr) {
        d_.split_regexes.push_back(regex_escape(text_of(*pattern, "String")));
      } else {
        return bad("pre_tokenizer.pattern", "needs Regex or String");
      }
      return ok_status();
    }
    if (type == "Digits") {
      d_.split_regexes.emplace_back(flag(p, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
      return ok_status();
    }
    return unsupported("pre_tokenizer.type", "pre-tokenizer " + quote_prefix(type));
  }

  // Learns BOS/EOS and add_bos/add_eos from the template; unknown processors change nothing.
  Status parse_post(const Json& p) {
    const std::string type = text_of(p, "type");
    if (type == "Sequence") {
      if (const Json* list = member(p, "processors"); list != nullptr && list->is_array()) {
        for (const Json& e : *list) QBC_RETURN_IF_ERROR(parse_post(e));
      }
    } else if (type == "TemplateProcessing") {
      const Json* single = member(p, "single");
      if (single == nullptr || !single->is_array() || single->empty()) return ok_status();
      const int32_t first = template_special(p, single->front());
      const int32_t last = single->size() > 1 ? template_special(p, single->back()) : -1;
      if (first >= 0) d_.bos_id = first, d_.add_bos = true;
      if (last >= 0) d_.eos_id = last, d_.add_eos = true;
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      const Json* cls = member(p, "cls");
      const Json* sep = member(p, "sep");
      if (cls && cls->is_array() && cls->size() == 2 && (*cls)[1].is_number_integer()) {
        d_.bos_id = (*cls)[1].get<int32_t>(), d_.add_bos = true;
      }
      if (sep && sep->is_array() && sep->size() == 2 && (*sep)[1].is_number_integer()) {
        d_.eos_id = (*sep)[1].get<int32_t>(), d_.add_eos = true;
      }
    }
    return ok_status();
  }

  // The id of a {"SpecialToken": {"id": name}} template item, or -1.
  int32_t template_special(const Json& processor, const Json& item) const {
    const Json* special = member(item, "SpecialToken");
    if (special == nullptr) return -1;
    const std::string name = text_of(*special, "id");
    if (const Json* table = member(processor, "special_tokens")) {
      const Json* entry = member(*table, name);
      const Json* ids = entry != nullptr ? member(*entry, "ids") : nullptr;
      if (ids != nullptr && ids->is_array() && ids->size() == 1 && (*ids)[0].is_number_integer()) {
        return (*ids)[0].get<int32_t>();
      }
    }
    return find_text(d_, name);
  }

  void parse_decoder(const Json& dec) {
    const std::string type = text_of(dec, "type");
    if (type == "Sequence") {
      if (const Json* list = member(dec, "decoders"); list != nullptr && list->is_array()) {
        for (const Json& e : *list) parse_decoder(e);
      }
    } else if (type == "ByteLevel") {
      d_.kind = TokenizerKind::kByteLevel;
    } else if (type == "Strip") {
      const Json* start = member(dec, "start");
      saw_decoder_strip_ = true;
      d_.strip_leading_space_on_decode = start != nullptr && start->is_number_integer() &&
                                         start->get<int>() > 0 && text_of(dec, "content") == " ";
    } else if (type == "Metaspace") {
      saw_decoder_strip_ = true;
      const std::string scheme = text_of(dec, "prepend_scheme");
      d_.strip_leading_space_on_decode =
          scheme.empty() ? flag(dec, "add_prefix_space", true) : scheme != "never";
    }
  }

  std::string src_;
  const Json* root_ = nullptr;
  size_t max_slots_ = 0;  // ids < this: vocab entries + added tokens + kMaxTokenIdHoles
  VocabData d_;
  bool saw_decoder_strip_ = false;
};

// tokenizer_config.json: add_bos_token / add_eos_token and the special token texts.
Status apply_tokenizer_config(std::string_view text, const std::string& src, VocabData& d) {
  QBC_ASSIGN_OR_RETURN(const Json cfg, parse_json_text(text, src));
  if (!cfg.is_object()) return invalid_argument(src, ": the top level is not an object");
  d.add_bos = flag(cfg, "add_bos_token", d.add_bos);
  d.add_eos = flag(cfg, "add_eos_token", d.add_eos);
  const std::pair<const char*, int32_t*> fields[] = {{"bos_token", &d.bos_id},
                                                     {"eos_token", &d.eos_id},
                                                     {"unk_token", &d.unk_id},
                                                     {"pad_token", &d.pad_id}};
  for (const auto& [key, id] : fields) {
    const std::string text = token_field(cfg, key);
    if (text.empty()) continue;
    const int32_t found = find_text(d, text);
    if (found < 0) return invalid_argument(src, ": ", key, ": ", quote_prefix(text), " is not a token");
    *id = found;
  }
  return ok_status();
}

// config.json: bos/eos ids, only where the tokenizer files left them unset.
Status apply_model_config(std::string_view text, const std::string& src, VocabData& d) {
  QBC_ASSIGN_OR_RETURN(const Json cfg, parse_json_text(text, src));
  for (const auto& [key, id] :
       {std::pair{"bos_token_id", &d.bos_id}, {"eos_token_id", &d.eos_id}}) {
    if (*id >= 0) continue;
    const Json* m = member(cfg, key);
    if (m != nullptr && m->is_array() && !m->empty()) m = &(*m)[0];  // eos lists: the first
    if (m != nullptr && m->is_number_integer()) *id = m->get<int32_t>();
  }
  return ok_status();
}

}  // namespace

StatusOr<std::shared_ptr<const Vocab>> load_hf_vocab(const std::filesystem::path& tokenizer_json,
                                                     const std::filesystem::path& tokenizer_config,
                                                     const std::filesystem::path& model_config) {
  const std::string src = tokenizer_json.string();
  QBC_ASSIGN_OR_RETURN(const std::string json, read_file(tokenizer_json));
  QBC_ASSIGN_OR_RETURN(const Json root, parse_json_text(json, src));
  HfParser parser(src);
  try {  // get<>() on a wrongly typed value throws; nothing else here does
    QBC_RETURN_IF_ERROR(parser.parse(root));
    // Errors name each file by its own path.
    if (!tokenizer_config.empty()) {
      QBC_ASSIGN_OR_RETURN(const std::string text, read_file(tokenizer_config));
      QBC_RETURN_IF_ERROR(apply_tokenizer_config(text, tokenizer_config.string(), parser.data()));
    }
    if (!model_config.empty()) {
      QBC_ASSIGN_OR_RETURN(const std::string text, read_file(model_config));
      QBC_RETURN_IF_ERROR(apply_model_config(text, model_config.string(), parser.data()));
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(src, ": unexpected value type: ", e.what());
  }
  return Vocab::build(std::move(parser.data()), src, /*strict_merges=*/true);
}

StatusOr<std::shared_ptr<const Vocab>> load_hf_vocab_text(std::string_view tokenizer_json,
                                                          std::string_view tokenizer_config,
                                                          std::string_view model_config,
                                                          const std::string& source) {
  QBC_ASSIGN_OR_RETURN(const Json root, parse_json_text(tokenizer_json, source));
  HfParser parser(source);
  try {  // get<>() on a wrongly typed value throws; nothing else here does
    QBC_RETURN_IF_ERROR(parser.parse(root));
    if (!tokenizer_config.empty())
      QBC_RETURN_IF_ERROR(
          apply_tokenizer_config(tokenizer_config, source + " (tokenizer_config.json)", parser.data()));
    if (!model_config.empty())
      QBC_RETURN_IF_ERROR(apply_model_config(model_config, source + " (config.json)", parser.data()));
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(source, ": unexpected value type: ", e.what());
  }
  return Vocab::build(std::move(parser.data()), source, /*strict_merges=*/true);
}

}  // namespace qbc::tokenizer::tok
