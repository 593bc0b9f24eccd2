// The fork-join pool (see thread_pool.h).
#include "thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QBC_CPU_RELAX() _mm_pause()
#else
#define QBC_CPU_RELAX() ((void)0)
#endif

namespace qbc::runtime {
namespace {

thread_local bool in_parallel_region = false;

/// How long a thread spins before it sleeps on a condition variable: the executor runs
/// many short instructions (decode's matmul tiles take microseconds), and a futex wake-up
/// costs more than the work it would hand over.
constexpr auto kSpin = std::chrono::microseconds(200);

/// Spins while `busy()` holds, up to kSpin; true when it stopped holding.
template <typename Pred>
bool spin_while(const Pred& busy) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (!busy()) return true;
    QBC_CPU_RELAX();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    published_.store(~uint64_t{0}, std::memory_order_release);
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
  for (;;) {
    spin_while([&] { return published_.load(std::memory_order_acquire) == seen; });
    std::unique_lock<std::mutex> lock(mu_);
    if (!stop_ && generation_ == seen) {
      ++sleepers_;
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      --sleepers_;
    }
    if (stop_) return;
    seen = generation_;
    busy_.fetch_add(1, std::memory_order_relaxed);
    drain();
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1 && waiting_) done_.notify_all();
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
  published_.store(generation_, std::memory_order_release);
  if (sleepers_ > 0) start_.notify_all();
  drain();
  // Every index is taken; wait for the workers still running theirs: spinning first.
  if (busy_.load(std::memory_order_acquire) != 0) {
    lock.unlock();
    const bool done = spin_while([&] { return busy_.load(std::memory_order_acquire) != 0; });
    lock.lock();
    if (!done) {
      waiting_ = true;
      done_.wait(lock, [&] { return busy_.load(std::memory_order_acquire) == 0; });
      waiting_ = false;
    }
  }
  fn_ = nullptr;
  n_ = 0;
  lock.unlock();
  in_parallel_region = false;
}

}  // namespace qbc::runtime
