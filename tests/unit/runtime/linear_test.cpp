// quantize + matmul + requant against numerics::qlinear, bit for bit: per-channel and
// grouped weight scales, weight zero points, int4 weights, static and per-token inputs,
// 16-bit inputs, fp16 and fp32 outputs, K split into two tiles (integer accumulation across
// tiles for per-channel scales, fp32 partial sums in group order for groups), and float
// offsets per group (the matmul's code sums and the requant's offset term).
#include "qbc/numerics/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "qbc/numerics/quantizer.h"
#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::DType;
using isa::Expr;
using testing::BundleBuilder;

struct LinearCase {
  const char* name;
  int64_t s, in, out, group;
  int w_bits;
  bool w_zero;
  int in_bits;
  bool in_dynamic, in_asym, bias, out_fp16;
  int ktiles;
  /// The compact grouped image (docs/numerics.md "Compact grouped weights"): fp16 scales
  /// and zero points as codes of the weights' width (packed 4-bit, or int8), in SRAM buffers
  /// of dtype f16 and i4 / i8 (docs/npu.md).
  bool compact = false;
  /// Weight zero points at the ends of their range (alternately the lowest and the highest
  /// code) instead of random codes.
  bool extreme_zero = false;
  /// fp32 input rows (quantize's x_f32: a head value kept in fp32, a vision projector's).
  bool x_f32 = false;
  /// Float offsets per group (docs/numerics.md "Float offsets": GGUF Q4_1 / Q5_1 codes kept),
  /// fp16 values in either image, with the matmul's code sums.
  bool w_min = false;
};

numerics::QLinear make_params(const LinearCase& c) {
  numerics::QLinear p;
  p.out = c.out;
  p.in = c.in;
  const int hi = c.w_bits == 4 ? 7 : 127;
  p.wq = testing::random_codes(static_cast<size_t>(c.out * c.in), 11, -hi - 1, hi);
  const int64_t groups = c.group > 0 ? (c.in + c.group - 1) / c.group : 1;
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(0.001f, 0.02f);
  for (int64_t i = 0; i < c.out * groups; ++i) p.wscale.push_back(i % 3 == 1 ? -u(g) : u(g));
  if (c.compact) {  // the quantizer's rounding: numerics::qlinear sees the rounded scales
    for (float& s : p.wscale) s = numerics::fp16_weight_scale(s);
  }
  if (c.w_zero) p.wzero = testing::random_codes(p.wscale.size(), 13, -hi - 1, hi);
  if (c.w_zero && c.extreme_zero) {
    for (size_t i = 0; i < p.wzero.size(); ++i) p.wzero[i] = i % 2 == 0 ? -hi - 1 : hi;
  }
  if (c.w_min) {  // a Q4_1 block's minimum: about -8 steps, either sign, fp16 values
    std::uniform_real_distribution<float> m(-10.0f, 2.0f);
    for (float s : p.wscale) p.wmin.push_back(numerics::round_fp16(std::fabs(s) * m(g)));
  }
  if (c.bias) {
    for (int64_t i = 0; i < c.out; ++i) p.bias.push_back(0.01f * static_cast<float>(i % 7) - 0.03f);
  }
  p.in_bits = c.in_bits;
  p.in_dynamic = c.in_dynamic;
  p.in_asym = c.in_asym;
  p.in_scale = 0.013f;
  p.in_zero = c.in_asym && !c.in_dynamic ? 9 : 0;
  p.group = c.group;
  p.out_fp16 = c.out_fp16;
  return p;
}

/// The program: load x, quantize, per K tile matmul (+ requant for groups), requant, store.
std::vector<float> run_linear(const LinearCase& c, const numerics::QLinear& p,
                              const std::vector<float>& x, int threads) {
  BundleBuilder bb(1, 1, 1 << 20, /*chunk=*/8);
  const int64_t groups = c.group > 0 ? (c.in + c.group - 1) / c.group : 1;
  const int64_t kt = c.in / c.ktiles;
  const DType wt = c.w_bits == 4 ? DType::kI4 : DType::kI8;
  const DType xt = c.in_bits == 16 ? DType::kI16 : DType::kI8;
  const int64_t cb = c.in_bits == 16 ? 2 : 1, yb = c.out_fp16 ? 2 : 4;
  const DType acct = c.in_bits == 16 ? DType::kI64 : DType::kI32;
  const int64_t accb = acct == DType::kI64 ? 8 : 4;
  const Expr seq = Expr::sym(isa::Sym::kSeq);

  const int64_t xb = c.x_f32 ? 4 : 2;
  const int32_t x_d = bb.dram("x", isa::Purpose::kActivations, c.s * c.in * xb);
  const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, c.s * c.out * yb);
  // Scales as the spec stores them: fp32, or (compact) the IEEE binary16 bits of each value.
  const int64_t wsb = c.compact ? 2 : 4;
  const int32_t ws_d =
      bb.weights("ws", c.compact ? testing::f16_bytes(p.wscale) : testing::raw_bytes(p.wscale));
  const int32_t bias_d = c.bias ? bb.weights("bias", testing::raw_bytes(p.bias)) : -1;
  const int32_t wm_d = !c.w_min ? -1
                                : bb.weights("wm", c.compact ? testing::f16_bytes(p.wmin)
                                                             : testing::raw_bytes(p.wmin));
  const int32_t x_s = bb.sram("x", 0, c.s * c.in * xb);
  const int32_t codes_s = bb.sram("codes", 0, c.s * c.in * cb);
  const int32_t xs_s = bb.sram("xs", 0, c.s * 4);
  const int32_t xz_s = bb.sram("xz", 0, c.s * 4);
  // The SRAM buffers keep the fp32 / int32 size (the instructions' footprints); their dtype
  // says how the executor reads them.
  const int32_t ws_s = bb.sram("ws", 0, c.out * groups * 4, c.compact ? DType::kF16 : DType::kF32);
  const int32_t bias_s = c.bias ? bb.sram("bias", 0, c.out * 4) : -1;
  const int32_t wm_s =
      c.w_min ? bb.sram("wm", 0, c.out * groups * 4, c.compact ? DType::kF16 : DType::kF32) : -1;
  const int32_t fsum_s = bb.sram("fsum", 0, c.s * c.out * 4);
  const int32_t y_s = bb.sram("y", 0, c.s * c.out * yb);
  const int32_t node = bb.node("blk.0.mlp.down");

  bb.copy(0, bb.ref(x_s), bb.ref(x_d), c.in * xb, seq);
  bb.copy(0, bb.ref(ws_s), bb.ref(ws_d), c.out * groups * wsb);
  if (c.bias) bb.copy(0, bb.ref(bias_s), bb.ref(bias_d), c.out * 4);
  if (c.w_min) bb.copy(0, bb.ref(wm_s), bb.ref(wm_d), c.out * groups * wsb);
  isa::Quantize q;
  q.x = bb.ref(x_s);
  q.codes = bb.ref(codes_s);
  q.scale = bb.ref(xs_s);
  q.zero = bb.ref(xz_s);
  q.rows = seq;
  q.k = c.in;
  q.bits = c.in_bits;
  q.mode = c.in_dynamic
               ? (c.in_asym ? isa::QuantMode::kTokenAffine : isa::QuantMode::kTokenSymmetric)
               : (c.in_asym ? isa::QuantMode::kStaticAffine : isa::QuantMode::kStaticSymmetric);
  q.static_scale = p.in_scale;
  q.static_zero = p.in_zero;
  q.x_f32 = c.x_f32;
  bb.emit(0, q, node);

  const int64_t tile_groups = c.group > 0 ? (kt + c.group - 1) / c.group : 1;
  int32_t acc_s = -1;
  for (int t = 0; t < c.ktiles; ++t) {
    const int64_t k0 = t * kt;
    // The weight tile [out, kt] and its zero points [out, tile_groups], pre-tiled.
    std::vector<int32_t> wt_codes, wt_zero;
    for (int64_t j = 0; j < c.out; ++j) {
      for (int64_t k = 0; k < kt; ++k)
        wt_codes.push_back(p.wq[static_cast<size_t>(j * c.in + k0 + k)]);
      if (c.w_zero) {
        for (int64_t g = 0; g < tile_groups; ++g) {
          const int64_t gg = c.group > 0 ? k0 / c.group + g : 0;
          wt_zero.push_back(p.wzero[static_cast<size_t>(j * groups + gg)]);
        }
      }
    }
    const std::string sfx = std::to_string(t);
    const int32_t w_d = bb.weights("w" + sfx, testing::code_bytes(wt_codes, c.out, kt, wt));
    const int32_t w_s = bb.sram("w" + sfx, 0, c.out * isa::dtype_bytes(wt, kt));
    bb.copy(0, bb.ref(w_s), bb.ref(w_d), c.out * isa::dtype_bytes(wt, kt));
    int32_t wz_s = -1;
    if (c.w_zero) {
      // int32, or (compact) codes of the weights' width: 4-bit packed two a byte, low nibble
      // first, or one int8 a value; flat [out, gt].
      const int64_t count = c.out * tile_groups;
      const DType zt = !c.compact ? DType::kI32 : wt;
      const int64_t bytes = c.compact ? isa::dtype_bytes(wt, count) : count * 4;
      const int32_t wz_d =
          bb.weights("wz" + sfx, c.compact ? testing::code_bytes(wt_zero, 1, count, wt)
                                           : testing::raw_bytes(wt_zero));
      wz_s = bb.sram("wz" + sfx, 0, count * 4, zt);
      bb.copy(0, bb.ref(wz_s), bb.ref(wz_d), bytes);
    }
    if (acc_s < 0 || c.group > 0) acc_s = bb.sram("acc" + sfx, 0, c.s * c.out * tile_groups * accb);
    const int32_t xsum_s = c.w_min ? bb.sram("xsum" + sfx, 0, c.s * tile_groups * accb) : -1;
    isa::MatMul m;
    m.x = bb.ref(codes_s, Expr(k0 * cb));
    m.xzero = c.in_asym ? bb.ref(xz_s) : isa::Ref{};
    m.w = bb.ref(w_s);
    m.wzero = c.w_zero ? bb.ref(wz_s) : isa::Ref{};
    m.acc = bb.ref(acc_s);
    m.rows = seq;
    m.n = c.out;
    m.kt = kt;
    m.ldx = c.in;
    m.group = c.group;
    m.xtype = xt;
    m.wtype = wt;
    m.acctype = acct;
    m.accumulate = c.group == 0 && t > 0;
    if (c.w_min) m.xsum = bb.ref(xsum_s);
    bb.emit(0, m, node);
    if (c.group > 0 || t == c.ktiles - 1) {
      isa::Requant r;
      r.acc = bb.ref(acc_s);
      r.xscale = bb.ref(xs_s);
      r.wscale = bb.ref(ws_s, Expr(c.group > 0 ? k0 / c.group * wsb : 0));
      r.fsum = bb.ref(fsum_s);
      r.bias = c.bias ? bb.ref(bias_s) : isa::Ref{};
      r.y = bb.ref(y_s);
      r.rows = seq;
      r.n = c.out;
      r.gt = tile_groups;
      r.ws_stride = groups;
      r.ldy = c.out;
      r.acctype = acct;
      r.ytype = c.out_fp16 ? DType::kF16 : DType::kF32;
      r.first = c.group == 0 || t == 0;
      r.last = t == c.ktiles - 1;
      if (c.w_min) {
        r.xsum = bb.ref(xsum_s);
        r.wmin = bb.ref(wm_s, Expr(k0 / c.group * wsb));
      }
      bb.emit(0, r, node);
    }
  }
  bb.copy(0, bb.ref(y_d), bb.ref(y_s), c.out * yb, seq);
  std::shared_ptr<Device> dev = testing::make_device(bb.finish(), threads);
  if (dev == nullptr) return {};
  testing::write(*dev, x_d, c.x_f32 ? testing::raw_bytes(x) : testing::f16_bytes(x));
  const Status st = dev->run(isa::Phase::kPrefill, 0, 0, c.s);
  EXPECT_TRUE(st.ok()) << st.to_string();
  const CoreCounters& k = dev->counters()[0];
  EXPECT_EQ(k.macs, c.s * c.out * c.in);
  std::vector<uint8_t> y = testing::read(*dev, y_d, c.s * c.out * yb);
  return c.out_fp16 ? testing::f16_values(y) : testing::values_of<float>(y);
}

class RuntimeLinear : public ::testing::TestWithParam<LinearCase> {};

TEST_P(RuntimeLinear, EqualsQlinearBitForBit) {
  const LinearCase& c = GetParam();
  const numerics::QLinear p = make_params(c);
  std::vector<float> x = testing::random_f16(static_cast<size_t>(c.s * c.in), 3, 2.0f);
  x[5] = 60.0f;   // an outlier channel
  if (c.x_f32) {  // fp32 head values: not fp16-representable
    for (float& v : x) v = v * 1.0001f + 1e-4f;
  }
  std::vector<float> want(static_cast<size_t>(c.s * c.out));
  numerics::qlinear(x.data(), c.s, p, want.data());
  for (int threads = 1; threads <= 4; ++threads) {
    EXPECT_TRUE(testing::same_bits(run_linear(c, p, x, threads), want)) << threads << " threads";
  }
}

//                        name                s  in  out grp wb  wz     ib  dyn    asym   bias fp16
//                        kt
const LinearCase kCases[] = {
    {"per_channel_token_affine", 3, 40, 24, 0, 8, false, 8, true, true, true, true, 1},
    {"per_channel_token_sym_fp32", 5, 64, 20, 0, 8, false, 8, true, false, false, false, 1},
    {"static_affine", 2, 48, 17, 0, 8, false, 8, false, true, true, true, 1},
    {"static_sym_int4", 4, 40, 9, 0, 4, false, 8, false, false, false, true, 1},
    {"grouped_short_last_group", 3, 40, 12, 16, 8, false, 8, true, true, true, true, 1},
    {"grouped_zero_points_int4", 6, 64, 10, 16, 4, true, 8, true, true, false, true, 1},
    {"per_channel_zero_points", 2, 33, 8, 0, 8, true, 8, true, true, true, true, 1},
    {"k_tiled_per_channel", 5, 64, 13, 0, 8, false, 8, true, true, true, true, 2},
    {"k_tiled_grouped_zero", 3, 64, 11, 16, 4, true, 8, true, true, true, true, 2},
    {"in16_token_sym", 2, 40, 7, 0, 8, false, 16, true, false, true, true, 1},
    {"in16_k_tiled_grouped", 3, 64, 6, 16, 8, true, 16, true, true, false, false, 2},
    {"many_rows_avx_tiles", 8, 96, 37, 32, 8, true, 8, true, true, true, true, 1},
    // Decode (one row): the row-sequential single-row tiles, with a tail after the 64-byte
    // steps and channel counts that leave 8-, 4- and 1-wide tiles.
    {"decode_row_tiles", 1, 200, 45, 0, 8, false, 8, true, true, true, true, 1},
    {"decode_grouped_zero", 1, 200, 13, 64, 8, true, 8, true, true, false, true, 1},
    // One row over 2^18 weight codes (kParallelStreamCodes): one contiguous channel block per
    // host thread.
    {"decode_threaded", 1, 1024, 300, 0, 8, false, 8, true, true, true, true, 1},
    {"decode_threaded_odd_channels", 1, 1040, 257, 0, 8, false, 8, true, true, true, true, 1},
    // Over 2^20 MACs: channel blocks on the host threads.
    {"large_threaded", 8, 512, 300, 0, 8, false, 8, true, true, true, true, 1},
    {"large_threaded_grouped_int4", 7, 512, 301, 64, 4, true, 8, true, true, true, true, 2},
    // The compact 4-bit image: fp16 scales and packed 4-bit zero points (an odd count of
    // zero points per tile: 11 channels x 2 groups, 13 x 1), per-token and static inputs,
    // K tiles, decode rows, the threaded path.
    {"compact_grouped_zero", 6, 64, 11, 32, 4, true, 8, true, true, false, true, 1, true},
    {"compact_k_tiled_zero", 3, 64, 11, 16, 4, true, 8, true, true, true, true, 2, true},
    {"compact_symmetric_fp32_out", 4, 96, 9, 32, 4, false, 8, true, false, true, false, 1, true},
    {"compact_static_affine", 2, 64, 13, 32, 4, true, 8, false, true, true, true, 2, true},
    {"compact_decode", 1, 200, 13, 32, 4, true, 8, true, true, false, true, 1, true},
    {"compact_large_threaded", 7, 512, 301, 32, 4, true, 8, true, true, true, true, 2, true},
    // The compact 8-bit group image: fp16 scales and int8 zero points (the 8-bit head and
    // value projections of W4V8): a head-like fp32 output, K tiles, decode rows (the VNNI
    // path's short rows), 16-bit inputs (the generic path), the threaded path.
    {"compact8_grouped_zero", 6, 64, 11, 32, 8, true, 8, true, true, false, true, 1, true},
    {"compact8_head_fp32_out", 3, 96, 23, 32, 8, true, 8, true, true, false, false, 1, true},
    {"compact8_k_tiled_zero", 3, 64, 11, 16, 8, true, 8, true, true, true, true, 2, true},
    {"compact8_symmetric", 4, 96, 9, 32, 8, false, 8, true, false, true, true, 1, true},
    {"compact8_static_affine", 2, 64, 13, 32, 8, true, 8, false, true, true, true, 2, true},
    {"compact8_decode", 1, 200, 13, 32, 8, true, 8, true, true, false, true, 1, true},
    {"compact8_in16", 3, 64, 6, 16, 8, true, 16, true, true, false, false, 2, true},
    {"compact8_large_threaded", 7, 512, 301, 32, 8, true, 8, true, true, true, true, 2, true},
    // The grouped int4 kernel (dot_u8_groups: every group of a row in one call, eight groups
    // reduced together): group counts that are not a multiple of eight (7 with a short last
    // group, 18 as the 135M shape's 576 inputs, 9 per K tile), odd channel counts, decode and
    // prefill rows, the threaded channel split, and int8 weights in groups of 32.
    {"groups32_short_last_int4", 1, 200, 13, 32, 4, true, 8, true, true, true, true, 1, true},
    {"groups32_135m_decode", 1, 576, 67, 32, 4, true, 8, true, true, false, true, 1, true},
    {"groups32_135m_prefill", 5, 576, 33, 32, 4, true, 8, true, true, true, false, 1, true},
    {"groups32_k_tiled", 3, 576, 19, 32, 4, true, 8, false, true, true, true, 2, true},
    {"groups32_threaded_decode", 1, 1024, 301, 32, 4, true, 8, true, true, true, true, 1, true},
    {"groups32_no_zero_int4", 2, 256, 41, 32, 4, false, 8, true, false, false, true, 1, true},
    {"groups32_int8_weights", 3, 200, 29, 32, 8, true, 8, true, true, true, true, 1},
    // The grouped requant's two passes (every part, then the sums with the channels inner):
    // K tiles whose scale rows are wider than their groups (ws_stride 18, 9 groups a tile, the
    // second tile adding to fsum), a short last group, zero points at both ends of the range.
    {"requant_groups_k_tiled_135m", 2, 576, 97, 32, 4, true, 8, true, true, true, true, 2, true},
    {"requant_groups_tail_extreme_zero", 1, 232, 15, 32, 4, true, 8, true, true, true, false, 1,
     true, true},
    {"requant_groups_prefill_extreme_zero", 5, 576, 33, 32, 4, true, 8, true, true, false, true, 2,
     true, true},
    {"requant_groups_int8_extreme_zero", 3, 200, 29, 32, 8, true, 8, true, true, false, true, 1,
     true, true},
    // fp32 input rows (a vision projector's second linear after its fp32 GELU): per-token
    // and static scales, 8- and 16-bit codes.
    {"x_f32_token_affine", 3, 40, 24, 0, 8, false, 8, true, true, true, false, 1, false, false,
     true},
    {"x_f32_static_affine_in16", 4, 48, 17, 0, 8, false, 16, false, true, true, false, 1, false,
     false, true},
    {"x_f32_grouped_static_sym", 2, 64, 12, 32, 8, false, 8, false, false, true, false, 1, false,
     false, true},
    // Float offsets (GGUF Q4_1 / Q5_1 codes kept): zero points at -8 / -16 like the import, in
    // the compact and the fp32 image, K tiles (the second adding to fsum), decode and prefill
    // rows, static and per-token inputs, 16-bit inputs (int64 sums), int8 codes, a short last
    // group, the threaded path.
    {"offsets_q4_1_prefill", 5, 576, 33, 32, 4, true, 8, true, true, true, true, 1, true, false,
     false, true},
    {"offsets_q4_1_decode", 1, 232, 15, 32, 4, true, 8, true, true, false, true, 1, true, false,
     false, true},
    {"offsets_k_tiled_static", 3, 576, 19, 32, 4, true, 8, false, true, true, false, 2, true, false,
     false, true},
    {"offsets_fp32_image", 3, 64, 11, 32, 4, true, 8, true, true, true, true, 2, false, false,
     false, true},
    {"offsets_q5_1_int8", 3, 200, 29, 32, 8, true, 8, true, true, false, true, 1, true, false,
     false, true},
    {"offsets_in16", 3, 64, 6, 16, 8, true, 16, true, true, false, false, 2, true, false, false,
     true},
    {"offsets_symmetric_threaded", 7, 512, 301, 32, 4, false, 8, true, false, true, true, 2, true,
     false, false, true},
};

INSTANTIATE_TEST_SUITE_P(Cases, RuntimeLinear, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<LinearCase>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace qbc::runtime
