// The backend tests' comparison of executor logits with the fake-quant evaluator's: bitwise
// equality, the first differing value, and a compiled bundle run on the executor (all at once,
// split into chunks by the session, or token by token), and deterministic token ids.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/npu_session.h"
#include "qbc/support/status.h"

namespace qbc::testing {

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  }
  return std::min(a.size(), b.size());
}

/// `n` token ids below `vocab` from a linear congruential sequence seeded with `seed`.
inline std::vector<int32_t> lcg_ids(int64_t vocab, size_t n, uint32_t seed) {
  std::vector<int32_t> ids;
  uint32_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    ids.push_back(static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(vocab)));
  }
  return ids;
}

/// The executor's logits of `ids` on `bundle` (its first mode): all at once, or token by token.
inline StatusOr<std::vector<float>> executor_logits(std::shared_ptr<const isa::Bundle> bundle,
                                                    const std::vector<int32_t>& ids,
                                                    bool stepwise) {
  runtime::DeviceOptions dopt;
  dopt.scheme = bundle->modes.front().scheme;
  QBC_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Device> dev, runtime::Device::create(bundle, dopt));
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::NpuSession> s, runtime::NpuSession::create(dev, 0));
  std::vector<float> out, part;
  if (!stepwise) {
    QBC_RETURN_IF_ERROR(s->forward(ids, &out));
    return out;
  }
  for (int32_t t : ids) {
    QBC_RETURN_IF_ERROR(s->forward({t}, &part));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace qbc::testing
