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

/// The index field of a closed ticket (no index of it can be taken; see parallel_for).
constexpr uint32_t kClosed = 0xffffffffu;

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
    stop_.store(true);
    published_.store(~uint32_t{0});
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

int64_t ThreadPool::drain(uint32_t gen) {
  int64_t ran = 0;
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    // An index is ours once the ticket moves past it while it still names call `gen`.
    if (static_cast<uint32_t>(t >> 32) != gen) return ran;
    const int64_t i = static_cast<int64_t>(t & 0xffffffffu);
    // Acquire: a size written for a later call comes with that call's closed ticket, so the
    // compare-and-swap below fails instead of pairing an old ticket with the new size.
    if (i >= n_.load(std::memory_order_acquire)) return ran;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
    (*fn_.load(std::memory_order_relaxed))(i);
    ++ran;
    if (done_.fetch_add(1) + 1 == n_.load(std::memory_order_relaxed) && waiting_.load()) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller sleeps on done_cv_
      done_cv_.notify_all();
    }
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker() {
  in_parallel_region = true;
  uint32_t seen = 0;
  for (;;) {
    if (!spin_while([&] { return published_.load(std::memory_order_acquire) == seen; })) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      start_.wait(lock, [&] { return stop_.load() || published_.load() != seen; });
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = published_.load(std::memory_order_acquire);
    drain(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n >= int64_t{kClosed}) {  // beyond the ticket's index field: in calls that fit
    for (int64_t lo = 0; lo < n; lo += kClosed - 1) {
      const int64_t m = std::min<int64_t>(kClosed - 1, n - lo);
      parallel_for(m, [&](int64_t i) { fn(lo + i); });
    }
    return;
  }
  using Clock = std::chrono::steady_clock;
  const bool resting = !workers_.empty() && !in_parallel_region && n > 1 &&
                       Clock::now().time_since_epoch().count() < rest_until_;
  if (workers_.empty() || in_parallel_region || n == 1 || resting) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  in_parallel_region = true;
  // Publish the call: first close the ticket under the new generation (a thread still in
  // drain for an earlier call now fails its compare-and-swap), then the call's fields, then
  // the open ticket, then the generation the workers watch.
  const uint32_t gen = ++generation_ == ~uint32_t{0} ? ++generation_ : generation_;
  ticket_.store(uint64_t{gen} << 32 | kClosed, std::memory_order_relaxed);
  fn_.store(&fn, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  n_.store(n, std::memory_order_release);
  ticket_.store(uint64_t{gen} << 32, std::memory_order_release);
  published_.store(gen);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    start_.notify_all();
  }
  const auto t0 = Clock::now();
  const int64_t mine = drain(gen);
  const auto t1 = Clock::now();
  // Every index is taken; wait for the workers still running theirs: spinning first.
  if (done_.load(std::memory_order_acquire) != n &&
      !spin_while([&] { return done_.load(std::memory_order_acquire) != n; })) {
    std::unique_lock<std::mutex> lock(mu_);
    waiting_.store(true);
    done_cv_.wait(lock, [&] { return done_.load() == n; });
    waiting_.store(false);
  }
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
  in_parallel_region = false;
}

}  // namespace qbc::runtime
