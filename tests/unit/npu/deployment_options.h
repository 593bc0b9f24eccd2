// The backend options of one deployment in the backend tests: the target profile's
// configuration, one mode of `cores` cooperating cores (single, global4 or global8 by count) and
// a prefill chunk (at most the graph's cache).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "qbc/config/config.h"
#include "qbc/driver/backend.h"
#include "qbc/ir/graph.h"
#include "qbc/npu/compile.h"
#include "qbc/support/status.h"

namespace qbc::testing {

inline StatusOr<npu::Options> deployment_options(const ir::Graph& g, const std::string& target,
                                                 int cores, int64_t chunk) {
  config::LoadRequest req;
  req.sets = {"targetProfile=" + target};
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
  QBC_ASSIGN_OR_RETURN(npu::Options o, driver::backend_options(g, cfg));
  o.modes = {npu::ModeRequest{cores == 1   ? isa::Scheme::kSingle
                              : cores == 8 ? isa::Scheme::kGlobal8
                                           : isa::Scheme::kGlobal4,
                              cores, 1}};
  o.chunk = std::min(chunk, o.max_cache);
  return o;
}

}  // namespace qbc::testing
