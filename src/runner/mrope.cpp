// M-RoPE positions and tables (qbc/runner/mrope.h), following transformers'
// Qwen2_5_VLModel.get_rope_index (images; Qwen3-VL's places an image alike),
// Qwen2_5_VLRotaryEmbedding and Qwen3VLTextRotaryEmbedding (interleaved streams).
#include "qbc/runner/mrope.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace qbc::runner {
namespace {

StatusOr<int64_t> metadata_int(const std::map<std::string, std::string>& m, const char* key) {
  const auto it = m.find(key);
  if (it == m.end()) return not_found("graph metadata has no '", key, "'");
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v <= 0 || v > (int64_t{1} << 20))
    return invalid_argument("graph metadata '", key, "' = '", it->second, "' is not a size");
  return static_cast<int64_t>(v);
}

// Appends text positions start, start + 1, ... for `n` tokens to every stream.
void append_text(std::array<std::vector<int64_t>, 3>& s, int64_t start, int64_t n) {
  for (auto& stream : s) {
    for (int64_t i = 0; i < n; ++i) stream.push_back(start + i);
  }
}

int64_t chunk_max(const std::array<std::vector<int64_t>, 3>& s, size_t from) {
  int64_t m = -1;
  for (const auto& stream : s) {
    for (size_t i = from; i < stream.size(); ++i) m = std::max(m, stream[i]);
  }
  return m;
}

}  // namespace

StatusOr<MRopeSpec> mrope_spec_from_metadata(const std::map<std::string, std::string>& m) {
  MRopeSpec spec;
  const auto sec = m.find("mrope.section");
  if (sec == m.end())
    return not_found("graph metadata has no 'mrope.section' (not an M-RoPE graph)");
  QBC_ASSIGN_OR_RETURN(spec.head_dim, metadata_int(m, "mrope.head_dim"));
  const auto th = m.find("mrope.theta");
  if (th == m.end()) return not_found("graph metadata has no 'mrope.theta'");
  char* end = nullptr;
  spec.theta = std::strtod(th->second.c_str(), &end);
  if (th->second.empty() || *end != '\0' || !(spec.theta > 0.0))
    return invalid_argument("graph metadata 'mrope.theta' = '", th->second, "' is not positive");
  const std::string& text = sec->second;
  size_t pos = 0;
  int64_t sum = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t comma = text.find(',', pos);
    const std::string part =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0 || (i < 2) == (comma == std::string::npos))
      return invalid_argument("graph metadata 'mrope.section' = '", text, "' is not 3 integers");
    spec.section[static_cast<size_t>(i)] = v;
    sum += v;
    pos = comma + 1;
  }
  if (sum * 2 != spec.head_dim)
    return invalid_argument("graph metadata 'mrope.section' = '", text,
                            "' does not sum to head_dim / 2 = ", spec.head_dim / 2);
  const auto il = m.find("mrope.interleaved");
  if (il != m.end()) {
    if (il->second != "1" && il->second != "0")
      return invalid_argument("graph metadata 'mrope.interleaved' = '", il->second,
                              "' is not 0 or 1");
    spec.interleaved = il->second == "1";
  }
  return spec;
}

int64_t mrope_stream(const MRopeSpec& spec, int64_t i) {
  if (!spec.interleaved)
    return i < spec.section[0] ? 0 : i < spec.section[0] + spec.section[1] ? 1 : 2;
  if (i % 3 == 1 && i < 3 * spec.section[1]) return 1;
  if (i % 3 == 2 && i < 3 * spec.section[2]) return 2;
  return 0;
}

StatusOr<MRopePositions> mrope_positions(const std::vector<int32_t>& tokens, int32_t image_token_id,
                                         const std::vector<LlmGrid>& images) {
  std::array<std::vector<int64_t>, 3> s;
  const int64_t n = static_cast<int64_t>(tokens.size());
  int64_t st = 0;  // the next token not yet placed
  size_t last_chunk = 0;
  for (size_t k = 0; k < images.size(); ++k) {
    const LlmGrid& g = images[k];
    if (g.t != 1)
      return unimplemented("image ", k, ": grid t = ", g.t, " (videos are not supported)");
    if (g.h <= 0 || g.w <= 0) return invalid_argument("image ", k, ": empty grid ", g.h, "x", g.w);
    int64_t ed = st;
    while (ed < n && tokens[static_cast<size_t>(ed)] != image_token_id) ++ed;
    if (ed == n)
      return invalid_argument("image ", k, ": no image token ", image_token_id, " after token ",
                              st);
    const int64_t cells = g.h * g.w;
    for (int64_t i = ed; i < ed + cells; ++i) {
      if (i >= n || tokens[static_cast<size_t>(i)] != image_token_id) {
        return invalid_argument("image ", k, " (", g.h, "x", g.w, " = ", cells,
                                " tokens from token ", ed, "): token ", i,
                                i >= n ? " is past the end" : " is not the image token");
      }
    }
    const int64_t st_idx = s[0].empty() ? 0 : chunk_max(s, last_chunk) + 1;
    append_text(s, st_idx, ed - st);
    last_chunk = s[0].size();
    const int64_t base = st_idx + (ed - st);
    for (int64_t r = 0; r < g.h; ++r) {
      for (int64_t c = 0; c < g.w; ++c) {
        s[0].push_back(base);
        s[1].push_back(base + r);
        s[2].push_back(base + c);
      }
    }
    st = ed + cells;
  }
  for (int64_t i = st; i < n; ++i) {
    if (tokens[static_cast<size_t>(i)] == image_token_id)
      return invalid_argument("token ", i, " is an image token, but the ", images.size(),
                              " image(s) are placed");
  }
  if (st < n) {
    const int64_t st_idx = s[0].empty() ? 0 : chunk_max(s, last_chunk) + 1;
    append_text(s, st_idx, n - st);
  }
  MRopePositions out;
  out.delta = (s[0].empty() ? 0 : chunk_max(s, 0) + 1) - n;
  for (const auto& stream : s)
    out.positions.insert(out.positions.end(), stream.begin(), stream.end());
  return out;
}

std::vector<int64_t> mrope_text_positions(int64_t first, int64_t n, int64_t delta) {
  std::vector<int64_t> p(static_cast<size_t>(3 * n));
  for (int64_t s = 0; s < 3; ++s) {
    for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(s * n + i)] = first + i + delta;
  }
  return p;
}

void mrope_tables(const MRopeSpec& spec, const std::vector<int64_t>& positions,
                  std::vector<double>* cos, std::vector<double>* sin) {
  const int64_t half = spec.head_dim / 2;
  const int64_t n = static_cast<int64_t>(positions.size()) / 3;
  std::vector<int64_t> stream(static_cast<size_t>(half));
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    stream[static_cast<size_t>(i)] = mrope_stream(spec, i);
    inv_freq[static_cast<size_t>(i)] =
        1.0 / std::pow(spec.theta, static_cast<double>(2 * i) / static_cast<double>(spec.head_dim));
  }
  cos->resize(static_cast<size_t>(n * half));
  sin->resize(static_cast<size_t>(n * half));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double p = static_cast<double>(
          positions[static_cast<size_t>(stream[static_cast<size_t>(i)] * n + t)]);
      const double a = p * inv_freq[static_cast<size_t>(i)];
      (*cos)[static_cast<size_t>(t * half + i)] = std::cos(a);
      (*sin)[static_cast<size_t>(t * half + i)] = std::sin(a);
    }
  }
}

Status mrope_call_tables(const MRopeSpec& spec, int64_t first, int64_t n,
                         const std::vector<int64_t>* given, int64_t* delta,
                         std::vector<double>* cos, std::vector<double>* sin) {
  std::vector<int64_t> text;
  if (given == nullptr) text = mrope_text_positions(first, n, *delta);
  const std::vector<int64_t>& pos = given != nullptr ? *given : text;
  if (static_cast<int64_t>(pos.size()) != 3 * n)
    return invalid_argument("M-RoPE positions: ", pos.size(), " values for 3 streams of ", n,
                            " tokens");
  mrope_tables(spec, pos, cos, sin);
  if (given != nullptr) *delta = *std::max_element(pos.begin(), pos.end()) + 1 - (first + n);
  return ok_status();
}

}  // namespace qbc::runner
