// How the host's allocator is tuned for compile-sized work.
//
// glibc maps blocks above its mmap threshold (128 KB, adapting up to 32 MB) one by one and
// gives the free top of the heap back to the kernel, so every calibration sample's tensors
// were mapped and zero-filled again: 14.3 million page faults and as much kernel time as
// compute time on a stories260K llm compile (docs/performance.md, "Host memory and threads").
// tune_host_allocator() keeps blocks up to kMmapThreshold (the most mallopt allows) on the
// heap and up to kTrimThreshold of freed heap for reuse. Results are byte-identical; only
// page faults and system time change. Call it once, first thing in main().
#pragma once

#include <cstddef>

namespace qbc::host_memory {

/// Blocks up to this size come from the heap, not from their own mapping.
inline constexpr std::size_t kMmapThreshold = std::size_t{32} << 20;
/// Freed memory at the top of the heap up to this size stays mapped for reuse.
inline constexpr std::size_t kTrimThreshold = std::size_t{1} << 30;

/// Sets the thresholds above. Returns false when the allocator refused one (not glibc, or a
/// sanitizer's allocator that ignores mallopt); the process then runs with the defaults.
bool tune_host_allocator();

}  // namespace qbc::host_memory
