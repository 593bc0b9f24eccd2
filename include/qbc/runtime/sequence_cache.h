// A sequence's cache file (docs/runtime.md "Sequence cache files"): the token ids a session's
// KV cache holds and the KV-cache blob of NpuSession::dump_kv, with a digest over both, so
// `qbc run --save-cache` / `--load-cache` can resume a prompt in another process and refuse a
// file that is corrupt, cut short or of another model.
//
//   "QBCSEQ\0\1"                      8-byte magic (version 1; "QBCSEQ\0\2": version 2)
//   u64 n, then n x u32 token ids     little-endian
//   version 2 only: u64 k, then k x (u64 first, u64 count, 16-byte XXH3-128): the image spans
//   u64 m, then m bytes               the KV-cache blob (its own format, docs/runtime.md)
//   16 bytes                          XXH3-128 of every byte before it
// A sequence without images is written as version 1 (the same bytes as before version 2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::runtime {

/// Positions [first, first + count) of a sequence whose rows were an image's features (spliced
/// at its image tokens), and the XXH3-128 of those fp32 rows: what the ids alone do not say.
struct ImageSpan {
  int64_t first = 0, count = 0;
  std::string digest;  ///< 16 raw bytes

  bool operator==(const ImageSpan& o) const {
    return first == o.first && count == o.count && digest == o.digest;
  }
};

struct SequenceCache {
  std::vector<int32_t> tokens;    ///< the ids the KV cache holds, position 0 first
  std::vector<ImageSpan> images;  ///< increasing, disjoint, inside the tokens
  std::string kv;                 ///< NpuSession::dump_kv()
};

/// The image spans of `tokens`: each maximal run of `token` ids, which take the rows of `rows`
/// ([n, width], in order: NpuSession::image_row_width(), the hidden size or with Qwen3-VL's
/// DeepStack rows), with the digest of its rows.
std::vector<ImageSpan> image_spans(const std::vector<int32_t>& tokens, int32_t token,
                                   const std::vector<float>& rows, int64_t width);

/// The file's bytes.
std::string encode_sequence_cache(const SequenceCache& cache);

/// Reads the bytes of a file (named `source` in errors). kInvalidArgument naming what is wrong:
/// not such a file (magic), a size the header does not add up to (truncated or trailing
/// bytes), a digest that differs (corrupt), a token id that is negative, image spans out of
/// order, overlapping or past the tokens. The KV blob inside is
/// checked by NpuSession::load_kv against the model it is loaded into.
StatusOr<SequenceCache> decode_sequence_cache(std::string_view bytes, std::string_view source);

}  // namespace qbc::runtime
