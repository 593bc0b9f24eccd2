// GGUF metadata values, typed getters and the tensor table accessors.
#include <limits>
#include <sstream>

#include "qbc/frontend/gguf.h"

namespace qbc::frontend {

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

namespace {

bool is_unsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64;
}
bool is_signed(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}
bool is_float(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

std::string type_description(const GgufValue& v) {
  if (v.type != GgufType::kArray) return std::string(gguf_type_name(v.type));
  return "array<" + std::string(gguf_type_name(v.array_type)) + ">";
}

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

}  // namespace

size_t GgufValue::array_size() const {
  if (type != GgufType::kArray) return 0;
  return uint_array.size() + int_array.size() + float_array.size() + string_array.size() +
         nested_array.size();
}

std::string GgufValue::summary() const {
  std::ostringstream os;
  os << type_description(*this);
  if (type == GgufType::kArray) {
    os << "[" << array_size() << "]";
  } else if (type == GgufType::kBool) {
    os << (uint_value ? " true" : " false");
  } else if (is_unsigned(type)) {
    os << " " << uint_value;
  } else if (is_signed(type)) {
    os << " " << int_value;
  } else if (is_float(type)) {
    os << " " << float_value;
  } else {
    os << " \"" << string_value << "\"";
  }
  return os.str();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

StatusOr<const GgufValue*> GgufFile::lookup(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return not_found(path().string(), ": no metadata key '", key, "'");
  return v;
}

namespace {
Status wrong_type(const std::filesystem::path& path, std::string_view key, const GgufValue& v,
                  std::string_view wanted) {
  return invalid_argument(path.string(), ": metadata key '", key, "' is ", type_description(v),
                          ", expected ", wanted);
}
}  // namespace

StatusOr<std::string> GgufFile::get_string(std::string_view key) const {
  QBC_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
  if (v->type != GgufType::kString) return wrong_type(path(), key, *v, "string");
  return v->string_value;
}

StatusOr<int64_t> GgufFile::get_int(std::string_view key) const {
  QBC_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
  if (is_signed(v->type)) return v->int_value;
  if (!is_unsigned(v->type)) return wrong_type(path(), key, *v, "an integer");
  if (v->uint_value > kInt64Max) {
    return invalid_argument(path().string(), ": metadata key '", key, "' = ", v->uint_value,
                            " does not fit int64");
  }
  return static_cast<int64_t>(v->uint_value);
}

StatusOr<double> GgufFile::get_float(std::string_view key) const {
  QBC_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
  if (!is_float(v->type)) return wrong_type(path(), key, *v, "float32 or float64");
  return v->float_value;
}

StatusOr<bool> GgufFile::get_bool(std::string_view key) const {
  QBC_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
  if (v->type != GgufType::kBool) return wrong_type(path(), key, *v, "bool");
  return v->uint_value != 0;
}

StatusOr<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  QBC_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
  if (v->type != GgufType::kArray || v->array_type != GgufType::kString) {
    return wrong_type(path(), key, *v, "array<string>");
  }
  return v->string_array;
}

StatusOr<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  QBC_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
  if (v->type != GgufType::kArray || !is_float(v->array_type)) {
    return wrong_type(path(), key, *v, "array<float32> or array<float64>");
  }
  return v->float_array;
}

StatusOr<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  QBC_ASSIGN_OR_RETURN(const GgufValue* v, lookup(key));
  if (v->type != GgufType::kArray) return wrong_type(path(), key, *v, "an array of integers");
  if (is_signed(v->array_type)) return v->int_array;
  if (!is_unsigned(v->array_type)) return wrong_type(path(), key, *v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(v->uint_array.size());
  for (size_t i = 0; i < v->uint_array.size(); ++i) {
    if (v->uint_array[i] > kInt64Max) {
      return invalid_argument(path().string(), ": metadata key '", key, "' element ", i, " = ",
                              v->uint_array[i], " does not fit int64");
    }
    out.push_back(static_cast<int64_t>(v->uint_array[i]));
  }
  return out;
}

int64_t GgufTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // Validated at load not to overflow.
  return n;
}

std::vector<int64_t> GgufTensor::shape() const { return {dims.rbegin(), dims.rend()}; }

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<const GgufTensor*> GgufFile::get_tensor(std::string_view name) const {
  if (const GgufTensor* t = find_tensor(name)) return t;
  return not_found(path().string(), ": no tensor '", name, "'");
}

Status GgufFile::read_f32(const GgufTensor& tensor, std::vector<float>* out) const {
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(tensor.type));
  if (traits == nullptr || !traits->decodable) {
    return unimplemented(path().string(), ": tensor '", tensor.name, "': decoding ggml type ",
                         ggml_type_name(tensor.type), " to F32 is not implemented");
  }
  const int64_t count = tensor.num_elements();
  out->resize(static_cast<size_t>(count));
  return gguf_decode_f32(tensor.type, tensor.data, count, out->data())
      .with_context(path().string(), ": tensor '", tensor.name, "'");
}

Status GgufFile::read_f32(std::string_view name, std::vector<float>* out) const {
  QBC_ASSIGN_OR_RETURN(const GgufTensor* t, get_tensor(name));
  return read_f32(*t, out);
}

}  // namespace qbc::frontend
