// RoPE inverse frequencies per scaling type, following HF's
// modeling_rope_utils (_compute_default/linear/dynamic/yarn/llama3/longrope).
#include <algorithm>
#include <cmath>

#include "qbc/frontend/importer.h"

namespace qbc::frontend {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::vector<double> default_inv_freq(double theta, int64_t rotary_dim) {
  std::vector<double> f(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
  }
  return f;
}

void apply_llama3(const RopeScaling& rs, std::vector<double>& f) {
  const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
  const double low_wavelen = old_ctx / rs.low_freq_factor;
  const double high_wavelen = old_ctx / rs.high_freq_factor;
  for (double& x : f) {
    const double wavelen = 2 * kPi / x;
    if (wavelen > low_wavelen) {
      x = x / rs.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      x = (1 - smooth) * x / rs.factor + smooth * x;
    }
  }
}

void apply_yarn(const RopeScaling& rs, double theta, int64_t dim, std::vector<double>& f) {
  const double max_pos = static_cast<double>(rs.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(max_pos / (rotations * 2 * kPi))) / (2 * std::log(theta));
  };
  double low = std::floor(correction_dim(rs.beta_fast));
  double high = std::ceil(correction_dim(rs.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < f.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    const double extrap = f[i];
    const double interp = f[i] / rs.factor;
    f[i] = interp * (1 - extrapolation_factor) + extrap * extrapolation_factor;
  }
}

std::vector<double> longrope(const std::vector<double>& factors, double theta, int64_t dim) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = 1.0 / (factors[i] * std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim)));
  }
  return f;
}

}  // namespace

numerics::Rope rope_params(const HParams& hp, int64_t layer) {
  const LayerAttention& la = hp.layers[static_cast<size_t>(layer)];
  numerics::Rope p;
  p.heads = hp.num_attention_heads;
  p.head_dim = hp.head_dim;
  p.rotary_dim = hp.rotary_dim;
  p.theta = la.rope_theta;
  p.inv_freq = default_inv_freq(la.rope_theta, hp.rotary_dim);
  if (!la.rope_scaled) return p;
  const RopeScaling& rs = hp.rope_scaling;
  switch (rs.type) {
    case RopeScalingType::kNone: break;
    case RopeScalingType::kLinear:
      for (double& x : p.inv_freq) x /= rs.factor;
      break;
    case RopeScalingType::kDynamic:
      // HF's dynamic NTK grows the base relative to config.max_position_embeddings and
      // ignores rope_scaling.original_max_position_embeddings (_compute_dynamic_ntk_parameters).
      p.dynamic_factor = rs.factor;
      p.original_max_positions = hp.max_position_embeddings;
      break;
    case RopeScalingType::kLlama3: apply_llama3(rs, p.inv_freq); break;
    case RopeScalingType::kYarn:
      apply_yarn(rs, la.rope_theta, hp.rotary_dim, p.inv_freq);
      p.attention_factor = rs.attention_factor;
      break;
    case RopeScalingType::kLongRope:
      p.inv_freq = longrope(rs.short_factor, la.rope_theta, hp.rotary_dim);
      p.long_inv_freq = longrope(rs.long_factor, la.rope_theta, hp.rotary_dim);
      p.original_max_positions = rs.original_max_position_embeddings;
      p.attention_factor = rs.attention_factor;
      break;
  }
  return p;
}

}  // namespace qbc::frontend
