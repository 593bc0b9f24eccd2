// The fork-join pool (see thread_pool.h).
#include "thread_pool.h"

#include <algorithm>
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
constexpr auto kSpin = std::chrono::microseconds(50);

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

/// Stalled calls (see parallel_for) after which the pool runs inline for kRest.
constexpr int kStallsToRest = 3;
constexpr auto kRest = std::chrono::milliseconds(50);

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

int64_t ThreadPool::drain() {
  // Called with mu_ held; runs fn on indices until none is left.
  int64_t done = 0;
  while (next_ < n_) {
    ++done;
    const int64_t i = next_++;
    const std::function<void(int64_t)>* fn = fn_;
    mu_.unlock();
    (*fn)(i);
    mu_.lock();
  }
  return done;
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
  using Clock = std::chrono::steady_clock;
  const bool resting = !workers_.empty() && !in_parallel_region && n > 1 &&
                       Clock::now().time_since_epoch().count() < rest_until_;
  if (workers_.empty() || in_parallel_region || n == 1 || resting) {
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
  const auto t0 = Clock::now();
  const int64_t mine = drain();
  const auto t1 = Clock::now();
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
  // A wait much longer than one of our own blocks means a worker was descheduled (other
  // processes hold the host's cores): after a few such waits, run inline for a while rather
  // than stall every instruction on a thread that is not running.
  const auto waited = Clock::now() - t1;
  const auto per_block = (t1 - t0) / std::max<int64_t>(mine, 1);
  if (waited > 4 * per_block + std::chrono::microseconds(100)) {
    if (++stalls_ >= kStallsToRest) {
      stalls_ = 0;
      rest_until_ = (Clock::now() + kRest).time_since_epoch().count();
    }
  } else if (stalls_ > 0) {
    --stalls_;
  }
  lock.unlock();
  in_parallel_region = false;
}

}  // namespace qbc::runtime
