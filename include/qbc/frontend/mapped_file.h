// A read-only memory mapping of a whole file, owned RAII-style.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "qbc/support/status.h"

namespace qbc::frontend {

/// A non-owning view of bytes, e.g. a tensor's data inside a MappedFile.
struct ByteSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;

  /// True iff the span holds no bytes.
  bool empty() const { return size == 0; }
  /// The bytes [offset, offset + count); the caller guarantees they lie inside.
  ByteSpan subspan(size_t offset, size_t count) const { return {data + offset, count}; }
};

/// Tells the kernel the whole pages inside `span` (part of a MappedFile) will not be
/// needed soon, so they leave the process's resident set; a later access reads them
/// from the file again. Used after converting a tensor, so reading a multi-GB model
/// tensor by tensor keeps memory at one tensor. No-op for an empty span.
void release_pages(ByteSpan span);

/// A read-only, private memory mapping of a whole file. Move-only; unmaps on
/// destruction. Pointers into the mapping stay valid across moves.
class MappedFile {
 public:
  /// Maps `path` read-only. kNotFound when it does not exist, kInvalidArgument
  /// when it is not a regular file or cannot be opened or mapped. An empty file
  /// maps to an empty span.
  static StatusOr<MappedFile> open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  /// The path the file was opened with.
  const std::filesystem::path& path() const { return path_; }
  /// First byte of the mapping (nullptr for an empty file).
  const uint8_t* data() const { return data_; }
  /// Size of the file in bytes.
  size_t size() const { return size_; }
  /// The whole file as a span.
  ByteSpan bytes() const { return {data_, size_}; }

 private:
  void reset();

  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace qbc::frontend
