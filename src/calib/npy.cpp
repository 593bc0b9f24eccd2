// .npy reader and writer (include/qbc/calib/npy.h). The header dict is parsed by a small
// recursive-descent reader of the Python literals NumPy writes (strings, True/False, tuples of
// integers); anything else is reported, never guessed.
#include "qbc/calib/npy.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include "qbc/numerics/fp16.h"
#include "qbc/support/quote.h"

namespace qbc::calib {
namespace {

namespace fs = std::filesystem;

// Float data is copied to and from memory as is: the .npy dtypes qbc uses are little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy.cpp assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

/// Cursor over the header dict text.
class DictReader {
 public:
  DictReader(std::string_view s, const std::string& name) : s_(s), name_(name) {}

  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    skip_ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool at_end() {
    skip_ws();
    return pos_ >= s_.size();
  }
  Status error(std::string_view what) const {
    return invalid_argument(name_, ": malformed .npy header (", what, " at byte ", pos_,
                            " of the dict): ", std::string(s_.substr(0, 120)));
  }
  StatusOr<std::string> string() {
    skip_ws();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
      return error("expected a string");
    }
    const char q = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) out += s_[pos_++];
    if (pos_ >= s_.size()) return error("unterminated string");
    ++pos_;
    return out;
  }
  std::string word() {
    skip_ws();
    std::string out;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
      out += s_[pos_++];
    }
    return out;
  }
  StatusOr<int64_t> integer() {
    std::string w = word();
    if (!w.empty() && (w.back() == 'L' || w.back() == 'l')) w.pop_back();  // Python 2 longs
    if (w.empty() || w.size() > 18) return error("expected a dimension");
    int64_t v = 0;
    for (char c : w) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return error("expected a dimension");
      v = v * 10 + (c - '0');
    }
    return v;
  }

 private:
  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

struct RawHeader {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

StatusOr<RawHeader> parse_dict(std::string_view text, const std::string& name) {
  DictReader r(text, name);
  RawHeader h;
  if (!r.eat('{')) return r.error("expected '{'");
  while (!r.eat('}')) {
    QBC_ASSIGN_OR_RETURN(std::string key, r.string());
    if (!r.eat(':')) return r.error("expected ':'");
    if (key == "descr") {
      if (r.peek('[')) {
        return invalid_argument(name,
                                ": structured dtype in .npy header; calibration data must be a ",
                                "plain float array (<f4, <f2 or <f8)");
      }
      QBC_ASSIGN_OR_RETURN(std::string d, r.string());
      h.descr = d;
    } else if (key == "fortran_order") {
      const std::string w = r.word();
      if (w != "True" && w != "False") return r.error("fortran_order must be True or False");
      h.fortran_order = w == "True";
    } else if (key == "shape") {
      if (!r.eat('(')) return r.error("shape must be a tuple");
      std::vector<int64_t> shape;
      while (!r.eat(')')) {
        QBC_ASSIGN_OR_RETURN(int64_t d, r.integer());
        shape.push_back(d);
        if (!r.eat(',') && !r.peek(')')) return r.error("expected ',' or ')' in shape");
      }
      h.shape = shape;
    } else {
      return r.error("unknown key " + quote_prefix(key));
    }
    if (!r.eat(',') && !r.peek('}')) return r.error("expected ',' or '}'");
  }
  if (!r.at_end()) return r.error("text after '}'");
  return h;
}

StatusOr<NpyDtype> parse_descr(const std::string& d, const std::string& name) {
  if (d == "<f4") return NpyDtype::kF32;
  if (d == "<f2") return NpyDtype::kF16;
  if (d == "<f8") return NpyDtype::kF64;
  if (d.size() >= 2 && d[0] == '>') {
    return invalid_argument(name, ": big-endian dtype ", quote_prefix(d),
                            " is not supported; save little-endian float32 (<f4)");
  }
  if (d.find('O') != std::string::npos) {
    return invalid_argument(name, ": object array (dtype ", quote_prefix(d),
                            ") cannot be calibration data; save a float32 array (<f4)");
  }
  return invalid_argument(name, ": dtype ", quote_prefix(d),
                          " is not supported; calibration data must be float (<f4, <f2 or <f8)");
}

uint32_t read_le(const char* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string format_shape_tuple(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace

std::string_view npy_descr(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::kF16:
      return "<f2";
    case NpyDtype::kF32:
      return "<f4";
    case NpyDtype::kF64:
      return "<f8";
  }
  return "?";
}

int64_t npy_itemsize(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::kF16:
      return 2;
    case NpyDtype::kF32:
      return 4;
    case NpyDtype::kF64:
      return 8;
  }
  return 0;
}

int64_t NpyHeader::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t NpyHeader::data_bytes() const {
  return static_cast<uint64_t>(num_elements()) * static_cast<uint64_t>(npy_itemsize(dtype));
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size() && s.size() < kQuotePrefixBytes; ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  if (s.size() >= kQuotePrefixBytes)
    s += ", \xE2\x80\xA6 (" + std::to_string(shape.size()) + " dims)";
  return s + "]";
}

StatusOr<NpyHeader> parse_npy_header(std::string_view bytes, uint64_t file_size,
                                     const std::string& name) {
  if (bytes.size() < kMagicLen ||
      bytes.substr(0, kMagicLen) != std::string_view(kMagic, kMagicLen)) {
    if (file_size < kMagicLen) {
      return data_loss(name, ": truncated .npy file (", file_size, " bytes)");
    }
    return invalid_argument(name, ": not a .npy file (no \\x93NUMPY magic)");
  }
  if (bytes.size() < 8) return data_loss(name, ": truncated .npy header");
  NpyHeader h;
  h.major_version = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (h.major_version < 1 || h.major_version > 3 || minor != 0) {
    return invalid_argument(name, ": unsupported .npy format version ", h.major_version, ".", minor,
                            " (1.0, 2.0 and 3.0 are supported)");
  }
  const size_t len_bytes = h.major_version == 1 ? 2 : 4;
  const size_t prefix = 8 + len_bytes;
  if (bytes.size() < prefix) return data_loss(name, ": truncated .npy header");
  const uint64_t header_len = read_le(bytes.data() + 8, static_cast<int>(len_bytes));
  if (header_len > kMaxNpyHeaderBytes) {
    return invalid_argument(name, ": .npy header length ", header_len, " is absurd (limit ",
                            kMaxNpyHeaderBytes, " bytes)");
  }
  h.data_offset = prefix + header_len;
  if (h.data_offset > file_size || bytes.size() < h.data_offset) {
    return data_loss(name, ": truncated .npy header (header says ", header_len, " bytes, file has ",
                     file_size, ")");
  }
  std::string_view dict = bytes.substr(prefix, header_len);
  while (!dict.empty() && (dict.back() == '\n' || dict.back() == ' ' || dict.back() == '\0')) {
    dict.remove_suffix(1);
  }
  QBC_ASSIGN_OR_RETURN(RawHeader raw, parse_dict(dict, name));
  if (!raw.descr || !raw.fortran_order || !raw.shape) {
    return invalid_argument(name, ": .npy header lacks ",
                            !raw.descr           ? "'descr'"
                            : !raw.fortran_order ? "'fortran_order'"
                                                 : "'shape'");
  }
  QBC_ASSIGN_OR_RETURN(h.dtype, parse_descr(*raw.descr, name));
  if (*raw.fortran_order) {
    return invalid_argument(name, ": Fortran-order array is not supported; save it in C order ",
                            "(np.ascontiguousarray)");
  }
  h.shape = *raw.shape;
  // Guard the product against overflow before comparing with the file size.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() / 16;
  uint64_t n = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && n > limit / static_cast<uint64_t>(d)) {
      return invalid_argument(name, ": .npy shape ", shape_string(h.shape), " is absurd");
    }
    n *= static_cast<uint64_t>(d);
  }
  const uint64_t have = file_size - h.data_offset;
  const uint64_t want = h.data_bytes();
  if (have < want) {
    return data_loss(name, ": truncated .npy data: shape ", shape_string(h.shape), " of ",
                     npy_descr(h.dtype), " needs ", want, " bytes, the file has ", have);
  }
  if (have > want) {
    return invalid_argument(name, ": .npy header says shape ", shape_string(h.shape), " of ",
                            npy_descr(h.dtype), " (", want, " bytes) but the file has ", have,
                            " data bytes");
  }
  return h;
}

StatusOr<NpyHeader> read_npy_header(const fs::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(name, ": no such file");
  if (!fs::is_regular_file(path, ec)) return invalid_argument(name, ": not a regular file");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return invalid_argument(name, ": cannot read size: ", ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(name, ": cannot open: ", std::strerror(errno));
  std::string buf(12, '\0');
  in.read(buf.data(), 12);
  buf.resize(static_cast<size_t>(in.gcount()));
  // Learn the header length from the prefix, then read exactly the header.
  if (buf.size() >= 10 && buf.compare(0, kMagicLen, kMagic, kMagicLen) == 0) {
    const int major = static_cast<unsigned char>(buf[6]);
    const size_t len_bytes = major == 1 ? 2 : 4;
    if (buf.size() >= 8 + len_bytes) {
      const uint64_t header_len = read_le(buf.data() + 8, static_cast<int>(len_bytes));
      const uint64_t total =
          std::min<uint64_t>(8 + len_bytes + std::min(header_len, kMaxNpyHeaderBytes), size);
      if (total > buf.size()) {
        const size_t have = buf.size();
        buf.resize(total);
        in.read(buf.data() + have, static_cast<std::streamsize>(total - have));
        buf.resize(have + static_cast<size_t>(in.gcount()));
      }
    }
  }
  return parse_npy_header(buf, size, name);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Status read_npy(const fs::path& path, std::vector<float>* data, std::vector<int64_t>* shape) {
  const std::string name = path.string();
  QBC_ASSIGN_OR_RETURN(NpyHeader h, read_npy_header(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(name, ": cannot open: ", std::strerror(errno));
  in.seekg(static_cast<std::streamoff>(h.data_offset));
  const size_t n = static_cast<size_t>(h.num_elements());
  const size_t item = static_cast<size_t>(npy_itemsize(h.dtype));
  data->resize(n);
  auto read_exact = [&](char* dst, size_t bytes) -> Status {
    in.read(dst, static_cast<std::streamsize>(bytes));
    if (static_cast<size_t>(in.gcount()) != bytes) {
      return data_loss(name, ": truncated .npy data (read failed)");
    }
    return ok_status();
  };
  if (h.dtype == NpyDtype::kF32) {
    QBC_RETURN_IF_ERROR(read_exact(reinterpret_cast<char*>(data->data()), n * item));
  } else {
    // Convert in bounded chunks so f64 files do not need a second full-size buffer.
    constexpr size_t kChunk = 1 << 16;
    std::vector<char> buf(kChunk * item);
    for (size_t done = 0; done < n; done += kChunk) {
      const size_t m = std::min(kChunk, n - done);
      QBC_RETURN_IF_ERROR(read_exact(buf.data(), m * item));
      for (size_t i = 0; i < m; ++i) {
        if (h.dtype == NpyDtype::kF16) {
          uint16_t b;
          std::memcpy(&b, buf.data() + 2 * i, 2);
          (*data)[done + i] = half_to_float(b);
        } else {
          double d;
          std::memcpy(&d, buf.data() + 8 * i, 8);
          (*data)[done + i] = static_cast<float>(d);
        }
      }
    }
  }
  if (shape) *shape = h.shape;
  return ok_status();
}

std::string npy_header_bytes(std::string_view descr, bool fortran_order,
                             const std::vector<int64_t>& shape, int major_version) {
  std::string dict = "{'descr': '" + std::string(descr) +
                     "', 'fortran_order': " + (fortran_order ? "True" : "False") +
                     ", 'shape': " + format_shape_tuple(shape) + ", }";
  const size_t prefix = major_version == 1 ? 10 : 12;
  // Pad with spaces so magic + length + dict + '\n' is a multiple of 64 (NumPy >= 1.16 layout).
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(major_version);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  for (size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + dict;
}

Status write_npy(const fs::path& path, const std::vector<int64_t>& shape, const float* data,
                 NpyDtype dtype) {
  const std::string name = path.string();
  if (dtype != NpyDtype::kF32 && dtype != NpyDtype::kF16)
    return invalid_argument(name, ": write_npy writes <f4 or <f2, not ", npy_descr(dtype));
  const bool half = dtype == NpyDtype::kF16;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument(name, ": negative dimension in shape ", shape_string(shape));
    n *= d;
  }
  if (n > 0 && data == nullptr) {
    return invalid_argument(name, ": no data for shape ", shape_string(shape));
  }
  const char* descr = half ? "<f2" : "<f4";
  std::string header = npy_header_bytes(descr, false, shape, 1);
  if (header.size() > 65535 + 10) header = npy_header_bytes(descr, false, shape, 2);
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const fs::path tmp =
      dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return invalid_argument(name, ": cannot write: ", std::strerror(errno));
  bool good = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  if (good && n > 0 && !half) {
    good = std::fwrite(data, sizeof(float), static_cast<size_t>(n), f) == static_cast<size_t>(n);
  } else if (good && n > 0) {
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = numerics::fp16_bits(data[i]);
    good = std::fwrite(bits.data(), sizeof(uint16_t), bits.size(), f) == bits.size();
  }
  good = (std::fclose(f) == 0) && good;
  std::error_code ec;
  if (!good) {
    fs::remove(tmp, ec);
    return invalid_argument(name, ": write failed: ", std::strerror(errno));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return invalid_argument(name, ": cannot move output into place: ", ec.message());
  }
  return ok_status();
}

}  // namespace qbc::calib
