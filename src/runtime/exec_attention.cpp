// Attention on the NPU, tile by tile: kv_quant (append codes), query_prep (query codes),
// qk_scores (scores of a block of cached keys and their running max), exp_accum (integer
// exponent codes and their sums), merge (order-free cross-core max / sum) and attn_out (the
// one normalisation). Each applies numerics' per-element rules (query_codes, key_score,
// rotated_key_offset, exp_code, attention_output), so any split of the cache over blocks,
// chunks and cores gives numerics::attention's bits.
#include <algorithm>
#include <limits>
#include <vector>

#include "core.h"
#include "qbc/numerics/attention.h"
#include "qbc/numerics/quantizer.h"
#include "values.h"

namespace qbc::runtime {
namespace {

int64_t group_size(const isa::AttnDesc& d) { return d.heads / d.kv_heads; }

}  // namespace

Status exec_kv_quant(const isa::KvQuant& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  QBC_ASSIGN_OR_RETURN(const int64_t pos0, c.count(op.pos0, "pos0"));
  const int64_t w = d.kv_heads * d.head_dim;
  const isa::DType kt = kv_code_type(d.k_bits), vt = kv_code_type(d.v_bits);
  const int64_t krow = isa::dtype_bytes(kt, w), vrow = isa::dtype_bytes(vt, w);
  QBC_ASSIGN_OR_RETURN(const numerics::Attention* a, c.attention(op.attn, op.params));
  QBC_ASSIGN_OR_RETURN(const uint8_t* kp, c.sram_at(op.k, span(rows, 2, w), "k"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* vp, c.sram_at(op.v, span(rows, 2, w), "v"));
  QBC_ASSIGN_OR_RETURN(uint8_t * kc, c.sram_at(op.kcodes, span(rows, krow), "kcodes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * vc, c.sram_at(op.vcodes, span(rows, vrow), "vcodes"));
  const bool rot = !a->k_rot_offset.empty();
  std::vector<float> k(static_cast<size_t>(w)), v(static_cast<size_t>(w));
  std::vector<int32_t> kq(static_cast<size_t>(w)), vq(static_cast<size_t>(w));
  for (int64_t t = 0; t < rows; ++t) {
    load_f16(kp + t * 2 * w, w, k.data());
    load_f16(vp + t * 2 * w, w, v.data());
    const float* off = rot ? c.rotated_key_offset(op.attn, pos0 + t) : nullptr;
    for (int64_t i = 0; i < w; ++i) {
      const size_t ci = static_cast<size_t>(i);
      float kv = k[ci];
      if (rot) kv = kv - off[ci];
      kq[ci] = numerics::quantize_symmetric(kv, a->k_scale[ci], a->k_bits, a->k_offset[ci]);
      vq[ci] = numerics::quantize_symmetric(v[ci], a->v_scale[ci], a->v_bits, a->v_offset[ci]);
    }
    store_codes(kq.data(), kt, w, kc + t * krow);
    store_codes(vq.data(), vt, w, vc + t * vrow);
  }
  c.counters.vector_ops += span(rows, 2, w);
  return ok_status();
}

Status exec_query_prep(const isa::QueryPrep& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t g = group_size(d), hd = d.head_dim, qw = d.heads * hd;
  QBC_ASSIGN_OR_RETURN(const numerics::Attention* a, c.attention(op.attn, op.params));
  QBC_ASSIGN_OR_RETURN(const uint8_t* qp,
                       c.sram_at(op.q, rows_span(rows, 2 * qw, 2 * g * hd), "q"));
  QBC_ASSIGN_OR_RETURN(uint8_t * qcp, c.sram_at(op.qcodes, span(rows, g, hd, 4), "qcodes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * mqp, c.sram_at(op.mq, span(rows, g, 4), "mq"));
  std::vector<float> qr(static_cast<size_t>(hd));
  numerics::QueryCodes qc;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < g; ++i) {
      load_f16(qp + (r * qw + i * hd) * 2, hd, qr.data());
      numerics::query_codes(qr.data(), op.kv_head * g + i, *a, &qc);
      store(qc.codes.data(), hd, qcp + (r * g + i) * hd * 4);
      store(&qc.mq, 1, mqp + (r * g + i) * 4);
    }
  }
  c.counters.vector_ops += span(rows, g, hd);
  return ok_status();
}

Status exec_qk_scores(const isa::QkScores& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t g = group_size(d), hd = d.head_dim, qw = d.heads * hd, bc = op.bc;
  const isa::DType kt = kv_code_type(d.k_bits);
  const int64_t krow = isa::dtype_bytes(kt, hd);
  QBC_ASSIGN_OR_RETURN(const numerics::Attention* a, c.attention(op.attn, op.params));
  const bool rot = !a->k_rot_offset.empty();
  QBC_ASSIGN_OR_RETURN(const uint8_t* qcp, c.sram_at(op.qcodes, span(rows, g, hd, 4), "qcodes"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* mqp, c.sram_at(op.mq, span(rows, g, 4), "mq"));
  const uint8_t* qp = nullptr;
  if (rot) {
    QBC_ASSIGN_OR_RETURN(qp, c.sram_at(op.q, rows_span(rows, 2 * qw, 2 * g * hd), "q"));
  }
  QBC_ASSIGN_OR_RETURN(const uint8_t* kcp, c.sram_at(op.kcodes, span(bc, krow), "kcodes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * sp, c.sram_at(op.scores, span(rows, g, bc, 4), "scores"));
  uint8_t* mxp = nullptr;
  if (op.max_mode != isa::MaxMode::kNone) {
    QBC_ASSIGN_OR_RETURN(mxp, c.sram_at(op.rowmax, span(rows, g, 4), "rowmax"));
  }
  const int64_t qpos0 = c.eval(op.qpos0), kpos0 = c.eval(op.kpos0);
  c.counters.macs += span(rows, g, bc, hd);
  c.counters.vector_ops += span(rows, g, bc);
  if (rows == 0 || bc == 0) return ok_status();

  std::vector<int32_t> keys(static_cast<size_t>(bc * hd));
  for (int64_t j = 0; j < bc; ++j) load_codes(kcp + j * krow, kt, hd, keys.data() + j * hd);
  // rope(m) of this KV head at each key's position (rotating key offsets).
  std::vector<float> krot;
  if (rot) {
    krot.assign(static_cast<size_t>(bc * hd), 0.0f);
    // Keys every query masks (after the last, before the first's window, before 0) need none.
    const int64_t last = qpos0 + rows - 1;
    const int64_t first = std::max<int64_t>(0, d.window > 0 ? qpos0 - d.window + 1 : 0);
    for (int64_t j = 0; j < bc && kpos0 + j <= last; ++j) {
      if (kpos0 + j < first) continue;
      const float* all = c.rotated_key_offset(op.attn, kpos0 + j);
      std::copy_n(all + op.kv_head * hd, hd, krot.begin() + j * hd);
    }
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();
  numerics::QueryCodes qc;
  qc.codes.resize(static_cast<size_t>(hd));
  std::vector<float> qr(static_cast<size_t>(rot ? hd : 0)), scores(static_cast<size_t>(bc));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t qpos = qpos0 + r;
    const int64_t lo = d.window > 0 ? qpos - d.window + 1 : 0;
    for (int64_t i = 0; i < g; ++i) {
      const int64_t row = r * g + i;
      load(qcp + row * hd * 4, hd, qc.codes.data());
      load(mqp + row * 4, 1, &qc.mq);
      if (rot) load_f16(qp + (r * qw + i * hd) * 2, hd, qr.data());
      float mx = neg_inf;
      for (int64_t j = 0; j < bc; ++j) {
        const int64_t kpos = kpos0 + j;
        float sc = neg_inf;
        if (kpos >= 0 && kpos <= qpos && kpos >= lo) {
          sc = numerics::key_score(qc, rot ? qr.data() : nullptr, keys.data() + j * hd,
                                   rot ? krot.data() + j * hd : nullptr, *a);
        }
        scores[static_cast<size_t>(j)] = sc;
        mx = std::max(mx, sc);
      }
      store(scores.data(), bc, sp + row * bc * 4);
      if (op.max_mode == isa::MaxMode::kInit) {
        store(&mx, 1, mxp + row * 4);
      } else if (op.max_mode == isa::MaxMode::kUpdate) {
        float old;
        load(mxp + row * 4, 1, &old);
        old = std::max(old, mx);
        store(&old, 1, mxp + row * 4);
      }
    }
  }
  return ok_status();
}

Status exec_exp_accum(const isa::ExpAccum& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t g = group_size(d), hd = d.head_dim, bc = op.bc, n = span(rows, g);
  const isa::DType vt = kv_code_type(d.v_bits);
  const int64_t vrow = isa::dtype_bytes(vt, hd);
  QBC_ASSIGN_OR_RETURN(const uint8_t* sp, c.sram_at(op.scores, span(n, bc, 4), "scores"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* mxp, c.sram_at(op.rowmax, span(n, 4), "rowmax"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* vcp, c.sram_at(op.vcodes, span(bc, vrow), "vcodes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * esp, c.sram_at(op.esum, span(n, 8), "esum"));
  QBC_ASSIGN_OR_RETURN(uint8_t * accp, c.sram_at(op.acc, span(n, hd, 8), "acc"));
  c.counters.macs += span(n, bc, hd);
  c.counters.vector_ops += span(n, bc);
  if (n == 0) return ok_status();
  std::vector<int32_t> vals(static_cast<size_t>(bc * hd));
  for (int64_t j = 0; j < bc; ++j) load_codes(vcp + j * vrow, vt, hd, vals.data() + j * hd);
  std::vector<float> scores(static_cast<size_t>(bc)), mx(static_cast<size_t>(n));
  std::vector<int64_t> esum(static_cast<size_t>(n), 0), acc(static_cast<size_t>(n * hd), 0);
  load(mxp, n, mx.data());
  if (!op.first) {
    load(esp, n, esum.data());
    load(accp, n * hd, acc.data());
  }
  for (int64_t row = 0; row < n; ++row) {
    load(sp + row * bc * 4, bc, scores.data());
    int64_t* ar = acc.data() + row * hd;
    int64_t es = 0;
    for (int64_t j = 0; j < bc; ++j) {
      const int32_t e = numerics::exp_code(scores[static_cast<size_t>(j)],
                                           mx[static_cast<size_t>(row)], d.p_bits);
      if (e == 0) continue;
      es += e;
      const int32_t* vr = vals.data() + j * hd;
      for (int64_t ch = 0; ch < hd; ++ch) ar[ch] += int64_t{e} * vr[ch];
    }
    esum[static_cast<size_t>(row)] += es;
  }
  store(esum.data(), n, esp);
  store(acc.data(), n * hd, accp);
  return ok_status();
}

Status exec_merge(const isa::Merge& op, Core& c) {
  const int64_t es = op.op == isa::MergeOp::kMax ? 4 : 8;
  QBC_ASSIGN_OR_RETURN(
      const uint8_t* pp,
      c.sram_at(op.parts, span(rows_span(op.parts_count, op.part_stride, op.count), es), "parts"));
  QBC_ASSIGN_OR_RETURN(uint8_t * op_out, c.sram_at(op.out, span(op.count, es), "out"));
  c.counters.vector_ops += span(op.parts_count, op.count);
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

Status exec_attn_out(const isa::AttnOut& op, Core& c) {
  const isa::AttnDesc& d = c.bundle.attentions[static_cast<size_t>(op.attn)];
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t g = group_size(d), hd = d.head_dim, qw = d.heads * hd, n = span(rows, g);
  QBC_ASSIGN_OR_RETURN(const numerics::Attention* a, c.attention(op.attn, op.params));
  QBC_ASSIGN_OR_RETURN(const uint8_t* accp, c.sram_at(op.acc, span(n, hd, 8), "acc"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* esp, c.sram_at(op.esum, span(n, 8), "esum"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_at(op.y, rows_span(rows, 2 * qw, 2 * g * hd), "y"));
  c.counters.vector_ops += span(n, hd);
  std::vector<int64_t> acc(static_cast<size_t>(hd));
  std::vector<float> y(static_cast<size_t>(hd));
  const size_t ch0 = static_cast<size_t>(op.kv_head * hd);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < g; ++i) {
      const int64_t row = r * g + i;
      int64_t esum;
      load(esp + row * 8, 1, &esum);
      load(accp + row * hd * 8, hd, acc.data());
      for (int64_t ch = 0; ch < hd; ++ch) {
        y[static_cast<size_t>(ch)] = numerics::attention_output(
            acc[static_cast<size_t>(ch)], esum, a->v_scale[ch0 + static_cast<size_t>(ch)],
            a->v_offset[ch0 + static_cast<size_t>(ch)]);
      }
      store_f16(y.data(), hd, yp + (r * qw + i * hd) * 2);
    }
  }
  return ok_status();
}

}  // namespace qbc::runtime
