// NumPy .npy files: the calibration sample format the vendor toolchain accepts.
//
// Format versions 1.0, 2.0 and 3.0 are read: the magic "\x93NUMPY", a version, a little-endian
// header length (2 bytes in 1.0, 4 in 2.0/3.0), then a Python dict literal
// `{'descr': '<f4', 'fortran_order': False, 'shape': (1, 512, 64), }` padded to a multiple of
// 64 bytes, then the raw data. qbc reads float arrays only (`<f2`, `<f4`, `<f8`, converted to
// float32) in C order, and writes float32 `<f4` in C order. Everything else (Fortran order,
// big-endian, integer/object/structured dtypes, truncated data, a shape that disagrees with the
// data size, an absurd header) is a Status naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::calib {

/// The element types qbc reads from .npy files.
enum class NpyDtype {
  kF16,  ///< `<f2`, IEEE half precision.
  kF32,  ///< `<f4`.
  kF64,  ///< `<f8`.
};

/// The NumPy descr of `dtype`, e.g. "<f4".
std::string_view npy_descr(NpyDtype dtype);
/// The size in bytes of one element of `dtype`.
int64_t npy_itemsize(NpyDtype dtype);

/// The largest header length accepted, in bytes. NumPy itself refuses headers over 10,000 bytes
/// by default; a float array's header is under 128.
inline constexpr uint64_t kMaxNpyHeaderBytes = 1 << 16;

/// What an .npy header says, checked against the file size.
struct NpyHeader {
  /// Format version, 1, 2 or 3.
  int major_version = 1;
  /// Element type.
  NpyDtype dtype = NpyDtype::kF32;
  /// Row-major shape; empty for a 0-d array.
  std::vector<int64_t> shape;
  /// Byte offset of the data from the start of the file.
  uint64_t data_offset = 0;

  /// Product of `shape` (1 for a 0-d array).
  int64_t num_elements() const;
  /// num_elements() times the item size.
  uint64_t data_bytes() const;
};

/// `shape` as text, e.g. "[1, 512, 64]".
std::string shape_string(const std::vector<int64_t>& shape);

/// Parses the header at the start of `bytes` (at least the whole header; the data may be
/// missing) of a file of `file_size` bytes. `name` is used in messages. kInvalidArgument for a
/// bad magic, version, dict, dtype, order or shape, and for data longer than the shape implies;
/// kDataLoss when the header or the data is cut short.
StatusOr<NpyHeader> parse_npy_header(std::string_view bytes, uint64_t file_size,
                                     const std::string& name);

/// Reads and checks only the header of `path` (a few hundred bytes), for fast validation.
/// kNotFound when the file does not exist; otherwise as parse_npy_header().
StatusOr<NpyHeader> read_npy_header(const std::filesystem::path& path);

/// Reads `path` as float32: the header is checked as by read_npy_header(), the data converted
/// from f16/f64 when needed. `shape` may be null.
Status read_npy(const std::filesystem::path& path, std::vector<float>* data,
                std::vector<int64_t>* shape = nullptr);

/// The header bytes (magic through padding) of an array with NumPy descr `descr`, order and
/// shape, in format version `major_version` (1, 2 or 3). Used by the writer, and by tests to
/// build other dtypes and malformed files.
std::string npy_header_bytes(std::string_view descr, bool fortran_order,
                             const std::vector<int64_t>& shape, int major_version = 1);

/// Writes a float32 C-order .npy file (version 1.0; 2.0 only if the header needs it) holding
/// `data` (product of `shape` floats). Written to a temporary file beside `path` and renamed, so
/// a failure leaves no partial file. kInvalidArgument when the sizes disagree; errors name the
/// path. With `dtype` kF16 the values are stored as IEEE half ("<f2", each rounded once to
/// nearest even); kF32 and kF16 are the types it writes.
Status write_npy(const std::filesystem::path& path, const std::vector<int64_t>& shape,
                 const float* data, NpyDtype dtype = NpyDtype::kF32);

/// Converts IEEE half-precision bits to float (subnormals, infinities and NaN included).
float half_to_float(uint16_t bits);

}  // namespace qbc::calib
