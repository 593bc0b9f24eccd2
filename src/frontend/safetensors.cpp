// safetensors file parsing and validation (see qbc/frontend/safetensors.h).
//
// Layout: u64 little-endian header length N, N bytes of JSON, then the data
// area. The JSON object maps tensor names to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets relative to the data area) plus an
// optional "__metadata__" string map.
#include "qbc/frontend/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "qbc/support/quote.h"
#include "qbc/tensorfile/safetensors_format.h"
#include "safetensors_json.h"

namespace qbc::frontend {
namespace {

using Json = nlohmann::json;

// Reads a JSON integer into `*out`, rejecting floats, negatives and non-numbers.
bool json_to_u64(const Json& value, uint64_t* out) {
  if (!value.is_number_unsigned()) return false;
  *out = value.get<uint64_t>();
  return true;
}

std::string describe_json_type(const Json& value) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return "negative integer";
  return value.type_name();
}

// Validates one header entry and fills `*t` (except `data` and `file`).
Status parse_tensor_entry(const std::string& name, const Json& entry, uint64_t data_size,
                          SafetensorsTensor* t) {
  t->name = name;
  if (!entry.is_object()) {
    return invalid_argument("entry is a JSON ", entry.type_name(), ", expected an object");
  }
  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return invalid_argument("missing 'dtype'");
  if (!dtype_it->is_string()) {
    return invalid_argument("'dtype' is a JSON ", dtype_it->type_name(), ", expected a string");
  }
  const std::string& dtype_name_str = dtype_it->get_ref<const std::string&>();
  const std::optional<tensorfile::DType> dtype = tensorfile::parse_dtype(dtype_name_str);
  if (!dtype) return invalid_argument("unknown dtype ", quote_prefix(dtype_name_str));
  t->dtype = *dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return invalid_argument("missing 'shape'");
  if (!shape_it->is_array()) {
    return invalid_argument("'shape' is a JSON ", shape_it->type_name(), ", expected an array");
  }
  uint64_t num_elements = 1;
  for (size_t i = 0; i < shape_it->size(); ++i) {
    uint64_t dim = 0;
    if (!json_to_u64((*shape_it)[i], &dim)) {
      return invalid_argument("shape[", i, "] is a ", describe_json_type((*shape_it)[i]),
                              ", expected a non-negative integer");
    }
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(num_elements, dim, &num_elements) ||
        num_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument("shape ", clip_prefix(shape_it->dump()),
                              " has an element count that overflows");
    }
    t->shape.push_back(static_cast<int64_t>(dim));
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) return invalid_argument("missing 'data_offsets'");
  if (!offsets_it->is_array() || offsets_it->size() != 2 ||
      !json_to_u64((*offsets_it)[0], &t->begin) || !json_to_u64((*offsets_it)[1], &t->end)) {
    return invalid_argument("'data_offsets' ", clip_prefix(offsets_it->dump()),
                            " is not an array of two non-negative integers");
  }
  if (t->begin > t->end) {
    return invalid_argument("data_offsets [", t->begin, ", ", t->end, "]: begin > end");
  }
  if (t->end > data_size) {
    return data_loss("data_offsets [", t->begin, ", ", t->end, "] exceed the data area of ",
                     data_size, " bytes (file truncated?)");
  }
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(num_elements, static_cast<uint64_t>(tensorfile::dtype_size(*dtype)),
                             &expected_bytes) ||
      expected_bytes != t->end - t->begin) {
    return invalid_argument("shape ", clip_prefix(shape_it->dump()), " of ", dtype_name_str,
                            " needs ", num_elements, " x ", tensorfile::dtype_size(*dtype),
                            " bytes but data_offsets [", t->begin, ", ", t->end, "] span ",
                            t->end - t->begin);
  }
  return ok_status();
}

Status parse_metadata(const Json& value, std::map<std::string, std::string>* out) {
  if (!value.is_object()) {
    return invalid_argument("'__metadata__' is a JSON ", value.type_name(),
                            ", expected an object of strings");
  }
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return invalid_argument("'__metadata__' key ", quote_prefix(key), " is a JSON ",
                              item.type_name(), ", expected a string");
    }
    (*out)[key] = item.get<std::string>();
  }
  return ok_status();
}

// Rejects tensors whose byte ranges overlap. `tensors` is sorted by name.
Status check_overlaps(const std::vector<SafetensorsTensor>& tensors) {
  std::vector<const SafetensorsTensor*> by_offset;
  by_offset.reserve(tensors.size());
  for (const SafetensorsTensor& t : tensors) {
    if (t.begin != t.end) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsTensor& prev = *by_offset[i - 1];
    const SafetensorsTensor& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      return invalid_argument("tensor ", quote_prefix(cur.name), ": data_offsets [", cur.begin,
                              ", ", cur.end, "] overlap tensor ", quote_prefix(prev.name), " [",
                              prev.begin, ", ", prev.end, "]");
    }
  }
  return ok_status();
}

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // Validated at load not to overflow.
  return n;
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  QBC_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  const std::string where = path.string();
  const size_t file_size = mapped.size();
  if (file_size < 8) {
    return data_loss(where, ": file is ", file_size,
                     " bytes, shorter than the 8-byte safetensors header length");
  }
  uint64_t header_size = 0;
  std::memcpy(&header_size, mapped.data(), sizeof(header_size));
  if (header_size > tensorfile::kMaxSafetensorsHeaderBytes) {
    return invalid_argument(where, ": header length ", header_size, " exceeds the limit of ",
                            tensorfile::kMaxSafetensorsHeaderBytes,
                            " bytes (not a safetensors file?)");
  }
  if (header_size > file_size - 8) {
    return data_loss(where, ": header length ", header_size, " runs past the end of the ",
                     file_size, "-byte file");
  }
  const std::string_view text(reinterpret_cast<const char*>(mapped.data() + 8), header_size);
  StatusOr<Json> parsed = parse_json_strict(text);
  if (!parsed.ok()) return parsed.status().with_context(where, ": header");
  const Json& header = *parsed;
  if (!header.is_object()) {
    return invalid_argument(where, ": header is a JSON ", header.type_name(),
                            ", expected an object");
  }

  SafetensorsFile file;
  file.header_size_ = header_size;
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_size - data_start;
  file.tensors_.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      QBC_RETURN_IF_ERROR(parse_metadata(entry, &file.metadata_).with_context(where));
      continue;
    }
    SafetensorsTensor t;
    QBC_RETURN_IF_ERROR(parse_tensor_entry(name, entry, data_size, &t)
                            .with_context(where, ": tensor ", quote_prefix(name)));
    t.data = mapped.bytes().subspan(data_start + t.begin, t.end - t.begin);
    t.file = path;
    file.tensors_.push_back(std::move(t));
  }
  // nlohmann objects iterate in key order, so tensors_ is already sorted by name.
  QBC_RETURN_IF_ERROR(check_overlaps(file.tensors_).with_context(where));
  file.file_ = std::move(mapped);
  return file;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it =
      std::lower_bound(tensors_.begin(), tensors_.end(), name,
                       [](const SafetensorsTensor& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

Status read_f32(const SafetensorsTensor& tensor, std::vector<float>* out) {
  if (!tensorfile::dtype_converts_to_f32(tensor.dtype)) {
    return unimplemented(tensor.file.string(), ": tensor '", tensor.name,
                         "': ", tensorfile::dtype_name(tensor.dtype),
                         " cannot be converted to F32");
  }
  const size_t count = static_cast<size_t>(tensor.num_elements());
  out->resize(count);
  QBC_RETURN_IF_ERROR(
      tensorfile::convert_to_f32(tensor.dtype, tensor.data.data, count, out->data()));
  release_pages(tensor.data);  // the float copy is what callers keep
  return ok_status();
}

StatusOr<const float*> f32_data(const SafetensorsTensor& tensor) {
  if (tensor.dtype != tensorfile::DType::kF32) {
    return invalid_argument(tensor.file.string(), ": tensor '", tensor.name, "' is ",
                            tensorfile::dtype_name(tensor.dtype), ", not F32");
  }
  if (reinterpret_cast<uintptr_t>(tensor.data.data) % alignof(float) != 0) {
    return invalid_argument(tensor.file.string(), ": tensor '", tensor.name,
                            "' is not 4-byte aligned in the file; use read_f32()");
  }
  return reinterpret_cast<const float*>(tensor.data.data);
}

}  // namespace qbc::frontend
