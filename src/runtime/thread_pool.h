// A small fork-join pool: the host threads the executor runs cores and large matmuls on.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qbc::runtime {

/// `threads` host threads: the caller of parallel_for plus threads - 1 workers. A call is
/// handed over without a lock (an atomic ticket per index, an atomic count of those done):
/// decode runs thousands of instructions a token, each a few microseconds, so the hand-over
/// must cost far less than that. Idle threads spin a short while before they sleep, so
/// back-to-back short calls do not pay for futex wake-ups. When workers keep arriving late
/// (the host's cores are busy with other processes), calls run inline for a while.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  /// Runs fn(i) for every i in [0, n) and returns when all are done. Indices are handed out
  /// dynamically, so fn must not depend on which thread runs it. A call from inside fn (or
  /// with one thread) runs inline on the calling thread.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker();
  /// Runs the indices of call `gen` that are left; returns how many it ran.
  int64_t drain(uint32_t gen);

  std::vector<std::thread> workers_;
  // A call: its function and size, then `ticket_` = (generation << 32) | next index, handed
  // out by compare-and-swap so a thread late from an earlier call never takes an index of a
  // later one. `done_` counts the indices finished. No lock on this path.
  std::atomic<const std::function<void(int64_t)>*> fn_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> done_{0};
  uint32_t generation_ = 0;             ///< the caller's (one caller at a time)
  std::atomic<uint32_t> published_{0};  ///< generation_, for the workers
  // Sleeping: a worker that spun kSpin without a call waits on start_; a caller whose
  // workers take longer than kSpin waits on done_cv_.
  std::mutex mu_;
  std::condition_variable start_, done_cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> waiting_{false};
  std::atomic<bool> stop_{false};
  int stalls_ = 0;          ///< recent calls that waited long for a worker
  int64_t rest_until_ = 0;  ///< steady_clock ticks until which calls run inline
};

/// Runs fn(lo, hi) over [0, n) in up to `per_thread` blocks of at least `min_block` per host
/// thread, or in one block when `work` is below `threshold` (not worth the threads).
template <typename Fn>
void parallel_blocks(ThreadPool& pool, int64_t n, int64_t work, int64_t threshold,
                     int64_t min_block, const Fn& fn, int64_t per_thread = 4) {
  if (n <= 0) return;
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  int64_t count = 1;
  if (work >= threshold && pool.threads() > 1) {
    count = std::min<int64_t>(cdiv(n, std::max<int64_t>(min_block, 1)),
                              std::max<int64_t>(per_thread, 1) * pool.threads());
  }
  if (count <= 1) return fn(int64_t{0}, n);
  const int64_t per = cdiv(n, count);
  pool.parallel_for(count, [&](int64_t b) {
    const int64_t lo = b * per, hi = std::min(n, lo + per);
    if (lo < hi) fn(lo, hi);
  });
}

}  // namespace qbc::runtime
