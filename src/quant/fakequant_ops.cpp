// Kernels of the fake-quant evaluator: one function per rule of docs/numerics.md.
// Built with -ffp-contract=off: each `a * b + c` below is two roundings, as the spec
// names them. Integer matmuls accumulate in int64: 8-bit codes would fit int32, but
// 16-bit inputs (qlinear in_bits 16, u16 P against int16 V) could overflow it, and
// int64 is exact for every case, so the result equals the NPU's exact accumulator.
#include "fakequant_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qbc/numerics/rope_frequencies.h"
#include "qbc/quant/fakequant.h"

namespace qbc::quant {

float round_fp16(double x) {
  if (std::isnan(x) || x == 0.0) return static_cast<float>(x);
  const double a = std::fabs(x);
  // 65520 is halfway between the largest fp16 (65504) and 2^16; its tie goes to infinity.
  if (a >= 65520.0)
    return std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(x));
  int e = 0;
  std::frexp(a, &e);                      // a = m * 2^e, m in [0.5, 1)
  const int lead = std::max(e - 1, -14);  // exponent of the leading bit; subnormals below 2^-14
  const double quantum = std::ldexp(1.0, lead - 10);
  // x / quantum is exact (power of two); nearbyint rounds half to even.
  return static_cast<float>(std::nearbyint(x / quantum) * quantum);
}

int64_t quant_max(int bits) { return (int64_t{1} << (bits - 1)) - 1; }

int32_t quantize_symmetric(double x, float scale, int bits, float offset) {
  const double q = std::nearbyint((x - static_cast<double>(offset)) / static_cast<double>(scale));
  const double hi = static_cast<double>(quant_max(bits));
  if (std::isnan(q)) return 0;
  return static_cast<int32_t>(std::min(std::max(q, -hi - 1.0), hi));
}

AffineParams affine_params(double span, double neg_lo, int bits) {
  const double levels = static_cast<double>((int64_t{1} << bits) - 1);
  AffineParams a;
  a.scale = std::max(static_cast<float>(span / levels), 1e-8f);
  const double zu = std::min(std::max(std::nearbyint(neg_lo / static_cast<double>(a.scale)), 0.0), levels);
  a.zero = static_cast<int32_t>(zu) - static_cast<int32_t>(quant_max(bits) + 1);
  return a;
}

float prob_scale(int bits) { return 1.0f / static_cast<float>((int64_t{1} << bits) - 1); }

namespace fq {
namespace {

/// P's code: clamp(rne(p / s_p), 0, 2^bits - 1), in fp64.
int32_t quantize_prob(float p, float sp, int bits) {
  const double q = std::nearbyint(static_cast<double>(p) / static_cast<double>(sp));
  const double hi = static_cast<double>((int64_t{1} << bits) - 1);
  return static_cast<int32_t>(std::min(std::max(q, 0.0), hi));
}

/// Max-subtracted softmax in fp32 over `n` scores, exp in fp64, sum in index order.
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

float maybe_fp16(float v, bool fp16) { return fp16 ? round_fp16(v) : v; }

float per_token_scale(const float* x, int64_t n, int bits) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return std::max(static_cast<float>(static_cast<double>(m) / static_cast<double>(quant_max(bits))),
                  kMinScale);
}

void per_token_affine(const float* x, int64_t n, int bits, float* scale, int32_t* zero) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const AffineParams a =
      affine_params(static_cast<double>(hi) - static_cast<double>(lo), -static_cast<double>(lo), bits);
  *scale = a.scale;
  *zero = a.zero;
}

int32_t quantize_affine(double x, float scale, int32_t zero, int bits) {
  const double q = std::nearbyint(x / static_cast<double>(scale)) + zero;
  const double hi = static_cast<double>(quant_max(bits));
  if (std::isnan(q)) return zero;
  return static_cast<int32_t>(std::min(std::max(q, -hi - 1.0), hi));
}

void qlinear(const float* x, int64_t s, const QLinear& p, float* y) {
  std::vector<int32_t> qx(static_cast<size_t>(p.in));
  for (int64_t t = 0; t < s; ++t) {
    const float* xr = x + t * p.in;
    float in_scale = p.in_scale;
    int32_t in_zero = p.in_zero;
    if (p.in_dynamic && p.in_asym) {
      per_token_affine(xr, p.in, p.in_bits, &in_scale, &in_zero);
    } else if (p.in_dynamic) {
      in_scale = per_token_scale(xr, p.in, p.in_bits);
    }
    for (int64_t i = 0; i < p.in; ++i) {
      // The code minus its zero point: x ≈ s_x · qx.
      qx[static_cast<size_t>(i)] = p.in_asym ? quantize_affine(xr[i], in_scale, in_zero, p.in_bits) - in_zero
                                             : quantize_symmetric(xr[i], in_scale, p.in_bits);
    }
    const int64_t group = p.group > 0 ? p.group : p.in;
    const int64_t groups = (p.in + group - 1) / group;
    for (int64_t c = 0; c < p.out; ++c) {
      const int32_t* w = p.wq.data() + c * p.in;
      // Per group: an exact integer partial sum Σ (q_x − z_x)(q_w − z_w), requantized in
      // fp32 and accumulated in fp32 in group order (one group: the per-channel rule).
      float v = 0.0f;
      for (int64_t gi = 0; gi < groups; ++gi) {
        const int64_t zw = p.wzero.empty() ? 0 : p.wzero[static_cast<size_t>(c * groups + gi)];
        int64_t acc = 0;
        const int64_t end = std::min(p.in, (gi + 1) * group);
        for (int64_t i = gi * group; i < end; ++i) acc += int64_t{qx[static_cast<size_t>(i)]} * (w[i] - zw);
        const float m = in_scale * p.wscale[static_cast<size_t>(c * groups + gi)];  // fp32(s_x * s_w[c, g])
        const float part = static_cast<float>(acc) * m;
        v = gi == 0 ? part : v + part;
      }
      if (!p.bias.empty()) v = v + p.bias[static_cast<size_t>(c)];
      y[t * p.out + c] = maybe_fp16(v, p.out_fp16);
    }
  }
}

void linear(const float* x, int64_t s, const std::vector<float>& w, const std::vector<float>& bias,
            int64_t out, int64_t in, bool fp16, float* y) {
  for (int64_t t = 0; t < s; ++t) {
    const float* xr = x + t * in;
    for (int64_t c = 0; c < out; ++c) {
      const float* wr = w.data() + c * in;
      float acc = 0.0f;
      for (int64_t i = 0; i < in; ++i) acc += xr[i] * wr[i];
      if (!bias.empty()) acc = acc + bias[static_cast<size_t>(c)];
      y[t * out + c] = maybe_fp16(acc, fp16);
    }
  }
}

void rms_norm(const float* x, int64_t s, int64_t n, const std::vector<float>& w, double eps,
              double unit_offset, int64_t group, float* y) {
  const int64_t g = group > 0 ? group : n;
  for (int64_t start = 0; start < s * n; start += g) {
    double ss = 0.0;
    for (int64_t i = 0; i < g; ++i) {
      const double v = x[start + i];
      ss += v * v;
    }
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(g) + eps);
    for (int64_t i = 0; i < g; ++i) {
      const double wi = static_cast<double>(w[static_cast<size_t>(i)]) + unit_offset;
      y[start + i] = round_fp16(static_cast<double>(x[start + i]) * r * wi);
    }
  }
}

std::vector<double> Rope::frequencies(int64_t max_pos) const {
  return numerics::rope_frequencies(inv_freq, long_inv_freq, dynamic_factor, original_max_positions,
                                    theta, rotary_dim, max_pos);
}

void rope(const float* x, int64_t s, int64_t first_pos, const Rope& p, float* y) {
  const std::vector<double> f = p.frequencies(first_pos + s - 1);
  const int64_t half = p.rotary_dim / 2;
  const int64_t width = p.heads * p.head_dim;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < s; ++t) {
    const double pos = static_cast<double>(first_pos + t);
    for (int64_t i = 0; i < half; ++i) {  // the NPU's fp16 table, computed in fp64
      const double a = pos * f[static_cast<size_t>(i)];
      cs[static_cast<size_t>(i)] = round_fp16(std::cos(a) * p.attention_factor);
      sn[static_cast<size_t>(i)] = round_fp16(std::sin(a) * p.attention_factor);
    }
    for (int64_t h = 0; h < p.heads; ++h) {
      const float* xr = x + t * width + h * p.head_dim;
      float* yr = y + t * width + h * p.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[static_cast<size_t>(i)], sv = sn[static_cast<size_t>(i)];
        const float x1 = xr[i], x2 = xr[i + half];
        yr[i] = round_fp16(x1 * c - x2 * sv);
        yr[i + half] = round_fp16(x2 * c + x1 * sv);
      }
      for (int64_t i = p.rotary_dim; i < p.head_dim; ++i) yr[i] = xr[i];
    }
  }
}

void attention(const float* q, const float* k, const float* v, int64_t s, const Attention& p,
               KvCache& cache, float* y) {
  const int64_t d = p.head_dim, kvw = p.kv_heads * d, qw = p.heads * d;
  const int64_t groups = p.heads / p.kv_heads;
  // Rotating key offsets: rope(m) at this call's positions, through the fp16 table the
  // rope op used for these keys (same frequencies, same rounding).
  const bool rot = p.quantized && !p.k_rot_offset.empty();
  std::vector<float> rot_rows;
  if (rot) {
    rot_rows.assign(static_cast<size_t>(s * kvw), 0.0f);
    std::vector<float> m_rows(static_cast<size_t>(s * kvw));
    for (int64_t t = 0; t < s; ++t) std::copy(p.k_rot_offset.begin(), p.k_rot_offset.end(), m_rows.begin() + t * kvw);
    rope(m_rows.data(), s, cache.tokens, p.k_rope, rot_rows.data());  // K's rope: kv_heads heads
  }
  // Append this call's keys and values (K is already rotated; static per-channel scales).
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t c = 0; c < kvw; ++c) {
      float kv = k[t * kvw + c];
      const float vv = v[t * kvw + c];
      if (rot) {
        const float off = rot_rows[static_cast<size_t>(t * kvw + c)];
        cache.k_rot.push_back(off);
        kv = kv - off;
      }
      if (p.quantized) {
        const size_t ci = static_cast<size_t>(c);
        cache.k_codes.push_back(quantize_symmetric(kv, p.k_scale[ci], p.k_bits, p.k_offset[ci]));
        cache.v_codes.push_back(quantize_symmetric(vv, p.v_scale[ci], p.v_bits, p.v_offset[ci]));
      } else {
        cache.k_values.push_back(kv);
        cache.v_values.push_back(vv);
      }
    }
  }
  cache.tokens += s;
  const int64_t past = cache.tokens - s;
  const float scale = static_cast<float>(p.scale);
  const float cap = static_cast<float>(p.softcap);
  const float sp = prob_scale(p.p_bits);
  std::vector<int32_t> qq(static_cast<size_t>(d));
  std::vector<float> qk(static_cast<size_t>(d));
  std::vector<float> scores;
  for (int64_t t = 0; t < s; ++t) {
    const int64_t pos = past + t;
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t kvh = h / groups;
      const float* qr = q + t * qw + h * d;
      float mq = 0.0f;  // score multiplier of the quantized path: fp32(s_q * scale)
      if (p.quantized) {
        for (int64_t c = 0; c < d; ++c) {  // Q times its KV head's K scales, fp16
          qk[static_cast<size_t>(c)] = round_fp16(qr[c] * p.k_scale[static_cast<size_t>(kvh * d + c)]);
        }
        const float sq = p.q_dynamic ? per_token_scale(qk.data(), d, 8) : p.q_scale[static_cast<size_t>(h)];
        for (int64_t c = 0; c < d; ++c) {
          qq[static_cast<size_t>(c)] = quantize_symmetric(qk[static_cast<size_t>(c)], sq, 8);
        }
        mq = static_cast<float>(static_cast<double>(sq) * p.scale);
      }
      scores.assign(static_cast<size_t>(pos - lo + 1), 0.0f);
      for (int64_t j = lo; j <= pos; ++j) {
        const int64_t row = j * kvw + kvh * d;
        float sc = 0.0f;
        if (p.quantized) {
          int64_t acc = 0;
          for (int64_t c = 0; c < d; ++c) {
            acc +=
                int64_t{qq[static_cast<size_t>(c)]} * cache.k_codes[static_cast<size_t>(row + c)];
          }
          sc = static_cast<float>(acc) * mq;
          if (rot) {  // + q · rope(m) of this key, in fp32, channel order
            float corr = 0.0f;
            for (int64_t c = 0; c < d; ++c) corr += qr[c] * cache.k_rot[static_cast<size_t>(row + c)];
            sc = sc + corr * scale;
          }
        } else {
          for (int64_t c = 0; c < d; ++c)
            sc += qr[c] * cache.k_values[static_cast<size_t>(row + c)];
          sc = sc * scale;
        }
        if (p.softcap > 0.0) sc = softcap_value(sc, cap);
        scores[static_cast<size_t>(j - lo)] = sc;
      }
      softmax(scores);
      float* yr = y + t * qw + h * d;
      if (p.quantized) {
        std::vector<int32_t> codes(scores.size());
        int64_t code_sum = 0;
        for (size_t j = 0; j < scores.size(); ++j) {
          codes[j] = quantize_prob(scores[j], sp, p.p_bits);
          code_sum += codes[j];
        }
        // The probability mass P actually carries, which multiplies the V offsets.
        const float mass = static_cast<float>(code_sum) * sp;
        for (int64_t c = 0; c < d; ++c) {
          int64_t acc = 0;
          for (int64_t j = lo; j <= pos; ++j) {
            acc += int64_t{codes[static_cast<size_t>(j - lo)]} *
                   cache.v_codes[static_cast<size_t>(j * kvw + kvh * d + c)];
          }
          const size_t ci = static_cast<size_t>(kvh * d + c);
          const float m = sp * p.v_scale[ci];  // fp32(s_p * s_v[c])
          const float offset_term = mass * p.v_offset[ci];
          yr[c] = round_fp16(static_cast<float>(acc) * m + offset_term);
        }
      } else {
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

void gated_act(const float* gate, const float* up, int64_t count, bool gelu, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    float a = 0.0f;
    if (gelu) {
      const float k = static_cast<float>(std::sqrt(2.0 / M_PI));
      const float inner = k * (g + 0.044715f * (g * g * g));
      const float th = static_cast<float>(std::tanh(static_cast<double>(inner)));
      a = 0.5f * g * (1.0f + th);
    } else {
      const float e = static_cast<float>(std::exp(-static_cast<double>(g)));
      a = g / (1.0f + e);
    }
    y[i] = maybe_fp16(a * up[i], fp16);
  }
}

void add(const float* a, const float* b, int64_t count, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = maybe_fp16(a[i] + b[i], fp16);
}

void scale(const float* x, int64_t count, float factor, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = maybe_fp16(x[i] * factor, fp16);
}

float softcap_value(float x, float cap) {
  const float th = static_cast<float>(std::tanh(static_cast<double>(x / cap)));
  return cap * th;
}

void softcap(const float* x, int64_t count, float cap, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = maybe_fp16(softcap_value(x[i], cap), fp16);
}

}  // namespace fq
}  // namespace qbc::quant
