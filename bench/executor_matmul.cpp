// qbc-exec-matmul: throughput of the executor's integer matmul (and of a whole quantized
// linear: quantize + matmul + requant) on SmolLM2-135M- and Llama-3.2-1B-shaped projections,
// decode (1 row) and prefill (128 rows), with 1 and 2 host threads. Prints GMAC/s. The "W4g32"
// shapes time the matmul on packed int4 weights in groups of 32 with packed 4-bit zero points
// (the compact 4-bit image, docs/numerics.md): the grouped stream kernels
// (src/runtime/group_stream.h) on VNNI hosts, QBC_EXEC_NO_STREAM=1 for the older ones.
//
//   build/tools/qbc-exec-matmul [reps [shape-substring]]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/runtime/device.h"

namespace {

using qbc::isa::Expr;

struct Shape {
  const char* name;
  int64_t rows, n, k;
  bool w4 = false;  ///< packed int4 weights, groups of 32, packed int4 zero points
};

/// A bundle whose prefill program loads x codes and weights into SRAM once, then runs
/// `reps` matmuls (or quantize + matmul + requant with `linear`).
std::shared_ptr<qbc::isa::Bundle> make_bundle(const Shape& s, int reps, bool linear) {
  auto b = std::make_shared<qbc::isa::Bundle>();
  const int64_t gt = s.w4 ? (s.k + 31) / 32 : 1, wz_bytes = s.w4 ? (s.n * gt + 1) / 2 : 0;
  const int64_t w_bytes = s.w4 ? s.n * s.k / 2 : s.n * s.k, x_bytes = s.rows * s.k * 2;
  const int64_t acc_bytes = s.rows * s.n * gt * 4;
  b->sram_bytes =
      w_bytes + wz_bytes + 2 * x_bytes + 2 * acc_bytes + 4 * s.n + 16 * s.rows + 4096 + 64;
  b->chunk = s.rows;
  b->max_cache = s.rows;
  std::mt19937 g(1);
  b->image.resize(static_cast<size_t>(w_bytes + x_bytes + 4 * s.n));
  for (uint8_t& v : b->image) v = static_cast<uint8_t>(g());
  for (int64_t i = 0; i < s.rows * s.k; ++i) {  // fp16 activations in [-2, 2)
    const uint16_t h = static_cast<uint16_t>(0x3C00 + (g() % 0x800)) | ((g() & 1) << 15);
    std::memcpy(b->image.data() + w_bytes + 2 * i, &h, 2);
  }
  for (int64_t j = 0; j < s.n; ++j) {
    const float ws = 0.01f;
    std::memcpy(b->image.data() + w_bytes + x_bytes + 4 * j, &ws, 4);
  }
  auto buffer = [&](const char* name, qbc::isa::Space sp, int64_t off, int64_t bytes) {
    qbc::isa::Buffer buf;
    buf.name = name;
    buf.space = sp;
    buf.core = sp == qbc::isa::Space::kSram ? 0 : -1;
    buf.purpose =
        sp == qbc::isa::Space::kSram ? qbc::isa::Purpose::kSram : qbc::isa::Purpose::kWeights;
    buf.offset = off;
    buf.bytes = bytes;
    b->buffers.push_back(buf);
    return qbc::isa::Ref{static_cast<int32_t>(b->buffers.size()) - 1, 0};
  };
  const auto dw = buffer("w", qbc::isa::Space::kDram, 0, w_bytes);
  const auto dx = buffer("x", qbc::isa::Space::kDram, w_bytes, x_bytes);
  const auto dws = buffer("ws", qbc::isa::Space::kDram, w_bytes + x_bytes, 4 * s.n);
  int64_t at = 0;
  auto sram = [&](const char* name, int64_t bytes) {
    const auto r = buffer(name, qbc::isa::Space::kSram, at, bytes > 0 ? bytes : 1);
    at += (bytes + 63) / 64 * 64;
    return r;
  };
  const auto w = sram("w", w_bytes), x = sram("x", x_bytes), codes = sram("codes", s.rows * s.k);
  const auto xs = sram("xs", 4 * s.rows), xz = sram("xz", 4 * s.rows);
  const auto wz = sram("wz", wz_bytes);  // zero codes: whatever the random weight bytes hold
  if (s.w4) {
    b->buffers[static_cast<size_t>(w.buffer)].dtype = qbc::isa::DType::kI4;
    b->buffers[static_cast<size_t>(wz.buffer)].dtype = qbc::isa::DType::kI4;
  }
  const auto ws = sram("ws", 4 * s.n), acc = sram("acc", acc_bytes),
             y = sram("y", s.rows * s.n * 2);
  qbc::isa::Mode m;
  m.prefill.phase = qbc::isa::Phase::kPrefill;
  m.prefill.max_seq = s.rows;
  m.decode.phase = qbc::isa::Phase::kDecode;
  m.prefill.cores.resize(1);
  m.decode.cores.resize(1);
  auto& code = m.prefill.cores[0].code;
  auto emit = [&](qbc::isa::Op op) {
    qbc::isa::Instr in;
    in.op = op;
    code.push_back(in);
  };
  auto dma = [&](qbc::isa::Ref dst, qbc::isa::Ref src, int64_t bytes) {
    qbc::isa::Dma d;
    d.dst = dst;
    d.src = src;
    d.row_bytes = bytes;
    emit(d);
  };
  dma(w, dw, w_bytes);
  dma(x, dx, x_bytes);
  dma(ws, dws, 4 * s.n);
  qbc::isa::Quantize q;
  q.x = x;
  q.codes = codes;
  q.scale = xs;
  q.zero = xz;
  q.rows = s.rows;
  q.k = s.k;
  emit(q);
  emit(qbc::isa::Loop{0, reps, linear ? 3 : 1});
  if (linear) emit(q);
  qbc::isa::MatMul mm;
  mm.x = codes;
  mm.xzero = xz;
  mm.w = w;
  mm.acc = acc;
  mm.rows = s.rows;
  mm.n = s.n;
  mm.kt = s.k;
  mm.ldx = s.k;
  if (s.w4) {
    mm.wtype = qbc::isa::DType::kI4;
    mm.group = 32;
    mm.wzero = wz;
  }
  emit(mm);
  if (linear) {
    qbc::isa::Requant r;
    r.acc = acc;
    r.xscale = xs;
    r.wscale = ws;
    r.y = y;
    r.rows = s.rows;
    r.n = s.n;
    r.ldy = s.n;
    emit(r);
  }
  b->modes.push_back(std::move(m));
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const Shape shapes[] = {
      {"smollm2-135m up (decode)", 1, 1536, 576},
      {"smollm2-135m down (decode)", 1, 576, 1536},
      {"smollm2-135m head (decode)", 1, 49152, 576},
      {"llama-3.2-1b up (decode)", 1, 8192, 2048},
      {"smollm2-135m up (prefill)", 128, 1536, 576},
      {"smollm2-135m down (prefill)", 128, 576, 1536},
      {"llama-3.2-1b up (prefill)", 128, 8192, 2048},
      {"smollm2-135m up W4g32 (decode)", 1, 1536, 576, true},
      {"smollm2-135m down W4g32 (decode)", 1, 576, 1536, true},
      {"llama-3.2-1b up W4g32 (decode)", 1, 8192, 2048, true},
      {"smollm2-135m up W4g32 (prefill)", 128, 1536, 576, true},
  };
  std::printf("%-30s %8s %8s %12s %12s\n", "shape", "threads", "kind", "GMAC/s", "ms/call");
  for (const Shape& s : shapes) {
    if (argc > 2 && std::strstr(s.name, argv[2]) == nullptr) continue;
    for (bool linear : {false, true}) {
      if (linear && s.w4) continue;  // the matmul alone (requant is per group either way)
      for (int threads : {1, 2}) {
        qbc::runtime::DeviceOptions o;
        o.host_threads = threads;
        auto dev = qbc::runtime::Device::create(make_bundle(s, reps, linear), o);
        if (!dev.ok()) {
          std::fprintf(stderr, "%s\n", dev.status().to_string().c_str());
          return 1;
        }
        qbc::Status st = (*dev)->run(qbc::isa::Phase::kPrefill, 0, 0, s.rows);  // warm up
        const auto t0 = std::chrono::steady_clock::now();
        st = (*dev)->run(qbc::isa::Phase::kPrefill, 0, 0, s.rows);
        const double sec =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!st.ok()) {
          std::fprintf(stderr, "%s\n", st.to_string().c_str());
          return 1;
        }
        const double macs = static_cast<double>(s.rows * s.n * s.k) * reps;
        std::printf("%-30s %8d %8s %12.2f %12.3f\n", s.name, threads, linear ? "linear" : "matmul",
                    macs / sec / 1e9, sec / reps * 1e3);
      }
    }
  }
  return 0;
}
