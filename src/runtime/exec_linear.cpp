// The MAC array's instructions: quantize (fp16 rows to integer codes with per-row scales and
// zero points), matmul (exact integer sums per weight group) and requant (the fp32
// multiply-adds of numerics::qlinear, in its order). Together they compute
// numerics::qlinear bit for bit, however the program tiles rows, channels and K. Large
// instructions split rows or channels over the host threads; every element is computed the
// same way wherever it runs.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "core.h"
#include "fp16_rows.h"
#include "group_stream.h"
#include "int4_kernel.h"
#include "matmul_kernel.h"
#include "qbc/numerics/quantizer.h"
#include "scratch.h"
#include "thread_pool.h"
#include "values.h"
#include "vec_kernels.h"

namespace qbc::runtime {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Work below which an instruction stays on one thread.
constexpr int64_t kParallelMacs = int64_t{1} << 20;
constexpr int64_t kParallelElements = int64_t{1} << 15;
/// A matmul of at most kStreamRows rows (decode) streams its weights once. From
/// kParallelStreamCodes weight codes it splits its channels into one contiguous block per
/// host thread, so each thread reads one run of memory in address order (the hardware
/// prefetcher follows it). Measured in docs/performance.md ("Decode on two threads"): four
/// dynamic blocks per thread streamed 8 % slower on the Llama-3.2-1B shape, and splits of
/// 64 KiB tiles made SmolLM2-135M's decode slower on two threads than on one.
constexpr int64_t kParallelStreamCodes = int64_t{1} << 18;
constexpr int64_t kStreamRows = 4;

template <typename Fn>
void blocks(ThreadPool& pool, int64_t n, int64_t work, int64_t threshold, int64_t min_block,
            const Fn& fn) {
  parallel_blocks(pool, n, work, threshold, min_block, fn);
}

/// fn(j0, j1) over the n channels of a rows x n x kt matmul: a decode matmul (at most
/// kStreamRows rows) in one contiguous block per host thread from kParallelStreamCodes weight
/// codes, others in up to four blocks per thread from kParallelMacs.
template <typename Fn>
void channel_blocks(ThreadPool& pool, int64_t rows, int64_t n, int64_t kt, const Fn& fn) {
  const bool stream = rows <= kStreamRows;
  parallel_blocks(pool, n, stream ? n * kt : rows * n * kt,
                  stream ? kParallelStreamCodes : kParallelMacs, 16, fn, stream ? 1 : 4);
}

/// The weight codes of rows [n, kt] as int8 (int4 unpacked, sign-extended); `w` points at
/// device memory, `scratch` holds the unpacked copy when needed.
const int8_t* weights_i8(const uint8_t* w, isa::DType t, int64_t n, int64_t kt,
                         std::vector<int8_t>* scratch) {
  if (t == isa::DType::kI8) return reinterpret_cast<const int8_t*>(w);
  const int64_t row_bytes = isa::dtype_bytes(t, kt);
  scratch->resize(static_cast<size_t>(n * kt));
  std::vector<int32_t> row(static_cast<size_t>(kt));
  for (int64_t j = 0; j < n; ++j) {
    load_codes(w + j * row_bytes, t, kt, row.data());
    int8_t* dst = scratch->data() + j * kt;
    for (int64_t k = 0; k < kt; ++k) dst[k] = static_cast<int8_t>(row[static_cast<size_t>(k)]);
  }
  return scratch->data();
}

/// Whether matmul_u8 runs a block's groups in one dot_u8_groups call (else one dot_u8 call per
/// group, the older path: the same integers). Off when the environment sets
/// QBC_EXEC_NO_GROUPED, to time the two side by side.
bool grouped_kernel() {
  static const bool on = std::getenv("QBC_EXEC_NO_GROUPED") == nullptr;
  return on;
}

/// The operands of one matmul, resolved.
struct MatMulArgs {
  const isa::MatMul& op;
  int64_t rows, gt, group;
  const int32_t* xz;            ///< [rows]
  const int8_t* w;              ///< [n, kt] int8, or nullptr when w4 is set
  const int32_t* wz;            ///< [n, gt] or nullptr
  const uint8_t* w4 = nullptr;  ///< [n, kt] packed int4 (rows of kt/2 bytes), for matmul_u8
  StreamZeros zeros = {};       ///< the zero points as stored (matmul_stream reads these)
};

/// Rows [rows, kt] of packed int4 codes (kt / 2 bytes a row, low nibble first) as int8, into
/// out [rows, kt]: 32 codes a step with SSE2 (every x86-64 has it), else one byte at a time.
void unpack_i4_rows(const uint8_t* w, int64_t rows, int64_t kt, int8_t* out) {
  const int64_t rb = kt / 2;  // the verifier requires an even kt for int4 weights
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = w + r * rb;
    int8_t* dst = out + r * kt;
    int64_t i = 0;
#if defined(__x86_64__)
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (; i + 16 <= rb; i += 16) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      // (v ^ 8) − 8 sign-extends a nibble v in [0, 15] to [−8, 7].
      const __m128i lo = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(b, low), eight), eight);
      const __m128i hi =
          _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(_mm_srli_epi16(b, 4), low), eight), eight);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm_unpacklo_epi8(lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i + 16), _mm_unpackhi_epi8(lo, hi));
    }
#endif
    for (; i < rb; ++i) {
      const int lo = src[i] & 0xF, hi = src[i] >> 4;
      dst[2 * i] = static_cast<int8_t>((lo ^ 8) - 8);
      dst[2 * i + 1] = static_cast<int8_t>((hi ^ 8) - 8);
    }
  }
}

/// acc[(m*n + j)*gt + g] (+)= Σ (x − xz)(w − wz), stored as AccT (int32 wraps).
template <typename AccT>
void store_sum(AccT* acc, int64_t i, int64_t v, bool accumulate) {
  if (accumulate) v += acc[i];
  acc[i] = static_cast<AccT>(static_cast<std::make_unsigned_t<AccT>>(v));
}

/// int8 activations: the int32 dot-product kernel on x − xz (|.| <= 255) per group, with
/// Σ (x − xz)(w − wz) = Σ (x − xz) w − wz Σ (x − xz); channel blocks on the host threads.
template <typename AccT>
void matmul_i8(const MatMulArgs& a, const int8_t* x, ThreadPool& pool, AccT* acc) {
  const isa::MatMul& op = a.op;
  const int64_t n = op.n, kt = op.kt, rows = a.rows, gt = a.gt;
  std::vector<int16_t> xs(static_cast<size_t>(rows * kt));
  for (int64_t m = 0; m < rows; ++m) {
    int16_t* d = xs.data() + m * kt;
    const int8_t* s = x + m * op.ldx;
    for (int64_t k = 0; k < kt; ++k) d[k] = static_cast<int16_t>(s[k] - a.xz[m]);
  }
  std::vector<int64_t> xsum;  // Σ_k (x − xz) per (m, g), for the weight zero points
  if (a.wz != nullptr) {
    xsum.assign(static_cast<size_t>(rows * gt), 0);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t k = 0; k < kt; ++k)
        xsum[static_cast<size_t>(m * gt + k / a.group)] += xs[static_cast<size_t>(m * kt + k)];
    }
  }
  blocks(pool, n, rows * n * kt, kParallelMacs, 16, [&](int64_t j0, int64_t j1) {
    const int64_t bn = j1 - j0;
    std::vector<int32_t> dots(static_cast<size_t>(rows * bn));
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t k0 = g * a.group, len = std::min(a.group, kt - k0);
      dot_tile(xs.data() + k0, kt, rows, a.w + j0 * kt + k0, kt, bn, len, dots.data(), bn, 1);
      for (int64_t m = 0; m < rows; ++m) {
        const int32_t* dr = dots.data() + m * bn;
        const int64_t xsg = a.wz != nullptr ? xsum[static_cast<size_t>(m * gt + g)] : 0;
        for (int64_t j = j0; j < j1; ++j) {
          int64_t v = dr[j - j0];
          if (a.wz != nullptr) v -= int64_t{a.wz[j * gt + g]} * xsg;
          store_sum(acc, (m * n + j) * gt + g, v, op.accumulate);
        }
      }
    }
  });
}

/// xsum[m * gt + g] = Σ_{k in group g} (x[m * ldx + k] − xz[m]) for the matmul's rows: the
/// activation sums the weight zero points multiply, group by group (no division per code).
void group_xsums(const MatMulArgs& a, const int8_t* x, int64_t* xsum) {
  const int64_t kt = a.op.kt, gt = a.gt;
  for (int64_t m = 0; m < a.rows; ++m) {
    const int8_t* s = x + m * a.op.ldx;
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t k0 = g * a.group, k1 = std::max(k0, std::min(kt, k0 + a.group));
      int64_t v = 0;
      for (int64_t k = k0; k < k1; ++k) v += s[k];
      xsum[m * gt + g] = v - int64_t{a.xz[m]} * (k1 - k0);
    }
  }
}

/// d[k] = s[k] + 128 as unsigned bytes (the sign bit flipped) for k < n. Its own function
/// with restrict pointers: inline, a byte store could have aliased the caller's `kt` (captured
/// by reference), and the loop ran a byte at a time reloading it (9 % of a prefill).
void offset_codes(const int8_t* __restrict s, int64_t n, uint8_t* __restrict d) {
  for (int64_t k = 0; k < n; ++k) d[k] = static_cast<uint8_t>(static_cast<uint8_t>(s[k]) ^ 0x80u);
}

/// int8 activations on the VNNI kernel: u = x + 128 (unsigned bytes) against the weights,
/// Σ (x − xz) w = Σ u w − (xz + 128) Σ w, and the weight zero points as in matmul_i8.
/// Exact for any xz (the corrections in int64). Writes acc (device memory) directly.
template <typename AccT>
void matmul_u8(const MatMulArgs& a, const int8_t* x, ThreadPool& pool, uint8_t* acc_mem) {
  const isa::MatMul& op = a.op;
  const int64_t n = op.n, kt = op.kt, rows = a.rows, gt = a.gt;
  uint8_t* xu = scratch<uint8_t, 0>(static_cast<size_t>(rows * kt)).data();
  for (int64_t m = 0; m < rows; ++m) offset_codes(x + m * op.ldx, kt, xu + m * kt);
  // Σ_k (x − xz) per (m, g), for the weight zero points (per-thread scratch: no allocation
  // per instruction).
  int64_t* xsum = nullptr;
  if (a.wz != nullptr) {
    xsum = scratch<int64_t, 5>(static_cast<size_t>(rows * gt)).data();
    group_xsums(a, x, xsum);
  }
  // Channels [j0, j1) against weight rows wr (row j0 first, kt codes a row).
  // Groups (gt > 1): every group of the block's rows in one dot_u8_groups call; the block's
  // acc entries [(m * n + j0) * gt, (m * n + j1) * gt) are contiguous in that order.
  auto run_groups = [&](int64_t j0, int64_t j1, const int8_t* wr) {
    const int64_t cnt = (j1 - j0) * gt;
    int32_t* dots = scratch<int32_t, 1>(static_cast<size_t>(rows * cnt)).data();
    int32_t* ws = scratch<int32_t, 2>(static_cast<size_t>(cnt)).data();
    AccT* row = scratch<AccT, 3>(static_cast<size_t>(cnt)).data();
    dot_u8_groups(xu, kt, rows, wr, kt, j1 - j0, kt, a.group, dots, cnt, ws);
    for (int64_t m = 0; m < rows; ++m) {
      const int64_t xzm = int64_t{a.xz[m]} + 128;
      const int64_t* xs = a.wz != nullptr ? xsum + m * gt : nullptr;
      const int32_t* wz = a.wz != nullptr ? a.wz + j0 * gt : nullptr;
      uint8_t* dst = acc_mem + (m * n + j0) * gt * static_cast<int64_t>(sizeof(AccT));
      if (op.accumulate) load(dst, cnt, row);
      const int32_t* dr = dots + m * cnt;
      if constexpr (std::is_same_v<AccT, int32_t>) {  // the same sums modulo 2^32
        uint32_t* xs32 = scratch<uint32_t, 20>(static_cast<size_t>(gt)).data();
        for (int64_t g = 0; g < gt; ++g) xs32[g] = xs != nullptr ? static_cast<uint32_t>(xs[g]) : 0;
        group_corrections(dr, ws, reinterpret_cast<const uint32_t*>(wz), xs32,
                          static_cast<uint32_t>(xzm), j1 - j0, gt, op.accumulate, row);
      } else {
        for (int64_t i = 0; i < cnt; i += gt) {
          for (int64_t g = 0; g < gt; ++g) {
            int64_t v = int64_t{dr[i + g]} - xzm * ws[i + g];
            if (wz != nullptr) v -= int64_t{wz[i + g]} * xs[g];
            const int64_t old = op.accumulate ? int64_t{row[i + g]} : 0;
            row[i + g] = static_cast<AccT>(static_cast<std::make_unsigned_t<AccT>>(v + old));
          }
        }
      }
      store(row, cnt, dst);
    }
  };
  auto run = [&](int64_t j0, int64_t j1, const int8_t* wr) {
    if (gt > 1 && grouped_kernel()) return run_groups(j0, j1, wr);
    const int64_t bn = j1 - j0;
    int32_t* dots = scratch<int32_t, 1>(static_cast<size_t>(rows * bn)).data();
    int32_t* ws = scratch<int32_t, 2>(static_cast<size_t>(bn)).data();
    AccT* row = scratch<AccT, 3>(static_cast<size_t>(bn)).data();
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t k0 = g * a.group, len = std::min(a.group, kt - k0);
      dot_u8(xu + k0, kt, rows, wr + k0, kt, bn, len, dots, bn, ws);
      for (int64_t m = 0; m < rows; ++m) {
        const int32_t* dr = dots + m * bn;
        const int64_t xzm = int64_t{a.xz[m]} + 128;
        if (gt == 1 && a.wz == nullptr) {  // one contiguous row of acc
          uint8_t* dst = acc_mem + (m * n + j0) * static_cast<int64_t>(sizeof(AccT));
          if (op.accumulate) load(dst, bn, row);
          for (int64_t j = 0; j < bn; ++j) {
            const int64_t v = int64_t{dr[j]} - xzm * ws[j];
            const int64_t old = op.accumulate ? int64_t{row[j]} : 0;
            row[j] = static_cast<AccT>(static_cast<std::make_unsigned_t<AccT>>(v + old));
          }
          store(row, bn, dst);
          continue;
        }
        const int64_t xsg = a.wz != nullptr ? xsum[m * gt + g] : 0;
        for (int64_t j = j0; j < j1; ++j) {
          int64_t v = int64_t{dr[j - j0]} - xzm * ws[j - j0];
          if (a.wz != nullptr) v -= int64_t{a.wz[j * gt + g]} * xsg;
          uint8_t* dst = acc_mem + ((m * n + j) * gt + g) * static_cast<int64_t>(sizeof(AccT));
          AccT old = 0;
          if (op.accumulate) load(dst, 1, &old);
          const AccT r = static_cast<AccT>(static_cast<std::make_unsigned_t<AccT>>(v + old));
          store(&r, 1, dst);
        }
      }
    }
  };
  channel_blocks(pool, rows, n, kt, [&](int64_t j0, int64_t j1) {
    if (a.w4 == nullptr) return run(j0, j1, a.w + j0 * kt);
    // Packed int4: unpacked 32 channels at a time into a cache-resident int8 block.
    constexpr int64_t kSub = 32;
    int8_t* wu = scratch<int8_t, 4>(static_cast<size_t>(kSub * kt)).data();
    for (int64_t jb = j0; jb < j1; jb += kSub) {
      const int64_t je = std::min(j1, jb + kSub);
      unpack_i4_rows(a.w4 + jb * (kt / 2), je - jb, kt, wu);
      run(jb, je, wu);
    }
  });
}

/// Whether a matmul takes the grouped stream kernels (group_stream.h): groups of 32 over
/// whole rows (int4 weights, or int8 in groups), int32 sums and the rows' zero points within
/// int8, on a host where those kernels are the fast path. Prefill too: with 64 rows a
/// SmolLM2-135M W4V8 matmul took 135 us on the older grouped kernels (a buffer of raw sums and
/// a correction pass over it) and 84 us here (docs/performance.md).
bool stream_path(const MatMulArgs& a) {
  return a.op.xtype == isa::DType::kI8 && a.op.acctype == isa::DType::kI32 &&
         a.group == kStreamGroup && a.op.kt % kStreamGroup == 0 && (a.w4 != nullptr || a.gt > 1) &&
         std::all_of(a.xz, a.xz + a.rows, [](int32_t z) { return z >= -128 && z <= 127; }) &&
         group_stream_fast();
}

/// Grouped matmuls on the stream kernels: each row laid out once, then every channel block's
/// groups in one pass in address order (int4: four rows a pass), corrected and stored by the
/// kernel.
void matmul_stream(const MatMulArgs& a, const int8_t* x, ThreadPool& pool, uint8_t* acc_mem) {
  const isa::MatMul& op = a.op;
  const int64_t n = op.n, kt = op.kt, gt = a.gt;
  thread_local std::vector<StreamRow> prepared_v;  // the pool's threads read the caller's
  if (prepared_v.size() < static_cast<size_t>(a.rows))
    prepared_v.resize(static_cast<size_t>(a.rows));
  StreamRow* prepared = prepared_v.data();
  for (int64_t m = 0; m < a.rows; ++m) {
    if (a.w4 != nullptr) {
      prepared[m].prepare_i4(x + m * op.ldx, kt, a.xz[m]);
    } else {
      prepared[m].prepare_i8(x + m * op.ldx, kt, a.xz[m]);
    }
  }
  const StreamRow* rows = prepared;
  // Blocks of whole channel pairs: a block's first zero point j0 * gt is then even, so packed
  // int4 zero points start on a byte.
  channel_blocks(pool, a.rows, (n + 1) / 2, 2 * kt, [&](int64_t p0, int64_t p1) {
    const int64_t j0 = 2 * p0, j1 = std::min(n, 2 * p1);
    StreamZeros wz = a.zeros;
    wz.first = j0 * gt;
    const int64_t ldo = n * gt * static_cast<int64_t>(sizeof(int32_t));  // acc bytes a row
    uint8_t* dst = acc_mem + j0 * gt * static_cast<int64_t>(sizeof(int32_t));
    if (a.w4 != nullptr) {
      group_stream_i4_rows(rows, a.rows, a.w4 + j0 * (kt / 2), j1 - j0, wz, op.accumulate, dst,
                           ldo);
      return;
    }
    for (int64_t m = 0; m < a.rows; ++m)
      group_stream_i8(rows[m], a.w + j0 * kt, j1 - j0, wz, op.accumulate, dst + m * ldo);
  });
}

/// Whether packed int4 weights against int8 activations take matmul_i4 (else the older
/// unpack-then-int8 paths: the same integers). Off when the environment sets
/// QBC_EXEC_NO_I4_KERNEL, to time the two side by side.
bool i4_kernel_on() {
  static const bool on = std::getenv("QBC_EXEC_NO_I4_KERNEL") == nullptr;
  return on;
}

/// Packed int4 weights against int8 activations on any host: dot_i4_groups reads the packed
/// rows directly and gives Σ x t and Σ t per group (t = w + 8), so
/// Σ (x − xz)(w − wz) = Σ x t − xz Σ t − (8 + wz) Σ (x − xz), computed modulo 2^bits(AccT)
/// (the wrapped exact sum, as the other paths store it). Writes acc (device memory) directly.
template <typename AccT>
void matmul_i4(const MatMulArgs& a, const int8_t* x, ThreadPool& pool, uint8_t* acc_mem) {
  using U = std::make_unsigned_t<AccT>;
  const isa::MatMul& op = a.op;
  const int64_t n = op.n, kt = op.kt, rows = a.rows, gt = a.gt;
  int64_t* xsum = scratch<int64_t, 5>(static_cast<size_t>(rows * gt)).data();
  group_xsums(a, x, xsum);
  channel_blocks(pool, rows, n, kt, [&](int64_t j0, int64_t j1) {
    const int64_t cnt = (j1 - j0) * gt;
    int32_t* dots = scratch<int32_t, 1>(static_cast<size_t>(rows * cnt)).data();
    int32_t* ts = scratch<int32_t, 2>(static_cast<size_t>(cnt)).data();
    AccT* row = scratch<AccT, 3>(static_cast<size_t>(cnt)).data();
    dot_i4_groups(x, op.ldx, rows, a.w4 + j0 * (kt / 2), kt / 2, j1 - j0, kt, a.group, dots, cnt,
                  ts);
    // 8 + wz per (channel, group) and Σ (x − xz) per group as U: the correction loop below
    // then runs on one integer width (a loop the compiler vectorises).
    U* off = scratch<U, 15>(static_cast<size_t>(cnt)).data();
    U* xsu = scratch<U, 16>(static_cast<size_t>(gt)).data();
    const int32_t* wz = a.wz != nullptr ? a.wz + j0 * gt : nullptr;
    for (int64_t i = 0; i < cnt; ++i) off[i] = static_cast<U>(8 + (wz != nullptr ? wz[i] : 0));
    for (int64_t m = 0; m < rows; ++m) {
      const U xzm = static_cast<U>(a.xz[m]);
      for (int64_t g = 0; g < gt; ++g) xsu[g] = static_cast<U>(xsum[m * gt + g]);
      uint8_t* dst = acc_mem + (m * n + j0) * gt * static_cast<int64_t>(sizeof(AccT));
      if (op.accumulate) load(dst, cnt, row);
      const int32_t* dr = dots + m * cnt;
      if constexpr (std::is_same_v<AccT, int32_t>) {
        group_corrections(dr, ts, off, xsu, xzm, j1 - j0, gt, op.accumulate, row);
      } else {
        for (int64_t i = 0; i < cnt; i += gt) {
          for (int64_t g = 0; g < gt; ++g) {
            U v = static_cast<U>(dr[i + g]) - xzm * static_cast<U>(ts[i + g]) - off[i + g] * xsu[g];
            if (op.accumulate) v += static_cast<U>(row[i + g]);
            row[i + g] = static_cast<AccT>(v);
          }
        }
      }
      store(row, cnt, dst);
    }
  });
}

/// Any code types in plain int64 loops (int16 activations, zero points outside int8, long
/// groups).
template <typename AccT>
void matmul_generic(const MatMulArgs& a, const uint8_t* x, ThreadPool& pool, AccT* acc) {
  const isa::MatMul& op = a.op;
  const int64_t n = op.n, kt = op.kt, gt = a.gt;
  const int64_t xb = op.xtype == isa::DType::kI16 ? 2 : 1;
  blocks(pool, a.rows, a.rows * n * kt, kParallelMacs, 1, [&](int64_t m0, int64_t m1) {
    std::vector<int32_t> xr(static_cast<size_t>(kt));
    for (int64_t m = m0; m < m1; ++m) {
      load_codes(x + m * op.ldx * xb, op.xtype, kt, xr.data());
      for (int64_t j = 0; j < n; ++j) {
        const int8_t* wr = a.w + j * kt;
        for (int64_t g = 0; g < gt; ++g) {
          const int64_t k0 = g * a.group, k1 = std::min(kt, k0 + a.group);
          const int64_t zw = a.wz != nullptr ? a.wz[j * gt + g] : 0;
          int64_t s = 0;
          for (int64_t k = k0; k < k1; ++k)
            s += (int64_t{xr[static_cast<size_t>(k)]} - a.xz[m]) * (int64_t{wr[k]} - zw);
          store_sum(acc, (m * n + j) * gt + g, s, op.accumulate);
        }
      }
    }
  });
}

/// The dtype of the buffer `r` refers to (`otherwise` for an unset optional operand).
isa::DType buffer_type(const Core& c, const isa::Ref& r, isa::DType otherwise) {
  return r.valid() ? c.bundle.buffers[static_cast<size_t>(r.buffer)].dtype : otherwise;
}

/// Whether matmul() takes the VNNI kernel (matmul_u8).
bool vnni_path(const isa::MatMul& op, int64_t group) {
  return op.xtype == isa::DType::kI8 && group <= kMaxExactDotLen && dot_u8_fast();
}

/// Whether matmul() takes matmul_i4 (packed int4 weights, int8 activations).
bool i4_path(const isa::MatMul& op, int64_t group) {
  return op.wtype == isa::DType::kI4 && op.xtype == isa::DType::kI8 && group <= (1 << 20) &&
         i4_kernel_on();
}

template <typename AccT>
void matmul(const MatMulArgs& a, const uint8_t* x, ThreadPool& pool, uint8_t* acc_mem) {
  if (a.w4 != nullptr && i4_path(a.op, a.group)) {
    return matmul_i4<AccT>(a, reinterpret_cast<const int8_t*>(x), pool, acc_mem);
  }
  if (vnni_path(a.op, a.group)) {
    return matmul_u8<AccT>(a, reinterpret_cast<const int8_t*>(x), pool, acc_mem);
  }
  const int64_t count = a.rows * a.op.n * a.gt;
  std::vector<AccT> acc(static_cast<size_t>(count));
  if (a.op.accumulate) load(acc_mem, count, acc.data());
  const bool small_zero =
      std::all_of(a.xz, a.xz + a.rows, [](int32_t z) { return z >= -128 && z <= 127; });
  if (a.op.xtype == isa::DType::kI8 && small_zero && a.group <= kMaxExactDotLen) {
    matmul_i8(a, reinterpret_cast<const int8_t*>(x), pool, acc.data());
  } else {
    matmul_generic(a, x, pool, acc.data());
  }
  store(acc.data(), count, acc_mem);
}

/// One row's grouped requant sums: v[j] = (fsum[j] +) part_0 + part_1 + ... in group order,
/// part_g = fp32(acc[j * gt + g]) * fp32(xm * ws[j * ws_stride + g]). Two passes with the same
/// fp32 operations as the element-at-a-time loop (so the same bits): every part into `part`
/// [n, gt] with unit strides (a loop the compiler vectorises), then the sums with the channels
/// inner (independent adds instead of one dependent chain per channel).
/// With float offsets (`wm`, laid out like ws, and `xsf`, the row's code sums per group as
/// fp32): part_g = part_g + fp32(xsf[g] * fp32(xm * wm[j, g])) (docs/numerics.md).
template <typename AccT>
void grouped_sums(const isa::Requant& op, const AccT* __restrict am, float xm,
                  const float* __restrict ws, float* __restrict part, const float* __restrict fsum,
                  float* __restrict v, const float* __restrict xsf, const float* __restrict wm) {
  const int64_t n = op.n, gt = op.gt;
  if (op.ws_stride == gt) {
    for (int64_t i = 0; i < n * gt; ++i) part[i] = static_cast<float>(am[i]) * (xm * ws[i]);
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const AccT* aj = am + j * gt;
      const float* wj = ws + j * op.ws_stride;
      float* pj = part + j * gt;
      for (int64_t g = 0; g < gt; ++g) pj[g] = static_cast<float>(aj[g]) * (xm * wj[g]);
    }
  }
  if (wm != nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      const float* mj = wm + j * op.ws_stride;
      float* pj = part + j * gt;
      for (int64_t g = 0; g < gt; ++g) pj[g] = pj[g] + xsf[g] * (xm * mj[g]);
    }
  }
  sum_groups(part, n, gt, fsum, v);
}

/// numerics::qlinear's fp32 order for rows [m0, m1): part_g = fp32(acc) * fp32(xs * ws),
/// v = part_0 or fsum + part_0, then + part_1 ..., + bias; fp16 or fp32 out, or fsum.
/// With float offsets: `xsf` [rows, gt] the code sums as fp32, `wm` laid out like ws.
/// With `ws16` (grouped int32 sums without float offsets), the scales are read as the
/// binary16 bits SRAM holds and `ws` is not used.
template <typename AccT>
void requant_rows(const isa::Requant& op, const AccT* acc, const float* xs, const float* ws,
                  const float* bias, float* fsum, int64_t m0, int64_t m1, uint8_t* y,
                  const float* xsf, const float* wm, const uint8_t* ws16) {
  const int64_t n = op.n, gt = op.gt;
  std::vector<float>& row = scratch<float, 7>(static_cast<size_t>(n));
  std::vector<float>& part = scratch<float, 14>(static_cast<size_t>(n * gt));
  for (int64_t m = m0; m < m1; ++m) {
    const AccT* am = acc + m * n * gt;
    const float xm = xs[m];
    if (gt == 1 && op.first && wm == nullptr) {  // per-channel: one part (vectorised)
      for (int64_t j = 0; j < n; ++j)
        row[static_cast<size_t>(j)] = static_cast<float>(am[j]) * (xm * ws[j * op.ws_stride]);
    } else if constexpr (std::is_same_v<AccT, int32_t>) {
      if (ws16 != nullptr) {
        grouped_requant_f16(am, n, gt, xm, ws16, op.ws_stride, op.first ? nullptr : fsum + m * n,
                            row.data());
      } else {
        grouped_requant(am, n, gt, xm, ws, op.ws_stride, wm != nullptr ? xsf + m * gt : nullptr, wm,
                        op.first ? nullptr : fsum + m * n, row.data());
      }
    } else {
      grouped_sums(op, am, xm, ws, part.data(), op.first ? nullptr : fsum + m * n, row.data(),
                   wm != nullptr ? xsf + m * gt : nullptr, wm);
    }
    if (op.last && bias != nullptr) {
      for (int64_t j = 0; j < n; ++j)
        row[static_cast<size_t>(j)] = row[static_cast<size_t>(j)] + bias[j];
    }
    if (!op.last) {
      std::copy(row.begin(), row.begin() + n, fsum + m * n);
    } else if (op.ytype == isa::DType::kF16) {
      store_f16(row.data(), n, y + m * op.ldy * 2);
    } else {
      store(row.data(), n, y + m * op.ldy * 4);
    }
  }
}

}  // namespace

Status exec(const isa::Quantize& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t k = op.k;
  c.counters.vector_ops += rows * k;
  if (c.counters_only) return ok_status();
  const isa::DType ct = op.bits == 16 ? isa::DType::kI16 : isa::DType::kI8;
  const int64_t cb = op.bits == 16 ? 2 : 1;
  const int64_t xb = op.x_f32 ? 4 : 2;
  QBC_ASSIGN_OR_RETURN(const uint8_t* x, c.sram_at(op.x, span(rows, xb, k), "x"));
  QBC_ASSIGN_OR_RETURN(uint8_t * codes, c.sram_write(op.codes, span(rows, cb, k), "codes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * scale, c.sram_write(op.scale, span(rows, 4), "scale"));
  uint8_t* zero = nullptr;
  if (op.zero.valid()) {
    QBC_ASSIGN_OR_RETURN(zero, c.sram_write(op.zero, span(rows, 4), "zero"));
  }
  blocks(c.pool, rows, rows * k, kParallelElements, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> xr(static_cast<size_t>(k));
    std::vector<int32_t> q(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      if (op.x_f32) {
        load(x + r * 4 * k, k, xr.data());
      } else {
        load_f16(x + r * 2 * k, k, xr.data());
      }
      float s = op.static_scale;
      int32_t z = 0;
      bool affine = false;
      switch (op.mode) {
        case isa::QuantMode::kTokenAffine:
          numerics::per_token_affine(xr.data(), k, op.bits, &s, &z);
          affine = true;
          break;
        case isa::QuantMode::kTokenSymmetric:
          s = numerics::per_token_scale(xr.data(), k, op.bits);
          break;
        case isa::QuantMode::kStaticAffine:
          z = op.static_zero;
          affine = true;
          break;
        case isa::QuantMode::kStaticSymmetric:
          break;
      }
      if (affine) {
        numerics::quantize_affine_row(xr.data(), k, s, z, op.bits, q.data());
      } else {
        numerics::quantize_symmetric_row(xr.data(), k, s, op.bits, q.data());
      }
      store_codes(q.data(), ct, k, codes + r * cb * k);
      store(&s, 1, scale + 4 * r);
      if (zero != nullptr) store(&z, 1, zero + 4 * r);
    }
  });
  return ok_status();
}

namespace {

/// xsum[m, g] = Σ_{k in group g} (x[m, k] − xz[m]), exactly, stored as op's acctype (the
/// float offsets' code sums, docs/numerics.md).
void code_sums(const isa::MatMul& op, int64_t rows, int64_t gt, const uint8_t* x, const int32_t* xz,
               uint8_t* out) {
  const int64_t group = op.group > 0 ? op.group : op.kt;
  const int64_t xb = isa::dtype_bytes(op.xtype, 1);
  std::vector<int32_t> codes(static_cast<size_t>(op.kt));
  std::vector<int64_t> sums(static_cast<size_t>(gt));
  std::vector<int32_t> sums32(static_cast<size_t>(gt));
  for (int64_t m = 0; m < rows; ++m) {
    load_codes(x + m * op.ldx * xb, op.xtype, op.kt, codes.data());
    for (int64_t g = 0; g < gt; ++g) {
      int64_t s = 0;
      for (int64_t k = g * group; k < std::min(op.kt, (g + 1) * group); ++k)
        s += codes[static_cast<size_t>(k)] - xz[m];
      sums[static_cast<size_t>(g)] = s;
      sums32[static_cast<size_t>(g)] = static_cast<int32_t>(s);
    }
    if (op.acctype == isa::DType::kI32) {
      store(sums32.data(), gt, out + 4 * m * gt);
    } else {
      store(sums.data(), gt, out + 8 * m * gt);
    }
  }
}

}  // namespace

Status exec(const isa::MatMul& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t n = op.n, kt = op.kt;
  c.counters.macs += span(rows, n, kt);
  if (c.counters_only) return ok_status();
  const int64_t group = op.group > 0 ? op.group : std::max<int64_t>(kt, 1);
  const int64_t gt = op.group > 0 ? ceil_div(kt, op.group) : 1;
  const int64_t xb = op.xtype == isa::DType::kI16 ? 2 : 1;
  const int64_t accb = op.acctype == isa::DType::kI32 ? 4 : 8;
  const int64_t x_bytes = span(rows_span(rows, op.ldx, kt), xb);
  QBC_ASSIGN_OR_RETURN(const uint8_t* x, c.sram_at(op.x, x_bytes, "x"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* xzp, c.sram_opt(op.xzero, span(rows, 4), "xzero"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* wp,
                       c.sram_read(op.w, span(n, isa::dtype_bytes(op.wtype, kt)), "w"));
  // Zero points as their SRAM buffer holds them: int32, or packed int4 / int8 codes (the
  // compact grouped image, docs/numerics.md), flat index j * gt + g.
  const isa::DType wzt = buffer_type(c, op.wzero, isa::DType::kI32);
  QBC_ASSIGN_OR_RETURN(const uint8_t* wzp,
                       c.sram_read_opt(op.wzero, isa::dtype_bytes(wzt, span(n, gt)), "wzero"));
  uint8_t* acc = nullptr;
  if (op.accumulate) {
    QBC_ASSIGN_OR_RETURN(acc, c.sram_at(op.acc, span(rows, n, gt, accb), "acc"));
  } else {  // written whole
    QBC_ASSIGN_OR_RETURN(acc, c.sram_write(op.acc, span(rows, n, gt, accb), "acc"));
  }
  uint8_t* xsum = nullptr;
  if (op.xsum.valid()) {
    QBC_ASSIGN_OR_RETURN(xsum, c.sram_write(op.xsum, span(rows, gt, accb), "xsum"));
  }
  if (rows == 0 || n == 0) return ok_status();

  // Per-thread scratch (no allocation per instruction); the host threads only read them.
  std::vector<int32_t>& xz = scratch<int32_t, 6>(static_cast<size_t>(rows));
  std::fill(xz.begin(), xz.begin() + rows, 0);
  if (xzp != nullptr) load(xzp, rows, xz.data());
  if (xsum != nullptr) code_sums(op, rows, gt, x, xz.data(), xsum);
  std::vector<int8_t> unpacked;
  // The VNNI path unpacks int4 rows block by block on the host threads (matmul_u8); the
  // others take the whole matrix as int8.
  const bool packed = op.wtype == isa::DType::kI4 && (i4_path(op, group) || vnni_path(op, group));
  StreamZeros zeros;
  if (wzp != nullptr) {
    zeros.p = wzp;
    zeros.kind = wzt == isa::DType::kI4   ? StreamZeros::Kind::kI4
                 : wzt == isa::DType::kI8 ? StreamZeros::Kind::kI8
                                          : StreamZeros::Kind::kI32;
  }
  MatMulArgs args{op, rows, gt, group, xz.data(), nullptr, nullptr, packed ? wp : nullptr, zeros};
  // Reads the weights and zero points in place while it writes acc (V4: live SRAM buffers do
  // not overlap).
  if (stream_path(args)) {
    if (!packed) args.w = weights_i8(wp, op.wtype, n, kt, &unpacked);
    matmul_stream(args, reinterpret_cast<const int8_t*>(x), c.pool, acc);
    return ok_status();
  }
  std::vector<int32_t>& wz = scratch<int32_t, 8>(wzp != nullptr ? static_cast<size_t>(n * gt) : 0);
  if (wzp != nullptr) {
    if (wzt == isa::DType::kI4 || wzt == isa::DType::kI8) {
      load_codes(wzp, wzt, n * gt, wz.data());  // codes, flat index j * gt + g
    } else {
      load(wzp, n * gt, wz.data());
    }
  }
  if (!packed) args.w = weights_i8(wp, op.wtype, n, kt, &unpacked);
  if (wzp != nullptr) args.wz = wz.data();
  if (op.acctype == isa::DType::kI32) {
    matmul<int32_t>(args, x, c.pool, acc);
  } else {
    matmul<int64_t>(args, x, c.pool, acc);
  }
  return ok_status();
}

Status exec(const isa::Requant& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t n = op.n, gt = op.gt;
  c.counters.vector_ops += span(rows, n, gt);
  if (c.counters_only) return ok_status();
  const int64_t accb = op.acctype == isa::DType::kI32 ? 4 : 8;
  const int64_t yb = op.ytype == isa::DType::kF16 ? 2 : 4;
  const int64_t ws_count = rows_span(n, op.ws_stride, gt);
  QBC_ASSIGN_OR_RETURN(const uint8_t* accp, c.sram_at(op.acc, span(rows, n, gt, accb), "acc"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* xsp, c.sram_at(op.xscale, span(rows, 4), "xscale"));
  // Scales as their SRAM buffer holds them: fp32, or fp16 widened exactly (compact image).
  const bool ws16 = buffer_type(c, op.wscale, isa::DType::kF32) == isa::DType::kF16;
  const int64_t wsb = ws16 ? 2 : 4;
  QBC_ASSIGN_OR_RETURN(const uint8_t* wsp, c.sram_read(op.wscale, span(ws_count, wsb), "wscale"));
  uint8_t* fsp = nullptr;
  if (!op.first || !op.last) {
    QBC_ASSIGN_OR_RETURN(fsp, c.sram_at(op.fsum, span(rows, n, 4), "fsum"));
  }
  const uint8_t* biasp = nullptr;
  uint8_t* yp = nullptr;
  if (op.last) {
    QBC_ASSIGN_OR_RETURN(biasp, c.sram_read_opt(op.bias, span(n, 4), "bias"));
    QBC_ASSIGN_OR_RETURN(yp, c.sram_at(op.y, span(rows_span(rows, op.ldy, n), yb), "y"));
  }
  const uint8_t* xsump = nullptr;
  const uint8_t* wmp = nullptr;
  const bool wm16 = buffer_type(c, op.wmin, isa::DType::kF32) == isa::DType::kF16;
  if (op.wmin.valid()) {
    QBC_ASSIGN_OR_RETURN(xsump, c.sram_at(op.xsum, span(rows, gt, accb), "xsum"));
    QBC_ASSIGN_OR_RETURN(wmp, c.sram_read(op.wmin, span(ws_count, wm16 ? 2 : 4), "wmin"));
  }
  if (rows == 0 || n == 0) return ok_status();
  // Per-thread scratch (no allocation per instruction); the host threads only read xs, ws,
  // bias and acc, and write disjoint rows of fsum.
  std::vector<float>& xs = scratch<float, 9>(static_cast<size_t>(rows));
  std::vector<float>& ws = scratch<float, 10>(static_cast<size_t>(ws_count));
  std::vector<float>& bias = scratch<float, 11>(biasp != nullptr ? static_cast<size_t>(n) : 0);
  std::vector<float>& fsum = scratch<float, 12>(fsp != nullptr ? static_cast<size_t>(rows * n) : 0);
  load(xsp, rows, xs.data());
  // Grouped int32 sums without float offsets read fp16 scales in place (grouped_requant_f16)
  // while the rows write y: safe because the verifier's V4 keeps live SRAM buffers apart.
  const bool f16_in_place =
      ws16 && op.acctype == isa::DType::kI32 && !(gt == 1 && op.first) && !op.wmin.valid();
  if (ws16 && !f16_in_place) {
    load_f16(wsp, ws_count, ws.data());  // fp16 scales widened exactly to fp32
  } else if (!ws16) {
    load(wsp, ws_count, ws.data());
  }
  if (biasp != nullptr) load(biasp, n, bias.data());
  if (fsp != nullptr && !op.first) load(fsp, rows * n, fsum.data());
  // Float offsets: the code sums as fp32 (exact conversions of the integers, as numerics'
  // static_cast) and the offsets widened like the scales.
  std::vector<float>& xsf = scratch<float, 17>(wmp != nullptr ? static_cast<size_t>(rows * gt) : 0);
  std::vector<float>& wm = scratch<float, 18>(wmp != nullptr ? static_cast<size_t>(ws_count) : 0);
  if (wmp != nullptr) {
    const auto widen = [&](auto* sums) {  // acc's type, then each exact integer as fp32
      load(xsump, rows * gt, sums);
      for (int64_t i = 0; i < rows * gt; ++i)
        xsf[static_cast<size_t>(i)] = static_cast<float>(sums[i]);
    };
    if (op.acctype == isa::DType::kI32) {
      widen(scratch<int32_t, 19>(static_cast<size_t>(rows * gt)).data());
    } else {
      widen(scratch<int64_t, 19>(static_cast<size_t>(rows * gt)).data());
    }
    if (wm16) {
      load_f16(wmp, ws_count, wm.data());
    } else {
      load(wmp, ws_count, wm.data());
    }
  }
  const int64_t count = rows * n * gt;
  auto run = [&](const auto* acc) {
    blocks(c.pool, rows, count, kParallelElements, 1, [&](int64_t m0, int64_t m1) {
      requant_rows(op, acc, xs.data(), ws.data(), biasp != nullptr ? bias.data() : nullptr,
                   fsum.data(), m0, m1, yp, xsf.data(), wmp != nullptr ? wm.data() : nullptr,
                   f16_in_place ? wsp : nullptr);
    });
  };
  if (op.acctype == isa::DType::kI32) {
    std::vector<int32_t>& acc = scratch<int32_t, 13>(static_cast<size_t>(count));
    load(accp, count, acc.data());
    run(acc.data());
  } else {
    std::vector<int64_t>& acc = scratch<int64_t, 13>(static_cast<size_t>(count));
    load(accp, count, acc.data());
    run(acc.data());
  }
  if (!op.last) store(fsum.data(), rows * n, fsp);
  return ok_status();
}

}  // namespace qbc::runtime
