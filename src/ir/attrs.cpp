#include "qbc/ir/attrs.h"

namespace qbc::ir {

const char* attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::kInt: return "int";
    case AttrKind::kFloat: return "float";
    case AttrKind::kString: return "string";
    case AttrKind::kInts: return "int list";
    case AttrKind::kFloats: return "float list";
  }
  return "?";
}

AttrKind attr_kind(const AttrValue& v) { return static_cast<AttrKind>(v.index()); }

const AttrValue* Attrs::find(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

int64_t Attrs::get_int(const std::string& name, int64_t fallback) const {
  const AttrValue* v = find(name);
  return v && std::holds_alternative<int64_t>(*v) ? std::get<int64_t>(*v) : fallback;
}

double Attrs::get_float(const std::string& name, double fallback) const {
  const AttrValue* v = find(name);
  return v && std::holds_alternative<double>(*v) ? std::get<double>(*v) : fallback;
}

std::string Attrs::get_string(const std::string& name, const std::string& fallback) const {
  const AttrValue* v = find(name);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : fallback;
}

std::vector<int64_t> Attrs::get_ints(const std::string& name) const {
  const AttrValue* v = find(name);
  return v && std::holds_alternative<std::vector<int64_t>>(*v) ? std::get<std::vector<int64_t>>(*v)
                                                               : std::vector<int64_t>{};
}

std::vector<double> Attrs::get_floats(const std::string& name) const {
  const AttrValue* v = find(name);
  return v && std::holds_alternative<std::vector<double>>(*v) ? std::get<std::vector<double>>(*v)
                                                              : std::vector<double>{};
}

}  // namespace qbc::ir
