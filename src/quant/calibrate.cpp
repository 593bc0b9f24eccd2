#include "qbc/quant/calibrate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qbc/support/cancel.h"
#include "qbc/support/logging.h"

namespace qbc::quant {

void observe_max(TensorStats& s, const std::vector<float>& x, int64_t channels,
                 const RotaryPairing* pairing) {
  if (pairing != nullptr && pairing->head_dim > 0 && pairing->rotary_dim > 1 &&
      channels % pairing->head_dim == 0) {
    const int64_t heads = channels / pairing->head_dim, half = pairing->rotary_dim / 2;
    if (s.pair_radius.empty()) s.pair_radius.assign(static_cast<size_t>(heads * half), 0.0f);
    for (size_t row = 0; row + static_cast<size_t>(channels) <= x.size();
         row += static_cast<size_t>(channels)) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const double a = x[row + static_cast<size_t>(h * pairing->head_dim + i)];
          const double b = x[row + static_cast<size_t>(h * pairing->head_dim + i + half)];
          float& r = s.pair_radius[static_cast<size_t>(h * half + i)];
          r = std::max(r, static_cast<float>(std::sqrt(a * a + b * b)));
        }
      }
    }
  }
  const size_t nc = static_cast<size_t>(channels);
  if (s.channel_absmax.empty()) {
    s.channel_absmax.assign(nc, 0.0f);
    s.channel_min.assign(nc, std::numeric_limits<float>::infinity());
    s.channel_max.assign(nc, -std::numeric_limits<float>::infinity());
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const float a = std::fabs(x[i]);
    const size_t ch = i % nc;
    float& c = s.channel_absmax[ch];
    c = std::max(c, a);
    s.channel_min[ch] = std::min(s.channel_min[ch], x[i]);
    s.channel_max[ch] = std::max(s.channel_max[ch], x[i]);
    s.absmax = std::max(s.absmax, a);
  }
  s.count += static_cast<int64_t>(x.size());
}

void observe_histogram(TensorStats& s, const std::vector<float>& x) {
  if (s.histogram.empty()) s.histogram.assign(kHistogramBins, 0.0);
  if (s.absmax <= 0) return;
  const double width = static_cast<double>(s.absmax) / kHistogramBins;
  for (float v : x) {
    const int b = std::min(kHistogramBins - 1, static_cast<int>(std::fabs(v) / width));
    s.histogram[static_cast<size_t>(b)] += 1.0;
  }
}

std::map<std::string, RotaryPairing> rotated_key_inputs(const ir::Graph& g) {
  std::map<std::string, RotaryPairing> out;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::kAttention) continue;
    const ir::Node& k = g.node(n.operands[1].value);
    if (k.op != ir::Op::kRope) continue;
    out[g.node(k.operands[0].value).name] = {k.attrs.get_int("head_dim"),
                                             k.attrs.get_int("rotary_dim")};
  }
  return out;
}

std::vector<std::string> observed_nodes(const ir::Graph& g) {
  std::vector<std::string> out;
  auto add = [&](ir::ValueId v) {
    const std::string& name = g.node(v).name;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::Op::kLinear) add(n.operands[0].value);
    if (n.op == ir::Op::kFullAttention) {
      for (int i = 0; i < 3; ++i) add(n.operands[static_cast<size_t>(i)].value);
    }
    if (n.op == ir::Op::kAttention) {
      for (int i = 0; i < 3; ++i) add(n.operands[static_cast<size_t>(i)].value);
      // Rotated keys: their position-robust range comes from the pre-RoPE values.
      const ir::Node& k = g.node(n.operands[1].value);
      if (k.op == ir::Op::kRope) add(k.operands[0].value);
    }
  }
  return out;
}

StatusOr<CalibStats> collect_stats(const ir::Graph& g, runner::Runner& runner, size_t n,
                                   const SampleSource& samples, int mode) {
  if (n == 0) return invalid_argument("calibration: no samples");
  const std::vector<std::string> nodes = observed_nodes(g);
  const std::map<std::string, RotaryPairing> pairings = rotated_key_inputs(g);
  CalibStats stats;
  runner.set_keep_activations(true);
  const int passes = mode == 0 ? 1 : 2;
  std::vector<float> embeds, logits, act;
  std::vector<int64_t> shape;
  for (int pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i < n; ++i) {
      int64_t seq = 0;
      QBC_RETURN_IF_ERROR(cancel::check("calibration sample " + std::to_string(i)));
      QBC_RETURN_IF_ERROR(samples(i, &embeds, &seq).with_context("calibration sample ", i));
      runner.reset();
      QBC_RETURN_IF_ERROR(
          runner.forward_embeds(embeds, seq, &logits).with_context("calibration sample ", i));
      for (const std::string& name : nodes) {
        QBC_RETURN_IF_ERROR(runner.activation(name, &act, &shape));
        TensorStats& s = stats[name];
        if (pass == 0) {
          auto p = pairings.find(name);
          observe_max(s, act, shape.empty() ? 1 : shape.back(),
                      p == pairings.end() ? nullptr : &p->second);
        } else {
          observe_histogram(s, act);
        }
      }
      events::progress("calib", static_cast<int64_t>(pass * n + i + 1),
                       static_cast<int64_t>(passes * n));
    }
  }
  runner.set_keep_activations(false);
  runner.reset();
  return stats;
}

float activation_range(const TensorStats& s, const config::CalibrationConfig& options, int bits) {
  if (s.absmax <= 0) return 1e-8f;
  if (options.mode() == 0 || s.histogram.empty()) return s.absmax;
  const double width = static_cast<double>(s.absmax) / kHistogramBins;
  double total = 0;
  for (double c : s.histogram) total += c;
  if (options.mode() == 1) {
    // The `percentile` quantile of |x|, at bin resolution (upper bin edge).
    const double target = options.max_percentile().percentile() * total;
    double cum = 0;
    for (int b = 0; b < kHistogramBins; ++b) {
      cum += s.histogram[static_cast<size_t>(b)];
      if (cum >= target) return static_cast<float>((b + 1) * width);
    }
    return s.absmax;
  }
  // Mode 2: the clip c minimising E[(x - Q_c(x))^2] under the histogram: values
  // above c pay their clipping error, values below pay uniform rounding noise.
  const double qmax = std::pow(2.0, bits - 1) - 1;
  double best_c = s.absmax, best_err = -1;
  for (int k = 1; k <= 200; ++k) {
    const double c = s.absmax * (0.2 + 0.8 * k / 200.0);
    const double step = c / qmax;
    double err = 0;
    for (int b = 0; b < kHistogramBins; ++b) {
      const double count = s.histogram[static_cast<size_t>(b)];
      if (count == 0) continue;
      const double x = (b + 0.5) * width;
      err += count * (x > c ? (x - c) * (x - c) : step * step / 12.0);
    }
    if (best_err < 0 || err < best_err) {
      best_err = err;
      best_c = c;
    }
  }
  return static_cast<float>(best_c);
}

}  // namespace qbc::quant
