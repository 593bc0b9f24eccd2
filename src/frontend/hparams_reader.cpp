// ConfigReader: typed, located access to one JSON object of a config.json.
#include "hparams_reader.h"

#include <cmath>
#include <limits>
#include <utility>

#include "qbc/support/quote.h"

namespace qbc::frontend::hparams_internal {
namespace {

const char* json_type_name(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "an unknown JSON value";
}

}  // namespace

ConfigReader::ConfigReader(const nlohmann::json& object, std::string source, std::string prefix)
    : object_(&object), source_(std::move(source)), prefix_(std::move(prefix)) {}

const nlohmann::json* ConfigReader::find(std::string_view key) const {
  if (!object_->is_object()) return nullptr;
  auto it = object_->find(std::string(key));
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool ConfigReader::has(std::string_view key) const { return find(key) != nullptr; }

StatusOr<ConfigReader> ConfigReader::child(std::string_view key) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return missing(key);
  if (!v->is_object()) return wrong_type(key, "an object");
  return ConfigReader(*v, source_, prefix_ + clip_prefix(key) + ".");
}

// A key of the file can be any string (a 4 KB `dynamic` pattern, control characters): each
// level of the path is shown by its clipped prefix (qbc/support/quote.h), never whole.
std::string ConfigReader::where(std::string_view key) const {
  return internal::concat(source_, ": key '", prefix_, clip_prefix(key), "'");
}

Status ConfigReader::missing(std::string_view key) const {
  return not_found(source_, ": missing required key '", prefix_, clip_prefix(key), "'");
}

Status ConfigReader::wrong_type(std::string_view key, std::string_view expected) const {
  const nlohmann::json* v = find(key);
  const char* got = v ? json_type_name(*v) : "null";
  return invalid_argument(where(key), ": expected ", expected, ", got ", got);
}

Status ConfigReader::bad_value(std::string_view key, std::string_view why) const {
  return invalid_argument(where(key), ": ", why);
}

StatusOr<int64_t> ConfigReader::get_int(std::string_view key) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return missing(key);
  if (v->is_number_unsigned()) {
    const auto u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad_value(key, "integer out of range");
    }
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    // Some exporters write sizes as 4096.0; accept integral floats only.
    const double d = v->get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
  }
  return wrong_type(key, "an integer");
}

StatusOr<int64_t> ConfigReader::get_int_or(std::string_view key, int64_t fallback) const {
  if (!has(key)) return fallback;
  return get_int(key);
}

StatusOr<int64_t> ConfigReader::get_positive(std::string_view key) const {
  QBC_ASSIGN_OR_RETURN(int64_t v, get_int(key));
  if (v <= 0) return bad_value(key, internal::concat("must be positive, got ", v));
  return v;
}

StatusOr<int64_t> ConfigReader::get_positive_or(std::string_view key, int64_t fallback) const {
  if (!has(key)) return fallback;
  return get_positive(key);
}

StatusOr<int64_t> ConfigReader::get_bounded(std::string_view key, int64_t max) const {
  QBC_ASSIGN_OR_RETURN(int64_t v, get_positive(key));
  if (v > max) {
    return bad_value(key, internal::concat(v, " exceeds qbc's limit of ", max,
                                           " (include/qbc/frontend/hparams.h)"));
  }
  return v;
}

StatusOr<int64_t> ConfigReader::get_bounded_or(std::string_view key, int64_t fallback,
                                               int64_t max) const {
  if (!has(key)) return fallback;
  return get_bounded(key, max);
}

StatusOr<double> ConfigReader::get_double(std::string_view key) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return missing(key);
  if (!v->is_number()) return wrong_type(key, "a number");
  return v->get<double>();
}

StatusOr<double> ConfigReader::get_double_or(std::string_view key, double fallback) const {
  if (!has(key)) return fallback;
  return get_double(key);
}

StatusOr<bool> ConfigReader::get_bool_or(std::string_view key, bool fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return wrong_type(key, "a boolean");
  return v->get<bool>();
}

StatusOr<std::string> ConfigReader::get_string_or(std::string_view key,
                                                  std::string fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) return wrong_type(key, "a string");
  return v->get<std::string>();
}

}  // namespace qbc::frontend::hparams_internal
