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
    for (int64_t t = 0; t < s; ++t)
      std::copy(p.k_rot_offset.begin(), p.k_rot_offset.end(), m_rows.begin() + t * kvw);
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
          qk[static_cast<size_t>(c)] =
              round_fp16(qr[c] * p.k_scale[static_cast<size_t>(kvh * d + c)]);
        }
        const float sq =
            p.q_dynamic ? per_token_scale(qk.data(), d, 8) : p.q_scale[static_cast<size_t>(h)];
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
            for (int64_t c = 0; c < d; ++c)
              corr += qr[c] * cache.k_rot[static_cast<size_t>(row + c)];
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

}  // namespace qbc::numerics
