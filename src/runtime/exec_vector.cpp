// The vector unit's row ops: rms_norm, layer_norm, rope, rope_table, avg_pool and the elementwise
// ops, each one call of its qbc_numerics kernel over rows read from SRAM (fp16 bit patterns, or
// fp32 for the head's elementwise values); fill (start values of row maxima and integer sums).
#include <cmath>
#include <cstring>
#include <vector>

#include "core.h"
#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/norm.h"
#include "qbc/numerics/pool.h"
#include "qbc/numerics/rope.h"
#include "scratch.h"
#include "thread_pool.h"
#include "values.h"
#include "vec_kernels.h"

namespace qbc::runtime {
namespace {

/// `f` of every fp16 bit pattern, in fp32: f(x, &y) writes numerics' unrounded value of x.
template <typename F>
std::vector<float> fp16_table(F f) {
  std::vector<float> t(65536);
  for (uint32_t h = 0; h < 65536; ++h) f(numerics::fp16_from_bits(static_cast<uint16_t>(h)), &t[h]);
  return t;
}

/// act(g) of numerics::gated_act (silu or gelu_tanh) for every fp16 bit pattern g, unrounded:
/// gated_act with up = 1 and no rounding is act(g) * 1 = act(g) exactly. A gated activation
/// of fp16 values is then fp16(table[g] * up), numerics' expression.
const float* gated_activation_table(bool gelu) {
  auto gated = [](bool gl) {
    return fp16_table([gl](float g, float* y) {
      const float one = 1.0f;
      numerics::gated_act(&g, &one, 1, gl, false, y);
    });
  };
  static const std::vector<float> silu = gated(false), gelu_tanh = gated(true);
  return gelu ? gelu_tanh.data() : silu.data();
}

/// The unary GELU's unrounded fp32 value (numerics::gelu: erf or quick_gelu; numerics::gelu_tanh)
/// for every fp16 bit pattern: an fp16 GELU is then fp16(table[x]), numerics' one rounding
/// (store_f16 rounds as round_fp16).
const float* gelu_table(isa::EltOp op) {
  auto gelu = [](bool q) {
    return fp16_table([q](float x, float* y) { numerics::gelu(&x, 1, false, y, q); });
  };
  static const std::vector<float> erf = gelu(false), quick_gelu = gelu(true);
  static const std::vector<float> tanh_gelu =
      fp16_table([](float x, float* y) { numerics::gelu_tanh(&x, 1, false, y); });
  return op == isa::EltOp::kGeluQuick  ? quick_gelu.data()
         : op == isa::EltOp::kGeluTanh ? tanh_gelu.data()
                                       : erf.data();
}

}  // namespace

Status exec(const isa::RmsNorm& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t count = span(rows, op.width);
  c.counters.vector_ops += count;
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(const uint8_t* xp, c.sram_at(op.x, span(2, count), "x"));
  // Weights: [group] for grouped norms (q/k norms: one head's weights for every group), else
  // [width] (numerics rms_norm).
  const int64_t wn = op.group > 0 ? op.group : op.width;
  QBC_ASSIGN_OR_RETURN(const uint8_t* wp, c.sram_read(op.weight, span(4, wn), "weight"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_write(op.y, span(2, count), "y"));
  // Per-thread scratch (tags 100+: exec_linear.cpp uses lower ones), overwritten before read.
  std::vector<float>& x = scratch<float, 100>(static_cast<size_t>(count));
  std::vector<float>& w = scratch<float, 101>(static_cast<size_t>(wn));
  load_f16(xp, count, x.data());
  load(wp, wn, w.data());
  // numerics::rms_norm's fp64 expressions, in its order, each output rounded once to fp16
  // from fp64 (round_fp16_bits: the bits of its round_fp16).
  const int64_t g = op.group > 0 ? op.group : op.width;
  std::vector<double>& wi = scratch<double, 102>(static_cast<size_t>(g));
  for (int64_t i = 0; i < g; ++i)
    wi[static_cast<size_t>(i)] = static_cast<double>(w[static_cast<size_t>(i)]) + op.unit_offset;
  std::vector<uint16_t>& y = scratch<uint16_t, 103>(static_cast<size_t>(count));
  const int64_t norms = g > 0 ? count / g : 0;
  parallel_blocks(c.pool, norms, count, int64_t{1} << 15, 1, [&](int64_t n0, int64_t n1) {
    for (int64_t start = n0 * g; start < n1 * g; start += g) {
      double ss = 0.0;
      for (int64_t i = 0; i < g; ++i) {
        const double v = x[static_cast<size_t>(start + i)];
        ss += v * v;
      }
      const double r = 1.0 / std::sqrt(ss / static_cast<double>(g) + op.eps);
      scale_round_fp16(x.data() + start, r, wi.data(), g, y.data() + start);
    }
  });
  store(y.data(), count, yp);
  return ok_status();
}

Status exec(const isa::LayerNorm& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t n = op.width;
  const int64_t count = span(rows, n);
  c.counters.vector_ops += count;
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(const uint8_t* xp, c.sram_at(op.x, span(2, count), "x"));
  // Parameters: the scale row [width], then the bias row [width].
  QBC_ASSIGN_OR_RETURN(const uint8_t* wp, c.sram_read(op.weight, span(8, n), "weight"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_write(op.y, span(2, count), "y"));
  std::vector<float> x(static_cast<size_t>(count)), wb(static_cast<size_t>(2 * n));
  load_f16(xp, count, x.data());
  load(wp, 2 * n, wb.data());
  // numerics::layer_norm itself (its fp64 expressions and order; each output already an fp16
  // value), rows split over the pool; the bias row is zeros when the node has none.
  std::vector<float> yf(static_cast<size_t>(count));
  parallel_blocks(c.pool, rows, count, int64_t{1} << 15, 1, [&](int64_t r0, int64_t r1) {
    numerics::layer_norm(x.data() + r0 * n, r1 - r0, n, wb.data(), wb.data() + n, op.eps,
                         yf.data() + r0 * n);
  });
  std::vector<uint16_t> y(static_cast<size_t>(count));
  for (size_t k = 0; k < y.size(); ++k) y[k] = numerics::fp16_bits(yf[k]);
  store(y.data(), count, yp);
  return ok_status();
}

Status exec(const isa::Rope& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const numerics::Rope& r = c.decoded.ropes[static_cast<size_t>(op.rope)];
  const int64_t count = span(rows, r.heads, r.head_dim);
  c.counters.vector_ops += count;
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(const uint8_t* xp, c.sram_at(op.x, span(2, count), "x"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_write(op.y, span(2, count), "y"));
  QBC_ASSIGN_OR_RETURN(const int64_t pos0, c.count(op.pos0, "pos0"));
  QBC_ASSIGN_OR_RETURN(const int64_t freq_pos, c.count(op.freq_pos, "freq_pos"));
  std::vector<float> x(static_cast<size_t>(count)), y(static_cast<size_t>(count));
  load_f16(xp, count, x.data());
  // numerics::rope: fp16 cos/sin tables from fp64, the rotation in fp32, one rounding to fp16
  // (store_f16, exact for its round_fp16 of an fp32 value).
  const std::vector<double> f = r.frequencies(freq_pos);
  const int64_t half = r.rotary_dim / 2, width = r.heads * r.head_dim;
  // The tables of positions pos0 .. pos0 + rows − 1, computed once per position.
  RopeTable& tab = c.data.ropes[static_cast<size_t>(op.rope)];
  if (tab.f != f) tab = RopeTable{f, {}, {}, {}};
  const int64_t need = pos0 + rows;
  if (static_cast<int64_t>(tab.have.size()) < need) {
    tab.have.resize(static_cast<size_t>(need), 0);
    tab.cs.resize(static_cast<size_t>(need * half));
    tab.sn.resize(static_cast<size_t>(need * half));
  }
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t p = pos0 + t;
    if (tab.have[static_cast<size_t>(p)] != 0) continue;
    const double pos = static_cast<double>(p);
    for (int64_t i = 0; i < half; ++i) {
      const double a = pos * f[static_cast<size_t>(i)];
      tab.cs[static_cast<size_t>(p * half + i)] =
          numerics::round_fp16(std::cos(a) * r.attention_factor);
      tab.sn[static_cast<size_t>(p * half + i)] =
          numerics::round_fp16(std::sin(a) * r.attention_factor);
    }
    tab.have[static_cast<size_t>(p)] = 1;
  }
  parallel_blocks(c.pool, rows, count, int64_t{1} << 15, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = tab.cs.data() + (pos0 + t) * half;
      const float* sn = tab.sn.data() + (pos0 + t) * half;
      for (int64_t h = 0; h < r.heads; ++h) {
        const float* xr = x.data() + t * width + h * r.head_dim;
        float* yr = y.data() + t * width + h * r.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float cv = cs[i], sv = sn[i];
          const float x1 = xr[i], x2 = xr[i + half];
          yr[i] = x1 * cv - x2 * sv;
          yr[i + half] = x2 * cv + x1 * sv;
        }
        for (int64_t i = r.rotary_dim; i < r.head_dim; ++i) yr[i] = xr[i];
      }
    }
  });
  store_f16(y.data(), count, yp);
  return ok_status();
}

Status exec(const isa::RopeTable& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t count = span(rows, op.heads, op.head_dim);
  const int64_t half = op.head_dim / 2, tab = span(rows, half);
  c.counters.vector_ops += count;
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(const uint8_t* xp, c.sram_at(op.x, span(2, count), "x"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* cp, c.sram_at(op.cos, span(2, tab), "cos"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* sp, c.sram_at(op.sin, span(2, tab), "sin"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_write(op.y, span(2, count), "y"));
  std::vector<float> x(static_cast<size_t>(count)), y(static_cast<size_t>(count));
  std::vector<float> cs(static_cast<size_t>(tab)), sn(static_cast<size_t>(tab));
  load_f16(xp, count, x.data());
  load_f16(cp, tab, cs.data());
  load_f16(sp, tab, sn.data());
  // numerics::rope_table itself: the rotation in fp32, one rounding to fp16 per output.
  parallel_blocks(c.pool, rows, count, int64_t{1} << 15, 1, [&](int64_t t0, int64_t t1) {
    const int64_t w = op.heads * op.head_dim;
    numerics::rope_table(x.data() + t0 * w, cs.data() + t0 * half, sn.data() + t0 * half, t1 - t0,
                         op.heads, op.head_dim, y.data() + t0 * w);
  });
  store_f16(y.data(), count, yp);
  return ok_status();
}

Status exec(const isa::Eltwise& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t count = span(rows, op.width);
  c.counters.vector_ops += count;
  if (c.counters_only) return ok_status();
  const bool f16 = op.type == isa::DType::kF16;
  const int64_t bytes = span(count, isa::dtype_bits(op.type) / 8);
  const bool binary =
      op.op == isa::EltOp::kAdd || op.op == isa::EltOp::kSilu || op.op == isa::EltOp::kGelu;
  QBC_ASSIGN_OR_RETURN(const uint8_t* ap, c.sram_at(op.a, bytes, "a"));
  const uint8_t* bp = nullptr;
  if (binary) {
    QBC_ASSIGN_OR_RETURN(bp, c.sram_at(op.b, bytes, "b"));
  }
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_write(op.y, bytes, "y"));
  std::vector<float>& a = scratch<float, 104>(static_cast<size_t>(count));
  std::vector<float>& b = scratch<float, 105>(binary ? static_cast<size_t>(count) : 0);
  std::vector<float>& y = scratch<float, 106>(static_cast<size_t>(count));
  auto read = [&](const uint8_t* p, float* out) {
    if (f16) {
      load_f16(p, count, out);
    } else {
      load(p, count, out);
    }
  };
  read(ap, a.data());
  if (binary) read(bp, b.data());
  // fp16 results: numerics' fp32 expression, rounded once by store_f16 (what round_fp16
  // of that fp32 value gives); the gated activations from a table over the gate's 65536
  // patterns.
  switch (op.op) {
    case isa::EltOp::kAdd:
      if (f16) {
        for (int64_t i = 0; i < count; ++i)
          y[static_cast<size_t>(i)] = a[static_cast<size_t>(i)] + b[static_cast<size_t>(i)];
      } else {
        numerics::add(a.data(), b.data(), count, f16, y.data());
      }
      break;
    case isa::EltOp::kSilu:
    case isa::EltOp::kGelu:
      if (f16) {
        const float* act = gated_activation_table(op.op == isa::EltOp::kGelu);
        for (int64_t i = 0; i < count; ++i) {
          uint16_t h;
          std::memcpy(&h, ap + 2 * i, 2);
          y[static_cast<size_t>(i)] = act[h] * b[static_cast<size_t>(i)];
        }
      } else {
        numerics::gated_act(a.data(), b.data(), count, op.op == isa::EltOp::kGelu, f16, y.data());
      }
      break;
    case isa::EltOp::kScale:
      if (f16) {
        for (int64_t i = 0; i < count; ++i)
          y[static_cast<size_t>(i)] = a[static_cast<size_t>(i)] * op.factor;
      } else {
        numerics::scale(a.data(), count, op.factor, f16, y.data());
      }
      break;
    case isa::EltOp::kSoftcap:
      numerics::softcap(a.data(), count, op.factor, f16, y.data());
      break;
    case isa::EltOp::kGeluErf:
    case isa::EltOp::kGeluQuick:
    case isa::EltOp::kGeluTanh:
      if (f16) {
        const float* act = gelu_table(op.op);
        for (int64_t i = 0; i < count; ++i) {
          uint16_t h;
          std::memcpy(&h, ap + 2 * i, 2);
          y[static_cast<size_t>(i)] = act[h];
        }
      } else if (op.op == isa::EltOp::kGeluTanh) {
        numerics::gelu_tanh(a.data(), count, f16, y.data());
      } else {
        numerics::gelu(a.data(), count, f16, y.data(), op.op == isa::EltOp::kGeluQuick);
      }
      break;
  }
  if (f16) {
    store_f16(y.data(), count, yp);
  } else {
    store(y.data(), count, yp);
  }
  return ok_status();
}

Status exec(const isa::AvgPool& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t ow = op.grid_w / op.kernel;  // V8: grid_w is a multiple of kernel
  if (rows % ow != 0)
    return invalid_argument("avg_pool: ", rows, " output rows are not whole bands of ", ow,
                            " windows (grid_w ", op.grid_w, ", kernel ", op.kernel, ")");
  const int64_t k2 = static_cast<int64_t>(op.kernel) * op.kernel;
  const int64_t in = span(rows, k2, op.width), count = span(rows, op.width);
  c.counters.vector_ops += in;
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(const uint8_t* xp, c.sram_at(op.x, span(2, in), "x"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_write(op.y, span(2, count), "y"));
  std::vector<float> x(static_cast<size_t>(in)), y(static_cast<size_t>(count));
  load_f16(xp, in, x.data());
  // numerics::avg_pool itself over the tile's bands (each output already an fp16 value).
  const int64_t bands = rows / ow, band_in = op.kernel * op.grid_w * op.width;
  parallel_blocks(c.pool, bands, in, int64_t{1} << 15, 1, [&](int64_t b0, int64_t b1) {
    numerics::avg_pool(x.data() + b0 * band_in, (b1 - b0) * op.kernel, op.grid_w, op.width,
                       op.kernel, true, y.data() + b0 * ow * op.width);
  });
  store_f16(y.data(), count, yp);
  return ok_status();
}

Status exec(const isa::Fill& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t n, c.count(op.count, "count"));
  c.counters.vector_ops += n;
  if (c.counters_only) return ok_status();
  QBC_ASSIGN_OR_RETURN(uint8_t * y, c.sram_at(op.y, span(n, isa::dtype_bits(op.type) / 8), "y"));
  if (op.type == isa::DType::kF32) {
    const float v = static_cast<float>(op.value);
    for (int64_t i = 0; i < n; ++i) std::memcpy(y + 4 * i, &v, 4);
  } else {
    const int64_t v = static_cast<int64_t>(op.value);  // kI64 (validated)
    for (int64_t i = 0; i < n; ++i) std::memcpy(y + 8 * i, &v, 8);
  }
  return ok_status();
}

}  // namespace qbc::runtime
