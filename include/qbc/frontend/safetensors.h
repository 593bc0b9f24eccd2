// safetensors reader: one memory-mapped file (SafetensorsFile) or a whole
// checkpoint, single-file or sharded through model.safetensors.index.json
// (SafetensorsCheckpoint). Tensor data is exposed zero-copy as spans into the
// mapping. Every malformed input is reported as a Status naming the file and,
// where there is one, the tensor; nothing here throws or aborts on bad input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/frontend/mapped_file.h"
#include "qbc/support/status.h"
#include "qbc/tensorfile/dtype.h"

namespace qbc::frontend {

/// One tensor of a safetensors file: its header entry plus a view of its bytes.
struct SafetensorsTensor {
  std::string name;
  tensorfile::DType dtype = tensorfile::DType::kF32;
  /// Row-major (PyTorch) shape; empty for a scalar.
  std::vector<int64_t> shape;
  /// `data_offsets` from the header: [begin, end) relative to the data area.
  uint64_t begin = 0;
  uint64_t end = 0;
  /// The tensor's bytes inside the mapping (little-endian, any alignment).
  ByteSpan data;
  /// The file holding the tensor (a shard of a sharded checkpoint).
  std::filesystem::path file;

  /// Number of elements (product of `shape`; validated not to overflow).
  int64_t num_elements() const;
};

/// A memory-mapped, validated safetensors file. Move-only; tensor spans stay
/// valid for the lifetime of the object (also after moves).
class SafetensorsFile {
 public:
  /// Maps and validates `path`. Errors are kNotFound (no such file),
  /// kDataLoss (truncated: data or header past the end of the file) or
  /// kInvalidArgument (malformed header); messages start with the path.
  static StatusOr<SafetensorsFile> open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  /// The path the file was opened with.
  const std::filesystem::path& path() const { return file_.path(); }
  /// Tensors sorted by name.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const SafetensorsTensor* find(std::string_view name) const;
  /// The `__metadata__` string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Size of the JSON header in bytes (the u64 at the start of the file).
  uint64_t header_size() const { return header_size_; }

 private:
  SafetensorsFile() = default;

  MappedFile file_;
  uint64_t header_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// A whole checkpoint: one tensor table across one or more safetensors files.
class SafetensorsCheckpoint {
 public:
  /// Opens `path`, which is one of:
  ///  - a folder: uses `model.safetensors.index.json` if present, else
  ///    `model.safetensors`, else its only `*.safetensors` file;
  ///  - an index file (`*.index.json`): loads every shard it names;
  ///  - a single `.safetensors` file.
  /// Besides each shard's own validation, the index must be a JSON object
  /// whose "weight_map" maps each tensor name to a shard file name (kept
  /// inside the index folder). A missing shard or a tensor absent from its
  /// shard is kDataLoss; a malformed index is kInvalidArgument. Tensors that a
  /// shard holds but the weight map does not list are ignored.
  static StatusOr<SafetensorsCheckpoint> open(const std::filesystem::path& path);

  SafetensorsCheckpoint(SafetensorsCheckpoint&&) = default;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) = default;

  /// All tensors of all shards, sorted by name; each one's `file` names its shard.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const SafetensorsTensor* find(std::string_view name) const;
  /// The tensor called `name`, or kNotFound naming it and the checkpoint.
  StatusOr<const SafetensorsTensor*> get(std::string_view name) const;
  /// The shard files, in the order they were opened.
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  /// The path given to open().
  const std::filesystem::path& path() const { return path_; }

  /// Replaces `*out` by tensor `name` converted to float32 (see the free
  /// read_f32()). kNotFound when the tensor does not exist.
  Status read_f32(std::string_view name, std::vector<float>* out) const;

 private:
  SafetensorsCheckpoint() = default;

  std::filesystem::path path_;
  std::vector<SafetensorsFile> shards_;
  std::vector<SafetensorsTensor> tensors_;
};

/// Replaces `*out` by the elements of `tensor` converted to float32 (F32, F16,
/// BF16, F64, I8, U8). kUnimplemented naming the tensor for other dtypes.
Status read_f32(const SafetensorsTensor& tensor, std::vector<float>* out);

/// The data of an F32 tensor as a zero-copy float pointer. kInvalidArgument when
/// the dtype is not F32 or the data is not 4-byte aligned in the mapping (then
/// use read_f32()).
StatusOr<const float*> f32_data(const SafetensorsTensor& tensor);

}  // namespace qbc::frontend
