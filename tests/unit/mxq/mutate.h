// Mutations of MXQ bytes for the hostile-input tests: seeded edits (bit flips, byte sets,
// truncation, insertion, deletion), aimed inside the protobuf sections when the case
// re-seals, and reseal(), which recomputes the section digests, the table digest and the
// header check (docs/mxq.md offsets) so the damage reaches the checks behind them.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qbc/mxq/container.h"

namespace qbc::testing {

inline void reseal(std::string& s, bool digests = true) {
  if (s.size() < mxq::kHeaderBytes) return;
  uint32_t count = 0;
  std::memcpy(&count, s.data() + 64, 4);
  const uint64_t table_end = mxq::kHeaderBytes + uint64_t{count} * mxq::kEntryBytes;
  if (count <= mxq::kMaxSections && table_end <= s.size()) {
    for (uint32_t i = 0; digests && i < count; ++i) {
      const size_t e = mxq::kHeaderBytes + size_t{i} * mxq::kEntryBytes;
      uint64_t off = 0, size = 0;
      std::memcpy(&off, s.data() + e + 16, 8);
      std::memcpy(&size, s.data() + e + 24, 8);
      if (off > s.size() || size > s.size() - off) continue;
      const mxq::Digest d = mxq::digest_of(s.data() + off, size);
      std::memcpy(s.data() + e + 32, d.data(), 16);
    }
    const mxq::Digest td =
        mxq::digest_of(s.data() + mxq::kHeaderBytes, table_end - mxq::kHeaderBytes);
    std::memcpy(s.data() + 96, td.data(), 16);
  }
  const uint64_t check = mxq::header_checksum(reinterpret_cast<const uint8_t*>(s.data()));
  std::memcpy(s.data() + 120, &check, 8);
}

/// 1..max_edits seeded edits of `s`; with `sealed`, three in four land inside one of the
/// first four sections (meta, layout, code, debug) and the result is re-sealed.
inline void mutate(std::string& s, std::mt19937_64& rng, bool sealed,
                   const std::vector<mxq::SectionEntry>& secs, int max_edits, size_t max_len) {
  const int edits = 1 + static_cast<int>(rng() % static_cast<uint64_t>(max_edits));
  for (int e = 0; e < edits && !s.empty(); ++e) {
    size_t at = rng() % s.size();
    if (sealed && secs.size() >= 4 && rng() % 4 != 0) {
      const mxq::SectionEntry& sec = secs[rng() % 4];
      if (sec.size > 0) at = sec.offset + rng() % sec.size;
    }
    if (at >= s.size()) at = rng() % s.size();
    switch (rng() % 5) {
      case 0:
        s[at] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        s[at] = static_cast<char>(rng());
        break;
      case 2:
        s.resize(at);
        break;
      case 3:
        s.insert(at, std::string(1 + rng() % max_len, static_cast<char>(rng())));
        break;
      default:
        s.erase(at, 1 + rng() % max_len);
        break;
    }
  }
  if (sealed) reseal(s, true);
}

}  // namespace qbc::testing
