// Which inference scheme `qbc plan` recommends (see qbc/driver/plan.h): the fastest decode
// per sequence, since decode dominates any reply longer than a few tokens; the scheme with
// the best TTFT is named next to it with the reply length from which the recommended one
// still finishes first, and multi with its throughput over its four sequences.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "qbc/driver/plan.h"

namespace qbc::driver {
namespace {

double rate(const SchemePlan& s) {
  return s.prediction.decode_s > 0 ? 1.0 / s.prediction.decode_s : 0.0;
}

}  // namespace

Recommendation recommend(const PlanResult& r) {
  Recommendation out;
  const SchemePlan *decode = nullptr, *ttft = nullptr, *total = nullptr;
  for (const SchemePlan& s : r.schemes) {
    if (decode == nullptr || rate(s) > rate(*decode)) decode = &s;
    if (ttft == nullptr || s.prediction.ttft_s < ttft->prediction.ttft_s) ttft = &s;
    if (total == nullptr || rate(s) * s.instances > rate(*total) * total->instances) total = &s;
  }
  if (decode == nullptr) return out;
  out.scheme = out.fastest_decode = isa::scheme_name(decode->scheme);
  out.best_ttft = isa::scheme_name(ttft->scheme);
  out.throughput = isa::scheme_name(total->scheme);
  char buf[512];
  const int64_t prompt = decode->prediction.prompt_tokens;
  if (r.schemes.size() == 1) {
    std::snprintf(buf, sizeof(buf), "%s is the only scheme planned (inferenceScheme)",
                  out.scheme.c_str());
    out.reason = buf;
    return out;
  }
  if (ttft == decode) {
    std::snprintf(buf, sizeof(buf),
                  "%s: the fastest decode (%.2f tok/s per sequence) and the best TTFT (%.1f ms "
                  "for %lld prompt tokens)",
                  out.scheme.c_str(), rate(*decode), decode->prediction.ttft_s * 1e3,
                  static_cast<long long>(prompt));
  } else {
    // TTFT_d + n / rate_d <= TTFT_t + n / rate_t from this many generated tokens on.
    const double gain_per_token = ttft->prediction.decode_s - decode->prediction.decode_s;
    const double ttft_loss = decode->prediction.ttft_s - ttft->prediction.ttft_s;
    out.break_even_tokens =
        gain_per_token > 0 ? static_cast<int64_t>(std::ceil(ttft_loss / gain_per_token)) : 0;
    std::snprintf(buf, sizeof(buf),
                  "%s: the fastest decode (%.2f tok/s per sequence), which dominates a reply; "
                  "%s has the best TTFT (%.1f ms against %.1f ms for %lld prompt tokens), but "
                  "%s finishes first for replies of %lld tokens or more",
                  out.scheme.c_str(), rate(*decode), out.best_ttft.c_str(),
                  ttft->prediction.ttft_s * 1e3, decode->prediction.ttft_s * 1e3,
                  static_cast<long long>(prompt), out.scheme.c_str(),
                  static_cast<long long>(std::max<int64_t>(out.break_even_tokens, 1)));
  }
  out.reason = buf;
  if (total != decode) {
    std::snprintf(buf, sizeof(buf),
                  "; %s has the highest throughput when serving several users (%d sequences x "
                  "%.2f tok/s = %.2f tok/s)",
                  out.throughput.c_str(), total->instances, rate(*total),
                  rate(*total) * total->instances);
    out.reason += buf;
  }
  return out;
}

}  // namespace qbc::driver
