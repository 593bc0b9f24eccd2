// Measures the host's streaming read bandwidth, the roofline of a memory-bound decode on
// the executor: every decode step reads each weight once. Reads a 1 GiB buffer (far beyond
// any cache) split evenly over T threads, for T = 1 and 2 (or the counts given), and
// prints one line per count: "host_read_gbps <threads> <GB/s>" (GB = 1e9 bytes), the best
// of five passes after one warm-up pass. The buffer is written first, so its pages exist.
//
//   qbc-host-bandwidth [MiB] [threads...]      default: 1024 MiB, threads 1 2
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

// Sums a range with four independent accumulators (the loop vectorizes; the sum keeps the
// compiler from dropping the reads).
uint64_t sum_range(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

// One pass over the buffer on `threads` threads; seconds.
double one_pass(const std::vector<uint64_t>& buf, int threads, uint64_t* sink) {
  std::vector<uint64_t> sums(threads, 0);
  std::vector<std::thread> pool;
  const size_t per = buf.size() / threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    const size_t begin = per * t, n = t + 1 == threads ? buf.size() - begin : per;
    pool.emplace_back([&, t, begin, n] { sums[t] = sum_range(buf.data() + begin, n); });
  }
  for (std::thread& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (uint64_t v : sums) *sink += v;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const long mib = argc > 1 ? std::atol(argv[1]) : 1024;
  std::vector<int> counts;
  for (int i = 2; i < argc; ++i) counts.push_back(std::atoi(argv[i]));
  if (counts.empty()) counts = {1, 2};
  if (mib <= 0 || std::any_of(counts.begin(), counts.end(), [](int t) { return t <= 0; })) {
    std::fprintf(stderr, "usage: qbc-host-bandwidth [MiB > 0] [threads > 0 ...]\n");
    return 2;
  }
  std::vector<uint64_t> buf(static_cast<size_t>(mib) << 17);  // MiB * 2^20 / 8
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  uint64_t sink = 0;
  for (int threads : counts) {
    one_pass(buf, threads, &sink);  // warm-up
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) best = std::min(best, one_pass(buf, threads, &sink));
    const double bytes = static_cast<double>(buf.size()) * sizeof(uint64_t);
    std::printf("host_read_gbps %d %.1f\n", threads, bytes / best / 1e9);
  }
  return sink == 42 ? 1 : 0;  // never: keeps the sums alive
}
