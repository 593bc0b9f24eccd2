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

/// `threads` host threads: the caller of parallel_for plus threads - 1 workers. Idle
/// threads spin a short while before they sleep, so back-to-back short calls (decode's
/// instructions) do not pay for futex wake-ups. When workers keep arriving late (the host's
/// cores are busy with other processes), calls run inline for a while.
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
  int64_t drain();  ///< the indices it ran

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, next_ = 0;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};  ///< generation_, for threads spinning without mu_
  std::atomic<int> busy_{0};            ///< workers inside drain (changed under mu_)
  int sleepers_ = 0;                    ///< workers waiting on start_
  bool waiting_ = false;                ///< parallel_for waiting on done_
  bool stop_ = false;
  int stalls_ = 0;          ///< recent calls that waited long for a worker (under mu_)
  int64_t rest_until_ = 0;  ///< steady_clock ticks until which calls run inline
};

/// Runs fn(lo, hi) over [0, n) in up to 4 blocks of at least `min_block` per host thread,
/// or in one block when `work` is below `threshold` (not worth the threads).
template <typename Fn>
void parallel_blocks(ThreadPool& pool, int64_t n, int64_t work, int64_t threshold,
                     int64_t min_block, const Fn& fn) {
  if (n <= 0) return;
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  int64_t count = 1;
  if (work >= threshold && pool.threads() > 1) {
    count = std::min<int64_t>(cdiv(n, std::max<int64_t>(min_block, 1)), 4 * pool.threads());
  }
  if (count <= 1) return fn(int64_t{0}, n);
  const int64_t per = cdiv(n, count);
  pool.parallel_for(count, [&](int64_t b) {
    const int64_t lo = b * per, hi = std::min(n, lo + per);
    if (lo < hi) fn(lo, hi);
  });
}

}  // namespace qbc::runtime
