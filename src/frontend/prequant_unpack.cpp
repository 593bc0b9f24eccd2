// unpack_linear: the stored tensors of one pre-quantized linear -> codes, scales, zero points
// (PackedLinear), and dequantize(). Layouts: docs/frontend.md, "Pre-quantized HF checkpoints".
#include <cmath>
#include <cstring>

#include "qbc/frontend/prequant.h"
#include "qbc/support/quote.h"

namespace qbc::frontend {
namespace {

using tensorfile::DType;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Reads tensors of one linear and names them in errors.
class Parts {
 public:
  Parts(const SafetensorsCheckpoint& ck, std::string module)
      : ck_(ck), module_(std::move(module)) {}

  StatusOr<const SafetensorsTensor*> get(const char* suffix) const {
    return ck_.get(module_ + suffix);
  }
  const SafetensorsTensor* find(const char* suffix) const { return ck_.find(module_ + suffix); }

  static Status bad(const SafetensorsTensor& t, const std::string& why) {
    return invalid_argument(t.file.string(), ": tensor ", quote_prefix(t.name), ": ", why);
  }
  static Status expect_shape(const SafetensorsTensor& t, const std::vector<int64_t>& shape,
                             const std::string& because) {
    if (t.shape == shape) return ok_status();
    return bad(
        t, "shape " + shape_text(t.shape) + ", expected " + shape_text(shape) + " for " + because);
  }

  // The 32-bit words of an I32 / U32 tensor.
  static StatusOr<std::vector<uint32_t>> words(const SafetensorsTensor& t) {
    if (t.dtype != DType::kI32 && t.dtype != DType::kU32) {
      return bad(t, "dtype " + std::string(tensorfile::dtype_name(t.dtype)) +
                        ", expected I32 (packed codes)");
    }
    std::vector<uint32_t> out(static_cast<size_t>(t.num_elements()));
    if (!out.empty()) std::memcpy(out.data(), t.data.data, out.size() * 4);
    return out;
  }

  // Integer values of an I8 / I16 / I32 / I64 tensor (or of a float tensor holding integers).
  static StatusOr<std::vector<int64_t>> ints(const SafetensorsTensor& t) {
    const size_t n = static_cast<size_t>(t.num_elements());
    std::vector<int64_t> out(n);
    const uint8_t* p = t.data.data;
    for (size_t i = 0; i < n; ++i) {
      switch (t.dtype) {
        case DType::kI8:
          out[i] = static_cast<int8_t>(p[i]);
          break;
        case DType::kI16: {
          int16_t v;
          std::memcpy(&v, p + 2 * i, 2);
          out[i] = v;
          break;
        }
        case DType::kI32: {
          int32_t v;
          std::memcpy(&v, p + 4 * i, 4);
          out[i] = v;
          break;
        }
        case DType::kI64:
          std::memcpy(&out[i], p + 8 * i, 8);
          break;
        default:
          return floats_as_ints(t);
      }
    }
    return out;
  }

  // Finite float values (F32 / F16 / BF16).
  static StatusOr<std::vector<float>> floats(const SafetensorsTensor& t) {
    std::vector<float> out;
    QBC_RETURN_IF_ERROR(read_f32(t, &out));
    for (float v : out) {
      if (!std::isfinite(v)) return bad(t, "holds a non-finite scale");
    }
    return out;
  }

 private:
  static StatusOr<std::vector<int64_t>> floats_as_ints(const SafetensorsTensor& t) {
    std::vector<float> f;
    QBC_RETURN_IF_ERROR(read_f32(t, &f));
    std::vector<int64_t> out(f.size());
    for (size_t i = 0; i < f.size(); ++i) {
      if (!(std::fabs(f[i]) < 1e9f) || f[i] != std::round(f[i])) {
        return bad(t, "holds " + std::to_string(f[i]) + " where an integer zero point belongs");
      }
      out[i] = static_cast<int64_t>(f[i]);
    }
    return out;
  }

  const SafetensorsCheckpoint& ck_;
  std::string module_;
};

// Value `k` of `bits` bits in a little-endian bit stream of 32-bit words at `stride` words apart
// (stride 1: a row; stride N: a column of an [rows, N] tensor). `padded`: each word holds
// floor(32 / bits) values and leaves its top bits zero (compressed-tensors before its dense
// packing); otherwise value k sits at bit k * bits, crossing words when it has to.
uint32_t stream_value(const uint32_t* w, size_t stride, int64_t k, int bits, bool padded) {
  const uint32_t mask = (1u << bits) - 1;
  uint64_t bit = 0;
  if (padded) {
    const int64_t per = 32 / bits;
    bit = static_cast<uint64_t>(k / per) * 32 + static_cast<uint64_t>(k % per) * bits;
  } else {
    bit = static_cast<uint64_t>(k) * bits;
  }
  const size_t word = bit / 32;
  const unsigned shift = bit % 32;
  uint64_t v = w[word * stride] >> shift;
  if (shift + bits > 32) v |= static_cast<uint64_t>(w[(word + 1) * stride]) << (32 - shift);
  return static_cast<uint32_t>(v) & mask;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Words of `n` values of `bits` bits: dense, or padded (false when both agree).
StatusOr<bool> padded_layout(const SafetensorsTensor& t, int64_t words, int64_t n, int bits,
                             const std::string& what) {
  const int64_t dense = ceil_div(n * bits, 32);
  const int64_t padded = ceil_div(n, 32 / bits);
  if (words == dense) return false;
  if (words == padded) return true;
  return Parts::bad(t, std::to_string(words) + " words per " + what + ", expected " +
                           std::to_string(dense) + " (dense) or " + std::to_string(padded) +
                           " (padded) for " + std::to_string(n) + " values of " +
                           std::to_string(bits) + " bits");
}

// Sets group_size / num_groups from the scheme and the weight's input width.
void set_groups(PackedLinear& p, const WeightQuantArgs& a) {
  p.group_size = a.group_size > 0 ? a.group_size : p.in;
  p.num_groups = ceil_div(p.in, p.group_size);
}

// Reads a g_idx tensor: [in] group indices in [0, num_groups). Dropped when it is the plain
// i / group_size (GPTQ writes one even without desc_act).
Status read_g_idx(const SafetensorsTensor& t, PackedLinear& p) {
  QBC_RETURN_IF_ERROR(Parts::expect_shape(t, {p.in}, "one group index per input"));
  QBC_ASSIGN_OR_RETURN(std::vector<int64_t> g, Parts::ints(t));
  bool trivial = true;
  p.g_idx.resize(static_cast<size_t>(p.in));
  for (int64_t i = 0; i < p.in; ++i) {
    const int64_t v = g[static_cast<size_t>(i)];
    if (v < 0 || v >= p.num_groups) {
      return Parts::bad(t, "group index " + std::to_string(v) + " at input " + std::to_string(i) +
                               " is outside [0, " + std::to_string(p.num_groups) + ")");
    }
    p.g_idx[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    trivial = trivial && v == i / p.group_size;
  }
  if (trivial) p.g_idx.clear();
  return ok_status();
}

// compressed-tensors weight_scale: [out, groups], [out] / [out, 1] per channel, [1] per tensor.
Status read_ct_scales(const Parts& parts, const WeightQuantArgs& a, PackedLinear& p) {
  QBC_ASSIGN_OR_RETURN(const SafetensorsTensor* t, parts.get(".weight_scale"));
  QBC_ASSIGN_OR_RETURN(std::vector<float> s, Parts::floats(*t));
  if (a.group_size < 0) {
    if (s.size() != 1) return Parts::bad(*t, "one scale per tensor expected");
    p.scales.assign(static_cast<size_t>(p.out), s[0]);
    return ok_status();
  }
  const std::vector<int64_t> want = {p.out, p.num_groups};
  if (t->shape != want && !(p.num_groups == 1 && t->shape == std::vector<int64_t>{p.out})) {
    return Parts::expect_shape(
        *t, want, "int" + std::to_string(a.bits) + " groups of " + std::to_string(p.group_size));
  }
  p.scales = std::move(s);
  return ok_status();
}

Status read_ct_zeros(const Parts& parts, PackedLinear& p, bool packed) {
  p.zeros.assign(static_cast<size_t>(p.out * p.num_groups), 0);
  const SafetensorsTensor* t = parts.find(".weight_zero_point");
  if (p.symmetric || t == nullptr) return ok_status();
  const int32_t offset = 1 << (p.bits - 1);
  if (!packed) {
    QBC_RETURN_IF_ERROR(Parts::expect_shape(*t, {p.out, p.num_groups}, "one zero point a group"));
    QBC_ASSIGN_OR_RETURN(std::vector<int64_t> z, Parts::ints(*t));
    for (size_t i = 0; i < z.size(); ++i) {
      if (z[i] < -offset || z[i] >= offset) return Parts::bad(*t, "zero point out of range");
      p.zeros[i] = static_cast<int32_t>(z[i]);
    }
    return ok_status();
  }
  // Packed along dim 0: column g is a bit stream over the output channels.
  if (t->shape.size() != 2 || t->shape[1] != p.num_groups) {
    return Parts::bad(*t, "shape " + shape_text(t->shape) + ", expected [words, " +
                              std::to_string(p.num_groups) + "] (zero points packed along dim 0)");
  }
  QBC_ASSIGN_OR_RETURN(bool padded,
                       padded_layout(*t, t->shape[0], p.out, p.bits, "zero-point column"));
  QBC_ASSIGN_OR_RETURN(std::vector<uint32_t> w, Parts::words(*t));
  for (int64_t g = 0; g < p.num_groups; ++g) {
    for (int64_t o = 0; o < p.out; ++o) {
      const uint32_t u =
          stream_value(w.data() + g, static_cast<size_t>(p.num_groups), o, p.bits, padded);
      p.zeros[static_cast<size_t>(o * p.num_groups + g)] = static_cast<int32_t>(u) - offset;
    }
  }
  return ok_status();
}

Status unpack_ct(const Parts& parts, const PackedTensorRef& ref, PackedLinear& p) {
  const bool packed = ref.layout == PackLayout::kCtPacked;
  const int32_t offset = 1 << (p.bits - 1);
  if (packed) {
    QBC_ASSIGN_OR_RETURN(const SafetensorsTensor* t, parts.get(".weight_packed"));
    if (t->shape.size() != 2 || t->shape[0] != p.out) {
      return Parts::bad(*t, "shape " + shape_text(t->shape) + " does not match weight_shape " +
                                shape_text(ref.shape));
    }
    QBC_ASSIGN_OR_RETURN(bool padded, padded_layout(*t, t->shape[1], p.in, p.bits, "row"));
    QBC_ASSIGN_OR_RETURN(std::vector<uint32_t> w, Parts::words(*t));
    p.codes.resize(static_cast<size_t>(p.out * p.in));
    const size_t row_words = static_cast<size_t>(t->shape[1]);
    for (int64_t o = 0; o < p.out; ++o) {
      const uint32_t* row = w.data() + static_cast<size_t>(o) * row_words;
      for (int64_t i = 0; i < p.in; ++i) {
        p.codes[static_cast<size_t>(o * p.in + i)] =
            static_cast<int32_t>(stream_value(row, 1, i, p.bits, padded)) - offset;
      }
    }
  } else {
    QBC_ASSIGN_OR_RETURN(const SafetensorsTensor* t, parts.get(".weight"));
    QBC_ASSIGN_OR_RETURN(std::vector<int64_t> q, Parts::ints(*t));
    p.codes.resize(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      if (q[i] < -offset || q[i] >= offset) {
        return Parts::bad(*t, "code " + std::to_string(q[i]) + " does not fit " +
                                  std::to_string(p.bits) + " bits");
      }
      p.codes[i] = static_cast<int32_t>(q[i]);
    }
  }
  QBC_RETURN_IF_ERROR(read_ct_scales(parts, ref.args, p));
  QBC_RETURN_IF_ERROR(read_ct_zeros(parts, p, packed));
  if (const SafetensorsTensor* g = parts.find(".weight_g_idx"))
    QBC_RETURN_IF_ERROR(read_g_idx(*g, p));
  return ok_status();
}

// GPTQ / AWQ scales: [groups, out] -> [out, groups].
Status read_transposed_scales(const Parts& parts, PackedLinear& p) {
  QBC_ASSIGN_OR_RETURN(const SafetensorsTensor* t, parts.get(".scales"));
  QBC_RETURN_IF_ERROR(Parts::expect_shape(*t, {p.num_groups, p.out}, "[groups, out] scales"));
  QBC_ASSIGN_OR_RETURN(std::vector<float> s, Parts::floats(*t));
  p.scales.resize(s.size());
  for (int64_t g = 0; g < p.num_groups; ++g) {
    for (int64_t o = 0; o < p.out; ++o) {
      p.scales[static_cast<size_t>(o * p.num_groups + g)] = s[static_cast<size_t>(g * p.out + o)];
    }
  }
  return ok_status();
}

// AutoAWQ packs eight 4-bit values of consecutive outputs in the order 0,2,4,6,1,3,5,7: output
// 8c + j sits in nibble kAwqNibble[j] of word c.
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

Status unpack_gptq(const Parts& parts, const PrequantConfig& c, PackedLinear& p) {
  QBC_ASSIGN_OR_RETURN(const SafetensorsTensor* qw, parts.get(".qweight"));
  if (qw->shape[0] * 32 != p.in * p.bits) {
    return Parts::bad(*qw, "shape " + shape_text(qw->shape) + ": the input width is not a " +
                               "whole number of " + std::to_string(p.bits) + "-bit values");
  }
  QBC_ASSIGN_OR_RETURN(std::vector<uint32_t> w, Parts::words(*qw));
  p.codes.resize(static_cast<size_t>(p.out * p.in));
  for (int64_t o = 0; o < p.out; ++o) {
    for (int64_t i = 0; i < p.in; ++i) {
      p.codes[static_cast<size_t>(o * p.in + i)] = static_cast<int32_t>(
          stream_value(w.data() + o, static_cast<size_t>(p.out), i, p.bits, false));
    }
  }
  QBC_RETURN_IF_ERROR(read_transposed_scales(parts, p));
  p.zeros.assign(static_cast<size_t>(p.out * p.num_groups), 1 << (p.bits - 1));
  if (const SafetensorsTensor* qz = parts.find(".qzeros")) {
    QBC_RETURN_IF_ERROR(Parts::expect_shape(*qz, {p.num_groups, ceil_div(p.out * p.bits, 32)},
                                            "[groups, out * bits / 32] packed zero points"));
    QBC_ASSIGN_OR_RETURN(std::vector<uint32_t> z, Parts::words(*qz));
    const size_t row = static_cast<size_t>(qz->shape[1]);
    for (int64_t g = 0; g < p.num_groups; ++g) {
      for (int64_t o = 0; o < p.out; ++o) {
        const uint32_t u = stream_value(z.data() + g * row, 1, o, p.bits, false);
        p.zeros[static_cast<size_t>(o * p.num_groups + g)] =
            static_cast<int32_t>(u) + (c.zero_minus_one ? 1 : 0);
      }
    }
  }
  if (const SafetensorsTensor* g = parts.find(".g_idx")) QBC_RETURN_IF_ERROR(read_g_idx(*g, p));
  return ok_status();
}

Status unpack_awq(const Parts& parts, PackedLinear& p) {
  QBC_ASSIGN_OR_RETURN(const SafetensorsTensor* qw, parts.get(".qweight"));
  QBC_ASSIGN_OR_RETURN(std::vector<uint32_t> w, Parts::words(*qw));
  const int64_t cols = p.out / 8;
  p.codes.resize(static_cast<size_t>(p.out * p.in));
  for (int64_t i = 0; i < p.in; ++i) {
    for (int64_t o = 0; o < p.out; ++o) {
      const uint32_t word = w[static_cast<size_t>(i * cols + o / 8)];
      p.codes[static_cast<size_t>(o * p.in + i)] =
          static_cast<int32_t>((word >> (4 * kAwqNibble[o % 8])) & 0xF);
    }
  }
  QBC_RETURN_IF_ERROR(read_transposed_scales(parts, p));
  QBC_ASSIGN_OR_RETURN(const SafetensorsTensor* qz, parts.get(".qzeros"));
  QBC_RETURN_IF_ERROR(
      Parts::expect_shape(*qz, {p.num_groups, cols}, "[groups, out / 8] packed zero points"));
  QBC_ASSIGN_OR_RETURN(std::vector<uint32_t> z, Parts::words(*qz));
  p.zeros.resize(static_cast<size_t>(p.out * p.num_groups));
  for (int64_t g = 0; g < p.num_groups; ++g) {
    for (int64_t o = 0; o < p.out; ++o) {
      const uint32_t word = z[static_cast<size_t>(g * cols + o / 8)];
      p.zeros[static_cast<size_t>(o * p.num_groups + g)] =
          static_cast<int32_t>((word >> (4 * kAwqNibble[o % 8])) & 0xF);
    }
  }
  return ok_status();
}

}  // namespace

std::vector<float> dequantize(const PackedLinear& p) {
  std::vector<float> w(static_cast<size_t>(p.out * p.in));
  for (int64_t o = 0; o < p.out; ++o) {
    for (int64_t i = 0; i < p.in; ++i) {
      const size_t k = static_cast<size_t>(o * p.num_groups + p.group_of(i));
      const size_t j = static_cast<size_t>(o * p.in + i);
      w[j] = static_cast<float>(p.codes[j] - p.zeros[k]) * p.scales[k];
    }
  }
  return w;
}

StatusOr<PackedLinear> unpack_linear(const SafetensorsCheckpoint& ck, const PrequantConfig& c,
                                     const PackedTensorRef& ref) {
  PackedLinear p;
  p.module = ref.module;
  p.layout = ref.layout;
  p.out = ref.shape.at(0);
  p.in = ref.shape.at(1);
  p.bits = ref.args.bits;
  p.symmetric = ref.args.symmetric;
  set_groups(p, ref.args);
  const Parts parts(ck, ref.module);
  switch (ref.layout) {
    case PackLayout::kCtPacked:
    case PackLayout::kCtInt:
      QBC_RETURN_IF_ERROR(unpack_ct(parts, ref, p));
      break;
    case PackLayout::kGptq:
      QBC_RETURN_IF_ERROR(unpack_gptq(parts, c, p));
      break;
    case PackLayout::kAwqGemm:
      QBC_RETURN_IF_ERROR(unpack_awq(parts, p));
      break;
    case PackLayout::kGgufBlocks:
      return invalid_argument(ref.module, ": GGUF blocks are not stored in safetensors");
  }
  return p;
}

}  // namespace qbc::frontend
