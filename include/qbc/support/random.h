// The one portable random generator qbc uses for seeded choices, so results are
// the same on every machine (no platform-dependent std distributions).
#pragma once

#include <cstdint>

namespace qbc {

/// One step of splitmix64 (Steele, Lea, Flood 2014): advances `state` and
/// returns the next 64-bit value.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// A uniform double in [0, 1) from the next splitmix64 value (53 random bits).
inline double uniform01(uint64_t& state) {
  return static_cast<double>(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace qbc
