// Sequence cache files (see qbc/runtime/sequence_cache.h).
#include "qbc/runtime/sequence_cache.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "qbc/mxq/container.h"

namespace qbc::runtime {
namespace {

constexpr char kMagic[8] = {'Q', 'B', 'C', 'S', 'E', 'Q', 0, 1};
constexpr char kMagic2[8] = {'Q', 'B', 'C', 'S', 'E', 'Q', 0, 2};
constexpr size_t kSpanBytes = 8 + 8 + 16;
constexpr size_t kDigestBytes = 16;

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>(v >> (8 * i) & 0xff);
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace

std::vector<ImageSpan> image_spans(const std::vector<int32_t>& tokens, int32_t token,
                                   const std::vector<float>& rows, int64_t width) {
  std::vector<ImageSpan> out;
  const int64_t nrows = width > 0 ? static_cast<int64_t>(rows.size()) / width : 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != token) continue;
    if (out.empty() || out.back().first + out.back().count != static_cast<int64_t>(i))
      out.push_back(ImageSpan{static_cast<int64_t>(i), 0, {}});
    ++out.back().count;
  }
  int64_t row = 0;
  for (ImageSpan& s : out) {
    const int64_t take = std::min(s.count, std::max<int64_t>(nrows - row, 0));
    const mxq::Digest d =
        mxq::digest_of(rows.data() + row * width, static_cast<size_t>(take * width) * 4);
    s.digest.assign(reinterpret_cast<const char*>(d.data()), d.size());
    row += s.count;
  }
  return out;
}

std::string encode_sequence_cache(const SequenceCache& cache) {
  const bool v2 = !cache.images.empty();
  std::string out(v2 ? kMagic2 : kMagic, sizeof(kMagic));
  put_u64(out, cache.tokens.size());
  for (int32_t t : cache.tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) out += static_cast<char>(u >> (8 * i) & 0xff);
  }
  if (v2) {
    put_u64(out, cache.images.size());
    for (const ImageSpan& s : cache.images) {
      put_u64(out, static_cast<uint64_t>(s.first));
      put_u64(out, static_cast<uint64_t>(s.count));
      std::string d = s.digest;
      d.resize(16, '\0');
      out += d;
    }
  }
  put_u64(out, cache.kv.size());
  out += cache.kv;
  const mxq::Digest d = mxq::digest_of(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(d.data()), d.size());
  return out;
}

StatusOr<SequenceCache> decode_sequence_cache(std::string_view b, std::string_view source) {
  const std::string src(source);
  const bool v1 = b.size() >= sizeof(kMagic) && std::memcmp(b.data(), kMagic, sizeof(kMagic)) == 0;
  const bool v2 =
      b.size() >= sizeof(kMagic2) && std::memcmp(b.data(), kMagic2, sizeof(kMagic2)) == 0;
  if (!v1 && !v2) return invalid_argument(src, ": not a qbc sequence cache (bad magic)");
  const size_t fixed = sizeof(kMagic) + 8 + (v2 ? 8 : 0) + 8 + kDigestBytes;
  if (b.size() < fixed)
    return invalid_argument(src, ": truncated: ", b.size(), " bytes, at least ", fixed, " needed");
  const uint64_t n = get_u64(b.data() + 8);
  if (n > (b.size() - fixed) / 4)
    return invalid_argument(src, ": truncated: its header lists ", n, " tokens, the ", b.size(),
                            "-byte file cannot hold them");
  size_t at = 16 + static_cast<size_t>(n) * 4;
  uint64_t k = 0;
  if (v2) {
    k = get_u64(b.data() + at);
    at += 8;
    if (k > (b.size() - fixed - n * 4) / kSpanBytes)
      return invalid_argument(src, ": truncated: its header lists ", k,
                              " image spans, the file cannot hold them");
  }
  const size_t spans_at = at;
  at += static_cast<size_t>(k) * kSpanBytes;
  const size_t kv_at = at + 8;
  const uint64_t m = get_u64(b.data() + at);
  const uint64_t room = b.size() - kv_at - kDigestBytes;
  if (m != room)
    return invalid_argument(src, ": ", m > room ? "truncated" : "trailing bytes",
                            ": its header lists a ", m,
                            "-byte KV cache blob, the file has room for ", room);
  const size_t body = b.size() - kDigestBytes;
  const mxq::Digest want = mxq::digest_of(b.data(), body);
  if (std::memcmp(want.data(), b.data() + body, kDigestBytes) != 0) {
    mxq::Digest got;
    std::memcpy(got.data(), b.data() + body, kDigestBytes);
    return invalid_argument(src, ": corrupt: the digest it stores is ", mxq::digest_hex(got),
                            ", its bytes hash to ", mxq::digest_hex(want));
  }
  SequenceCache c;
  c.tokens.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t u = get_u32(b.data() + 16 + i * 4);
    if (u > static_cast<uint32_t>(INT32_MAX))
      return invalid_argument(src, ": token ", i, " has the id ", u, " (negative as int32)");
    c.tokens.push_back(static_cast<int32_t>(u));
  }
  uint64_t end = 0;
  for (uint64_t i = 0; i < k; ++i) {
    const char* p = b.data() + spans_at + i * kSpanBytes;
    const uint64_t first = get_u64(p), count = get_u64(p + 8);
    if (first < end || count == 0 || count > n || first > n - count)
      return invalid_argument(src, ": image span ", i, " [", first, ", +", count,
                              ") is out of order, empty or past the ", n, " tokens");
    end = first + count;
    c.images.push_back(ImageSpan{static_cast<int64_t>(first), static_cast<int64_t>(count),
                                 std::string(p + 16, 16)});
  }
  c.kv.assign(b.data() + kv_at, static_cast<size_t>(m));
  return c;
}

}  // namespace qbc::runtime
