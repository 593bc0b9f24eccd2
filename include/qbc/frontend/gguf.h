// GGUF reader (versions 2 and 3): metadata key/values, the tensor table, and
// zero-copy tensor data in a memory mapping, plus float32 decoding of F32, F16,
// BF16, Q8_0, Q4_0 and Q5_0 tensors. Every malformed input is reported as a
// Status naming the file and the key or tensor; nothing throws or aborts on bad
// input.
//
// Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, the
// key/values, the tensor infos, padding to `general.alignment` (default 32),
// then the data section; each tensor's offset is relative to that section.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/frontend/mapped_file.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// Type of a GGUF metadata value (the ids are the file format's).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

/// Returns the lower-case name of `type`, e.g. "uint32".
std::string_view gguf_type_name(GgufType type);

/// A ggml tensor element type (the ids are ggml's `enum ggml_type`).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

/// Storage traits of a ggml type: `block_size` elements take `type_size` bytes.
struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  ///< ggml's name, e.g. "q8_0".
  uint32_t block_size;
  uint32_t type_size;
  bool decodable;  ///< True iff gguf_decode_f32() supports it.
};

/// The traits of ggml type id `id`, or nullptr for ids that do not name a
/// current ggml type (unknown or removed, like 4 and 5).
const GgmlTypeTraits* ggml_type_traits(uint32_t id);

/// The name of `type`, e.g. "q4_0".
std::string_view ggml_type_name(GgmlType type);

/// One metadata value. Scalars live in the field for their type; arrays record
/// their element type and fill one of the `*_array` fields.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t uint_value = 0;   ///< kUint8 .. kUint64, and kBool as 0 / 1.
  int64_t int_value = 0;     ///< kInt8 .. kInt64.
  double float_value = 0.0;  ///< kFloat32, kFloat64.
  std::string string_value;  ///< kString.

  GgufType array_type = GgufType::kUint8;  ///< Element type when type == kArray.
  std::vector<uint64_t> uint_array;        ///< Unsigned and bool elements.
  std::vector<int64_t> int_array;          ///< Signed integer elements.
  std::vector<double> float_array;         ///< Float elements.
  std::vector<std::string> string_array;   ///< String elements.
  std::vector<GgufValue> nested_array;     ///< Array elements (arrays of arrays).

  /// Number of elements when type == kArray, else 0.
  size_t array_size() const;
  /// A short human-readable form, e.g. `uint32 512` or `array<string>[512]`.
  std::string summary() const;
};

/// One key/value of the metadata, in file order.
struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

/// One entry of the tensor table, with a view of its bytes in the mapping.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  /// ggml order: dims[0] (ne[0]) varies fastest. 1 to 4 entries.
  std::vector<int64_t> dims;
  /// Offset from the start of the data section (a multiple of the alignment).
  uint64_t offset = 0;
  /// Bytes taken by the tensor: num_elements / block_size * type_size.
  uint64_t byte_size = 0;
  /// The tensor's bytes inside the mapping.
  ByteSpan data;

  /// Number of elements (product of dims; validated not to overflow).
  int64_t num_elements() const;
  /// Row-major (PyTorch) shape: `dims` reversed.
  std::vector<int64_t> shape() const;
};

/// A memory-mapped, validated GGUF file. Move-only; tensor spans stay valid for
/// the lifetime of the object (also after moves).
class GgufFile {
 public:
  /// Maps and validates `path`. Errors: kNotFound (no such file), kDataLoss
  /// (truncated: a count, string, array or tensor runs past the end of the
  /// file), kUnimplemented (GGUF v1, a newer version or big-endian files),
  /// kInvalidArgument (anything else malformed). Messages start with the path
  /// and name the key or tensor at fault.
  static StatusOr<GgufFile> open(const std::filesystem::path& path);

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;

  /// The path the file was opened with.
  const std::filesystem::path& path() const { return file_.path(); }
  /// Format version (2 or 3).
  uint32_t version() const { return version_; }
  /// Data alignment in bytes (`general.alignment`, default 32).
  uint64_t alignment() const { return alignment_; }
  /// Absolute file offset of the data section.
  uint64_t data_offset() const { return data_offset_; }

  /// All key/values in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  /// The value of `key`, or nullptr.
  const GgufValue* find(std::string_view key) const;
  /// True iff `key` is present.
  bool has(std::string_view key) const { return find(key) != nullptr; }

  /// Typed getters. kNotFound when `key` is missing, kInvalidArgument when it
  /// has another type; both messages name the file and the key.
  StatusOr<std::string> get_string(std::string_view key) const;
  /// Any integer type; kInvalidArgument when a uint64 value exceeds int64.
  StatusOr<int64_t> get_int(std::string_view key) const;
  /// float32 or float64.
  StatusOr<double> get_float(std::string_view key) const;
  StatusOr<bool> get_bool(std::string_view key) const;
  StatusOr<std::vector<std::string>> get_string_array(std::string_view key) const;
  /// Arrays of float32 or float64.
  StatusOr<std::vector<double>> get_float_array(std::string_view key) const;
  /// Arrays of any integer type (uint64 elements must fit int64).
  StatusOr<std::vector<int64_t>> get_int_array(std::string_view key) const;

  /// The tensor table in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const GgufTensor* find_tensor(std::string_view name) const;
  /// The tensor called `name`, or kNotFound naming it and the file.
  StatusOr<const GgufTensor*> get_tensor(std::string_view name) const;
  /// Replaces `*out` by the tensor decoded to float32, in ggml order (which is
  /// also row-major order for shape()). kUnimplemented naming the tensor and
  /// its type for types that cannot be decoded yet.
  Status read_f32(const GgufTensor& tensor, std::vector<float>* out) const;
  /// read_f32() by name; kNotFound when there is no such tensor.
  Status read_f32(std::string_view name, std::vector<float>* out) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  StatusOr<const GgufValue*> lookup(std::string_view key) const;

  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

/// Decodes `count` elements of `type` from `data` into `out` (ggml block
/// layouts). `data.size` must be count / block_size * type_size and `count` a
/// multiple of the block size (kInvalidArgument otherwise). kUnimplemented for
/// types that are not decodable.
Status gguf_decode_f32(GgmlType type, ByteSpan data, int64_t count, float* out);

}  // namespace qbc::frontend
