// Typed op attributes. Each op declares its attributes (name, kind, required)
// in op.cpp; the verifier checks every node against that schema.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace qbc::ir {

/// One attribute value.
using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

/// The kind of an attribute value, matching AttrValue's alternatives.
enum class AttrKind { kInt, kFloat, kString, kInts, kFloats };

/// "int", "float", "string", "int list", "float list".
const char* attr_kind_name(AttrKind k);
/// The kind of a value.
AttrKind attr_kind(const AttrValue& v);

/// Attributes of a node, ordered by name (so printing and serialising are stable).
class Attrs {
 public:
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  /// Removes `name` (nothing when absent).
  void erase(const std::string& name) { values_.erase(name); }
  const AttrValue* find(const std::string& name) const;
  /// A required attribute, for code that runs on checked nodes (ir::verify's I4, or
  /// ir::check_attr_kinds): absent or of another kind is an internal error (QBC_CHECK naming
  /// the key, exit 70). Code that reads unchecked nodes uses ir/op_params.h, whose errors
  /// are Status values naming the node and the key.
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  /// An optional attribute: `fallback` when absent, which every caller states; of another
  /// kind is an internal error as above.
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_float(const std::string& name, double fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  /// List attributes; empty when absent (the lists' own "none"), of another kind is an
  /// internal error.
  std::vector<int64_t> get_ints(const std::string& name) const;
  std::vector<double> get_floats(const std::string& name) const;
  const std::map<std::string, AttrValue>& all() const { return values_; }
  bool operator==(const Attrs& o) const { return values_ == o.values_; }

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace qbc::ir
