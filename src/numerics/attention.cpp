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

void query_codes(const float* qr, int64_t head, const Attention& p, QueryCodes* out) {
  const int64_t d = p.head_dim;
  const int64_t kvh = head / (p.heads / p.kv_heads);
  std::vector<float> qh;
  if (p.qk_hadamard) {  // Q rotated like its keys, fp64, rounded once to fp16
    std::vector<double> x(qr, qr + d);
    hadamard_inplace(x.data(), d);
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

void key_codes(const float* k, int64_t kvh, const Attention& p, int32_t* codes, float* t) {
  const int64_t d = p.head_dim;
  const size_t base = static_cast<size_t>(kvh * d);
  std::vector<double> x(k, k + d);
  if (p.qk_hadamard) hadamard_inplace(x.data(), d);
  *t = 1.0f;
  if (p.k_token_scale) {  // the row's reach in units of its static scales, over qmax, fp16
    double m = 0.0;
    for (int64_t c = 0; c < d; ++c) {
      const size_t i = base + static_cast<size_t>(c);
      m = std::max(m, std::fabs(x[static_cast<size_t>(c)] - static_cast<double>(p.k_offset[i])) /
                          static_cast<double>(p.k_scale[i]));
    }
    const float r = round_fp16(m / static_cast<double>(quant_max(p.k_bits)));
    if (r > 0.0f) *t = r;
  }
  for (int64_t c = 0; c < d; ++c) {
    const size_t i = base + static_cast<size_t>(c);
    codes[c] =
        quantize_symmetric(x[static_cast<size_t>(c)], p.k_scale[i] * *t, p.k_bits, p.k_offset[i]);
  }
}

float key_score(const QueryCodes& q, const float* qr, const int32_t* kcodes, const float* krot,
                const Attention& p, float k_token) {
  const int64_t d = p.head_dim;
  int64_t acc = 0;
  for (int64_t c = 0; c < d; ++c) acc += int64_t{q.codes[static_cast<size_t>(c)]} * kcodes[c];
  float sc = static_cast<float>(acc) * q.mq;
  if (p.k_token_scale) sc = sc * k_token;
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
               KvCache& cache, float* y) {
  const int64_t d = p.head_dim, kvw = p.kv_heads * d, qw = p.heads * d;
  const int64_t groups = p.heads / p.kv_heads;
  const bool rot = p.quantized && !p.k_rot_offset.empty();
  std::vector<float> off(static_cast<size_t>(rot ? kvw : 0)), krow(static_cast<size_t>(kvw));
  std::vector<int32_t> kc(static_cast<size_t>(kvw));
  // Append this call's keys and values (K is already rotated; static per-channel scales).
  for (int64_t t = 0; t < s; ++t) {
    if (rot) rotated_key_offset(p, cache.tokens + t, off.data());
    for (int64_t c = 0; c < kvw; ++c) {
      float kv = k[t * kvw + c];
      const float vv = v[t * kvw + c];
      if (rot) {
        cache.k_rot.push_back(off[static_cast<size_t>(c)]);
        kv = kv - off[static_cast<size_t>(c)];
      }
      if (p.quantized) {
        const size_t ci = static_cast<size_t>(c);
        krow[ci] = kv;
        cache.v_codes.push_back(quantize_symmetric(vv, p.v_scale[ci], p.v_bits, p.v_offset[ci]));
      } else {
        cache.k_values.push_back(kv);
        cache.v_values.push_back(vv);
      }
    }
    for (int64_t h = 0; h < p.kv_heads && p.quantized; ++h) {
      float tk = 1.0f;
      key_codes(krow.data() + h * d, h, p, kc.data() + h * d, &tk);
      if (p.k_token_scale) cache.k_token.push_back(tk);
    }
    if (p.quantized) cache.k_codes.insert(cache.k_codes.end(), kc.begin(), kc.end());
  }
  cache.tokens += s;
  const int64_t past = cache.tokens - s;
  QueryCodes qc;
  std::vector<float> scores;
  std::vector<int32_t> codes;
  for (int64_t t = 0; t < s; ++t) {
    const int64_t pos = past + t;
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t kvh = h / groups;
      const float* qr = q + t * qw + h * d;
      float* yr = y + t * qw + h * d;
      scores.assign(static_cast<size_t>(pos - lo + 1), 0.0f);
      if (p.quantized) {
        query_codes(qr, h, p, &qc);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j <= pos; ++j) {
          const size_t row = static_cast<size_t>(j * kvw + kvh * d);
          const float tk =
              p.k_token_scale ? cache.k_token[static_cast<size_t>(j * p.kv_heads + kvh)] : 1.0f;
          const float sc = key_score(qc, qr, cache.k_codes.data() + row,
                                     rot ? cache.k_rot.data() + row : nullptr, p, tk);
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
          for (int64_t j = lo; j <= pos; ++j) {
            acc += int64_t{codes[static_cast<size_t>(j - lo)]} *
                   cache.v_codes[static_cast<size_t>(j * kvw + kvh * d + c)];
          }
          const size_t ci = static_cast<size_t>(kvh * d + c);
          yr[c] = attention_output(acc, esum, p.v_scale[ci], p.v_offset[ci]);
        }
      } else {
        for (int64_t j = lo; j <= pos; ++j) {
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
          for (int64_t j = lo; j <= pos; ++j) {
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
