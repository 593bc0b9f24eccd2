// Private to qbc_config: applying YAML documents onto CompileOptions through
// protobuf reflection, driven by the (qbc.config.spec) field annotations.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>

#include "qbc/config/config.h"

namespace qbc::config::detail {

namespace pb = google::protobuf;

/// A document being applied: its label for messages, and whether YAML marks
/// (line/column) are meaningful for it.
struct Source {
  std::string label;
  bool has_lines = true;
};

/// Parses YAML (or JSON, validated strictly first when `is_json`). Syntax errors
/// carry "label:line:column".
StatusOr<YAML::Node> parse_document(const std::string& text, const std::string& label,
                                    bool is_json);

/// Applies mapping `node` onto `msg` whose key path is `prefix` ("" = root).
/// Unknown keys, wrong types and out-of-range values are errors naming the key
/// path and the location; every leaf set is recorded in `origins`.
Status apply_node(const YAML::Node& node, pb::Message& msg, const std::string& prefix,
                  const Source& source, Origins* origins);

/// Sets every annotated default in `msg` (recursively), recording "default" origins.
void apply_defaults(pb::Message& msg, const std::string& prefix, Origins* origins);

/// The annotation of a field (an empty spec when absent).
const FieldSpec& field_spec(const pb::FieldDescriptor* field);

/// The config spelling of an enum value (its (spelling) option, else its name).
std::string enum_spelling(const pb::EnumValueDescriptor* value);

/// Calls `fn(path, field, parent)` for every non-message field, in schema order.
void for_each_leaf(const pb::Message& msg, const std::string& prefix,
                   const std::function<void(const std::string&, const pb::FieldDescriptor*,
                                            const pb::Message&)>& fn);

/// Calls `fn(path, field)` for every field (messages before their children), in
/// schema order, from descriptors alone.
void for_each_field(const pb::Descriptor* desc, const std::string& prefix,
                    const std::function<void(const std::string&, const pb::FieldDescriptor*)>& fn);

/// A leaf's value as YAML flow text ("4096", "true", "aries-rb", "[8, 16]", "\"x\"").
std::string value_text(const pb::Message& parent, const pb::FieldDescriptor* field);

/// Formats a double with the shortest text that reads back to the same value.
std::string format_double(double v);

/// Human-readable type of a field ("int", "bool", "list of string", "enum: a | b").
std::string type_text(const pb::FieldDescriptor* field);

/// Allowed values of a field ("4 | 8", "0 .. 3", "> 0 .. 1"), or "" when unrestricted.
std::string range_text(const pb::FieldDescriptor* field);

/// Finds a field by its config spelling: exact JSON name, proto name, or a
/// case- and underscore-insensitive match (accepts the vendor's "SpinR1", "QK").
const pb::FieldDescriptor* find_field(const pb::Descriptor* desc, const std::string& key);

/// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

/// Joins a key path: join_path("llm", "apply") == "llm.apply"; join_path("", "x") == "x".
std::string join_path(const std::string& prefix, const std::string& key);

}  // namespace qbc::config::detail
