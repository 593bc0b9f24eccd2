// Attention on the NPU, tile by tile: kv_quant (append codes), query_prep (query codes),
// qk_scores (scores of a block of cached keys and their running max), exp_accum (integer
// exponent codes and their sums), merge (order-free cross-core max / sum) and attn_out (the
// one normalisation). Each applies numerics' per-element rules (query_codes, key_score,
// rotated_key_offset, exp_code, attention_output), so any split of the cache over blocks,
// chunks and cores gives numerics::attention's bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core.h"
#include "exp_codes.h"
#include "matmul_kernel.h"
#include "qbc/numerics/attention.h"
#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/quantizer.h"
#include "thread_pool.h"
#include "values.h"
#include "vec_kernels.h"

namespace qbc::runtime {
namespace {

int64_t group_size(const isa::AttnDesc& d) { return d.heads / d.kv_heads; }

/// Rows [j0, j1) of `n`-code rows of type t (kI8 or kI4) at p (`row` bytes apart) as int8
/// [j1 − j0, n]: a pointer into p itself for kI8, else unpacked into `scratch`.
const int8_t* code_rows_i8(const uint8_t* p, isa::DType t, int64_t row, int64_t n, int64_t j0,
                           int64_t j1, std::vector<int8_t>* scratch) {
  if (t == isa::DType::kI8) return reinterpret_cast<const int8_t*>(p + j0 * row);
  scratch->resize(static_cast<size_t>((j1 - j0) * n));
  std::vector<int32_t> codes(static_cast<size_t>(n));
  for (int64_t j = j0; j < j1; ++j) {
    load_codes(p + j * row, t, n, codes.data());
    int8_t* d = scratch->data() + (j - j0) * n;
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int8_t>(codes[static_cast<size_t>(i)]);
  }
  return scratch->data();
}

/// How numerics::key_score's integer sums Σ_c q[r, c] · k[j, c] are computed: VNNI on
/// u = q + 128 (query codes within int8), the int16 kernel (within ±255; 8- or 4-bit keys),
/// else int64 loops in key_score.
/// kGroups: per key group (the KV4 rules' multipliers), dot_u8_groups on u = q + 128.
enum class DotPath { kLoops, kInt16, kVnni, kGroups };

DotPath key_dot_path(const int32_t* qcodes, int64_t count, int64_t hd, isa::DType kt) {
  if ((kt != isa::DType::kI8 && kt != isa::DType::kI4) || hd > kMaxExactDotLen)
    return DotPath::kLoops;
  const auto [lo, hi] = std::minmax_element(qcodes, qcodes + count);
  if (count > 0 && (*lo < -255 || *hi > 255)) return DotPath::kLoops;
  if (dot_u8_fast() && (count == 0 || (*lo >= -128 && *hi <= 127))) return DotPath::kVnni;
  return DotPath::kInt16;
}

/// Σ_c qcodes[r, c] · kcodes[j, c] for query rows r of [q0, q1) and keys j of [j0, j1) into
/// dots[(r − q0) * (j1 − j0) + j − j0] with the kernel of `path` (kInt16 or kVnni): an
/// integer sum, which has no order.
void key_dots(DotPath path, const int32_t* qcodes, int64_t q0, int64_t q1, int64_t hd,
              const uint8_t* kcp, isa::DType kt, int64_t krow, int64_t j0, int64_t j1,
              std::vector<int32_t>* dots) {
  const int64_t nk = j1 - j0, rq = q1 - q0;
  dots->assign(static_cast<size_t>(rq * nk), 0);
  if (nk <= 0 || rq <= 0) return;
  std::vector<int8_t> unpacked;
  const int8_t* keys = code_rows_i8(kcp, kt, krow, hd, j0, j1, &unpacked);
  const int64_t ldw = kt == isa::DType::kI8 ? krow : hd;
  const int32_t* q = qcodes + q0 * hd;
  if (path == DotPath::kVnni) {
    std::vector<uint8_t> u(static_cast<size_t>(rq * hd));
    for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(q[i] + 128);
    std::vector<int32_t> ksum(static_cast<size_t>(nk));
    dot_u8(u.data(), hd, rq, keys, ldw, nk, hd, dots->data(), nk, ksum.data());
    for (int64_t r = 0; r < rq; ++r) {
      int32_t* d = dots->data() + r * nk;
      for (int64_t j = 0; j < nk; ++j) d[j] -= 128 * ksum[static_cast<size_t>(j)];
    }
    return;
  }
  std::vector<int16_t> q16(q, q + rq * hd);
  dot_tile(q16.data(), hd, rq, keys, ldw, nk, hd, dots->data(), nk, 1);
}

/// The key-group sums of numerics::key_score for keys with per-token fields: for query rows
/// [q0, q1) and keys [j0, j1), dots[((r − q0) · nk + j − j0) · ng + g] = Σ_{c in group g}
/// q[r, c] · k[j, c] (ng = hd / gs groups of gs channels), exact int32 from dot_u8_groups on
/// u = q + 128 less 128 · the group's key sum. Query codes must lie in [−128, 127].
void key_group_dots(const int32_t* qcodes, int64_t q0, int64_t q1, int64_t hd, int64_t gs,
                    const uint8_t* kcp, isa::DType kt, int64_t krow, int64_t j0, int64_t j1,
                    std::vector<int32_t>* dots) {
  const int64_t nk = j1 - j0, rq = q1 - q0, ng = hd / gs;
  dots->assign(static_cast<size_t>(std::max<int64_t>(rq * nk * ng, 0)), 0);
  if (nk <= 0 || rq <= 0) return;
  std::vector<int8_t> unpacked;
  const int8_t* keys = code_rows_i8(kcp, kt, krow, hd, j0, j1, &unpacked);
  const int64_t ldw = kt == isa::DType::kI8 ? krow : hd;
  const int32_t* q = qcodes + q0 * hd;
  std::vector<uint8_t> u(static_cast<size_t>(rq * hd));
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(q[i] + 128);
  std::vector<int32_t> wsum(static_cast<size_t>(nk * ng));
  dot_u8_groups(u.data(), hd, rq, keys, ldw, nk, hd, gs, dots->data(), nk * ng, wsum.data());
  for (int64_t r = 0; r < rq; ++r) {
    int32_t* d = dots->data() + r * nk * ng;
    for (int64_t i = 0; i < nk * ng; ++i) d[i] -= 128 * wsum[static_cast<size_t>(i)];
  }
}

/// Work (score elements) below which an attention instruction stays on one thread.
constexpr int64_t kParallelScores = int64_t{1} << 13;

/// kv_quant with the KV4 rules (isa::AttnDesc::token_fields) or into packed blocks
/// (KvQuant::head_stride): per row and KV head, the key
/// record (numerics::key_codes' codes, its fp16 multipliers, with k_asym its int16 zero points)
/// and the value record (numerics::value_codes' codes, its u8 multiplier).
Status kv_records(const isa::KvQuant& op, const numerics::Attention& a, int64_t rows, int64_t pos0,
                  const uint8_t* kp, const uint8_t* vp, uint8_t* kc, uint8_t* vc, Core& c) {
  const int32_t attn = op.attn;
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(attn)];
  const int64_t hd = d.head_dim, kv = d.kv_heads, w = kv * hd, ng = d.key_groups();
  const int64_t kr = d.key_record(), vr = d.value_record();
  const isa::DType kt = isa::code_type(d.k_bits), vt = isa::code_type(d.v_bits);
  const int64_t kcb = isa::dtype_bytes(kt, hd), vcb = isa::dtype_bytes(vt, hd);
  const bool rot = !a.k_rot_offset.empty();
  std::vector<float> k(static_cast<size_t>(w)), v(static_cast<size_t>(w)),
      t(static_cast<size_t>(ng));
  std::vector<int32_t> codes(static_cast<size_t>(hd)), z(static_cast<size_t>(ng));
  std::vector<int16_t> z16(static_cast<size_t>(ng));
  // Record index of row r of head h: rows of every head's records, or (packed caches) each
  // head's own blocks from h * head_stride.
  const int64_t rec0 = c.eval(op.rec0);
  const auto record = [&](int64_t r, int64_t h) {
    return op.head_stride > 0 ? h * op.head_stride + rec0 + r : r * kv + h;
  };
  for (int64_t r = 0; r < rows; ++r) {
    load_f16(kp + r * 2 * w, w, k.data());
    load_f16(vp + r * 2 * w, w, v.data());
    if (rot) {  // keys are stored minus rope(m) at their position, as kv_quant's
      const float* off = c.rotated_key_offset(attn, pos0 + r);
      for (int64_t i = 0; i < w; ++i)
        k[static_cast<size_t>(i)] = k[static_cast<size_t>(i)] - off[i];
    }
    for (int64_t h = 0; h < kv; ++h) {
      uint8_t* krec = kc + record(r, h) * kr;
      numerics::key_codes(k.data() + h * hd, h, a, codes.data(), t.data(), z.data());
      store_codes(codes.data(), kt, hd, krec);
      if (d.k_token_scale) store_f16(t.data(), ng, krec + kcb);
      if (d.k_asym) {
        for (int64_t g = 0; g < ng; ++g)
          z16[static_cast<size_t>(g)] = static_cast<int16_t>(z[static_cast<size_t>(g)]);
        store(z16.data(), ng, krec + kcb + 2 * ng);
      }
      uint8_t* vrec = vc + record(r, h) * vr;
      const int32_t m = numerics::value_codes(v.data() + h * hd, h, a, codes.data());
      store_codes(codes.data(), vt, hd, vrec);
      if (d.v_token_scale) vrec[vcb] = static_cast<uint8_t>(m);
    }
  }
  return ok_status();
}

}  // namespace

Status exec(const isa::KvQuant& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  QBC_ASSIGN_OR_RETURN(const int64_t pos0, c.count(op.pos0, "pos0"));
  const int64_t w = d.kv_heads * d.head_dim;
  c.counters.vector_ops += span(rows, 2, w);
  if (c.counters_only) return ok_status();
  const isa::DType kt = isa::code_type(d.k_bits), vt = isa::code_type(d.v_bits);
  // A row holds the records of every KV head in order (isa::AttnDesc::key_record).
  const int64_t krow = d.kv_heads * d.key_record(), vrow = d.kv_heads * d.value_record();
  QBC_ASSIGN_OR_RETURN(const numerics::Attention* a, c.attention(op.attn, op.params));
  QBC_ASSIGN_OR_RETURN(const uint8_t* kp, c.sram_at(op.k, span(rows, 2, w), "k"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* vp, c.sram_at(op.v, span(rows, 2, w), "v"));
  // Records written: rows of every head's, or up to the last head's rec0 + rows.
  int64_t records = span(rows, d.kv_heads);
  if (op.head_stride > 0) {
    QBC_ASSIGN_OR_RETURN(const int64_t rec0, c.count(op.rec0, "rec0"));
    records = span(d.kv_heads - 1, op.head_stride) + rec0 + rows;
  }
  QBC_ASSIGN_OR_RETURN(uint8_t * kc, c.sram_at(op.kcodes, span(records, d.key_record()), "kcodes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * vc,
                       c.sram_at(op.vcodes, span(records, d.value_record()), "vcodes"));
  if (d.token_fields() || op.head_stride > 0)
    return kv_records(op, *a, rows, pos0, kp, vp, kc, vc, c);
  const bool rot = !a->k_rot_offset.empty();
  std::vector<float> k(static_cast<size_t>(w)), v(static_cast<size_t>(w));
  std::vector<int32_t> kq(static_cast<size_t>(w)), vq(static_cast<size_t>(w));
  for (int64_t t = 0; t < rows; ++t) {
    load_f16(kp + t * 2 * w, w, k.data());
    load_f16(vp + t * 2 * w, w, v.data());
    if (rot) {  // the fp32 difference, then quantize_symmetric of it
      const float* off = c.rotated_key_offset(op.attn, pos0 + t);
      for (int64_t i = 0; i < w; ++i) k[static_cast<size_t>(i)] -= off[i];
    }
    numerics::quantize_symmetric_channels(k.data(), a->k_scale.data(), a->k_offset.data(), w,
                                          a->k_bits, kq.data());
    numerics::quantize_symmetric_channels(v.data(), a->v_scale.data(), a->v_offset.data(), w,
                                          a->v_bits, vq.data());
    store_codes(kq.data(), kt, w, kc + t * krow);
    store_codes(vq.data(), vt, w, vc + t * vrow);
  }
  return ok_status();
}

Status exec(const isa::QueryPrep& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t g = group_size(d), hd = d.head_dim, qw = d.heads * hd;
  c.counters.vector_ops += span(rows, g, hd);
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(const numerics::Attention* a, c.attention(op.attn, op.params));
  QBC_ASSIGN_OR_RETURN(const uint8_t* qp,
                       c.sram_at(op.q, rows_span(rows, 2 * qw, 2 * g * hd), "q"));
  QBC_ASSIGN_OR_RETURN(uint8_t * qcp, c.sram_at(op.qcodes, span(rows, g, hd, 4), "qcodes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * mqp, c.sram_at(op.mq, span(rows, g, 4), "mq"));
  // numerics::query_codes: Q times its KV head's K scales rounded to fp16 (one fp32 product,
  // round_f16), the static or per-token scale, symmetric 8-bit codes, the score multiplier.
  std::vector<float> qk(static_cast<size_t>(hd));
  std::vector<int32_t> codes(static_cast<size_t>(hd));
  const float* ks = a->k_scale.data() + op.kv_head * hd;
  numerics::QueryCodes rotated;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < g; ++i) {
      const int64_t head = op.kv_head * g + i;
      load_f16(qp + (r * qw + i * hd) * 2, hd, qk.data());
      if (a->qk_hadamard) {  // the online Q·K Hadamard: numerics::query_codes itself
        numerics::query_codes(qk.data(), head, *a, &rotated);
        store(rotated.codes.data(), hd, qcp + (r * g + i) * hd * 4);
        store(&rotated.mq, 1, mqp + (r * g + i) * 4);
        continue;
      }
      for (int64_t ch = 0; ch < hd; ++ch)
        qk[static_cast<size_t>(ch)] = qk[static_cast<size_t>(ch)] * ks[ch];
      round_f16(qk.data(), hd);
      const float sq = a->q_dynamic ? numerics::per_token_scale(qk.data(), hd, 8)
                                    : a->q_scale[static_cast<size_t>(head)];
      numerics::quantize_symmetric_row(qk.data(), hd, sq, 8, codes.data());
      const float mq = static_cast<float>(static_cast<double>(sq) * a->scale);
      store(codes.data(), hd, qcp + (r * g + i) * hd * 4);
      store(&mq, 1, mqp + (r * g + i) * 4);
    }
  }
  return ok_status();
}

namespace {

/// What qk_scores' rows read: the block's keys (codes, per-token fields, rotated offsets), the
/// query codes and multipliers, the visible key range, and where the scores and row maxima go.
struct ScoreBlock {
  const isa::QkScores* op = nullptr;
  const isa::AttnDesc* d = nullptr;
  const numerics::Attention* a = nullptr;
  int64_t g = 0, hd = 0, qw = 0, bc = 0, krow = 0, ng = 1;
  isa::DType kt = isa::DType::kI8;
  DotPath path = DotPath::kLoops;
  bool fast = false, rot = false, kfields = false;
  const uint8_t *qp = nullptr, *kcp = nullptr;
  uint8_t *sp = nullptr, *mxp = nullptr;
  std::vector<int32_t> qcodes, keys, kzero;
  std::vector<float> mqs, ktoken, krot, krot_t;
  int64_t qpos0 = 0, kpos0 = 0, qstep = 1, span_lo = 0, span_hi = -1, j0 = 0, j1 = 0;

  int64_t nk() const { return j1 - j0; }
  /// The first key position visible to a query at `qpos`.
  int64_t visible_lo(int64_t qpos) const {
    const int64_t w = d->window > 0 ? qpos - d->window + 1 : 0;
    return std::max<int64_t>(0, op->span ? std::min(w, span_lo) : w);
  }
};

/// The per-token key multipliers (and int16 zero points) after each scored key's codes.
void load_key_fields(ScoreBlock& b) {
  const int64_t ng = b.ng, cbytes = isa::dtype_bytes(b.kt, b.hd);
  b.ktoken.resize(static_cast<size_t>(b.bc * ng));
  b.kzero.assign(static_cast<size_t>(b.d->k_asym ? b.bc * ng : 0), 0);
  std::vector<int16_t> z(static_cast<size_t>(ng));
  for (int64_t j = b.j0; j < b.j1; ++j) {
    load_f16(b.kcp + j * b.krow + cbytes, ng, b.ktoken.data() + j * ng);
    if (b.d->k_asym) {
      load(b.kcp + j * b.krow + cbytes + 2 * ng, ng, z.data());
      std::copy(z.begin(), z.end(), b.kzero.begin() + j * ng);
    }
  }
}

/// rope(m) of this KV head at each scored key's position (rotating key offsets), as rows
/// [nk, hd] for key_score and transposed [hd, nk] for the kernels' vector corrections.
void load_rotated_offsets(ScoreBlock& b, Core& c) {
  const int64_t nk = b.nk(), hd = b.hd;
  b.krot.assign(static_cast<size_t>(nk * hd), 0.0f);
  for (int64_t j = b.j0; j < b.j1; ++j) {
    const float* all = c.rotated_key_offset(b.op->attn, b.kpos0 + j);
    std::copy_n(all + b.op->kv_head * hd, hd, b.krot.begin() + (j - b.j0) * hd);
  }
  if (!b.fast) return;
  b.krot_t.resize(b.krot.size());
  for (int64_t j = 0; j < nk; ++j) {
    for (int64_t ch = 0; ch < hd; ++ch)
      b.krot_t[static_cast<size_t>(ch * nk + j)] = b.krot[static_cast<size_t>(j * hd + ch)];
  }
}

/// Scores of query row `row` over keys [jlo, jhi) from the grouped kernel's sums `drow`
/// ([nk, ng]): key_score's per-group expressions, in group order.
void grouped_scores(const ScoreBlock& b, int64_t row, float mq, const int32_t* drow, int64_t jlo,
                    int64_t jhi, std::vector<int64_t>& qsum, float* sc) {
  const int64_t ng = b.ng, gs = b.hd / ng;
  for (int64_t gi = 0; gi < static_cast<int64_t>(qsum.size()); ++gi) {
    int64_t sum = 0;
    for (int64_t ch = gi * gs; ch < (gi + 1) * gs; ++ch)
      sum += b.qcodes[static_cast<size_t>(row * b.hd + ch)];
    qsum[static_cast<size_t>(gi)] = sum;
  }
  const float mqz = mq / static_cast<float>(numerics::kZeroUnit);
  const int32_t* dj = drow - b.j0 * ng;
  for (int64_t j = jlo; j < jhi; ++j) {
    const int32_t* dg = dj + j * ng;
    const float* tj = b.ktoken.data() + j * ng;
    float s = 0.0f;
    for (int64_t gi = 0; gi < ng; ++gi) {
      float sg;
      if (b.d->k_asym) {
        const int64_t acc =
            int64_t{dg[gi]} * numerics::kZeroUnit -
            int64_t{b.kzero[static_cast<size_t>(j * ng + gi)]} * qsum[static_cast<size_t>(gi)];
        sg = static_cast<float>(acc) * mqz;
      } else {
        sg = static_cast<float>(dg[gi]) * mq;
      }
      sg = sg * tj[gi];
      s = gi == 0 ? sg : s + sg;
    }
    sc[j] = s;
  }
}

/// Query rows [r0, r1) of the block: each head's scores over the visible keys (-inf outside),
/// stored, and its row maximum initialised or updated.
void score_rows(const ScoreBlock& b, int64_t r0, int64_t r1) {
  const isa::AttnDesc& d = *b.d;
  const numerics::Attention& a = *b.a;
  const int64_t g = b.g, hd = b.hd, bc = b.bc, nk = b.nk();
  const int64_t nd = b.path == DotPath::kGroups ? b.ng : 1;  // sums per (row, key)
  std::vector<int32_t> dots;
  if (b.path == DotPath::kGroups) {
    key_group_dots(b.qcodes.data(), r0 * g, r1 * g, hd, hd / b.ng, b.kcp, b.kt, b.krow, b.j0, b.j1,
                   &dots);
  } else if (b.fast) {
    key_dots(b.path, b.qcodes.data(), r0 * g, r1 * g, hd, b.kcp, b.kt, b.krow, b.j0, b.j1, &dots);
  }
  std::vector<int64_t> qsum(static_cast<size_t>(d.k_asym ? b.ng : 0));
  numerics::QueryCodes qc;
  qc.codes.resize(static_cast<size_t>(hd));
  std::vector<float> qr(static_cast<size_t>(b.rot ? hd : 0)), scores(static_cast<size_t>(bc));
  std::vector<float> corr(static_cast<size_t>(b.fast && b.rot ? nk : 0));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float fscale = static_cast<float>(a.scale), fcap = static_cast<float>(a.softcap);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t qpos = b.qpos0 + b.qstep * r;
    const int64_t lo = b.visible_lo(qpos), hi = std::max(qpos, b.span_hi);
    for (int64_t i = 0; i < g; ++i) {
      const int64_t row = r * g + i;
      const float mq = b.mqs[static_cast<size_t>(row)];
      if (b.rot) load_f16(b.qp + (r * b.qw + i * hd) * 2, hd, qr.data());
      if (b.fast && b.rot && nk > 0)
        rot_corrections(qr.data(), b.krot_t.data(), nk, hd, nk, corr.data());
      if (!b.fast) {
        std::copy_n(b.qcodes.begin() + row * hd, hd, qc.codes.begin());
        qc.mq = mq;
      }
      const int32_t* drow = b.fast ? dots.data() + (row - r0 * g) * nk * nd : nullptr;
      // Keys [jlo, jhi) of the block are visible to this query (kpos in [lo, hi]); the rest
      // score -inf, which leaves the running max as it is.
      const int64_t jlo = std::clamp<int64_t>(lo - b.kpos0, 0, bc);
      const int64_t jhi = std::max(jlo, std::clamp<int64_t>(hi - b.kpos0 + 1, 0, bc));
      float* sc = scores.data();
      std::fill(sc, sc + jlo, neg_inf);
      std::fill(sc + jhi, sc + bc, neg_inf);
      if (b.path == DotPath::kGroups) {
        grouped_scores(b, row, mq, drow, jlo, jhi, qsum, sc);
      } else if (b.fast) {  // numerics::key_score's expressions, the sums from the kernels
        const int32_t* dj = drow - b.j0;
        for (int64_t j = jlo; j < jhi; ++j) sc[j] = static_cast<float>(dj[j]) * mq;
      }
      if (b.fast) {  // then key_score's rotating-offset correction and soft cap
        if (b.rot) {
          const float* cj = corr.data() - b.j0;
          for (int64_t j = jlo; j < jhi; ++j) sc[j] = sc[j] + cj[j] * fscale;
        }
        if (a.softcap > 0.0) {
          for (int64_t j = jlo; j < jhi; ++j) sc[j] = numerics::softcap_value(sc[j], fcap);
        }
      } else {
        for (int64_t j = jlo; j < jhi; ++j) {
          sc[j] = numerics::key_score(qc, b.rot ? qr.data() : nullptr, b.keys.data() + j * hd,
                                      b.rot ? b.krot.data() + (j - b.j0) * hd : nullptr, a,
                                      b.kfields ? b.ktoken.data() + j * b.ng : nullptr,
                                      b.kfields && d.k_asym ? b.kzero.data() + j * b.ng : nullptr);
        }
      }
      float mx = neg_inf;
      for (int64_t j = jlo; j < jhi; ++j) mx = std::max(mx, sc[j]);
      store(scores.data(), bc, b.sp + row * bc * 4);
      if (b.op->max_mode == isa::MaxMode::kInit) {
        store(&mx, 1, b.mxp + row * 4);
      } else if (b.op->max_mode == isa::MaxMode::kUpdate) {
        float old;
        load(b.mxp + row * 4, 1, &old);
        old = std::max(old, mx);
        store(&old, 1, b.mxp + row * 4);
      }
    }
  }
}

}  // namespace

Status exec(const isa::QkScores& op, Core& c) {
  ScoreBlock b;
  b.op = &op;
  b.d = &c.bundle.attentions[static_cast<size_t>(op.attn)];
  const isa::AttnDesc& d = *b.d;
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  b.g = group_size(d);
  b.hd = d.head_dim;
  b.qw = d.heads * b.hd;
  b.bc = op.bc;
  const int64_t g = b.g, hd = b.hd, bc = b.bc;
  c.counters.macs += span(rows, g, bc, hd);
  c.counters.vector_ops += span(rows, g, bc);
  if (c.counters_only) return ok_status();
  b.kt = isa::code_type(d.k_bits);
  b.krow = d.key_record();
  QBC_ASSIGN_OR_RETURN(b.a, c.attention(op.attn, op.params));
  b.rot = !b.a->k_rot_offset.empty();
  // Per-token key multipliers (and zero points) follow each key's codes in its record; their
  // per-group sums take numerics::key_score's loops.
  b.kfields = d.k_token_scale;
  b.ng = d.key_groups();
  QBC_ASSIGN_OR_RETURN(const uint8_t* qcp, c.sram_at(op.qcodes, span(rows, g, hd, 4), "qcodes"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* mqp, c.sram_at(op.mq, span(rows, g, 4), "mq"));
  if (b.rot) {
    QBC_ASSIGN_OR_RETURN(b.qp, c.sram_at(op.q, rows_span(rows, 2 * b.qw, 2 * g * hd), "q"));
  }
  QBC_ASSIGN_OR_RETURN(b.kcp, c.sram_at(op.kcodes, span(bc, b.krow), "kcodes"));
  QBC_ASSIGN_OR_RETURN(b.sp, c.sram_write(op.scores, span(rows, g, bc, 4), "scores"));
  if (op.max_mode != isa::MaxMode::kNone) {
    QBC_ASSIGN_OR_RETURN(b.mxp, c.sram_at(op.rowmax, span(rows, g, 4), "rowmax"));
  }
  b.qpos0 = c.eval(op.qpos0);
  b.kpos0 = c.eval(op.kpos0);
  if (rows == 0 || bc == 0) return ok_status();

  // Keys every query masks (after the last, before the first's window, before 0) are -inf
  // for every row: only keys [j0, j1) of the block are scored.
  // A bidirectional attention's rows all sit at qpos0 (the key range's last position). A span
  // call's rows also see the call's keys [span_lo, span_hi] (isa::QkScores::span).
  b.qstep = d.bidirectional ? 0 : 1;
  b.span_lo = c.env.sym[static_cast<int>(isa::Sym::kStart)];
  b.span_hi = op.span ? b.span_lo + c.env.sym[static_cast<int>(isa::Sym::kSeq)] - 1 : -1;
  const int64_t last = std::max(b.qpos0 + b.qstep * (rows - 1), b.span_hi);
  b.j0 = std::clamp<int64_t>(b.visible_lo(b.qpos0) - b.kpos0, 0, bc);
  b.j1 = std::max(b.j0, std::clamp<int64_t>(last - b.kpos0 + 1, 0, bc));
  const int64_t rq = rows * g;
  b.qcodes.resize(static_cast<size_t>(rq * hd));
  b.mqs.resize(static_cast<size_t>(rq));
  load(qcp, rq * hd, b.qcodes.data());
  load(mqp, rq, b.mqs.data());
  b.path = key_dot_path(b.qcodes.data(), rq * hd, hd, b.kt);
  if (b.kfields) {  // per-group sums: dot_u8_groups when the query codes are int8
    const auto [lo, hi] = std::minmax_element(b.qcodes.begin(), b.qcodes.end());
    const bool int8 = b.qcodes.empty() || (*lo >= -128 && *hi <= 127);
    b.path = b.path != DotPath::kLoops && int8 ? DotPath::kGroups : DotPath::kLoops;
  }
  b.fast = b.path != DotPath::kLoops;
  if (!b.fast) {
    b.keys.resize(static_cast<size_t>(bc * hd));
    for (int64_t j = b.j0; j < b.j1; ++j)
      load_codes(b.kcp + j * b.krow, b.kt, hd, b.keys.data() + j * hd);
  }
  if (b.kfields) load_key_fields(b);
  if (b.rot) load_rotated_offsets(b, c);
  // Query rows are independent: blocks of rows on the host threads.
  parallel_blocks(c.pool, rows, span(rq, b.nk(), hd), kParallelScores * 16, 1,
                  [&b](int64_t r0, int64_t r1) { score_rows(b, r0, r1); });
  return ok_status();
}

Status exec(const isa::ExpAccum& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t g = group_size(d), hd = d.head_dim, bc = op.bc, n = span(rows, g);
  c.counters.macs += span(n, bc, hd);
  c.counters.vector_ops += span(n, bc);
  if (c.counters_only) return ok_status();
  const isa::DType vt = isa::code_type(d.v_bits);
  const int64_t vrow = d.value_record();
  // Per-token V multipliers m (the u8 after each value's codes) weight the integer sums:
  // Σ_j e_j · m_j · v_j, in the int64 loops.
  const bool vfields = d.v_token_scale;
  const int64_t vbytes = isa::dtype_bytes(vt, hd);
  QBC_ASSIGN_OR_RETURN(const uint8_t* sp, c.sram_at(op.scores, span(n, bc, 4), "scores"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* mxp, c.sram_at(op.rowmax, span(n, 4), "rowmax"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* vcp, c.sram_at(op.vcodes, span(bc, vrow), "vcodes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * esp, c.sram_at(op.esum, span(n, 8), "esum"));
  QBC_ASSIGN_OR_RETURN(uint8_t * accp, c.sram_at(op.acc, span(n, hd, 8), "acc"));
  if (n == 0) return ok_status();
  std::vector<float> mx(static_cast<size_t>(n));
  std::vector<int64_t> esum(static_cast<size_t>(n), 0), acc(static_cast<size_t>(n * hd), 0);
  load(mxp, n, mx.data());
  if (!op.first) {
    load(esp, n, esum.data());
    load(accp, n * hd, acc.data());
  }
  // Rows are independent: blocks of rows on the host threads, each with its exponent codes
  // [rows, bc] and the keys [ja, jb) where any is not 0.
  parallel_blocks(c.pool, n, span(n, bc, hd), kParallelScores * 16, 4, [&](int64_t q0, int64_t q1) {
    const int64_t nr = q1 - q0;
    std::vector<float> scores(static_cast<size_t>(bc));
    std::vector<int32_t> e(static_cast<size_t>(nr * bc));
    int64_t ja = bc, jb = 0;
    const ExpCodes* table = d.p_bits >= 1 && d.p_bits <= 8 ? &exp_codes(d.p_bits) : nullptr;
    for (int64_t row = q0; row < q1; ++row) {
      load(sp + row * bc * 4, bc, scores.data());
      int32_t* er = e.data() + (row - q0) * bc;
      int64_t es = 0;
      const float mrow = mx[static_cast<size_t>(row)];
      if (table != nullptr) table->row(scores.data(), bc, mrow, er);
      for (int64_t j = 0; j < bc; ++j) {
        if (table == nullptr)
          er[j] = numerics::exp_code(scores[static_cast<size_t>(j)], mrow, d.p_bits);
        es += er[j];
        if (er[j] != 0) {
          ja = std::min(ja, j);
          jb = std::max(jb, j + 1);
        }
      }
      esum[static_cast<size_t>(row)] += es;
    }
    // Σ_j e_j · v_j: exact integer sums in any order. VNNI on e (unsigned, <= 255) or the
    // int16 kernel, against the V codes transposed [hd, keys] (8- or 4-bit values), else
    // int64 loops.
    const int64_t nv = std::max<int64_t>(jb - ja, 0);
    int64_t* accb = acc.data() + q0 * hd;
    if (nv > 0 && nv <= kMaxExactDotLen && !vfields && d.p_bits <= 8 &&
        (vt == isa::DType::kI8 || vt == isa::DType::kI4)) {
      std::vector<int8_t> unpacked;
      const int8_t* v = code_rows_i8(vcp, vt, vrow, hd, ja, jb, &unpacked);
      const int64_t ldv = vt == isa::DType::kI8 ? vrow : hd;
      std::vector<int32_t> dots(static_cast<size_t>(nr * hd));
      if (dot_u8_fast()) {  // the value rows as stored, four keys a step
        std::vector<uint8_t> e8(static_cast<size_t>(nr * nv));
        for (int64_t row = 0; row < nr; ++row) {
          for (int64_t j = 0; j < nv; ++j)
            e8[static_cast<size_t>(row * nv + j)] = static_cast<uint8_t>(e[row * bc + ja + j]);
        }
        weighted_rows_u8(e8.data(), nv, nr, v, ldv, nv, hd, dots.data(), hd);
      } else {  // the int16 kernel against the value codes transposed [hd, keys]
        std::vector<int8_t> vt_rows(static_cast<size_t>(hd * nv));
        for (int64_t j = 0; j < nv; ++j) {
          for (int64_t ch = 0; ch < hd; ++ch)
            vt_rows[static_cast<size_t>(ch * nv + j)] = v[j * ldv + ch];
        }
        std::vector<int16_t> e16(static_cast<size_t>(nr * nv));
        for (int64_t row = 0; row < nr; ++row) {
          for (int64_t j = 0; j < nv; ++j)
            e16[static_cast<size_t>(row * nv + j)] = static_cast<int16_t>(e[row * bc + ja + j]);
        }
        dot_tile(e16.data(), nv, nr, vt_rows.data(), nv, hd, nv, dots.data(), hd, 1);
      }
      for (int64_t i = 0; i < nr * hd; ++i) accb[i] += dots[static_cast<size_t>(i)];
    } else if (nv > 0) {
      std::vector<int32_t> vals(static_cast<size_t>(bc * hd));
      for (int64_t j = ja; j < jb; ++j) load_codes(vcp + j * vrow, vt, hd, vals.data() + j * hd);
      for (int64_t row = 0; row < nr; ++row) {
        int64_t* ar = accb + row * hd;
        for (int64_t j = ja; j < jb; ++j) {
          const int64_t ej = int64_t{e[static_cast<size_t>(row * bc + j)]} *
                             (vfields ? vcp[j * vrow + vbytes] : 1);
          if (ej == 0) continue;
          const int32_t* vr = vals.data() + j * hd;
          for (int64_t ch = 0; ch < hd; ++ch) ar[ch] += ej * vr[ch];
        }
      }
    }
  });
  store(esum.data(), n, esp);
  store(acc.data(), n * hd, accp);
  return ok_status();
}

Status exec(const isa::Merge& op, Core& c) {
  const int64_t es = op.op == isa::MergeOp::kMax ? 4 : 8;
  c.counters.vector_ops += span(op.parts_count, op.count);
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(
      const uint8_t* pp,
      c.sram_at(op.parts, span(rows_span(op.parts_count, op.part_stride, op.count), es), "parts"));
  QBC_ASSIGN_OR_RETURN(uint8_t * op_out, c.sram_at(op.out, span(op.count, es), "out"));
  if (op.op == isa::MergeOp::kMax) {
    std::vector<float> out(static_cast<size_t>(op.count)), part(static_cast<size_t>(op.count));
    load(pp, op.count, out.data());
    for (int64_t p = 1; p < op.parts_count; ++p) {
      load(pp + p * op.part_stride * es, op.count, part.data());
      for (size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], part[i]);
    }
    store(out.data(), op.count, op_out);
  } else {
    std::vector<int64_t> out(static_cast<size_t>(op.count)), part(static_cast<size_t>(op.count));
    load(pp, op.count, out.data());
    for (int64_t p = 1; p < op.parts_count; ++p) {
      load(pp + p * op.part_stride * es, op.count, part.data());
      for (size_t i = 0; i < out.size(); ++i) out[i] += part[i];
    }
    store(out.data(), op.count, op_out);
  }
  return ok_status();
}

Status exec(const isa::AttnOut& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t g = group_size(d), hd = d.head_dim, qw = d.heads * hd, n = span(rows, g);
  c.counters.vector_ops += span(n, hd);
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(const numerics::Attention* a, c.attention(op.attn, op.params));
  QBC_ASSIGN_OR_RETURN(const uint8_t* accp, c.sram_at(op.acc, span(n, hd, 8), "acc"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* esp, c.sram_at(op.esum, span(n, 8), "esum"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_at(op.y, rows_span(rows, 2 * qw, 2 * g * hd), "y"));
  std::vector<int64_t> acc(static_cast<size_t>(hd));
  std::vector<double> out(static_cast<size_t>(hd));
  std::vector<uint16_t> y(static_cast<size_t>(hd));
  // With per-token V multipliers the sums are in 1/kVTokenUnit steps of the static scale.
  std::vector<float> vs(a->v_scale.begin() + op.kv_head * hd,
                        a->v_scale.begin() + (op.kv_head + 1) * hd);
  if (a->v_token_scale) {
    for (float& x : vs) x = x / numerics::kVTokenUnit;
  }
  const float* vo = a->v_offset.data() + op.kv_head * hd;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < g; ++i) {
      const int64_t row = r * g + i;
      int64_t esum;
      load(esp + row * 8, 1, &esum);
      load(accp + row * hd * 8, hd, acc.data());
      // numerics::attention_output's fp64 expression, its round_fp16 as bits.
      const double es = static_cast<double>(esum);
      for (int64_t ch = 0; ch < hd; ++ch) {
        out[static_cast<size_t>(ch)] = static_cast<double>(acc[static_cast<size_t>(ch)]) / es *
                                           static_cast<double>(vs[static_cast<size_t>(ch)]) +
                                       static_cast<double>(vo[ch]);
      }
      round_fp16_rows(out.data(), hd, y.data());
      store(y.data(), hd, yp + (r * qw + i * hd) * 2);
    }
  }
  return ok_status();
}

}  // namespace qbc::runtime
