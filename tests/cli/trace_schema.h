// The trace event format check shared by the tests of `qbc inspect --trace` and `qbc run
// --trace`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace qbc::testing {

// ---------------------------------------------------------------------------------------
// The trace event format ("Trace Event Format", the document chrome://tracing and Perfetto
// follow): a JSON object whose "traceEvents" is a list of events. Complete events (ph "X")
// carry name and cat (strings), ts and dur (microseconds, numbers), pid and tid (integers);
// metadata events (ph "M") name a process or thread (process_name / thread_name with
// args.name a string) or order them (*_sort_index with args.sort_index an integer).

/// Checks `doc` against the rules above plus ours (ts/dur non-negative, every pid and
/// (pid, tid) of a complete event named); returns the problems found.
inline std::vector<std::string> trace_schema_errors(const nlohmann::json& doc) {
  std::vector<std::string> errors;
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    return {"no \"traceEvents\" list"};
  std::set<int64_t> named_pids, used_pids;
  std::set<std::pair<int64_t, int64_t>> named_tids, used_tids;
  size_t i = 0;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    const std::string at = "event " + std::to_string(i++) + ": ";
    if (!e.is_object()) {
      errors.push_back(at + "not an object");
      continue;
    }
    for (const char* key : {"name", "ph"})
      if (!e.contains(key) || !e[key].is_string()) errors.push_back(at + key + " is not a string");
    for (const char* key : {"pid", "tid"})
      if (!e.contains(key) || !e[key].is_number_integer())
        errors.push_back(at + key + " is not an integer");
    if (!errors.empty() && errors.back().rfind(at, 0) == 0) continue;
    const std::string ph = e["ph"], name = e["name"];
    const int64_t pid = e["pid"], tid = e["tid"];
    if (ph == "X") {
      if (!e.contains("cat") || !e["cat"].is_string()) errors.push_back(at + "cat is not a string");
      for (const char* key : {"ts", "dur"}) {
        if (!e.contains(key) || !e[key].is_number())
          errors.push_back(at + key + " is not a number");
        else if (e[key].get<double>() < 0)
          errors.push_back(at + key + " is negative");
      }
      if (e.contains("args") && !e["args"].is_object())
        errors.push_back(at + "args is not an object");
      used_pids.insert(pid);
      used_tids.insert({pid, tid});
    } else if (ph == "M") {
      if (!e.contains("args") || !e["args"].is_object()) {
        errors.push_back(at + "metadata without args");
      } else if (name == "process_name" || name == "thread_name") {
        if (!e["args"].contains("name") || !e["args"]["name"].is_string())
          errors.push_back(at + name + " without a string args.name");
        else if (name == "process_name")
          named_pids.insert(pid);
        else
          named_tids.insert({pid, tid});
      } else if (name == "process_sort_index" || name == "thread_sort_index") {
        if (!e["args"].contains("sort_index") || !e["args"]["sort_index"].is_number_integer())
          errors.push_back(at + name + " without an integer args.sort_index");
      } else {
        errors.push_back(at + "unknown metadata event " + name);
      }
    } else {
      errors.push_back(at + "unexpected ph " + ph);
    }
  }
  for (int64_t p : used_pids)
    if (!named_pids.count(p)) errors.push_back("pid " + std::to_string(p) + " has no process_name");
  for (const auto& [p, t] : used_tids) {
    if (!named_tids.count({p, t}))
      errors.push_back("pid " + std::to_string(p) + " tid " + std::to_string(t) +
                       " has no thread_name");
  }
  return errors;
}

}  // namespace qbc::testing
