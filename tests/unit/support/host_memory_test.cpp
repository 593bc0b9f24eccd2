// support/host_memory: the allocator tuning that took a stories260K llm compile from 120.9 s
// of system time to 3.0 s (issue 28, point 10). Timing is a benchmark's business; what a test
// can check is the cause: with the tuning, memory freed by one calibration-sample-sized round
// of work is reused by the next without new page faults. Each case runs in a forked child so
// that the allocator starts from its defaults and the tuning does not leak into other tests.
#include "qbc/support/host_memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace qbc::host_memory {
namespace {

struct Faults {
  long first_round = 0;   // minor page faults of the first round of allocations
  long later_rounds = 0;  // the most of any later round
  bool tuned = false;     // what tune_host_allocator() returned (false when not asked)
};

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// One round: ten 8 MiB blocks (the size of a calibration sample's activations on a 1B model,
// above glibc's default mmap threshold, below ours), each written fully, then all freed.
long one_round() {
  constexpr std::size_t kBlock = std::size_t{8} << 20;
  const long before = minor_faults();
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) {
    void* p = std::malloc(kBlock);
    if (p == nullptr) std::abort();
    std::memset(p, i + 1, kBlock);
    blocks.push_back(p);
  }
  for (void* p : blocks) std::free(p);
  return minor_faults() - before;
}

// Runs the rounds in a child process; `tune` calls tune_host_allocator() first.
Faults measure(bool tune) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Faults f;
    if (tune) f.tuned = tune_host_allocator();
    f.first_round = one_round();
    for (int r = 0; r < 4; ++r) {
      const long n = one_round();
      if (n > f.later_rounds) f.later_rounds = n;
    }
    const ssize_t w = write(fds[1], &f, sizeof f);
    _exit(w == static_cast<ssize_t>(sizeof f) ? 0 : 1);
  }
  close(fds[1]);
  Faults f;
  const ssize_t r = read(fds[0], &f, sizeof f);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_EQ(r, static_cast<ssize_t>(sizeof f));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return f;
}

TEST(HostMemory, DefaultAllocatorFaultsEveryRoundAgain) {
  // The control: without the tuning, glibc trims the freed top of the heap, so each round
  // maps and zero-fills its blocks again. If this ever stops holding, the test below proves
  // nothing and the tuning may be obsolete: both facts should be looked at together.
  const Faults f = measure(false);
  ASSERT_GT(f.first_round, 10000);  // 80 MiB written: about 20,000 4 KiB pages
  EXPECT_GT(f.later_rounds, f.first_round / 2);
}

TEST(HostMemory, TunedAllocatorReusesFreedMemory) {
  const Faults f = measure(true);
  EXPECT_TRUE(f.tuned) << "mallopt refused a threshold";
  ASSERT_GT(f.first_round, 10000);
  EXPECT_LT(f.later_rounds, f.first_round / 20)
      << "later rounds faulted " << f.later_rounds << " times, the first " << f.first_round;
}

}  // namespace
}  // namespace qbc::host_memory
