// The stream kernels of grouped weights in groups of 32 (the compact 4-bit image and the 8-bit
// groups of its V and head): one activation row against a block of weight rows stored back to
// back, read as one stream of 32-code groups in address order, with the zero-point
// corrections done in the kernel's store. Stream group q is channel q / gt's group q % gt; it
// meets the row's group q % gt. The row is laid out once per instruction (StreamRow) and
// repeated past its end, so a step of 16 groups that crosses into the next channel reads its
// activations in place: no per-channel loop, no partial steps at row ends, and no separate
// correction pass over a buffer of raw sums (the paths of matmul_kernel.h and int4_kernel.h,
// which every other shape still takes).
#pragma once

#include <cstdint>
#include <vector>

namespace qbc::runtime {

/// Whether the SIMD stream kernels run on this host (AVX-512 VNNI): off when the environment
/// sets QBC_EXEC_NO_VNNI or QBC_EXEC_NO_STREAM. The functions below work on any host; the
/// matmul takes them only when this is true (elsewhere its older paths are as fast).
bool group_stream_fast();

/// Codes a group of the stream kernels.
constexpr int64_t kStreamGroup = 32;

/// One activation row in the layouts the stream kernels read.
class StreamRow {
 public:
  /// For group_stream_i8: x holds kt int8 codes (kt a positive multiple of 32), xz the row's
  /// zero point in [-128, 127]. A row equal to the one last prepared (the same codes, zero
  /// point and layout: every channel tile of a projection reads the same activations) keeps
  /// its layout.
  void prepare_i8(const int8_t* x, int64_t kt, int32_t xz);
  /// For group_stream_i4: the same operands, laid out for packed 4-bit weights.
  void prepare_i4(const int8_t* x, int64_t kt, int32_t xz);

  int64_t kt() const { return kt_; }
  int64_t gt() const { return kt_ / kStreamGroup; }
  int32_t xz() const { return xz_; }
  /// x + 128 as unsigned bytes, u()[i] = x[i % kt] + 128 for i < kt + 32.
  const uint8_t* u() const { return u_.data(); }
  /// Per group its 16 even codes (k = 2i) / odd codes (k = 2i + 1), repeated: byte i of either
  /// is that of group (i / 16) % gt, for i < 16 * gt + 48.
  const int8_t* even() const { return even_.data(); }
  const int8_t* odd() const { return odd_.data(); }
  /// xs()[i] = Σ_{k in group i % gt} (x_k − xz) modulo 2^32, for i < gt + 16.
  const uint32_t* xs() const { return xs_.data(); }

 private:
  enum class Layout { kNone, kI8, kI4 };
  /// Whether the row (x, kt, xz) in `layout` is the one already prepared; else records it.
  bool same(const int8_t* x, int64_t kt, int32_t xz, Layout layout);
  void prepare_sums(const int8_t* x);

  int64_t kt_ = 0;
  int32_t xz_ = 0;
  Layout layout_ = Layout::kNone;
  std::vector<int8_t> x_;  ///< the codes last prepared
  std::vector<uint8_t> u_;
  std::vector<int8_t> even_, odd_;
  std::vector<uint32_t> xs_;
};

/// The weight zero points of a call as the device holds them: none, int32 values, or the
/// compact image's codes (int8, or signed 4-bit packed two a byte, low nibble first). Zero
/// point q of the call (q = j * gt + g) is element first + q of p; for packed int4 codes
/// `first` must be even (the caller splits channels so that it is).
struct StreamZeros {
  enum class Kind { kNone, kI32, kI8, kI4 };
  Kind kind = Kind::kNone;
  const uint8_t* p = nullptr;
  int64_t first = 0;

  /// Zero point q as an integer.
  int32_t at(int64_t q) const;
};

/// For q < n * gt (j = q / gt, g = q % gt), modulo 2^32:
///   out[q] = (accumulate ? out[q] : 0) + Σ_{k in group g} (x_k − xz)(w(j, k) − wz(q))
/// w: n rows of kt int8 codes back to back; wz: the zero points (0 for none). `out` holds
/// int32 values at any alignment. `x` was prepared with prepare_i8.
void group_stream_i8(const StreamRow& x, const int8_t* w, int64_t n, const StreamZeros& wz,
                     bool accumulate, uint8_t* out);

/// The same for signed 4-bit codes packed two a byte (low nibble first), rows of kt / 2 bytes
/// back to back. `x` was prepared with prepare_i4.
void group_stream_i4(const StreamRow& x, const uint8_t* w, int64_t n, const StreamZeros& wz,
                     bool accumulate, uint8_t* out);

/// group_stream_i4 for `rows` prepared rows against the same weights, row r's sums at
/// out + r * ldo bytes: each weight register is decoded once for up to four rows (prefill).
void group_stream_i4_rows(const StreamRow* x, int64_t rows, const uint8_t* w, int64_t n,
                          const StreamZeros& wz, bool accumulate, uint8_t* out, int64_t ldo);

/// group_stream_i8 / _i4 on the portable loops whatever the host (for tests that compare them).
void group_stream_i8_portable(const StreamRow& x, const int8_t* w, int64_t n, const StreamZeros& wz,
                              bool accumulate, uint8_t* out);
void group_stream_i4_portable(const StreamRow& x, const uint8_t* w, int64_t n,
                              const StreamZeros& wz, bool accumulate, uint8_t* out);

}  // namespace qbc::runtime
