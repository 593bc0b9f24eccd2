// The safetensors writer: a streaming writer for files of any size, and write_safetensors() for
// tensors already in memory (tests, small tools), built on it.
//
// The header is computed from the tensor specs up front, the data is then appended tensor by
// tensor (in chunks when wanted) to `<path>.tmp`, and finish() fsyncs and renames the file into
// place, so readers never see a partial file and memory stays bounded for multi-GB models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"
#include "qbc/tensorfile/dtype.h"

namespace qbc::tensorfile {

/// Name, dtype and row-major shape of one tensor of a safetensors file.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

/// Writes one safetensors file whose tensor list is known up front, streaming the data.
///
/// Usage: create() with the specs, then for each tensor of tensors() (in that order) either one
/// append() with all of its bytes or any number of write() calls with consecutive chunks, then
/// finish(). Tensors are laid out as the reference writer does: by descending element size, then
/// by name, so each tensor's data is aligned to its element size; the header lists them in that
/// order after `__metadata__` and is padded with spaces to a multiple of 8 bytes.
///
/// The data goes to `<path>.tmp`; finish() fsyncs it and renames it to `path`. A writer
/// destroyed before finish() succeeded removes the temporary file and leaves `path` untouched.
/// The first error (misuse or I/O) is sticky: later calls return it again. Two writers must
/// not target the same path at the same time. Move-only.
class SafetensorsStreamWriter {
 public:
  /// Validates `tensors`, builds the header and creates `<path>.tmp` holding it.
  /// kInvalidArgument, with the message starting with `path`, for an empty, duplicate or
  /// reserved ("__metadata__") name, a negative dim, a size that overflows, a header that is not
  /// valid UTF-8 or larger than kMaxSafetensorsHeaderBytes, or when the file cannot be created.
  static StatusOr<SafetensorsStreamWriter> create(
      const std::filesystem::path& path, std::vector<TensorSpec> tensors,
      const std::map<std::string, std::string>& metadata = {});

  SafetensorsStreamWriter(SafetensorsStreamWriter&& other) noexcept;
  SafetensorsStreamWriter& operator=(SafetensorsStreamWriter&& other) noexcept;
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;
  /// Removes the temporary file unless finish() succeeded.
  ~SafetensorsStreamWriter();

  /// The tensors in file order: the order in which their data must be written.
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  /// The number of data bytes of tensors()[i] (product of its shape times the element size).
  uint64_t byte_size(size_t i) const { return sizes_[i]; }
  /// The size the finished file will have: 8 + header + all tensor data.
  uint64_t file_size() const;
  /// The final path given to create().
  const std::filesystem::path& path() const { return path_; }

  /// Writes all `size` bytes of tensor `name` at once. The tensor must be the next one in
  /// tensors() order (the previous one complete) and `size` its exact byte size.
  Status append(std::string_view name, const void* data, size_t size);

  /// Appends a chunk of tensor `name`: either the tensor being written (chunks are
  /// consecutive) or, once that one is complete, the next tensor in tensors() order. The bytes
  /// written for a tensor may not exceed its byte size; a tensor left short is an error at the
  /// next tensor or at finish(). Errors name the path and the tensor.
  Status write(std::string_view name, const void* data, size_t size);

  /// Checks that every tensor got exactly its bytes, then flushes, fsyncs and renames the file to
  /// path(). After success the writer is closed and further calls fail.
  Status finish();

 private:
  SafetensorsStreamWriter() = default;
  Status usable() const;                // error_, or an error once finished or moved from.
  Status begin(std::string_view name);  // Closes the current tensor and starts `name`.
  Status fail(Status status);           // Records the first error and removes the file.
  Status raw_write(const void* data, size_t size);
  Status flush_buffer();
  void discard();

  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  std::vector<TensorSpec> tensors_;
  std::vector<uint64_t> sizes_;
  uint64_t header_bytes_ = 0;  ///< 8 + padded JSON header.
  int fd_ = -1;
  std::vector<uint8_t> buffer_;  ///< Small writes are batched here.
  size_t next_ = 0;              ///< Index of the tensor being (or next to be) written.
  uint64_t written_ = 0;         ///< Bytes written of tensors_[next_] so far.
  bool started_ = false;         ///< Whether tensors_[next_] got a write() already.
  bool finished_ = false;
  Status error_;  ///< The first error; sticky.
};

/// One tensor to write: name, dtype, row-major shape and little-endian bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  /// Exactly product(shape) * dtype_size(dtype) bytes.
  std::vector<uint8_t> data;
};

/// Builds a tensor of `dtype` (F32, F16 or BF16; others are a QBC_CHECK
/// failure) from float values, rounding to nearest-even. `values.size()` must
/// equal the product of `shape` (checked by write_safetensors()).
TensorToWrite make_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                          const std::vector<float>& values);

/// Writes `tensors` and, when not empty, `metadata` as `__metadata__` to `path`, atomically,
/// with SafetensorsStreamWriter (so the data is laid out in its order, not the given one).
/// kInvalidArgument for an empty, duplicate or reserved ("__metadata__") name, a negative dim,
/// or a data size that does not match shape and dtype; the message names the path and the
/// tensor. kInvalidArgument naming the path on I/O errors.
Status write_safetensors(const std::filesystem::path& path,
                         const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace qbc::tensorfile
