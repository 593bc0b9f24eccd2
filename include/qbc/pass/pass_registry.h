// The registry of one stage's passes: names to factories. Registration is explicit
// (each stage has one register_*_passes() listing every pass; no static initialisers),
// and a pipeline (pipeline.h) names passes that the registry creates.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qbc/pass/pass.h"
#include "qbc/support/check.h"
#include "qbc/support/status.h"

namespace qbc::pass {

template <class Context, class Options>
class PassRegistry {
 public:
  using PassPtr = std::unique_ptr<Pass<Context>>;
  /// Makes the pass from the stage's options (its config subtree); may refuse them.
  using Factory = std::function<StatusOr<PassPtr>(const Options&)>;

  /// Registers `name` (unique: a second registration is an internal error).
  void add(const std::string& name, const std::string& summary, Factory factory) {
    QBC_CHECK(entries_.count(name) == 0) << "pass " << name << " registered twice";
    entries_[name] = {summary, std::move(factory)};
  }

  bool contains(const std::string& name) const { return entries_.count(name) != 0; }

  /// The one-line summary of a registered pass ("" for unknown names).
  std::string summary(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? std::string() : it->second.summary;
  }

  /// Every registered name, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, e] : entries_) out.push_back(name);
    return out;
  }

  /// The pass `name` made from `options`; kInternal for an unregistered name (a
  /// pipeline naming a pass nobody registered is a bug, not bad input).
  StatusOr<PassPtr> create(const std::string& name, const Options& options) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) return internal_error("no pass registered as '", name, "'");
    StatusOr<PassPtr> p = it->second.factory(options);
    if (!p.ok()) return p.status().with_context("pass ", name);
    if (*p == nullptr || (*p)->name() != name) {
      return internal_error("the factory of pass '", name, "' made a pass of another name");
    }
    return p;
  }

 private:
  struct Entry {
    std::string summary;
    Factory factory;
  };
  std::map<std::string, Entry> entries_;
};

}  // namespace qbc::pass
