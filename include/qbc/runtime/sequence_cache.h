// A sequence's cache file (docs/runtime.md "Sequence cache files"): the token ids a session's
// KV cache holds and the KV-cache blob of NpuSession::dump_kv, with a digest over both, so
// `qbc run --save-cache` / `--load-cache` can resume a prompt in another process and refuse a
// file that is corrupt, cut short or of another model.
//
//   "QBCSEQ\0\1"                      8-byte magic (version 1)
//   u64 n, then n x u32 token ids     little-endian
//   u64 m, then m bytes               the KV-cache blob (its own format, docs/runtime.md)
//   16 bytes                          XXH3-128 of every byte before it
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::runtime {

struct SequenceCache {
  std::vector<int32_t> tokens;  ///< the ids the KV cache holds, position 0 first
  std::string kv;               ///< NpuSession::dump_kv()
};

/// The file's bytes.
std::string encode_sequence_cache(const SequenceCache& cache);

/// Reads the bytes of a file (named `source` in errors). kInvalidArgument naming what is wrong:
/// not such a file (magic), a size the header does not add up to (truncated or trailing
/// bytes), a digest that differs (corrupt), a token id that is negative. The KV blob inside is
/// checked by NpuSession::load_kv against the model it is loaded into.
StatusOr<SequenceCache> decode_sequence_cache(std::string_view bytes, std::string_view source);

}  // namespace qbc::runtime
