// A small fork-join pool: the host threads the executor runs cores and large matmuls on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qbc::runtime {

/// `threads` host threads: the caller of parallel_for plus threads - 1 workers.
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
  void drain();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, next_ = 0;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
};

}  // namespace qbc::runtime
