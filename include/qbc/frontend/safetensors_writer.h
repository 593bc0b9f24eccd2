// A small safetensors writer, e.g. for tests and tools that make random-weight
// models. The file is written to a temporary name next to the target and
// renamed into place, so readers never see a partial file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "qbc/frontend/dtype.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

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

/// Writes `tensors` (data in the given order) and, when not empty, `metadata`
/// as `__metadata__` to `path`, atomically (temporary file + rename).
/// kInvalidArgument for an empty, duplicate or reserved ("__metadata__") name,
/// a negative dim, or a data size that does not match shape and dtype; the
/// message names the tensor. kInvalidArgument naming the path on I/O errors.
Status write_safetensors(const std::filesystem::path& path,
                         const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace qbc::frontend
