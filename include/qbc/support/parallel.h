// Independent checks on the host's threads, reported as if they had run in order.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "qbc/support/status.h"

namespace qbc {

/// Runs fn(i) for i in [0, n) on up to `threads` host threads (0: one per hardware thread)
/// and returns the status of the lowest i that failed, or ok: the same answer as running them
/// in order and stopping at the first error. Indices above a failed one are skipped once it
/// is known. fn must not depend on the thread it runs on.
inline Status first_error_parallel(int64_t n, const std::function<Status(int64_t)>& fn,
                                   int threads = 0) {
  if (n <= 0) return ok_status();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  std::vector<Status> status(static_cast<size_t>(n));
  std::atomic<int64_t> next{0}, failed{n};
  auto work = [&] {
    for (;;) {
      const int64_t i = next.fetch_add(1);
      if (i >= n || i > failed.load()) return;
      status[static_cast<size_t>(i)] = fn(i);
      if (!status[static_cast<size_t>(i)].ok()) {
        int64_t f = failed.load();
        while (i < f && !failed.compare_exchange_weak(f, i)) {
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  const int64_t f = failed.load();
  return f < n ? status[static_cast<size_t>(f)] : ok_status();
}

}  // namespace qbc
