// The executor's timeline (see qbc/runtime/exec_trace.h).
#include "qbc/runtime/exec_trace.h"

#include <algorithm>

namespace qbc::runtime {

bool ExecTrace::wants(isa::Phase phase) const {
  const bool have_prefill = std::any_of(calls.begin(), calls.end(), [](const ExecCall& c) {
    return c.phase == isa::Phase::kPrefill;
  });
  if (phase == isa::Phase::kPrefill) return !have_prefill;
  if (phase == isa::Phase::kSpan) return false;  // the trace shows one prefill chunk and decodes
  const auto decodes = std::count_if(
      calls.begin(), calls.end(), [](const ExecCall& c) { return c.phase == isa::Phase::kDecode; });
  return have_prefill && decodes < max_decode_calls;
}

}  // namespace qbc::runtime
