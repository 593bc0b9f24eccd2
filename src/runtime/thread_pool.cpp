// The fork-join pool (see thread_pool.h).
#include "thread_pool.h"

namespace qbc::runtime {
namespace {
thread_local bool in_parallel_region = false;
}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::drain() {
  // Called with mu_ held; runs fn on indices until none is left.
  while (next_ < n_) {
    const int64_t i = next_++;
    const std::function<void(int64_t)>* fn = fn_;
    mu_.unlock();
    (*fn)(i);
    mu_.lock();
  }
}

void ThreadPool::worker() {
  in_parallel_region = true;
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    ++busy_;
    drain();
    if (--busy_ == 0) done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || in_parallel_region || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  in_parallel_region = true;
  std::unique_lock<std::mutex> lock(mu_);
  fn_ = &fn;
  n_ = n;
  next_ = 0;
  ++generation_;
  start_.notify_all();
  drain();
  // Every index is taken; wait for the workers still running theirs.
  done_.wait(lock, [&] { return busy_ == 0; });
  fn_ = nullptr;
  n_ = 0;
  lock.unlock();
  in_parallel_region = false;
}

}  // namespace qbc::runtime
