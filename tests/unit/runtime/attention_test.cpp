// A whole attention on two cores against numerics::attention, bit for bit: core 0 appends
// the call's keys and values to the KV cache (kv_quant, ring DMA into DRAM), each core
// scores one half of the cache for every KV head (query_prep, qk_scores), the two row maxima
// are merged through DRAM scratch (merge max), each core accumulates its half (exp_accum),
// and core 0 merges the integer sums and normalises (merge sum, attn_out). Three calls
// (prefill of 6 tokens, decode of 1, prefill of 5; more for long blocks) share the cache.
// Cases: GQA with rotating key offsets, sliding window, soft-capping, 4-bit keys and values,
// per-token query scales, 16-bit P codes, head dim 40 with blocks of 24 keys (the vector
// kernels' widths and tails); one and two host threads.
#include "qbc/numerics/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::Expr;
using testing::BundleBuilder;

constexpr int64_t kHeads = 4, kKvHeads = 2, kChunk = 8;
constexpr int64_t kG = kHeads / kKvHeads;

struct AttnCase {
  const char* name;
  bool rotating;
  int64_t window;
  double softcap;
  int k_bits, v_bits, p_bits;
  bool q_dynamic;
  int64_t dim = 8, block = 8;  ///< head_dim, keys per block (the cache holds two blocks)
};

isa::RopeDesc k_rope(int64_t dim) {
  isa::RopeDesc r;
  r.heads = kKvHeads;
  r.head_dim = dim;
  r.rotary_dim = dim;
  r.inv_freq = {1.0, 0.3, 0.1, 0.03};
  for (int64_t i = 4; i < dim / 2; ++i) r.inv_freq.push_back(0.03 / static_cast<double>(i));
  return r;
}

/// The attention's parameters (fp32 block order: q_scale, k_scale, v_scale, k_offset,
/// v_offset, k_rot_offset) and the numerics description of the same attention.
struct Params {
  isa::AttnDesc desc;
  std::vector<float> block;
  numerics::Attention attn;
  int64_t block_keys = 8;
};

Params make_params(const AttnCase& c) {
  const int64_t kDim = c.dim, kCapacity = 2 * c.block;
  Params p;
  p.block_keys = c.block;
  isa::AttnDesc& d = p.desc;
  d.heads = kHeads;
  d.kv_heads = kKvHeads;
  d.head_dim = kDim;
  d.window = c.window;
  d.capacity = kCapacity;
  d.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  d.softcap = c.softcap;
  d.k_bits = c.k_bits;
  d.v_bits = c.v_bits;
  d.p_bits = c.p_bits;
  d.q_dynamic = c.q_dynamic;
  d.rotating = c.rotating;
  d.k_rope = c.rotating ? 0 : -1;
  numerics::Attention& a = p.attn;
  a.heads = kHeads;
  a.kv_heads = kKvHeads;
  a.head_dim = kDim;
  a.window = c.window;
  a.max_cache = kCapacity;
  a.scale = d.scale;
  a.softcap = c.softcap;
  a.quantized = true;
  a.k_bits = c.k_bits;
  a.v_bits = c.v_bits;
  a.p_bits = c.p_bits;
  a.q_dynamic = c.q_dynamic;
  const int64_t w = kKvHeads * kDim;
  const float kq = c.k_bits == 4 ? 0.3f : c.k_bits == 16 ? 1e-4f : 0.02f;
  const float vq = c.v_bits == 4 ? 0.3f : c.v_bits == 16 ? 1e-4f : 0.02f;
  for (int64_t h = 0; h < kHeads; ++h) a.q_scale.push_back(0.015f + 0.002f * static_cast<float>(h));
  for (int64_t i = 0; i < w; ++i) {
    const float f = static_cast<float>(i % 5);
    a.k_scale.push_back(kq * (1.0f + 0.1f * f));
    a.v_scale.push_back(vq * (1.0f + 0.07f * f));
    a.k_offset.push_back(c.softcap > 0 ? 0.0f : 0.05f * (f - 2.0f));
    a.v_offset.push_back(-0.03f * (f - 1.0f));
  }
  std::vector<float> rot(static_cast<size_t>(w), 0.0f);
  rot[1] = 0.75f;  // one rotary pair per head with an offset
  rot[1 + kDim / 2] = -0.5f;
  rot[kDim + 2] = 1.25f;
  if (kDim > 8) {  // every channel: sums whose order shows in their bits
    for (int64_t i = 0; i < w; ++i)
      rot[static_cast<size_t>(i)] =
          0.8f * static_cast<float>(std::sin(1.7 * static_cast<double>(i)));
  }
  if (c.rotating) {
    a.k_rot_offset = rot;
    const isa::RopeDesc r = k_rope(kDim);
    a.k_rope.heads = r.heads;
    a.k_rope.head_dim = r.head_dim;
    a.k_rope.rotary_dim = r.rotary_dim;
    a.k_rope.inv_freq = r.inv_freq;
  }
  for (const std::vector<float>* v :
       {&a.q_scale, &a.k_scale, &a.v_scale, &a.k_offset, &a.v_offset, &rot}) {
    p.block.insert(p.block.end(), v->begin(), v->end());
  }
  return p;
}

struct Program {
  std::shared_ptr<isa::Bundle> bundle;
  int32_t q_d, k_d, v_d, y_d;
};

Program build(const Params& p) {
  const int64_t kDim = p.desc.head_dim, kCapacity = p.desc.capacity, kBlock = p.block_keys;
  BundleBuilder bb(2, 1, 1 << 16, kChunk, kCapacity);
  isa::Bundle& b = bb.bundle();
  b.ropes.push_back(k_rope(kDim));
  b.attentions.push_back(p.desc);
  const int32_t attn_node = bb.node("blk.0.attn");
  const Expr seq = Expr::sym(isa::Sym::kSeq), start = Expr::sym(isa::Sym::kStart);
  const isa::DType kt = p.desc.k_bits == 4    ? isa::DType::kI4
                        : p.desc.k_bits == 16 ? isa::DType::kI16
                                              : isa::DType::kI8;
  const isa::DType vt = p.desc.v_bits == 4    ? isa::DType::kI4
                        : p.desc.v_bits == 16 ? isa::DType::kI16
                                              : isa::DType::kI8;
  const int64_t kvw = kKvHeads * kDim, qw = kHeads * kDim;
  const int64_t krow = isa::dtype_bytes(kt, kDim), vrow = isa::dtype_bytes(vt, kDim);
  const int64_t pbytes = static_cast<int64_t>(p.block.size()) * 4;
  const int64_t rows_g = kChunk * kG;  // (token, head) rows of one KV head

  Program out;
  const int32_t params_d = bb.weights("attn.params", testing::raw_bytes(p.block));
  out.q_d = bb.dram("q", isa::Purpose::kActivations, kChunk * qw * 2);
  out.k_d = bb.dram("k", isa::Purpose::kActivations, kChunk * kvw * 2);
  out.v_d = bb.dram("v", isa::Purpose::kActivations, kChunk * kvw * 2);
  out.y_d = bb.dram("y", isa::Purpose::kActivations, kChunk * qw * 2);
  const int32_t kcache = bb.dram("kcache", isa::Purpose::kKv, kKvHeads * kCapacity * krow);
  const int32_t vcache = bb.dram("vcache", isa::Purpose::kKv, kKvHeads * kCapacity * vrow);
  const int32_t max_parts = bb.dram("max_parts", isa::Purpose::kScratch, 2 * rows_g * 4);
  const int32_t esum_parts = bb.dram("esum_parts", isa::Purpose::kScratch, 2 * rows_g * 8);
  const int32_t acc_parts = bb.dram("acc_parts", isa::Purpose::kScratch, 2 * rows_g * kDim * 8);

  struct Sram {
    int32_t params, q, qcodes, mq, kblk, vblk, scores, rowmax, maxparts, gmax, esum, acc;
  };
  Sram s[2];
  for (int c = 0; c < 2; ++c) {
    s[c].params = bb.sram("params", c, pbytes);
    s[c].q = bb.sram("q", c, kChunk * qw * 2);
    s[c].qcodes = bb.sram("qcodes", c, rows_g * kDim * 4);
    s[c].mq = bb.sram("mq", c, rows_g * 4);
    s[c].kblk = bb.sram("kblk", c, kBlock * krow);
    s[c].vblk = bb.sram("vblk", c, kBlock * vrow);
    s[c].scores = bb.sram("scores", c, rows_g * kBlock * 4);
    s[c].rowmax = bb.sram("rowmax", c, rows_g * 4);
    s[c].maxparts = bb.sram("maxparts", c, 2 * rows_g * 4);
    s[c].gmax = bb.sram("gmax", c, rows_g * 4);
    s[c].esum = bb.sram("esum", c, rows_g * 8);
    s[c].acc = bb.sram("acc", c, rows_g * kDim * 8);
  }
  const int32_t k_s = bb.sram("k", 0, kChunk * kvw * 2), v_s = bb.sram("v", 0, kChunk * kvw * 2);
  const int32_t kc_s = bb.sram("kc", 0, kChunk * isa::dtype_bytes(kt, kvw));
  const int32_t vc_s = bb.sram("vc", 0, kChunk * isa::dtype_bytes(vt, kvw));
  const int32_t esum_parts_s = bb.sram("esum_parts", 0, 2 * rows_g * 8);
  const int32_t acc_parts_s = bb.sram("acc_parts", 0, 2 * rows_g * kDim * 8);
  const int32_t esum_tot = bb.sram("esum_tot", 0, rows_g * 8);
  const int32_t acc_tot = bb.sram("acc_tot", 0, rows_g * kDim * 8);
  const int32_t y_s = bb.sram("y", 0, kChunk * qw * 2);

  auto dma = [&](int core, isa::Ref dst, isa::Ref src, Expr rows, int64_t row_bytes,
                 int64_t dst_stride, int64_t src_stride) {
    isa::Dma d;
    d.dst = dst;
    d.src = src;
    d.rows = rows;
    d.row_bytes = row_bytes;
    d.dst_stride = dst_stride;
    d.src_stride = src_stride;
    bb.emit(core, d, attn_node);
  };
  int32_t barrier = 0;
  auto sync = [&] {
    ++barrier;
    for (int c = 0; c < 2; ++c) bb.emit(c, isa::Barrier{barrier, 2}, attn_node);
  };

  // Append: core 0 quantizes the call's K/V and writes each KV head's rows into its ring.
  for (int c = 0; c < 2; ++c) bb.copy(c, bb.ref(s[c].params), bb.ref(params_d), pbytes);
  bb.copy(0, bb.ref(k_s), bb.ref(out.k_d), kvw * 2, seq);
  bb.copy(0, bb.ref(v_s), bb.ref(out.v_d), kvw * 2, seq);
  isa::KvQuant kq;
  kq.k = bb.ref(k_s);
  kq.v = bb.ref(v_s);
  kq.kcodes = bb.ref(kc_s);
  kq.vcodes = bb.ref(vc_s);
  kq.params = bb.ref(s[0].params);
  kq.rows = seq;
  kq.pos0 = start;
  kq.attn = 0;
  bb.emit(0, kq, attn_node);
  for (int64_t h = 0; h < kKvHeads; ++h) {
    for (const auto& [cache, codes, row, type] :
         {std::tuple{kcache, kc_s, krow, kt}, std::tuple{vcache, vc_s, vrow, vt}}) {
      isa::Dma d;
      d.dst = bb.ref(cache, Expr(h * kCapacity * row));
      d.src = bb.ref(codes, Expr(h * row));
      d.rows = seq;
      d.row_bytes = row;
      d.src_stride = isa::dtype_bytes(type, kvw);
      d.ring_rows = kCapacity;
      d.ring_stride = row;
      d.ring_row0 = start;
      bb.emit(0, d, attn_node);
    }
  }
  sync();
  for (int c = 0; c < 2; ++c) bb.copy(c, bb.ref(s[c].q), bb.ref(out.q_d), qw * 2, seq);
  for (int64_t h = 0; h < kKvHeads; ++h) {
    const Expr qcol(h * kG * kDim * 2);
    for (int c = 0; c < 2; ++c) {
      isa::QueryPrep qp;
      qp.q = bb.ref(s[c].q, qcol);
      qp.params = bb.ref(s[c].params);
      qp.qcodes = bb.ref(s[c].qcodes);
      qp.mq = bb.ref(s[c].mq);
      qp.rows = seq;
      qp.kv_head = h;
      qp.attn = 0;
      bb.emit(c, qp, attn_node);
      bb.copy(c, bb.ref(s[c].kblk), bb.ref(kcache, Expr((h * kCapacity + c * kBlock) * krow)),
              kBlock * krow);
      bb.copy(c, bb.ref(s[c].vblk), bb.ref(vcache, Expr((h * kCapacity + c * kBlock) * vrow)),
              kBlock * vrow);
      isa::QkScores qk;
      qk.qcodes = bb.ref(s[c].qcodes);
      qk.mq = bb.ref(s[c].mq);
      qk.q = bb.ref(s[c].q, qcol);
      qk.kcodes = bb.ref(s[c].kblk);
      qk.params = bb.ref(s[c].params);
      qk.scores = bb.ref(s[c].scores);
      qk.rowmax = bb.ref(s[c].rowmax);
      qk.rows = seq;
      qk.qpos0 = start;
      qk.kpos0 = c * kBlock;
      qk.bc = kBlock;
      qk.kv_head = h;
      qk.max_mode = isa::MaxMode::kInit;
      qk.attn = 0;
      bb.emit(c, qk, attn_node);
      dma(c, bb.ref(max_parts, Expr(c * rows_g * 4)), bb.ref(s[c].rowmax), seq, kG * 4, kG * 4,
          kG * 4);
    }
    sync();
    for (int c = 0; c < 2; ++c) {
      bb.copy(c, bb.ref(s[c].maxparts), bb.ref(max_parts), 2 * rows_g * 4);
      isa::Merge mx;
      mx.op = isa::MergeOp::kMax;
      mx.parts = bb.ref(s[c].maxparts);
      mx.out = bb.ref(s[c].gmax);
      mx.parts_count = 2;
      mx.count = rows_g;
      mx.part_stride = rows_g;
      bb.emit(c, mx, attn_node);
      isa::ExpAccum ea;
      ea.scores = bb.ref(s[c].scores);
      ea.rowmax = bb.ref(s[c].gmax);
      ea.vcodes = bb.ref(s[c].vblk);
      ea.esum = bb.ref(s[c].esum);
      ea.acc = bb.ref(s[c].acc);
      ea.rows = seq;
      ea.bc = kBlock;
      ea.first = true;
      ea.attn = 0;
      bb.emit(c, ea, attn_node);
      dma(c, bb.ref(esum_parts, Expr(c * rows_g * 8)), bb.ref(s[c].esum), seq, kG * 8, kG * 8,
          kG * 8);
      dma(c, bb.ref(acc_parts, Expr(c * rows_g * kDim * 8)), bb.ref(s[c].acc), seq, kG * kDim * 8,
          kG * kDim * 8, kG * kDim * 8);
    }
    sync();
    bb.copy(0, bb.ref(esum_parts_s), bb.ref(esum_parts), 2 * rows_g * 8);
    bb.copy(0, bb.ref(acc_parts_s), bb.ref(acc_parts), 2 * rows_g * kDim * 8);
    for (const auto& [parts, tot, count] : {std::tuple{esum_parts_s, esum_tot, rows_g},
                                            std::tuple{acc_parts_s, acc_tot, rows_g * kDim}}) {
      isa::Merge m;
      m.op = isa::MergeOp::kSum;
      m.parts = bb.ref(parts);
      m.out = bb.ref(tot);
      m.parts_count = 2;
      m.count = count;
      m.part_stride = count;
      bb.emit(0, m, attn_node);
    }
    isa::AttnOut ao;
    ao.acc = bb.ref(acc_tot);
    ao.esum = bb.ref(esum_tot);
    ao.params = bb.ref(s[0].params);
    ao.y = bb.ref(y_s, qcol);
    ao.rows = seq;
    ao.kv_head = h;
    ao.attn = 0;
    bb.emit(0, ao, attn_node);
  }
  bb.copy(0, bb.ref(out.y_d), bb.ref(y_s), qw * 2, seq);
  out.bundle = bb.finish();
  return out;
}

class RuntimeAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(RuntimeAttention, TwoCoresEqualNumericsAttention) {
  const AttnCase& c = GetParam();
  const int64_t kDim = c.dim;
  const Params p = make_params(c);
  const Program prog = build(p);
  std::shared_ptr<Device> dev1 = testing::make_device(prog.bundle, 1);
  std::shared_ptr<Device> dev2 = testing::make_device(prog.bundle, 2);
  ASSERT_NE(dev1, nullptr);
  ASSERT_NE(dev2, nullptr);
  numerics::KvCache cache;
  int64_t start = 0;
  uint32_t seed = 100;
  // Longer blocks get more calls, so that later calls score more than 16 keys of a block.
  const std::vector<int64_t> calls =
      c.block > 8 ? std::vector<int64_t>{6, 1, 5, 8, 8, 1} : std::vector<int64_t>{6, 1, 5};
  for (int64_t s : calls) {
    const std::vector<float> q =
        testing::random_f16(static_cast<size_t>(s * kHeads * kDim), ++seed, 2.0f);
    const std::vector<float> k =
        testing::random_f16(static_cast<size_t>(s * kKvHeads * kDim), ++seed, 2.0f);
    const std::vector<float> v =
        testing::random_f16(static_cast<size_t>(s * kKvHeads * kDim), ++seed, 2.0f);
    std::vector<float> want(q.size());
    numerics::attention(q.data(), k.data(), v.data(), s, p.attn, cache, want.data());
    for (Device* d : {dev1.get(), dev2.get()}) {
      testing::write(*d, prog.q_d, testing::f16_bytes(q));
      testing::write(*d, prog.k_d, testing::f16_bytes(k));
      testing::write(*d, prog.v_d, testing::f16_bytes(v));
      QBC_ASSERT_OK(d->run(s == 1 ? isa::Phase::kDecode : isa::Phase::kPrefill, 0, start, s));
      EXPECT_TRUE(testing::same_bits(
          testing::f16_values(testing::read(*d, prog.y_d, static_cast<int64_t>(q.size()) * 2)),
          want))
          << "call at " << start << " of " << s << " tokens, " << d->counters().size() << " cores";
    }
    start += s;
  }
  // Both cores worked, and the barrier counts agree.
  const std::vector<CoreCounters>& k = dev2->counters();
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].barriers, k[1].barriers);
  EXPECT_EQ(k[0].barriers, static_cast<int64_t>(calls.size()) * (1 + 2 * kKvHeads));
  EXPECT_GT(k[1].macs, 0);
  EXPECT_EQ(k[0].macs, k[1].macs);  // the same blocks of keys, the same rows
}

//                          name        rot    win sc  kb vb pb  qdyn
const AttnCase kCases[] = {
    {"gqa_rotating", true, 0, 0.0, 8, 8, 8, false},
    {"window3", false, 3, 0.0, 8, 8, 8, false},
    {"softcap_rotating", true, 0, 30.0, 8, 8, 8, true},
    {"kv4_window5", true, 5, 0.0, 4, 4, 8, true},
    {"kv16_p16", false, 0, 0.0, 16, 16, 16, false},
    {"k4_v8", true, 0, 0.0, 4, 8, 8, false},
    // Head dim 40 and blocks of 24 keys: the vector kernels' full widths and their tails.
    {"long_rotating", true, 0, 0.0, 8, 8, 8, false, 40, 24},
    {"long_k4_window", true, 20, 0.0, 4, 4, 8, true, 40, 24},
    {"long_softcap_p16", true, 0, 30.0, 8, 8, 16, false, 40, 24},
};

INSTANTIATE_TEST_SUITE_P(Cases, RuntimeAttention, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<AttnCase>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace qbc::runtime
