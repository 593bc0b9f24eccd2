// full_attention quantization (see full_attention_quant.h). The rules are those of the
// quantized KV cache (docs/numerics.md "attention"), without a cache: K and V get a static
// offset (the midpoint of the channel's calibrated range) and scale (its half-width / qmax) per
// channel; Q is multiplied by its head's K scales and coded with a static scale per head.
#include "full_attention_quant.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>

#include "qbc/numerics/quantizer.h"

namespace qbc::quant {
namespace {

double fp32(double x) { return static_cast<double>(static_cast<float>(x)); }

bool matches_any(const google::protobuf::RepeatedPtrField<std::string>& globs,
                 const std::string& name) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
    return fnmatch(g.c_str(), name.c_str(), 0) == 0;
  });
}

/// Per channel of `s`: the midpoint offset (fp32) and the scale covering [min, max] around it.
void channel_scales(const TensorStats& s, size_t width, int bits, std::vector<double>* offset,
                    std::vector<double>* scale) {
  offset->assign(width, 0.0);
  scale->assign(width, 1e-8);
  const double qmax = static_cast<double>(numerics::quant_max(bits));
  for (size_t c = 0; c < width && c < s.channel_min.size(); ++c) {
    if (!(s.channel_min[c] <= s.channel_max[c])) continue;  // never observed
    const double lo = s.channel_min[c], hi = s.channel_max[c];
    (*offset)[c] = fp32(0.5 * (lo + hi));
    const double reach = std::max(std::fabs(hi - (*offset)[c]), std::fabs(lo - (*offset)[c]));
    (*scale)[c] = std::max(reach / qmax, 1e-8);
  }
}

}  // namespace

Status set_full_attention_quant(ir::Node& n, const ir::Graph& g, const CalibStats* stats,
                                const config::CompileOptions& options) {
  const int64_t heads = n.attrs.get_int("num_heads"), hd = n.attrs.get_int("head_dim");
  const size_t width = static_cast<size_t>(heads * hd);
  const int kb = options.bit().kv_cache().key(), vb = options.bit().kv_cache().value();
  std::vector<double> q_scale(static_cast<size_t>(heads), 1.0), k_scale(width, 1.0),
      v_scale(width, 1.0), k_offset(width, 0.0), v_offset(width, 0.0);
  if (stats != nullptr) {
    const TensorStats* st[3] = {};
    for (size_t i = 0; i < 3; ++i) {
      const std::string& name = g.node(n.operands[i].value).name;
      auto it = stats->find(name);
      if (it == stats->end() || it->second.channel_absmax.size() != width)
        return internal_error("no calibration statistics for '", name, "' (", ir::describe(n), ")");
      st[i] = &it->second;
    }
    channel_scales(*st[1], width, kb, &k_offset, &k_scale);
    channel_scales(*st[2], width, vb, &v_offset, &v_scale);
    for (int64_t h = 0; h < heads; ++h) {  // Q times its head's K scales, then 8-bit codes
      double m = 0;
      for (int64_t c = 0; c < hd; ++c) {
        const size_t i = static_cast<size_t>(h * hd + c);
        m = std::max(m, static_cast<double>(st[0]->channel_absmax[i]) * k_scale[i]);
      }
      q_scale[static_cast<size_t>(h)] =
          std::max(m / static_cast<double>(numerics::quant_max(8)), 1e-8);
    }
  }
  const bool p16 = matches_any(options.bit().layer_overrides().activation16_bits(), n.name);
  n.attrs.set("k_bits", int64_t{kb});
  n.attrs.set("v_bits", int64_t{vb});
  n.attrs.set("p_bits", int64_t{p16 ? 16 : 8});
  n.attrs.set("q_scale", std::move(q_scale));
  n.attrs.set("k_scale", std::move(k_scale));
  n.attrs.set("v_scale", std::move(v_scale));
  n.attrs.set("k_offset", std::move(k_offset));
  n.attrs.set("v_offset", std::move(v_offset));
  return ok_status();
}

}  // namespace qbc::quant
