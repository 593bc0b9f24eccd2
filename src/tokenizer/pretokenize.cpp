#include "pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "unicode.h"

namespace qbc::tokenizer::tok {

namespace {

// GPT-2's regex; the trailing \s+ only matters for HF (gaps are kept anyway).
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// llama.cpp's gpt-2 set (no trailing \s+).
constexpr std::string_view kGpt2Llamacpp =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama 3 (tiktoken cl100k style): digits in groups of up to three.
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: like Llama 3 but single digits.
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Code {
  pcre2_code* code = nullptr;
  explicit Code(pcre2_code* c) : code(c) {}
  Code(const Code&) = delete;
  Code& operator=(const Code&) = delete;
  ~Code() { pcre2_code_free(code); }
};

std::string pcre2_message(int error) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(error, buf, sizeof(buf));
  return n < 0 ? "error " + std::to_string(error) : std::string(reinterpret_cast<char*>(buf), n);
}

}  // namespace

struct RegexSplitter::Impl {
  std::vector<std::unique_ptr<Code>> codes;
};

StatusOr<RegexSplitter> RegexSplitter::compile(const std::vector<std::string>& patterns) {
  RegexSplitter splitter;
  if (patterns.empty()) return splitter;
  auto impl = std::make_shared<Impl>();
  for (const std::string& p : patterns) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (code == nullptr) {
      return invalid_argument("pre-tokenizer regex '", p, "': ", pcre2_message(error),
                              " at offset ", offset);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    impl->codes.push_back(std::make_unique<Code>(code));
  }
  splitter.impl_ = std::move(impl);
  return splitter;
}

namespace {

// Cuts `seg` into the matches of `code` and the gaps between them. Like llama.cpp, the
// regex sees only `seg`, so lookarounds stop at its ends.
void split_one(const pcre2_code* code, pcre2_match_data* md, std::string_view seg,
               std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(seg.data());
  size_t start = 0;
  size_t last = 0;
  while (start < seg.size()) {
    int rc = pcre2_match(code, subject, seg.size(), start, 0, md, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // E.g. JIT stack exhausted on a huge run: retry with the interpreter.
      rc = pcre2_match(code, subject, seg.size(), start, PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;  // no more matches (or an error): the rest is a gap
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t ms = ov[0];
    const size_t me = ov[1];
    if (me <= ms) {  // empty match: step over one character and search again
      start = ms + utf8_char_len(seg, ms);
      continue;
    }
    if (ms > last) out.push_back(seg.substr(last, ms - last));
    out.push_back(seg.substr(ms, me - ms));
    last = start = me;
  }
  if (last < seg.size()) out.push_back(seg.substr(last));
}

}  // namespace

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  if (impl_ == nullptr) return pieces;
  std::vector<std::string_view> next;
  for (const auto& code : impl_->codes) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code->code, nullptr);
    next.clear();
    next.reserve(pieces.size() * 2);
    for (std::string_view seg : pieces) split_one(code->code, md, seg, next);
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

std::string_view gpt2_pattern() { return kGpt2; }

}  // namespace qbc::tokenizer::tok

namespace qbc::tokenizer {

std::optional<std::vector<std::string>> pre_tokenizer_patterns(std::string_view name) {
  using namespace tok;
  using V = std::vector<std::string>;
  auto is = [&](std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (is({"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de",
          "gigachat", "exaone4"})) {
    return V{std::string(kGpt2Llamacpp)};
  }
  if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe"})) {
    return V{std::string(kLlama3)};
  }
  if (is({"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"})) return V{std::string(kQwen2)};
  if (is({"starcoder", "smollm", "refact", "command-r", "codeshell", "exaone"})) {
    return V{R"(\p{N})", std::string(kGpt2Llamacpp)};
  }
  if (name.empty() || name == "default") {
    return V{R"([\p{P}\$\+<=>\^~\|]+)", std::string(kGpt2Llamacpp), R"(\p{N}+)", "[0-9][0-9][0-9]"};
  }
  return std::nullopt;
}

}  // namespace qbc::tokenizer

namespace qbc::tokenizer::tok {

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view(R"(\^$.|?*+()[]{}-/#)").find(c) != std::string_view::npos) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace qbc::tokenizer::tok
