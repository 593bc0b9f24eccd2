// Per-thread scratch vectors of the executor's instructions: memory kept between
// instructions, so a decode step allocates nothing per instruction.
#pragma once

#include <cstddef>
#include <vector>

namespace qbc::runtime {

/// A per-thread vector of at least n elements that keeps its memory between calls. Its
/// contents are whatever the last user left (callers overwrite what they read) and it may be
/// longer than n. Each call site takes its own Tag: two live scratch vectors with the same T
/// and Tag on one thread are the same vector.
template <typename T, int Tag>
std::vector<T>& scratch(size_t n) {
  thread_local std::vector<T> v;
  if (v.size() < n) v.resize(n);
  return v;
}

}  // namespace qbc::runtime
