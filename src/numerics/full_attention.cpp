// full_attention (see qbc/numerics/attention.h): bidirectional attention within segments, the
// vision towers' attention (Qwen2.5-VL's window attention is one segment per window).
// Built with -ffp-contract=off (src/numerics/CMakeLists.txt): each `a * b + c` below is two
// roundings, as the spec names them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "qbc/numerics/attention.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/quantizer.h"

namespace qbc::numerics {
namespace {

/// One head of one query row over keys [lo, hi), quantized: the integer score rule, the exact
/// row max, exponent codes, integer sums and one normalisation per output (as `attention`).
void quantized_row(const float* qr, int64_t h, const std::vector<int32_t>& kc,
                   const std::vector<int32_t>& vc, int64_t lo, int64_t hi, const Attention& p,
                   float* yr) {
  const int64_t d = p.head_dim, w = p.heads * d;
  QueryCodes qc;
  query_codes(qr, h, p, &qc);
  std::vector<float> scores(static_cast<size_t>(hi - lo));
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = lo; j < hi; ++j) {
    const float sc =
        key_score(qc, qr, kc.data() + static_cast<size_t>(j * w + h * d), nullptr, p, 1.0f);
    scores[static_cast<size_t>(j - lo)] = sc;
    mx = std::max(mx, sc);
  }
  std::vector<int32_t> e(scores.size());
  int64_t esum = 0;
  for (size_t j = 0; j < scores.size(); ++j) {
    e[j] = exp_code(scores[j], mx, p.p_bits);
    esum += e[j];
  }
  for (int64_t c = 0; c < d; ++c) {
    int64_t acc = 0;
    for (int64_t j = lo; j < hi; ++j)
      acc += int64_t{e[static_cast<size_t>(j - lo)]} * vc[static_cast<size_t>(j * w + h * d + c)];
    const size_t ci = static_cast<size_t>(h * d + c);
    yr[c] = attention_output(acc, esum, p.v_scale[ci], p.v_offset[ci]);
  }
}

/// The float path of unquantized graphs: fp32 scores in channel order, a max-subtracted
/// softmax with exp in fp64 and the sum in index order, P·V in fp32, one fp16 rounding.
void float_row(const float* qr, int64_t h, const float* k, const float* v, int64_t lo, int64_t hi,
               const Attention& p, float* yr) {
  const int64_t d = p.head_dim, w = p.heads * d;
  std::vector<float> sc(static_cast<size_t>(hi - lo));
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = lo; j < hi; ++j) {
    float a = 0.0f;
    for (int64_t c = 0; c < d; ++c) a += qr[c] * k[j * w + h * d + c];
    a = a * static_cast<float>(p.scale);
    sc[static_cast<size_t>(j - lo)] = a;
    m = std::max(m, a);
  }
  float sum = 0.0f;
  for (float& x : sc) {
    x = static_cast<float>(std::exp(static_cast<double>(x - m)));
    sum += x;
  }
  for (float& x : sc) x = x / sum;
  for (int64_t c = 0; c < d; ++c) {
    float acc = 0.0f;
    for (int64_t j = lo; j < hi; ++j) acc += sc[static_cast<size_t>(j - lo)] * v[j * w + h * d + c];
    yr[c] = round_fp16(acc);
  }
}

}  // namespace

void full_attention(const float* q, const float* k, const float* v, int64_t s, const Attention& p,
                    const std::vector<int64_t>& segments, float* y) {
  const int64_t d = p.head_dim, w = p.heads * d;
  std::vector<int32_t> kc, vc;
  if (p.quantized) {  // every key and value row coded once, with its channel's static scale
    kc.resize(static_cast<size_t>(s * w));
    vc.resize(static_cast<size_t>(s * w));
    float t = 1.0f;
    for (int64_t j = 0; j < s; ++j) {
      for (int64_t h = 0; h < p.heads; ++h)
        key_codes(k + j * w + h * d, h, p, &kc[j * w + h * d], &t);
      for (int64_t c = 0; c < w; ++c) {
        const size_t ci = static_cast<size_t>(c);
        vc[static_cast<size_t>(j * w + c)] =
            quantize_symmetric(v[j * w + c], p.v_scale[ci], p.v_bits, p.v_offset[ci]);
      }
    }
  }
  std::vector<int64_t> runs = segments;
  if (runs.empty()) runs.push_back(s);
  int64_t lo = 0;
  for (int64_t len : runs) {
    const int64_t hi = std::min(s, lo + len);
    for (int64_t t = lo; t < hi; ++t) {
      for (int64_t h = 0; h < p.heads; ++h) {
        const float* qr = q + t * w + h * d;
        float* yr = y + t * w + h * d;
        if (p.quantized) {
          quantized_row(qr, h, kc, vc, lo, hi, p, yr);
        } else {
          float_row(qr, h, k, v, lo, hi, p, yr);
        }
      }
    }
    lo = hi;
  }
}

}  // namespace qbc::numerics
