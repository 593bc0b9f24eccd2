// Measures the machine's float32 GEMM peak through LibTorch (the library the float
// runtime uses for calibration), so bench/quantize.sh can report calibration
// throughput as a fraction of it. Prints "gemm_peak_gflops <value>".
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

int main() {
  // Shapes of a calibration matmul: [tokens, hidden] x [hidden, out].
  const int64_t m = 4096, k = 2048, n = 2048;
  torch::manual_seed(0);
  const at::Tensor a = torch::randn({m, k});
  const at::Tensor b = torch::randn({k, n});
  at::Tensor c = torch::matmul(a, b);  // warm up
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    c = torch::matmul(a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * m * k * n / s / 1e9);
  }
  std::printf("gemm_peak_gflops %.1f (threads %d)\n", best, at::get_num_threads());
  return c.numel() > 0 ? 0 : 1;
}
