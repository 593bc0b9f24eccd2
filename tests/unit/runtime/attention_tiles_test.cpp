// qk_scores and exp_accum on one block of cached keys, their outputs read back and compared
// bit for bit with numerics' per-element rules: every score with numerics::key_score (the
// integer sum, the rotating-offset correction in channel order, soft-capping) and the row
// maxima, every exponent sum and P·V sum with numerics::exp_code. The executor computes them
// with vector kernels (integer dot products, corrections several keys at a time), so the
// head dims and block lengths here cover their full widths and tails; the rotating offsets
// are dense, so a correction summed in another order shows in the scores' bits.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "qbc/numerics/attention.h"
#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/quantizer.h"
#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::Expr;
using testing::BundleBuilder;

struct TileCase {
  const char* name;
  int64_t heads, kv_heads, dim, bc;
  int k_bits, v_bits, p_bits;
  bool rotating;
  double softcap;
  int64_t window;
  int64_t rows, qpos0, kpos0;  ///< query rows of the call, their first position, the block's
};

numerics::Attention make_attention(const TileCase& c, isa::AttnDesc* d, std::vector<float>* block) {
  numerics::Attention a;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.dim;
  a.window = c.window;
  a.max_cache = 4096;
  a.scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
  a.softcap = c.softcap;
  a.quantized = true;
  a.k_bits = c.k_bits;
  a.v_bits = c.v_bits;
  a.p_bits = c.p_bits;
  const int64_t w = c.kv_heads * c.dim;
  for (int64_t h = 0; h < c.heads; ++h) a.q_scale.push_back(0.02f + 0.001f * static_cast<float>(h));
  std::vector<float> rot(static_cast<size_t>(w));
  for (int64_t i = 0; i < w; ++i) {
    const double f = static_cast<double>(i);
    a.k_scale.push_back(0.03f + 0.002f * static_cast<float>(i % 7));
    a.v_scale.push_back(0.02f + 0.001f * static_cast<float>(i % 5));
    a.k_offset.push_back(0.0f);
    a.v_offset.push_back(0.01f * static_cast<float>(i % 3));
    rot[static_cast<size_t>(i)] = 0.9f * static_cast<float>(std::sin(1.3 * f + 0.2));
  }
  d->heads = c.heads;
  d->kv_heads = c.kv_heads;
  d->head_dim = c.dim;
  d->window = c.window;
  d->capacity = a.max_cache;
  d->scale = a.scale;
  d->softcap = c.softcap;
  d->k_bits = c.k_bits;
  d->v_bits = c.v_bits;
  d->p_bits = c.p_bits;
  d->rotating = c.rotating;
  d->k_rope = c.rotating ? 0 : -1;
  if (c.rotating) {
    a.k_rot_offset = rot;
    a.k_rope.heads = c.kv_heads;
    a.k_rope.head_dim = c.dim;
    a.k_rope.rotary_dim = c.dim;
    for (int64_t i = 0; i < c.dim / 2; ++i)
      a.k_rope.inv_freq.push_back(std::pow(10000.0, -2.0 * static_cast<double>(i) / c.dim));
  }
  for (const std::vector<float>* v :
       {&a.q_scale, &a.k_scale, &a.v_scale, &a.k_offset, &a.v_offset, &rot})
    block->insert(block->end(), v->begin(), v->end());
  return a;
}

void PrintTo(const TileCase& c, std::ostream* os) { *os << c.name; }

isa::DType code_type(int bits) {
  return bits == 4 ? isa::DType::kI4 : bits == 16 ? isa::DType::kI16 : isa::DType::kI8;
}

class RuntimeAttentionTiles : public ::testing::TestWithParam<TileCase> {};

TEST_P(RuntimeAttentionTiles, ScoresAndSumsEqualNumericsRules) {
  const TileCase& c = GetParam();
  isa::AttnDesc desc;
  std::vector<float> pblock;
  const numerics::Attention a = make_attention(c, &desc, &pblock);
  const int64_t g = c.heads / c.kv_heads, hd = c.dim, bc = c.bc, rg = c.rows * g;
  const int64_t qw = c.heads * hd;
  const isa::DType kt = code_type(c.k_bits), vt = code_type(c.v_bits);
  const int64_t krow = isa::dtype_bytes(kt, hd), vrow = isa::dtype_bytes(vt, hd);
  const int64_t kv_head = c.kv_heads - 1;
  const int64_t pbytes = static_cast<int64_t>(pblock.size()) * 4;

  BundleBuilder bb(1, 1, 1 << 20, /*chunk=*/c.rows, /*max_cache=*/4096);
  isa::Bundle& b = bb.bundle();
  if (c.rotating) {
    isa::RopeDesc r;
    r.heads = c.kv_heads;
    r.head_dim = hd;
    r.rotary_dim = hd;
    r.inv_freq = a.k_rope.inv_freq;
    b.ropes.push_back(r);
  }
  b.attentions.push_back(desc);
  const int32_t params_d = bb.weights("params", testing::raw_bytes(pblock));
  const int32_t q_d = bb.dram("q", isa::Purpose::kActivations, c.rows * qw * 2);
  const int32_t k_d = bb.dram("k", isa::Purpose::kKv, bc * krow);
  const int32_t v_d = bb.dram("v", isa::Purpose::kKv, bc * vrow);
  const int32_t sc_d = bb.dram("scores", isa::Purpose::kScratch, rg * bc * 4);
  const int32_t mx_d = bb.dram("rowmax", isa::Purpose::kScratch, rg * 4);
  const int32_t sum_d = bb.dram("sums", isa::Purpose::kScratch, rg * (hd + 1) * 8);
  const int32_t prm = bb.sram("params", 0, pbytes), q = bb.sram("q", 0, c.rows * qw * 2);
  const int32_t qc = bb.sram("qcodes", 0, rg * hd * 4), mq = bb.sram("mq", 0, rg * 4);
  const int32_t kb = bb.sram("k", 0, bc * krow), vb = bb.sram("v", 0, bc * vrow);
  const int32_t sc = bb.sram("scores", 0, rg * bc * 4), mx = bb.sram("rowmax", 0, rg * 4);
  const int32_t sums = bb.sram("sums", 0, rg * (hd + 1) * 8);
  bb.copy(0, bb.ref(prm), bb.ref(params_d), pbytes);
  bb.copy(0, bb.ref(q), bb.ref(q_d), c.rows * qw * 2);
  bb.copy(0, bb.ref(kb), bb.ref(k_d), bc * krow);
  bb.copy(0, bb.ref(vb), bb.ref(v_d), bc * vrow);
  const Expr qcol(kv_head * g * hd * 2);
  isa::QueryPrep qp;
  qp.q = bb.ref(q, qcol);
  qp.params = bb.ref(prm);
  qp.qcodes = bb.ref(qc);
  qp.mq = bb.ref(mq);
  qp.rows = c.rows;
  qp.kv_head = kv_head;
  qp.attn = 0;
  bb.emit(0, qp);
  isa::QkScores qk;
  qk.qcodes = bb.ref(qc);
  qk.mq = bb.ref(mq);
  qk.q = bb.ref(q, qcol);
  qk.kcodes = bb.ref(kb);
  qk.params = bb.ref(prm);
  qk.scores = bb.ref(sc);
  qk.rowmax = bb.ref(mx);
  qk.rows = c.rows;
  qk.qpos0 = c.qpos0;
  qk.kpos0 = c.kpos0;
  qk.bc = bc;
  qk.kv_head = kv_head;
  qk.max_mode = isa::MaxMode::kInit;
  qk.attn = 0;
  bb.emit(0, qk);
  isa::ExpAccum ea;
  ea.scores = bb.ref(sc);
  ea.rowmax = bb.ref(mx);
  ea.vcodes = bb.ref(vb);
  ea.esum = bb.ref(sums);
  ea.acc = bb.ref(sums, Expr(rg * 8));
  ea.rows = c.rows;
  ea.bc = bc;
  ea.first = true;
  ea.attn = 0;
  bb.emit(0, ea);
  bb.copy(0, bb.ref(sc_d), bb.ref(sc), rg * bc * 4);
  bb.copy(0, bb.ref(mx_d), bb.ref(mx), rg * 4);
  bb.copy(0, bb.ref(sum_d), bb.ref(sums), rg * (hd + 1) * 8);

  const std::vector<float> qv = testing::random_f16(static_cast<size_t>(c.rows * qw), 7, 3.0f);
  const int kq = static_cast<int>(numerics::quant_max(c.k_bits));
  const int vq = static_cast<int>(numerics::quant_max(c.v_bits));
  const std::vector<int32_t> kcodes =
      testing::random_codes(static_cast<size_t>(bc * hd), 8, -kq - 1, kq);
  const std::vector<int32_t> vcodes =
      testing::random_codes(static_cast<size_t>(bc * hd), 9, -vq - 1, vq);
  for (int threads : {1, 2}) {
    std::shared_ptr<Device> dev = testing::make_device(bb.finish(), threads);
    ASSERT_NE(dev, nullptr);
    testing::write(*dev, q_d, testing::f16_bytes(qv));
    testing::write(*dev, k_d, testing::code_bytes(kcodes, bc, hd, kt));
    testing::write(*dev, v_d, testing::code_bytes(vcodes, bc, hd, vt));
    QBC_ASSERT_OK(dev->run(isa::Phase::kPrefill, 0, c.qpos0, c.rows));
    const std::vector<float> got_sc =
        testing::values_of<float>(testing::read(*dev, sc_d, rg * bc * 4));
    const std::vector<float> got_mx = testing::values_of<float>(testing::read(*dev, mx_d, rg * 4));
    const std::vector<int64_t> got_sums =
        testing::values_of<int64_t>(testing::read(*dev, sum_d, rg * (hd + 1) * 8));

    std::vector<float> want_sc(static_cast<size_t>(rg * bc)), want_mx(static_cast<size_t>(rg));
    std::vector<int64_t> want_sums(static_cast<size_t>(rg * (hd + 1)), 0);
    std::vector<float> krot(static_cast<size_t>(c.kv_heads * hd));
    numerics::QueryCodes qcodes;
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t qpos = c.qpos0 + r;
      const int64_t lo = c.window > 0 ? qpos - c.window + 1 : 0;
      for (int64_t i = 0; i < g; ++i) {
        const int64_t row = r * g + i;
        const float* qr = qv.data() + r * qw + (kv_head * g + i) * hd;
        numerics::query_codes(qr, kv_head * g + i, a, &qcodes);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < bc; ++j) {
          const int64_t kpos = c.kpos0 + j;
          float s = -std::numeric_limits<float>::infinity();
          if (kpos >= 0 && kpos <= qpos && kpos >= lo) {
            if (c.rotating) numerics::rotated_key_offset(a, kpos, krot.data());
            s = numerics::key_score(qcodes, c.rotating ? qr : nullptr, kcodes.data() + j * hd,
                                    c.rotating ? krot.data() + kv_head * hd : nullptr, a);
          }
          want_sc[static_cast<size_t>(row * bc + j)] = s;
          m = std::max(m, s);
        }
        want_mx[static_cast<size_t>(row)] = m;
        for (int64_t j = 0; j < bc; ++j) {
          const int32_t e =
              numerics::exp_code(want_sc[static_cast<size_t>(row * bc + j)], m, c.p_bits);
          want_sums[static_cast<size_t>(row)] += e;
          for (int64_t ch = 0; ch < hd; ++ch)
            want_sums[static_cast<size_t>(rg + row * hd + ch)] +=
                int64_t{e} * vcodes[static_cast<size_t>(j * hd + ch)];
        }
      }
    }
    EXPECT_TRUE(testing::same_bits(got_sc, want_sc)) << "scores, " << threads << " threads";
    EXPECT_TRUE(testing::same_bits(got_mx, want_mx)) << "row maxima, " << threads << " threads";
    EXPECT_EQ(got_sums, want_sums) << "exponent and P·V sums, " << threads << " threads";
  }
}

//                    name          H  KV  d   bc  kb vb pb  rot   cap  win rows qpos0 kpos0
const TileCase kTiles[] = {
    {"d64_bc256_rotating", 9, 3, 64, 256, 8, 8, 8, true, 0.0, 0, 5, 130, 0},
    {"d64_decode_rotating", 9, 3, 64, 256, 8, 8, 8, true, 0.0, 0, 1, 300, 256},
    {"d40_bc24_k4_window", 4, 2, 40, 24, 4, 4, 8, true, 0.0, 9, 7, 20, 16},
    {"d40_softcap_p16", 4, 1, 40, 40, 8, 8, 16, true, 20.0, 0, 3, 50, 20},
    {"d24_kv16", 4, 2, 24, 33, 16, 16, 8, false, 0.0, 0, 4, 40, 8},
    {"d16_k8_v4_plain", 8, 2, 16, 19, 8, 4, 8, false, 0.0, 0, 6, 10, 0},
};

INSTANTIATE_TEST_SUITE_P(Cases, RuntimeAttentionTiles, ::testing::ValuesIn(kTiles),
                         [](const ::testing::TestParamInfo<TileCase>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace qbc::runtime
