#include "qbc/support/host_memory.h"

#include <malloc.h>

namespace qbc::host_memory {

// mallopt takes an int.
static_assert(kMmapThreshold <= 0x7fffffff && kTrimThreshold <= 0x7fffffff);

bool tune_host_allocator() {
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold)) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThreshold)) == 1;
  return mmap_ok && trim_ok;
}

}  // namespace qbc::host_memory
