// Attention with its KV cache (see qbc/numerics/attention.h).
// Built with -ffp-contract=off (src/numerics/CMakeLists.txt): each `a * b + c` below is two
// roundings, as the spec names them.
// Integer matmuls accumulate in int64: 8-bit codes would fit int32, but 16-bit inputs
// (qlinear in_bits 16, u16 P against int16 V) could overflow it, and int64 is exact for
// every case, so the result equals the NPU's exact accumulator.
#include "qbc/numerics/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/quantizer.h"

namespace qbc::numerics {
namespace {

/// Max-subtracted softmax in fp32 over `n` scores, exp in fp64, sum in index order
/// (the float path of unquantized graphs only; the quantized path is tile-invariant).
void softmax(std::vector<float>& x) {
  float m = -std::numeric_limits<float>::infinity();
  for (float v : x) m = std::max(m, v);
  float sum = 0.0f;
  for (float& v : x) {
    const float d = v - m;
    v = static_cast<float>(std::exp(static_cast<double>(d)));
    sum += v;
  }
  for (float& v : x) v = v / sum;
}

}  // namespace

void hadamard_inplace(double* x, int64_t n) {
  for (int64_t len = 1; len < n; len *= 2) {
    for (int64_t i = 0; i < n; i += 2 * len) {
      for (int64_t j = i; j < i + len; ++j) {
        const double a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
  const double r = std::sqrt(static_cast<double>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / r;
}

void rotate_head(double* x, const Attention& p) {
  const int64_t n = p.k_group > 0 ? p.k_group : p.head_dim;
  for (int64_t g = 0; g < p.head_dim; g += n) hadamard_inplace(x + g, n);
}

void query_codes(const float* qr, int64_t head, const Attention& p, QueryCodes* out) {
  const int64_t d = p.head_dim;
  const int64_t kvh = head / (p.heads / p.kv_heads);
  std::vector<float> qh;
  if (p.qk_hadamard) {  // Q rotated like its keys, fp64, rounded once to fp16
    std::vector<double> x(qr, qr + d);
    rotate_head(x.data(), p);
    qh.resize(static_cast<size_t>(d));
    for (int64_t c = 0; c < d; ++c)
      qh[static_cast<size_t>(c)] = round_fp16(x[static_cast<size_t>(c)]);
    qr = qh.data();
  }
  std::vector<float> qk(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c)  // Q times its KV head's K scales, fp16
    qk[static_cast<size_t>(c)] = round_fp16(qr[c] * p.k_scale[static_cast<size_t>(kvh * d + c)]);
  const float sq =
      p.q_dynamic ? per_token_scale(qk.data(), d, 8) : p.q_scale[static_cast<size_t>(head)];
  out->codes.resize(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c)
    out->codes[static_cast<size_t>(c)] = quantize_symmetric(qk[static_cast<size_t>(c)], sq, 8);
  out->mq = static_cast<float>(static_cast<double>(sq) * p.scale);
}

namespace {

/// The row segment's reach max_c |x_c − o_c| / s_c over qmax (fp64).
double reach(const double* x, const float* o, const float* s, int64_t n, int bits) {
  double m = 0.0;
  for (int64_t c = 0; c < n; ++c)
    m = std::max(m, std::fabs(x[c] - static_cast<double>(o[c])) / static_cast<double>(s[c]));
  return m / static_cast<double>(quant_max(bits));
}

/// How far (in steps) the low end of an asymmetric key group may sit from its offset.
constexpr double kZeroReach = 119.0;

/// Asymmetric codes of one key group (k_asym): y_c = (x_c − o_c) / s_c in fp64, t =
/// fp16(max((max y − min y) / (2^bits − 1), |min y| / 119)) (1 when that is 0), the zero
/// point in 1/256 steps z = rne(−min y / t · 256) − 2^(bits−1) · 256 (an int16), code_c =
/// clamp(rne((x_c − o_c) / fp32(s_c · t) + z / 256), −2^(bits−1), 2^(bits−1) − 1); the
/// stored key is o_c + s_c · t · (code_c − z / 256), so both ends of the group are exact.
void asym_group(const double* x, const float* o, const float* s, int64_t n, int bits,
                int32_t* codes, float* t, int32_t* z) {
  double lo = 0.0, hi = 0.0;
  for (int64_t c = 0; c < n; ++c) {
    const double y = (x[c] - static_cast<double>(o[c])) / static_cast<double>(s[c]);
    lo = c == 0 ? y : std::min(lo, y);
    hi = c == 0 ? y : std::max(hi, y);
  }
  const double half = static_cast<double>(int64_t{1} << (bits - 1));
  // The step covers the range, and is wide enough that the zero point fits an int8 when
  // the group sits far from its offset (|lo| / t ≤ 119).
  // At least the least normal fp16 (2^-14): a subnormal step rounds too coarsely to keep
  // |lo| / t <= 119, and the zero point would leave the int16 of the cache record.
  const float r = round_fp16(std::max((hi - lo) / (2.0 * half - 1.0), std::fabs(lo) / kZeroReach));
  *t = r > 0.0f ? std::max(r, 0x1p-14f) : 1.0f;
  const double zf = std::nearbyint(-lo / static_cast<double>(*t) * kZeroUnit) - half * kZeroUnit;
  *z = static_cast<int32_t>(zf);
  for (int64_t c = 0; c < n; ++c) {
    const double y = (x[c] - static_cast<double>(o[c])) / static_cast<double>(s[c] * *t);
    codes[c] =
        static_cast<int32_t>(std::clamp(std::nearbyint(y + zf / kZeroUnit), -half, half - 1.0));
  }
}

}  // namespace

int64_t key_groups(const Attention& p) {
  return p.k_group > 0 && p.k_group < p.head_dim ? p.head_dim / p.k_group : 1;
}

void key_codes(const float* k, int64_t kvh, const Attention& p, int32_t* codes, float* t,
               int32_t* z) {
  const int64_t d = p.head_dim, ng = key_groups(p), gs = d / ng;
  const size_t base = static_cast<size_t>(kvh * d);
  std::vector<double> x(k, k + d);
  if (p.qk_hadamard) rotate_head(x.data(), p);
  for (int64_t g = 0; g < ng; ++g) {
    const double* xg = x.data() + g * gs;
    const float* o = p.k_offset.data() + base + g * gs;
    const float* s = p.k_scale.data() + base + g * gs;
    int32_t zg = 0;
    float tg = 1.0f;
    if (p.k_token_scale && p.k_asym) {
      asym_group(xg, o, s, gs, p.k_bits, codes + g * gs, &tg, &zg);
    } else {
      if (p.k_token_scale) {  // the group's reach in units of its static scales, over qmax
        const float r = round_fp16(reach(xg, o, s, gs, p.k_bits));
        if (r > 0.0f) tg = r;
      }
      for (int64_t c = 0; c < gs; ++c)
        codes[g * gs + c] = quantize_symmetric(xg[c], s[c] * tg, p.k_bits, o[c]);
    }
    t[g] = tg;
    if (z != nullptr) z[g] = zg;
  }
}

int32_t value_codes(const float* v, int64_t kvh, const Attention& p, int32_t* codes) {
  const int64_t d = p.head_dim;
  const size_t base = static_cast<size_t>(kvh * d);
  const float* o = p.v_offset.data() + base;
  const float* s = p.v_scale.data() + base;
  int32_t m = kVTokenUnit;
  if (p.v_token_scale) {  // ceil of the row's reach in 1/64 units of the static scales
    std::vector<double> x(v, v + d);
    const double r = reach(x.data(), o, s, d, p.v_bits) * kVTokenUnit;
    m = static_cast<int32_t>(std::clamp(std::ceil(r), 1.0, 255.0));
  }
  const float u = static_cast<float>(m) / static_cast<float>(kVTokenUnit);  // exact
  for (int64_t c = 0; c < d; ++c) codes[c] = quantize_symmetric(v[c], s[c] * u, p.v_bits, o[c]);
  return m;
}

float key_score(const QueryCodes& q, const float* qr, const int32_t* kcodes, const float* krot,
                const Attention& p, const float* k_token, const int32_t* k_zero) {
  const int64_t d = p.head_dim, ng = key_groups(p), gs = d / ng;
  float sc = 0.0f;
  for (int64_t g = 0; g < ng; ++g) {
    int64_t acc = 0;
    int64_t qsum = 0;
    for (int64_t c = g * gs; c < (g + 1) * gs; ++c) {
      acc += int64_t{q.codes[static_cast<size_t>(c)]} * kcodes[c];
      qsum += q.codes[static_cast<size_t>(c)];
    }
    float sg;
    if (k_zero != nullptr) {  // fractional zero point: the sum in 1/256 units, still an integer
      acc = acc * kZeroUnit - int64_t{k_zero[g]} * qsum;
      sg = static_cast<float>(acc) * (q.mq / static_cast<float>(kZeroUnit));
    } else {
      sg = static_cast<float>(acc) * q.mq;
    }
    if (p.k_token_scale) sg = sg * k_token[g];
    sc = g == 0 ? sg : sc + sg;
  }
  if (krot != nullptr) {  // + q · rope(m) of this key, in fp32, channel order
    float corr = 0.0f;
    for (int64_t c = 0; c < d; ++c) corr += qr[c] * krot[c];
    sc = sc + corr * static_cast<float>(p.scale);
  }
  if (p.softcap > 0.0) sc = softcap_value(sc, static_cast<float>(p.softcap));
  return sc;
}

void rotated_key_offset(const Attention& p, int64_t pos, float* out) {
  rope(p.k_rot_offset.data(), 1, pos, p.k_rope, out);  // K's rope: kv_heads heads
}

int32_t exp_code(float score, float max, int bits) {
  if (std::isinf(score) && score < 0.0f) return 0;
  const double hi = static_cast<double>((int64_t{1} << bits) - 1);
  const float diff = score - max;
  const double q = std::nearbyint(std::exp(static_cast<double>(diff)) * hi);
  return static_cast<int32_t>(std::min(std::max(q, 0.0), hi));
}

float attention_output(int64_t acc, int64_t esum, float v_scale, float v_offset) {
  return round_fp16(static_cast<double>(acc) / static_cast<double>(esum) *
                        static_cast<double>(v_scale) +
                    static_cast<double>(v_offset));
}

void attention(const float* q, const float* k, const float* v, int64_t s, const Attention& p,
               KvCache& cache, float* y, bool span) {
  const int64_t d = p.head_dim, kvw = p.kv_heads * d, qw = p.heads * d;
  const int64_t groups = p.heads / p.kv_heads;
  const bool rot = p.quantized && !p.k_rot_offset.empty();
  std::vector<float> off(static_cast<size_t>(rot ? kvw : 0)), krow(static_cast<size_t>(kvw));
  std::vector<int32_t> kc(static_cast<size_t>(kvw));
  // Append this call's keys and values (K is already rotated; static per-channel scales).
  const int64_t ng = key_groups(p);
  std::vector<float> vrow(static_cast<size_t>(kvw)), tk(static_cast<size_t>(ng));
  std::vector<int32_t> zk(static_cast<size_t>(ng));
  std::vector<int32_t> vc(static_cast<size_t>(kvw));
  for (int64_t t = 0; t < s; ++t) {
    const int64_t pos = cache.tokens + t;
    if (rot) rotated_key_offset(p, pos, off.data());
    for (int64_t c = 0; c < kvw; ++c) {
      float kv = k[t * kvw + c];
      const float vv = v[t * kvw + c];
      if (rot) {
        cache.k_rot.push_back(off[static_cast<size_t>(c)]);
        kv = kv - off[static_cast<size_t>(c)];
      }
      if (p.quantized) {
        krow[static_cast<size_t>(c)] = kv;
        vrow[static_cast<size_t>(c)] = vv;
      } else {
        cache.k_values.push_back(kv);
        cache.v_values.push_back(vv);
      }
    }
    for (int64_t h = 0; h < p.kv_heads && p.quantized; ++h) {
      key_codes(krow.data() + h * d, h, p, kc.data() + h * d, tk.data(), zk.data());
      if (p.k_token_scale) cache.k_token.insert(cache.k_token.end(), tk.begin(), tk.end());
      if (p.k_asym) cache.k_zero.insert(cache.k_zero.end(), zk.begin(), zk.end());
      const int32_t m = value_codes(vrow.data() + h * d, h, p, vc.data() + h * d);
      if (p.v_token_scale) cache.v_token.push_back(m);
    }
    if (p.quantized) {
      cache.k_codes.insert(cache.k_codes.end(), kc.begin(), kc.end());
      cache.v_codes.insert(cache.v_codes.end(), vc.begin(), vc.end());
    }
  }
  cache.tokens += s;
  const int64_t past = cache.tokens - s;
  QueryCodes qc;
  std::vector<float> scores;
  std::vector<int32_t> codes;
  for (int64_t t = 0; t < s; ++t) {
    // Keys [lo, hi]: causal up to the row's own position, or the span's last one.
    const int64_t hi = span ? past + s - 1 : past + t;
    const int64_t base = span ? std::min(past + t - p.window + 1, past) : hi - p.window + 1;
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, base) : 0;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t kvh = h / groups;
      const float* qr = q + t * qw + h * d;
      float* yr = y + t * qw + h * d;
      scores.assign(static_cast<size_t>(hi - lo + 1), 0.0f);
      if (p.quantized) {
        query_codes(qr, h, p, &qc);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j <= hi; ++j) {
          const size_t row = static_cast<size_t>(j * kvw + kvh * d);
          const int64_t gi = (j * p.kv_heads + kvh) * ng;
          const float* tkj = p.k_token_scale ? cache.k_token.data() + gi : nullptr;
          const int32_t* zkj = p.k_asym ? cache.k_zero.data() + gi : nullptr;
          const float sc = key_score(qc, qr, cache.k_codes.data() + row,
                                     rot ? cache.k_rot.data() + row : nullptr, p, tkj, zkj);
          scores[static_cast<size_t>(j - lo)] = sc;
          mx = std::max(mx, sc);
        }
        // Tile-invariant softmax: exact max, integer exponent codes and sums, one
        // normalisation per output.
        codes.resize(scores.size());
        int64_t esum = 0;
        for (size_t j = 0; j < scores.size(); ++j) {
          codes[j] = exp_code(scores[j], mx, p.p_bits);
          esum += codes[j];
        }
        for (int64_t c = 0; c < d; ++c) {
          int64_t acc = 0;
          for (int64_t j = lo; j <= hi; ++j) {
            const int64_t m =
                p.v_token_scale ? cache.v_token[static_cast<size_t>(j * p.kv_heads + kvh)] : 1;
            acc += int64_t{codes[static_cast<size_t>(j - lo)]} * m *
                   cache.v_codes[static_cast<size_t>(j * kvw + kvh * d + c)];
          }
          const size_t ci = static_cast<size_t>(kvh * d + c);
          const float vs = p.v_token_scale ? p.v_scale[ci] / kVTokenUnit : p.v_scale[ci];
          yr[c] = attention_output(acc, esum, vs, p.v_offset[ci]);
        }
      } else {
        for (int64_t j = lo; j <= hi; ++j) {
          const int64_t row = j * kvw + kvh * d;
          float sc = 0.0f;
          for (int64_t c = 0; c < d; ++c)
            sc += qr[c] * cache.k_values[static_cast<size_t>(row + c)];
          sc = sc * static_cast<float>(p.scale);
          if (p.softcap > 0.0) sc = softcap_value(sc, static_cast<float>(p.softcap));
          scores[static_cast<size_t>(j - lo)] = sc;
        }
        softmax(scores);
        for (int64_t c = 0; c < d; ++c) {
          float acc = 0.0f;
          for (int64_t j = lo; j <= hi; ++j) {
            acc += scores[static_cast<size_t>(j - lo)] *
                   cache.v_values[static_cast<size_t>(j * kvw + kvh * d + c)];
          }
          yr[c] = round_fp16(acc);
        }
      }
    }
  }
}

}  // namespace qbc::numerics
