#include "qbc/ir/attrs.h"

#include "qbc/support/check.h"

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

namespace {

// The value of `name` as T; nullptr when absent. Another kind is a caller's bug: nodes are
// checked against their op's schema before anything reads them.
template <typename T>
const T* typed(const Attrs& a, const std::string& name) {
  const AttrValue* v = a.find(name);
  if (v == nullptr) return nullptr;
  const T* x = std::get_if<T>(v);
  QBC_CHECK(x != nullptr) << "attribute '" << name << "' is " << attr_kind_name(attr_kind(*v))
                          << ", read as another kind";
  return x;
}

template <typename T>
const T& required(const Attrs& a, const std::string& name) {
  const T* x = typed<T>(a, name);
  QBC_CHECK(x != nullptr) << "required attribute '" << name
                          << "' is missing on a node that was not checked against its op's schema";
  return *x;
}

}  // namespace

int64_t Attrs::get_int(const std::string& name) const { return required<int64_t>(*this, name); }
double Attrs::get_float(const std::string& name) const { return required<double>(*this, name); }
std::string Attrs::get_string(const std::string& name) const {
  return required<std::string>(*this, name);
}

int64_t Attrs::get_int(const std::string& name, int64_t fallback) const {
  const int64_t* v = typed<int64_t>(*this, name);
  return v ? *v : fallback;
}

double Attrs::get_float(const std::string& name, double fallback) const {
  const double* v = typed<double>(*this, name);
  return v ? *v : fallback;
}

std::string Attrs::get_string(const std::string& name, const std::string& fallback) const {
  const std::string* v = typed<std::string>(*this, name);
  return v ? *v : fallback;
}

std::vector<int64_t> Attrs::get_ints(const std::string& name) const {
  const std::vector<int64_t>* v = typed<std::vector<int64_t>>(*this, name);
  return v ? *v : std::vector<int64_t>{};
}

std::vector<double> Attrs::get_floats(const std::string& name) const {
  const std::vector<double>* v = typed<std::vector<double>>(*this, name);
  return v ? *v : std::vector<double>{};
}

}  // namespace qbc::ir
