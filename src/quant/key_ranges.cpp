#include "qbc/quant/key_ranges.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qbc/numerics/rope_frequencies.h"

namespace qbc::quant {
namespace {

constexpr int64_t kAngleSamples = 4096;

/// The angles a pair with frequency `w` reaches at positions [0, positions): every
/// position when there are few, else evenly spaced samples of the arc (the full circle
/// once it passes 2·pi), both endpoints included.
std::vector<double> reached_angles(double w, int64_t positions) {
  std::vector<double> out;
  const double last = static_cast<double>(positions - 1) * w;
  if (positions <= kAngleSamples) {
    for (int64_t p = 0; p < positions; ++p) out.push_back(static_cast<double>(p) * w);
    return out;
  }
  const double span = std::min(last, 2.0 * M_PI);
  for (int64_t k = 0; k < kAngleSamples; ++k) {
    out.push_back(span * static_cast<double>(k) / static_cast<double>(kAngleSamples - 1));
  }
  return out;
}

}  // namespace

std::vector<ChannelRange> rotated_key_ranges(const ir::Node& rope, const TensorStats& pre,
                                             int64_t positions) {
  const ir::Attrs& a = rope.attrs;
  const int64_t heads = a.get_int("num_heads"), hd = a.get_int("head_dim"),
                rd = a.get_int("rotary_dim");
  const double f = a.get_float("attention_factor", 1.0);
  const size_t width = static_cast<size_t>(heads * hd);
  std::vector<ChannelRange> out(width);
  auto centre = [&](size_t i) {
    return 0.5 * (static_cast<double>(pre.channel_min[i]) + pre.channel_max[i]);
  };
  auto half = [&](size_t i) {
    return 0.5 * (static_cast<double>(pre.channel_max[i]) - pre.channel_min[i]);
  };
  if (pre.channel_min.size() != width || positions <= 0) {
    for (size_t i = 0; i < width && i < pre.channel_absmax.size(); ++i) {
      out[i] = {-static_cast<double>(pre.channel_absmax[i]),
                static_cast<double>(pre.channel_absmax[i])};
    }
    return out;
  }
  for (size_t i = 0; i < width; ++i) out[i] = {centre(i) - half(i), centre(i) + half(i)};
  // The frequency sets a call may use: LongRoPE / dynamic NTK switch with the length.
  const std::vector<double> inv = a.get_floats("inv_freq"),
                            long_inv = a.get_floats("long_inv_freq");
  const double dyn = a.get_float("dynamic_factor", 0.0), theta = a.get_float("theta", 10000.0);
  const int64_t orig = a.get_int("original_max_positions", 0);
  std::vector<std::vector<double>> sets = {
      numerics::rope_frequencies(inv, long_inv, dyn, orig, theta, rd, positions - 1)};
  if (orig > 0 && orig < positions) {
    sets.push_back(numerics::rope_frequencies(inv, long_inv, dyn, orig, theta, rd, orig - 1));
  }
  const int64_t pairs = rd / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < pairs; ++i) {
      const size_t ia = static_cast<size_t>(h * hd + i), ib = ia + static_cast<size_t>(pairs);
      const double ma = centre(ia), mb = centre(ib), ha = half(ia), hb = half(ib);
      double lo_a = std::numeric_limits<double>::infinity(), hi_a = -lo_a, lo_b = lo_a,
             hi_b = -lo_a;
      for (const std::vector<double>& freq : sets) {
        for (double phi : reached_angles(freq[static_cast<size_t>(i)], positions)) {
          const double c = f * std::cos(phi), s = f * std::sin(phi);
          // rope: a' = a cos - b sin, b' = b cos + a sin.
          const double ca = ma * c - mb * s, cb = mb * c + ma * s;
          const double ea = std::fabs(c) * ha + std::fabs(s) * hb,
                       eb = std::fabs(s) * ha + std::fabs(c) * hb;
          lo_a = std::min(lo_a, ca - ea);
          hi_a = std::max(hi_a, ca + ea);
          lo_b = std::min(lo_b, cb - eb);
          hi_b = std::max(hi_b, cb + eb);
        }
      }
      // Tighter and always valid: a rotated channel never exceeds f times the largest
      // pair radius seen (|a cos - b sin| <= |(a, b)|); the 1e-3 margin covers the fp16
      // cos/sin table, whose entries may have cos² + sin² slightly above 1.
      const size_t pr = static_cast<size_t>(h * pairs + i);
      if (pre.pair_radius.size() > pr) {
        const double r = std::fabs(f) * static_cast<double>(pre.pair_radius[pr]) * (1.0 + 1e-3);
        lo_a = std::max(lo_a, -r);
        hi_a = std::min(hi_a, r);
        lo_b = std::max(lo_b, -r);
        hi_b = std::min(hi_b, r);
      }
      out[ia] = {lo_a, hi_a};
      out[ib] = {lo_b, hi_b};
    }
  }
  return out;
}

RotatingKeyOffsets rotating_key_offsets(const ir::Node& rope, const TensorStats& pre,
                                        int64_t positions, bool centered, double gain) {
  RotatingKeyOffsets r;
  r.ranges = rotated_key_ranges(rope, pre, positions);
  const ir::Attrs& a = rope.attrs;
  const int64_t heads = a.get_int("num_heads"), hd = a.get_int("head_dim"),
                rd = a.get_int("rotary_dim");
  const size_t width = static_cast<size_t>(heads * hd);
  r.m.assign(width, 0.0);
  if (pre.channel_min.size() != width || pre.channel_max.size() != width || positions <= 0)
    return r;
  // The same statistics around each channel's centre: the keys minus m (no radius
  // bound: the radius was seen around 0).
  TensorStats shifted = pre;
  shifted.pair_radius.clear();
  std::vector<double> centre(width);
  for (size_t i = 0; i < width; ++i) {
    centre[i] = static_cast<double>(static_cast<float>(
        0.5 * (static_cast<double>(pre.channel_min[i]) + pre.channel_max[i])));  // fp32, as stored
    shifted.channel_min[i] = static_cast<float>(pre.channel_min[i] - centre[i]);
    shifted.channel_max[i] = static_cast<float>(pre.channel_max[i] - centre[i]);
  }
  const std::vector<ChannelRange> moved = rotated_key_ranges(rope, shifted, positions);
  auto reach = [&](const ChannelRange& c) {
    const double mid = centered ? 0.5 * (c.lo + c.hi) : 0.0;
    return std::max(std::fabs(c.hi - mid), std::fabs(c.lo - mid));
  };
  const int64_t pairs = rd / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < pairs; ++i) {
      const size_t ia = static_cast<size_t>(h * hd + i), ib = ia + static_cast<size_t>(pairs);
      const double before = std::max(reach(r.ranges[ia]), reach(r.ranges[ib]));
      const double after = std::max(reach(moved[ia]), reach(moved[ib]));
      if (!(after <= gain * before)) continue;
      // The stored key is an fp16 difference of fp16 values: widen by a few fp16 steps.
      for (size_t c : {ia, ib}) {
        const double ulp =
            std::ldexp(std::fabs(centre[c]) + std::fabs(moved[c].hi) + std::fabs(moved[c].lo), -9);
        r.ranges[c] = {moved[c].lo - ulp, moved[c].hi + ulp};
        r.m[c] = centre[c];
      }
      ++r.pairs;
    }
  }
  return r;
}

}  // namespace qbc::quant
