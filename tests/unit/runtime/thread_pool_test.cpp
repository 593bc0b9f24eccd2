// The executor's fork-join pool (src/runtime/thread_pool.h): every index of a call runs exactly
// once and before the call returns, whatever the thread count, the call size, the gaps between
// calls (workers spinning, or asleep and woken) and nesting; parallel_blocks covers [0, n) with
// the block counts its contract states.
#include "thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace qbc::runtime {
namespace {

/// Runs one call of size n and checks each index ran once, on return.
void expect_each_once(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  for (auto& h : hits) h.store(0);
  pool.parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, EveryIndexRunsOnceForAnyThreadCountAndSize) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) expect_each_once(pool, n);
  }
}

TEST(ThreadPool, BackToBackCallsNeverShareAnIndex) {
  // Thousands of short calls in a row (decode's pattern): a worker still inside one call must
  // not take an index of the next, whose function and size differ.
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  int64_t want = 0;
  for (int call = 0; call < 20000; ++call) {
    const int64_t n = 1 + call % 9;
    std::vector<int> hits(static_cast<size_t>(n), 0);
    std::atomic<int> wrong{0};
    pool.parallel_for(n, [&](int64_t i) {
      if (i < 0 || i >= n)
        wrong.fetch_add(1);
      else
        ++hits[static_cast<size_t>(i)];  // one thread per index: no race when correct
      total.fetch_add(i + 1);
    });
    ASSERT_EQ(wrong.load(), 0) << "call " << call;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "call " << call;
    want += n * (n + 1) / 2;
  }
  EXPECT_EQ(total.load(), want);
}

TEST(ThreadPool, SleepingWorkersAreWokenAndCallsWaitForSlowIndices) {
  // Gaps longer than the spin put the workers to sleep; an index that outlasts the caller's
  // spin makes the caller sleep until it is done.
  ThreadPool pool(2);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::atomic<int> done{0};
    pool.parallel_for(4, [&](int64_t i) {
      if (i % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      done.fetch_add(1);
    });
    EXPECT_EQ(done.load(), 4) << "round " << round;
  }
}

TEST(ThreadPool, NestedCallsRunInlineOnTheCallingThread) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(64);
  for (auto& h : hits) h.store(0);
  std::atomic<int> moved{0};
  pool.parallel_for(8, [&](int64_t outer) {
    const auto self = std::this_thread::get_id();
    pool.parallel_for(8, [&](int64_t inner) {
      if (std::this_thread::get_id() != self) moved.fetch_add(1);
      hits[static_cast<size_t>(outer * 8 + inner)].fetch_add(1);
    });
  });
  EXPECT_EQ(moved.load(), 0);
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << i;
}

TEST(ThreadPool, DestroyedWithSleepingWorkers) {
  for (int k = 0; k < 3; ++k) {
    ThreadPool pool(4);
    expect_each_once(pool, 16);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // past the spin: asleep
  }  // the destructor wakes and joins them (a hang here fails under ctest's timeout)
  SUCCEED();
}

/// The [lo, hi) blocks parallel_blocks hands out, sorted.
std::vector<std::pair<int64_t, int64_t>> blocks_of(ThreadPool& pool, int64_t n, int64_t work,
                                                   int64_t threshold, int64_t min_block,
                                                   int64_t per_thread) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> got;
  parallel_blocks(
      pool, n, work, threshold, min_block,
      [&](int64_t lo, int64_t hi) {
        std::lock_guard<std::mutex> lock(mu);
        got.emplace_back(lo, hi);
      },
      per_thread);
  std::sort(got.begin(), got.end());
  return got;
}

TEST(ThreadPool, ParallelBlocksCoverTheRangeInTheStatedCounts) {
  ThreadPool pool(2);
  struct Case {
    int64_t n, work, threshold, min_block, per_thread;
    size_t blocks;
  };
  const Case cases[] = {
      {96, 10, 100, 16, 4, 1},    // below the threshold: one block
      {96, 100, 100, 16, 4, 6},   // 96 / 16 = 6 < 4 x 2
      {512, 100, 100, 16, 4, 8},  // capped at 4 per thread
      {512, 100, 100, 16, 1, 2},  // one contiguous block per thread (decode's stream split)
      {17, 100, 100, 16, 1, 2},   // 17 channels: 9 + 8
      {16, 100, 100, 16, 1, 1},   // not worth a second block
  };
  for (const Case& c : cases) {
    const auto got = blocks_of(pool, c.n, c.work, c.threshold, c.min_block, c.per_thread);
    ASSERT_EQ(got.size(), c.blocks) << "n " << c.n << " per_thread " << c.per_thread;
    int64_t at = 0;
    for (const auto& [lo, hi] : got) {
      EXPECT_EQ(lo, at);
      EXPECT_LT(lo, hi);
      at = hi;
    }
    EXPECT_EQ(at, c.n);
  }
  ThreadPool one(1);
  EXPECT_EQ(blocks_of(one, 512, 100, 100, 16, 4).size(), 1u);  // one thread: one block
}

}  // namespace
}  // namespace qbc::runtime
