// The built-in presets and hardware target profiles, listed for people and as JSON
// (`qbc presets`, `qbc targets [NAME]`).
#pragma once

#include <string>

#include "qbc/support/status.h"

namespace qbc::driver {

/// A listing as a command prints it: `text` (aligned lines) and `json` (compact, the result
/// event's document; `--json` prints it indented).
struct CatalogListing {
  std::string text, json;
};

/// Every built-in preset: name (padded to 12 columns) and the description its file opens with;
/// JSON [{name, description, path}].
CatalogListing list_presets();

/// Every built-in target profile: name and description; JSON [{name, description, cores, path}].
/// An error naming the profile when a built-in one does not load.
StatusOr<CatalogListing> list_targets();

/// One profile (a built-in name or a .yaml path): each key with its value and whether it is a
/// vendor fact, a fitted figure or our assumption, with its note; the text starts with
/// "# PATH". JSON [{key, value, kind, note}]. kNotFound naming it when there is no such profile.
StatusOr<CatalogListing> describe_target(const std::string& name_or_path);

}  // namespace qbc::driver
