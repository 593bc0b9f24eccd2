// The JSON event channel of a qbc run (`--log-format json`, docs/cli.md) as the CLI tests
// read it.
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_support.h"

namespace qbc::testing {

/// The whole last event `kind` ("summary", "result") in `text` (a run's stderr); null when
/// there is none.
inline nlohmann::json last_json_event(const std::string& text, const std::string& kind) {
  nlohmann::json found;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("event", "") == kind) found = e;
  }
  return found;
}

/// The "result" of the last event `kind` on the run's stderr; null when there is none.
inline nlohmann::json last_event_result(const RunResult& r, const std::string& kind) {
  const nlohmann::json e = last_json_event(r.err, kind);
  return e.is_null() ? e : e.value("result", nlohmann::json());
}

}  // namespace qbc::testing
