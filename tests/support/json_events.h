// The JSON event channel of a qbc run (`--log-format json`, docs/cli.md) as the CLI tests
// read it.
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_support.h"

namespace qbc::testing {

/// The "result" of the last event `kind` ("summary", "result") on the run's stderr; null when
/// there is none.
inline nlohmann::json last_event_result(const RunResult& r, const std::string& kind) {
  nlohmann::json out;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("event", "") == kind) out = e["result"];
  }
  return out;
}

}  // namespace qbc::testing
