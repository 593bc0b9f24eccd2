// GGUF parsing and validation (see qbc/frontend/gguf.h). Every read goes
// through a bounds-checked cursor; counts from the file are checked against the
// bytes left before anything is allocated for them.
#include "qbc/frontend/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "qbc/support/quote.h"
#include "qbc/support/utf8.h"

namespace qbc::frontend {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the GGUF reader assumes a LE host");

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32.
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayNesting = 8;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Smallest encoded size of one value of `type` (used to bound counts).
uint64_t min_encoded_size(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kArray:
      return 12;  // u32 element type + u64 count
    default:
      return 8;  // 64-bit scalars; strings (u64 length)
  }
}

bool valid_value_type(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::kFloat64); }

}  // namespace

// Reads one GGUF file into a GgufFile. A class (not free functions) so the
// cursor state is in one place; befriended by GgufFile to fill its members.
class GgufParser {
 public:
  GgufParser(const MappedFile& file, GgufFile* out)
      : data_(file.data()), size_(file.size()), out_(out) {}

  Status parse() {
    QBC_RETURN_IF_ERROR(parse_header());
    for (uint64_t i = 0; i < n_kv_; ++i) QBC_RETURN_IF_ERROR(parse_key_value(i));
    QBC_RETURN_IF_ERROR(parse_alignment());
    for (uint64_t i = 0; i < n_tensors_; ++i) QBC_RETURN_IF_ERROR(parse_tensor_info(i));
    return place_tensors();
  }

 private:
  uint64_t remaining() const { return size_ - pos_; }

  Status need(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      return data_loss(what, " (", n, " bytes at offset ", pos_, ") runs past the end of the ",
                       size_, "-byte file");
    }
    return ok_status();
  }

  template <typename T>
  Status read(T* value, std::string_view what) {
    QBC_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }

  // GGUF strings are UTF-8 (the spec's gguf_string_t) and reach JSON writers (config.json of
  // the source, the MXQ metadata, inspect): one that is not is refused here with its offset.
  // The vocabulary arrays are exempt (raw_strings_): a token may be a raw byte sequence, and
  // qbc_vocab.json writes such a token as hex.
  Status read_string(std::string* s, std::string_view what) {
    uint64_t length = 0;
    QBC_RETURN_IF_ERROR(read(&length, what));
    QBC_RETURN_IF_ERROR(need(length, what));
    const uint64_t start = pos_;
    s->assign(reinterpret_cast<const char*>(data_ + pos_), length);
    pos_ += length;
    if (raw_strings_) return ok_status();
    if (Status u = check_utf8_value(*s, what); !u.ok())
      return invalid_argument(u.message(), " (the string at offset ", start, ")");
    return ok_status();
  }

  Status parse_header() {
    uint32_t magic = 0;
    QBC_RETURN_IF_ERROR(read(&magic, "magic"));
    if (magic != kGgufMagic) return invalid_argument("not a GGUF file (bad magic)");
    uint32_t version = 0;
    QBC_RETURN_IF_ERROR(read(&version, "version"));
    if (version == 1) {
      return unimplemented(
          "GGUF version 1 is not supported (only 2 and 3); re-convert the "
          "model with a current llama.cpp");
    }
    if ((version & 0xFFFFu) == 0 && version != 0) {
      return unimplemented("big-endian GGUF files are not supported");
    }
    if (version == 0 || version > 3) {
      return unimplemented("GGUF version ", version, " is not supported (only 2 and 3)");
    }
    out_->version_ = version;
    QBC_RETURN_IF_ERROR(read(&n_tensors_, "tensor count"));
    QBC_RETURN_IF_ERROR(read(&n_kv_, "key/value count"));
    // Each key/value takes >= 13 bytes (u64 key length, u32 type, 1-byte value)
    // and each tensor info >= 24 bytes (u64 name length, u32 n_dims, u32 type, u64 offset).
    if (n_kv_ > remaining() / 13) {
      return data_loss("key/value count ", n_kv_, " cannot fit in the ", remaining(),
                       " bytes left in the file");
    }
    if (n_tensors_ > remaining() / 24) {
      return data_loss("tensor count ", n_tensors_, " cannot fit in the ", remaining(),
                       " bytes left in the file");
    }
    return ok_status();
  }

  Status parse_key_value(uint64_t index) {
    GgufKeyValue kv;
    QBC_RETURN_IF_ERROR(read_string(&kv.key, "key").with_context("key/value #", index));
    const std::string context = "key " + quote_prefix(kv.key);
    uint32_t type_id = 0;
    QBC_RETURN_IF_ERROR(read(&type_id, "value type").with_context(context));
    raw_strings_ = kv.key == "tokenizer.ggml.tokens" || kv.key == "tokenizer.ggml.merges";
    Status value = read_value(type_id, 0, &kv.value);
    raw_strings_ = false;
    QBC_RETURN_IF_ERROR(std::move(value).with_context(context));
    if (out_->key_index_.count(kv.key) != 0) return invalid_argument("duplicate ", context);
    out_->key_index_.emplace(kv.key, out_->metadata_.size());
    out_->metadata_.push_back(std::move(kv));
    return ok_status();
  }

  Status read_value(uint32_t type_id, int depth, GgufValue* v) {
    if (!valid_value_type(type_id)) return invalid_argument("unknown value type id ", type_id);
    v->type = static_cast<GgufType>(type_id);
    switch (v->type) {
      case GgufType::kUint8:
        return read_uint<uint8_t>(&v->uint_value);
      case GgufType::kUint16:
        return read_uint<uint16_t>(&v->uint_value);
      case GgufType::kUint32:
        return read_uint<uint32_t>(&v->uint_value);
      case GgufType::kUint64:
        return read_uint<uint64_t>(&v->uint_value);
      case GgufType::kInt8:
        return read_int<int8_t>(&v->int_value);
      case GgufType::kInt16:
        return read_int<int16_t>(&v->int_value);
      case GgufType::kInt32:
        return read_int<int32_t>(&v->int_value);
      case GgufType::kInt64:
        return read_int<int64_t>(&v->int_value);
      case GgufType::kFloat32: {
        float f = 0;
        QBC_RETURN_IF_ERROR(read(&f, "float32 value"));
        v->float_value = f;
        return ok_status();
      }
      case GgufType::kFloat64:
        return read(&v->float_value, "float64 value");
      case GgufType::kBool:
        return read_bool(&v->uint_value);
      case GgufType::kString:
        return read_string(&v->string_value, "string value");
      case GgufType::kArray:
        return read_array(depth, v);
    }
    return invalid_argument("unknown value type id ", type_id);
  }

  template <typename T>
  Status read_uint(uint64_t* out) {
    T value = 0;
    QBC_RETURN_IF_ERROR(read(&value, "value"));
    *out = value;
    return ok_status();
  }

  template <typename T>
  Status read_int(int64_t* out) {
    T value = 0;
    QBC_RETURN_IF_ERROR(read(&value, "value"));
    *out = value;
    return ok_status();
  }

  Status read_bool(uint64_t* out) {
    uint8_t value = 0;
    QBC_RETURN_IF_ERROR(read(&value, "bool value"));
    if (value > 1) return invalid_argument("bool value ", int{value}, " is neither 0 nor 1");
    *out = value;
    return ok_status();
  }

  Status read_array(int depth, GgufValue* v) {
    if (depth >= kMaxArrayNesting) {
      return invalid_argument("arrays nested deeper than ", kMaxArrayNesting, " levels");
    }
    uint32_t elem_id = 0;
    uint64_t count = 0;
    QBC_RETURN_IF_ERROR(read(&elem_id, "array element type"));
    if (!valid_value_type(elem_id)) {
      return invalid_argument("unknown array element type id ", elem_id);
    }
    QBC_RETURN_IF_ERROR(read(&count, "array length"));
    v->array_type = static_cast<GgufType>(elem_id);
    if (count > remaining() / min_encoded_size(v->array_type)) {
      return data_loss("array of ", count, " ", gguf_type_name(v->array_type),
                       " elements cannot fit in the ", remaining(), " bytes left in the file");
    }
    for (uint64_t i = 0; i < count; ++i) {
      GgufValue item;
      Status s = read_value(elem_id, depth + 1, &item);
      if (!s.ok()) return s.with_context("element ", i);
      switch (item.type) {
        case GgufType::kUint8:
        case GgufType::kUint16:
        case GgufType::kUint32:
        case GgufType::kUint64:
        case GgufType::kBool:
          v->uint_array.push_back(item.uint_value);
          break;
        case GgufType::kInt8:
        case GgufType::kInt16:
        case GgufType::kInt32:
        case GgufType::kInt64:
          v->int_array.push_back(item.int_value);
          break;
        case GgufType::kFloat32:
        case GgufType::kFloat64:
          v->float_array.push_back(item.float_value);
          break;
        case GgufType::kString:
          v->string_array.push_back(std::move(item.string_value));
          break;
        case GgufType::kArray:
          v->nested_array.push_back(std::move(item));
          break;
      }
    }
    return ok_status();
  }

  Status parse_alignment() {
    const GgufValue* value = out_->find("general.alignment");
    if (value == nullptr) return ok_status();
    if (value->type != GgufType::kUint32) {
      return invalid_argument("key 'general.alignment' is ", gguf_type_name(value->type),
                              ", expected uint32");
    }
    const uint64_t a = value->uint_value;
    if (a == 0 || (a & (a - 1)) != 0) {
      return invalid_argument("key 'general.alignment' = ", a, " is not a power of two");
    }
    out_->alignment_ = a;
    return ok_status();
  }

  Status parse_tensor_info(uint64_t index) {
    GgufTensor t;
    QBC_RETURN_IF_ERROR(read_string(&t.name, "tensor name").with_context("tensor #", index));
    const std::string context = "tensor " + quote_prefix(t.name);
    Status s = parse_tensor_fields(&t);
    if (!s.ok()) return s.with_context(context);
    if (out_->tensor_index_.count(t.name) != 0) return invalid_argument("duplicate ", context);
    out_->tensor_index_.emplace(t.name, out_->tensors_.size());
    out_->tensors_.push_back(std::move(t));
    return ok_status();
  }

  // Type ids ggml assigned after the types qbc reads (ggml/include/ggml.h, enum ggml_type) are
  // named and refused as unsupported; any other id is not a ggml type.
  static Status unknown_type(uint32_t type_id) {
    static const std::pair<uint32_t, const char*> kNewer[] = {{40, "NVFP4"}, {41, "Q1_0"}};
    for (const auto& [id, name] : kNewer) {
      if (id == type_id) {
        return unimplemented("ggml type ", name, " (id ", id,
                             ") is not supported; re-quantize the model to a supported type "
                             "(Q8_0, Q4_K, ...) or use the float checkpoint");
      }
    }
    return invalid_argument("unknown ggml type id ", type_id);
  }

  Status parse_tensor_fields(GgufTensor* t) {
    uint32_t n_dims = 0;
    QBC_RETURN_IF_ERROR(read(&n_dims, "n_dims"));
    if (n_dims > kMaxDims) return invalid_argument(n_dims, " dims, at most ", kMaxDims);
    uint64_t count = 1;
    for (uint32_t i = 0; i < n_dims; ++i) {
      uint64_t dim = 0;
      QBC_RETURN_IF_ERROR(read(&dim, "dim"));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(count, dim, &count) ||
          count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return invalid_argument("dims overflow the element count at dim ", i, " (", dim, ")");
      }
      t->dims.push_back(static_cast<int64_t>(dim));
    }
    uint32_t type_id = 0;
    QBC_RETURN_IF_ERROR(read(&type_id, "tensor type"));
    const GgmlTypeTraits* traits = ggml_type_traits(type_id);
    if (traits == nullptr) return unknown_type(type_id);
    t->type = traits->type;
    QBC_RETURN_IF_ERROR(read(&t->offset, "tensor offset"));
    const uint64_t ne0 = t->dims.empty() ? 1 : static_cast<uint64_t>(t->dims[0]);
    if (ne0 % traits->block_size != 0) {
      return invalid_argument("row length ", ne0, " is not a multiple of the ", traits->name,
                              " block size ", traits->block_size);
    }
    if (__builtin_mul_overflow(count / traits->block_size, uint64_t{traits->type_size},
                               &t->byte_size)) {
      return invalid_argument("byte size overflows");
    }
    return ok_status();
  }

  Status place_tensors() {
    const uint64_t a = out_->alignment_;
    const uint64_t data_offset = (pos_ + a - 1) / a * a;  // pos_ <= size_, no overflow
    out_->data_offset_ = data_offset;
    const uint64_t data_size = data_offset < size_ ? size_ - data_offset : 0;
    std::vector<const GgufTensor*> by_offset;
    for (GgufTensor& t : out_->tensors_) {
      const std::string context = "tensor " + quote_prefix(t.name);
      if (t.offset % a != 0) {
        return invalid_argument(context, ": offset ", t.offset, " is not a multiple of the ",
                                "alignment ", a);
      }
      if (t.offset > data_size || t.byte_size > data_size - t.offset) {
        return data_loss(context, ": data [", t.offset, ", +", t.byte_size,
                         ") runs past the end of the ", data_size, "-byte data section");
      }
      t.data = ByteSpan{data_ + data_offset + t.offset, static_cast<size_t>(t.byte_size)};
      if (t.byte_size > 0) by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensor* x, const GgufTensor* y) { return x->offset < y->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const GgufTensor& prev = *by_offset[i - 1];
      const GgufTensor& cur = *by_offset[i];
      if (cur.offset < prev.offset + prev.byte_size) {
        return invalid_argument("tensor ", quote_prefix(cur.name), ": data at offset ", cur.offset,
                                " overlaps tensor ", quote_prefix(prev.name), " [", prev.offset, ", +",
                                prev.byte_size, ")");
      }
    }
    return ok_status();
  }

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  bool raw_strings_ = false;  // inside the value of a vocabulary key (read_string)
  GgufFile* out_;
};

StatusOr<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  QBC_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  GgufFile file;
  QBC_RETURN_IF_ERROR(GgufParser(mapped, &file).parse().with_context(path.string()));
  file.file_ = std::move(mapped);  // Spans into the mapping survive the move.
  return file;
}

}  // namespace qbc::frontend
