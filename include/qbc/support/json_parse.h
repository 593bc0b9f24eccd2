// Parsing JSON text from a file into nlohmann::json without letting nlohmann's exceptions out:
// every failure (syntax, a number literal that overflows, nesting deeper than a limit, a duplicate
// key when asked) is a kInvalidArgument Status located by file, line, column and key path.
//
// Header-only (a template over nlohmann::json and nlohmann::ordered_json); a target including it
// links nlohmann_json itself.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qbc/support/quote.h"
#include "qbc/support/status.h"

namespace qbc {

/// The deepest nesting of arrays and objects a JSON input may have. Real configs and tokenizers
/// nest under 10 levels; the limit keeps the recursive walkers over parsed JSON off the stack's
/// end.
inline constexpr size_t kMaxJsonDepth = 512;

struct JsonParseOptions {
  /// An object with the same key twice is an error (the safetensors header rule).
  bool reject_duplicate_keys = false;
  size_t max_depth = kMaxJsonDepth;
  /// The words that start the error after the location.
  std::string_view error_label = "invalid JSON";
};

namespace json_internal {

/// 1-based line and column of the 0-based byte `byte` of `text`.
inline std::pair<size_t, size_t> line_column(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

/// nlohmann's message without its "[json.exception.x.N] " and "parse error at line L, column C: "
/// prefixes (the location is given by us), clipped (its "last read" can be a whole 20 MB token).
inline std::string short_what(std::string_view what) {
  if (!what.empty() && what[0] == '[') {
    const size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  if (what.substr(0, 15) == "parse error at ") {
    const size_t colon = what.find(": ");
    if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
  } else if (what.substr(0, 13) == "parse error: ") {
    what.remove_prefix(13);
  }
  return clip_prefix(what, 160);
}

/// Forwards every SAX event to nlohmann's DOM builder, keeping the key path, the depth and the
/// key sets of the open objects, and records (instead of throwing) the first error.
template <typename Json>
class LocatingSax {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  LocatingSax(Json& result, const JsonParseOptions& options)
      : dom_(result, /*allow_exceptions=*/false), options_(options) {}

  bool null() { return value(), dom_.null(); }
  bool boolean(bool v) { return value(), dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return value(), dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return value(), dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) {
    return value(), dom_.number_float(v, s);
  }
  bool string(string_t& v) { return value(), dom_.string(v); }
  bool binary(binary_t& v) { return value(), dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (!open(true)) return false;
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    if (!frames_.empty()) {
      Frame& f = frames_.back();
      f.key = k;
      f.has_key = true;
      if (options_.reject_duplicate_keys && !f.keys.insert(k).second) {
        error_ = "duplicate key " + quote_prefix(k);
        if (frames_.size() > 1 && frames_[0].has_key) {
          error_ += " in entry " + quote_prefix(frames_[0].key);
        }
        error_at_key_ = true;
        return false;
      }
    }
    return dom_.key(k);
  }
  bool end_object() { return close(), dom_.end_object(); }
  bool start_array(std::size_t n) {
    if (!open(false)) return false;
    return dom_.start_array(n);
  }
  bool end_array() { return close(), dom_.end_array(); }
  template <typename Exception>
  bool parse_error(std::size_t position, const std::string& /*last_token*/, const Exception& e) {
    error_ = short_what(e.what());
    position_ = position;
    has_position_ = true;
    return false;
  }

  const std::string& error() const { return error_; }
  bool has_position() const { return has_position_; }
  size_t position() const { return position_; }
  /// "a.b[3].c": where the parser was when it stopped.
  std::string path() const {
    std::string out;
    for (const Frame& f : frames_) {
      if (f.is_object) {
        if (!f.has_key) break;
        out += (out.empty() ? "" : ".") + clip_prefix(f.key, 48);
      } else {
        out += "[" + std::to_string(f.index > 0 ? f.index - 1 : 0) + "]";
      }
      if (out.size() > 160) return clip_prefix(out, 120);
    }
    return out;
  }

 private:
  struct Frame {
    bool is_object = false;
    bool has_key = false;
    std::string key;
    size_t index = 0;  // arrays: elements started so far
    std::set<std::string> keys;
  };

  void value() {
    if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().index;
  }
  bool open(bool is_object) {
    value();
    if (frames_.size() >= options_.max_depth) {
      error_ = "nesting deeper than " + std::to_string(options_.max_depth) + " levels";
      return false;
    }
    Frame f;
    f.is_object = is_object;
    frames_.push_back(std::move(f));
    return true;
  }
  void close() {
    if (!frames_.empty()) frames_.pop_back();
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  JsonParseOptions options_;
  std::vector<Frame> frames_;
  std::string error_;
  bool error_at_key_ = false;
  bool has_position_ = false;
  size_t position_ = 0;
};

}  // namespace json_internal

/// Parses `text` (the contents of `source`, a file name used in messages). Errors read
/// "<source>:<line>:<col>: invalid JSON at key 'a.b': <what>" (line and column when the parser
/// knows the byte; the key path when inside an object). An empty `source` (the caller adds its
/// own context) gives "line L, column C: invalid JSON ...".
template <typename Json = nlohmann::json>
StatusOr<Json> parse_json_text(std::string_view text, std::string_view source,
                               const JsonParseOptions& options = {}) {
  Json result;
  json_internal::LocatingSax<Json> sax(result, options);
  bool ok = false;
  std::string thrown;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {  // not expected: sax_parse reports via the SAX
    thrown = json_internal::short_what(e.what());
  } catch (const std::bad_alloc&) {
    thrown = "out of memory";
  }
  if (ok && thrown.empty()) return result;
  std::string where(source);
  if (sax.has_position()) {
    auto [line, column] =
        json_internal::line_column(text, sax.position() > 0 ? sax.position() - 1 : 0);
    where += where.empty() ? "line " + std::to_string(line) + ", column " + std::to_string(column)
                           : ":" + std::to_string(line) + ":" + std::to_string(column);
  }
  const std::string path = sax.path();
  std::string msg(options.error_label);
  if (!where.empty()) msg = where + ": " + msg;
  if (!path.empty()) msg += " at key '" + path + "'";
  msg += ": ";
  msg += !thrown.empty() ? thrown : sax.error().empty() ? "parse failed" : sax.error();
  return invalid_argument(msg);
}

}  // namespace qbc
