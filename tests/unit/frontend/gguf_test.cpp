// Tests for the GGUF reader: real llama.cpp files (F32 and quantized), every
// metadata type, handmade quant blocks, hostile files and a seeded mini-fuzz.
#include "qbc/frontend/gguf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include "gguf_bytes.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/tensorfile/dtype.h"
#include "support/test_support.h"

namespace qbc::frontend {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::enc;
using ::qbc::testing::enc_array;
using ::qbc::testing::enc_str;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

// ---- Encoding helpers: build GGUF bytes by hand (enc* in gguf_bytes.h). ----

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type;
  std::string data;
  std::optional<uint64_t> offset;  // Default: packed at the alignment.
};

class GgufBuilder {
 public:
  GgufBuilder& kv(const std::string& key, GgufType type, const std::string& payload) {
    return kv_raw(key, static_cast<uint32_t>(type), payload);
  }
  GgufBuilder& kv_raw(const std::string& key, uint32_t type, const std::string& payload) {
    kvs_ += enc_str(key) + enc<uint32_t>(type) + payload;
    ++n_kv_;
    return *this;
  }
  GgufBuilder& tensor(TensorSpec t) {
    tensors_.push_back(std::move(t));
    return *this;
  }
  std::string build() const {
    std::string out = "GGUF" + enc<uint32_t>(version) +
                      enc<uint64_t>(n_tensors.value_or(tensors_.size())) +
                      enc<uint64_t>(n_kv.value_or(n_kv_)) + kvs_;
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TensorSpec& t : tensors_) {
      const uint64_t offset = t.offset.value_or(next);
      offsets.push_back(offset);
      next = (offset + t.data.size() + alignment - 1) / alignment * alignment;
      out += enc_str(t.name) + enc<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) out += enc<uint64_t>(d);
      out += enc<uint32_t>(t.type) + enc<uint64_t>(offset);
    }
    out.append((alignment - out.size() % alignment) % alignment, '\0');
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (offsets[i] > (1u << 20)) continue;  // Hostile offsets point nowhere.
      const size_t at = data_start + offsets[i];
      if (out.size() < at + tensors_[i].data.size()) out.resize(at + tensors_[i].data.size());
      out.replace(at, tensors_[i].data.size(), tensors_[i].data);
    }
    return out;
  }

  uint32_t version = 3;
  uint64_t alignment = 32;
  std::optional<uint64_t> n_tensors;
  std::optional<uint64_t> n_kv;

 private:
  std::string kvs_;
  uint64_t n_kv_ = 0;
  std::vector<TensorSpec> tensors_;
};

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

fs::path write_temp(const std::string& name, const std::string& bytes) {
  const fs::path path = temp_dir() / name;
  write_file(path, bytes);
  return path;
}

// ---- Real files. ----

TEST(GgufTest, ReadsStories260kF32) {
  QBC_REQUIRE_SHARED(path, "models/stories260k/stories260K.gguf");
  StatusOr<GgufFile> file = GgufFile::open(path);
  QBC_ASSERT_OK(file);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->data_offset() % 32, 0u);
  EXPECT_EQ(file->tensors().size(), 48u);
  EXPECT_EQ(*file->get_string("general.architecture"), "llama");
  EXPECT_EQ(*file->get_int("llama.block_count"), 5);
  EXPECT_EQ(*file->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(*file->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_NEAR(*file->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  StatusOr<std::vector<std::string>> tokens = file->get_string_array("tokenizer.ggml.tokens");
  QBC_ASSERT_OK(tokens);
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[3], "<0x00>");
  EXPECT_EQ(file->get_float_array("tokenizer.ggml.scores")->size(), 512u);
  StatusOr<std::vector<int64_t>> types = file->get_int_array("tokenizer.ggml.token_type");
  QBC_ASSERT_OK(types);
  EXPECT_EQ(std::count(types->begin(), types->end(), 6), 256);  // byte tokens
  EXPECT_EQ(std::count(types->begin(), types->end(), 1), 253);  // normal tokens

  const Status wrong = file->get_int("general.architecture").status();
  EXPECT_EQ(wrong.code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(wrong.message(), "'general.architecture'") &&
              contains(wrong.message(), path.string()))
      << wrong.message();
  const Status missing = file->get_string("llama.no_such_key").status();
  EXPECT_EQ(missing.code(), Code::kNotFound);
  EXPECT_TRUE(contains(missing.message(), "'llama.no_such_key'"));

  const GgufTensor* embd = file->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kF32);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(embd->shape(), (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(embd->byte_size, 512u * 64 * 4);
  EXPECT_EQ(embd->offset % 32, 0u);
  const GgufTensor* down = file->find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape(), (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(file->get_tensor("blk.9.ffn_down.weight").status().code(), Code::kNotFound);

  // The same weights as the HF checkpoint; output.weight is a copy of token_embd.
  std::vector<float> gguf_embd, output;
  QBC_ASSERT_OK(file->read_f32(*embd, &gguf_embd));
  QBC_ASSERT_OK(file->read_f32("output.weight", &output));
  EXPECT_EQ(gguf_embd, output);
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf/model.safetensors");
  StatusOr<SafetensorsFile> st = SafetensorsFile::open(hf);
  QBC_ASSERT_OK(st);
  std::vector<float> hf_embd;
  QBC_ASSERT_OK(read_f32(*st->find("model.embed_tokens.weight"), &hf_embd));
  EXPECT_EQ(gguf_embd, hf_embd);
}

struct QuantFile {
  const char* rel;
  std::vector<GgmlType> must_have;
};

// Max abs error allowed in one 32-element block of `type` whose F32 max |x| is `amax`.
double block_bound(GgmlType type, double amax) {
  switch (type) {
    case GgmlType::kF32:
      return 0.0;
    case GgmlType::kF16:
      return amax * 1e-3 + 6e-8;
    case GgmlType::kQ8_0:
      return amax / 127 * 0.6 + 1e-7;  // d/2 + rounding of d to fp16
    case GgmlType::kQ5_0:
      return amax / 16 * 1.01 + 1e-7;  // |d|, the clamped end
    case GgmlType::kQ4_0:
      return amax / 8 * 1.01 + 1e-7;  // |d|, the clamped end
    default:
      return -1;
  }
}

TEST(GgufTest, QuantizedFilesMatchF32WithinQuantizationError) {
  QBC_REQUIRE_SHARED(ref_path, "models/stories260k/stories260K.gguf");
  StatusOr<GgufFile> ref = GgufFile::open(ref_path);
  QBC_ASSERT_OK(ref);
  const std::vector<QuantFile> files = {
      {"models/stories260k/quant/stories260K-F16.gguf", {GgmlType::kF16}},
      {"models/stories260k/quant/stories260K-Q8_0.gguf", {GgmlType::kQ8_0, GgmlType::kF16}},
      {"models/stories260k/quant/stories260K-Q4_0.gguf", {GgmlType::kQ4_0, GgmlType::kQ8_0}},
      {"models/stories260k/quant/stories260K-Q4_K_M.gguf", {GgmlType::kQ5_0, GgmlType::kQ8_0}},
  };
  for (const QuantFile& qf : files) {
    SCOPED_TRACE(qf.rel);
    QBC_REQUIRE_SHARED(path, qf.rel);
    StatusOr<GgufFile> file = GgufFile::open(path);
    QBC_ASSERT_OK(file);
    ASSERT_EQ(file->tensors().size(), ref->tensors().size());
    std::vector<GgmlType> seen;
    for (const GgufTensor& t : file->tensors()) {
      SCOPED_TRACE(t.name);
      seen.push_back(t.type);
      const GgufTensor* r = ref->find_tensor(t.name);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(t.dims, r->dims);
      std::vector<float> want, got;
      QBC_ASSERT_OK(ref->read_f32(*r, &want));
      QBC_ASSERT_OK(file->read_f32(t, &got));
      ASSERT_EQ(got.size(), want.size());
      const size_t block = t.type == GgmlType::kF32 || t.type == GgmlType::kF16 ? 1 : 32;
      for (size_t b = 0; b < want.size(); b += block) {
        double amax = 0;
        for (size_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(double{want[i]}));
        const double bound = block_bound(t.type, amax);
        ASSERT_GE(bound, 0.0) << "unexpected type " << ggml_type_name(t.type);
        for (size_t i = b; i < b + block; ++i) {
          ASSERT_LE(std::fabs(double{got[i]} - want[i]), bound)
              << ggml_type_name(t.type) << " element " << i << ": " << got[i] << " vs " << want[i];
        }
      }
    }
    for (GgmlType type : qf.must_have) {
      EXPECT_NE(std::find(seen.begin(), seen.end(), type), seen.end()) << ggml_type_name(type);
    }
  }
}

// ---- Handmade quant blocks (layouts from ggml-common.h). ----

std::string fp16_bytes(float v) { return enc<uint16_t>(tensorfile::f32_to_fp16(v)); }

std::string nibbles() {  // byte j: low nibble j, high nibble 15 - j
  std::string qs;
  for (int j = 0; j < 16; ++j) qs += static_cast<char>(j | ((15 - j) << 4));
  return qs;
}

TEST(GgufTest, DecodesHandmadeQuantBlocks) {
  const uint32_t qh = 0xA5A5F00Fu;
  auto bit = [&](int i) { return static_cast<int>((qh >> i) & 1u); };
  auto low = [](int j) { return j < 16 ? j : 15 - (j - 16); };  // the nibble of element j
  struct Case {
    GgmlType type;
    std::string block;
    std::function<float(int)> expect;
  };
  std::vector<Case> cases = {
      {GgmlType::kQ4_0, fp16_bytes(0.5f) + nibbles(), [&](int j) { return (low(j) - 8) * 0.5f; }},
      {GgmlType::kQ4_1, fp16_bytes(0.5f) + fp16_bytes(-1.0f) + nibbles(),
       [&](int j) { return low(j) * 0.5f - 1.0f; }},
      {GgmlType::kQ5_0, fp16_bytes(0.25f) + enc<uint32_t>(qh) + nibbles(),
       [&](int j) { return ((low(j) | bit(j) << 4) - 16) * 0.25f; }},
      {GgmlType::kQ5_1, fp16_bytes(0.25f) + fp16_bytes(2.0f) + enc<uint32_t>(qh) + nibbles(),
       [&](int j) { return (low(j) | bit(j) << 4) * 0.25f + 2.0f; }},
  };
  std::string q8 = fp16_bytes(2.0f);
  for (int j = 0; j < 32; ++j) q8 += static_cast<char>(static_cast<int8_t>(j * 8 - 128));
  cases.push_back({GgmlType::kQ8_0, q8, [](int j) { return (j * 8 - 128) * 2.0f; }});

  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(ggml_type_name(c.type)));
    std::vector<float> out(32);
    const ByteSpan span{reinterpret_cast<const uint8_t*>(c.block.data()), c.block.size()};
    QBC_ASSERT_OK(gguf_decode_f32(c.type, span, 32, out.data()));
    for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], c.expect(j)) << "element " << j;
    EXPECT_EQ(gguf_decode_f32(c.type, span, 64, out.data()).code(), Code::kInvalidArgument);
    EXPECT_EQ(gguf_decode_f32(c.type, span, 16, out.data()).code(), Code::kInvalidArgument);
  }

  // Through a file: a 2-block Q8_0 tensor, shape() reversed, values in ggml order.
  const fs::path path =
      write_temp("q8.gguf", GgufBuilder().tensor({"t", {32, 2}, 8, q8 + q8, std::nullopt}).build());
  StatusOr<GgufFile> file = GgufFile::open(path);
  QBC_ASSERT_OK(file);
  std::vector<float> out;
  QBC_ASSERT_OK(file->read_f32("t", &out));
  ASSERT_EQ(out.size(), 64u);
  EXPECT_EQ(out[33], -240.0f);
  EXPECT_EQ(file->find_tensor("t")->shape(), (std::vector<int64_t>{2, 32}));
}

TEST(GgufTest, UndecodableTypeIsListedButUnimplemented) {
  // Q8_1 (id 9) is ggml's dot-product intermediate: listed, never stored as a weight, and not
  // decoded.
  const fs::path path = write_temp(
      "q81.gguf", GgufBuilder()
                      .tensor({"blk.0.attn_q.weight", {64}, 9, std::string(72, '\0'), std::nullopt})
                      .build());
  StatusOr<GgufFile> file = GgufFile::open(path);
  QBC_ASSERT_OK(file);
  const GgufTensor& t = file->tensors().at(0);
  EXPECT_EQ(t.type, GgmlType::kQ8_1);
  EXPECT_EQ(ggml_type_name(t.type), "q8_1");
  EXPECT_EQ(t.byte_size, 72u);
  std::vector<float> out;
  const Status s = file->read_f32(t, &out);
  EXPECT_EQ(s.code(), Code::kUnimplemented);
  EXPECT_TRUE(contains(s.message(), "'blk.0.attn_q.weight'") && contains(s.message(), "q8_1"))
      << s.message();
}

// ---- Metadata of every type. ----

TEST(GgufTest, ReadsMetadataOfEveryType) {
  GgufBuilder b;
  b.version = 2;
  b.kv("u8", GgufType::kUint8, enc<uint8_t>(200))
      .kv("i8", GgufType::kInt8, enc<int8_t>(-100))
      .kv("u16", GgufType::kUint16, enc<uint16_t>(60000))
      .kv("i16", GgufType::kInt16, enc<int16_t>(-30000))
      .kv("u32", GgufType::kUint32, enc<uint32_t>(4000000000u))
      .kv("i32", GgufType::kInt32, enc<int32_t>(-2000000000))
      .kv("u64", GgufType::kUint64, enc<uint64_t>(1ull << 40))
      .kv("u64.huge", GgufType::kUint64, enc<uint64_t>(~0ull))
      .kv("i64", GgufType::kInt64, enc<int64_t>(-(1ll << 40)))
      .kv("f32", GgufType::kFloat32, enc<float>(0.25f))
      .kv("f64", GgufType::kFloat64, enc<double>(-1e100))
      .kv("yes", GgufType::kBool, enc<uint8_t>(1))
      .kv("name", GgufType::kString, enc_str("stories"))
      .kv("empty", GgufType::kString, enc_str(""))
      .kv("a.u8", GgufType::kArray, enc_array(GgufType::kUint8, 3, "\x01\x02\xff"))
      .kv("a.i16", GgufType::kArray,
          enc_array(GgufType::kInt16, 2, enc<int16_t>(-5) + enc<int16_t>(7)))
      .kv("a.u64", GgufType::kArray, enc_array(GgufType::kUint64, 1, enc<uint64_t>(~0ull)))
      .kv("a.f32", GgufType::kArray,
          enc_array(GgufType::kFloat32, 2, enc<float>(1.5f) + enc<float>(-2)))
      .kv("a.f64", GgufType::kArray, enc_array(GgufType::kFloat64, 1, enc<double>(3.0)))
      .kv("a.bool", GgufType::kArray, enc_array(GgufType::kBool, 2, std::string("\x00\x01", 2)))
      .kv("a.str", GgufType::kArray,
          enc_array(GgufType::kString, 3, enc_str("a") + enc_str("") + enc_str("ccc")))
      .kv("a.empty", GgufType::kArray, enc_array(GgufType::kInt32, 0, ""))
      .kv("a.nested", GgufType::kArray,
          enc_array(GgufType::kArray, 2,
                    enc_array(GgufType::kString, 2, enc_str("x") + enc_str("y")) +
                        enc_array(GgufType::kString, 1, enc_str("z"))));
  const fs::path path = write_temp("meta.gguf", b.build());
  StatusOr<GgufFile> f = GgufFile::open(path);
  QBC_ASSERT_OK(f);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->metadata().size(), 23u);
  EXPECT_EQ(f->metadata()[0].key, "u8");  // File order.
  EXPECT_EQ(*f->get_int("u8"), 200);
  EXPECT_EQ(*f->get_int("i8"), -100);
  EXPECT_EQ(*f->get_int("u16"), 60000);
  EXPECT_EQ(*f->get_int("i16"), -30000);
  EXPECT_EQ(*f->get_int("u32"), 4000000000ll);
  EXPECT_EQ(*f->get_int("i32"), -2000000000);
  EXPECT_EQ(*f->get_int("u64"), 1ll << 40);
  EXPECT_EQ(*f->get_int("i64"), -(1ll << 40));
  EXPECT_EQ(f->get_int("u64.huge").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(f->find("u64.huge")->uint_value, ~0ull);
  EXPECT_EQ(*f->get_float("f32"), 0.25);
  EXPECT_EQ(*f->get_float("f64"), -1e100);
  EXPECT_TRUE(*f->get_bool("yes"));
  EXPECT_EQ(*f->get_string("name"), "stories");
  EXPECT_EQ(*f->get_string("empty"), "");
  EXPECT_EQ(*f->get_int_array("a.u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(*f->get_int_array("a.i16"), (std::vector<int64_t>{-5, 7}));
  EXPECT_EQ(f->get_int_array("a.u64").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(*f->get_float_array("a.f32"), (std::vector<double>{1.5, -2}));
  EXPECT_EQ(*f->get_float_array("a.f64"), (std::vector<double>{3.0}));
  EXPECT_EQ(f->find("a.bool")->uint_array, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(*f->get_string_array("a.str"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_TRUE(f->get_int_array("a.empty")->empty());
  const GgufValue* nested = f->find("a.nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->array_type, GgufType::kArray);
  ASSERT_EQ(nested->array_size(), 2u);
  EXPECT_EQ(nested->nested_array[0].string_array, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(nested->nested_array[1].string_array, (std::vector<std::string>{"z"}));
  EXPECT_EQ(f->find("u32")->summary(), "uint32 4000000000");
  EXPECT_EQ(f->find("a.str")->summary(), "array<string>[3]");

  // Wrong types and missing keys name the file and the key.
  const std::vector<Status> wrong = {
      f->get_string("u8").status(),          f->get_int("f32").status(),
      f->get_float("i32").status(),          f->get_bool("u8").status(),
      f->get_string_array("a.f32").status(), f->get_float_array("a.str").status(),
      f->get_int_array("name").status()};
  for (const Status& s : wrong) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
    EXPECT_TRUE(contains(s.message(), path.string()) && contains(s.message(), "key '"))
        << s.message();
  }
  EXPECT_TRUE(contains(f->get_float_array("a.str").status().message(), "'a.str' is array<string>"));
  EXPECT_EQ(f->get_bool("nope").status().code(), Code::kNotFound);
  EXPECT_FALSE(f->has("nope"));
}

TEST(GgufTest, HonoursGeneralAlignment) {
  GgufBuilder b;
  b.alignment = 64;
  b.kv("general.alignment", GgufType::kUint32, enc<uint32_t>(64))
      .tensor({"a", {3}, 0, f32_bytes({1, 2, 3}), std::nullopt})
      .tensor({"b",
               {2, 2},
               1,
               fp16_bytes(1) + fp16_bytes(-1) + fp16_bytes(0.5f) + fp16_bytes(4),
               std::nullopt});
  const fs::path path = write_temp("align.gguf", b.build());
  StatusOr<GgufFile> f = GgufFile::open(path);
  QBC_ASSERT_OK(f);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 64u);
  std::vector<float> out;
  QBC_ASSERT_OK(f->read_f32("b", &out));
  EXPECT_EQ(out, (std::vector<float>{1, -1, 0.5f, 4}));
  QBC_ASSERT_OK(f->read_f32("a", &out));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3}));
}

// ---- Hostile files. ----

struct HostileCase {
  const char* name;
  std::string bytes;
  Code code;
  const char* detail;  // Expected in the message (besides the path).
};

std::string one_tensor(std::vector<uint64_t> dims, uint32_t type, std::string data,
                       std::optional<uint64_t> offset = std::nullopt) {
  return GgufBuilder().tensor({"t", std::move(dims), type, std::move(data), offset}).build();
}

std::vector<HostileCase> hostile_cases() {
  const std::string valid = GgufBuilder()
                                .kv("general.name", GgufType::kString, enc_str("tiny"))
                                .tensor({"t", {4}, 0, f32_bytes({1, 2, 3, 4}), std::nullopt})
                                .build();
  const size_t kv_start = 24;
  auto header = [](uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return "GGUF" + enc<uint32_t>(version) + enc<uint64_t>(n_tensors) + enc<uint64_t>(n_kv);
  };
  auto with_kv = [](const std::string& key, uint32_t type, const std::string& payload) {
    return GgufBuilder().kv_raw(key, type, payload).build();
  };
  std::string nested = enc_array(GgufType::kUint8, 0, "");
  for (int i = 0; i < 10; ++i) nested = enc_array(GgufType::kArray, 1, nested);
  GgufBuilder lying_kv;
  lying_kv.n_kv = 1ull << 40;
  GgufBuilder lying_tensors;
  lying_tensors.n_tensors = 1ull << 40;
  GgufBuilder aligned48;
  aligned48.kv("general.alignment", GgufType::kUint32, enc<uint32_t>(48));
  GgufBuilder aligned0;
  aligned0.kv("general.alignment", GgufType::kUint32, enc<uint32_t>(0));
  return {
      {"empty", "", Code::kDataLoss, "magic"},
      {"bad_magic", "GGUX" + valid.substr(4), Code::kInvalidArgument, "not a GGUF file"},
      {"version_1", header(1, 0, 0), Code::kUnimplemented, "version 1 is not supported"},
      {"version_4", header(4, 0, 0), Code::kUnimplemented, "version 4"},
      {"big_endian", header(0x03000000u, 0, 0), Code::kUnimplemented, "big-endian"},
      {"truncated_header", valid.substr(0, 12), Code::kDataLoss, "tensor count"},
      {"lying_n_kv", lying_kv.build(), Code::kDataLoss, "key/value count 1099511627776"},
      {"lying_n_tensors", lying_tensors.build(), Code::kDataLoss, "tensor count 1099511627776"},
      {"key_past_end", header(3, 0, 1) + enc<uint64_t>(1000) + std::string(20, 'k'),
       Code::kDataLoss, "key/value #0"},
      {"string_past_end", with_kv("general.name", 8, enc<uint64_t>(1ull << 60) + "abc"),
       Code::kDataLoss, "key 'general.name'"},
      {"truncated_kv", valid.substr(0, kv_start + 30), Code::kDataLoss, "key 'general.name'"},
      {"array_count_huge",
       with_kv("tokenizer.ggml.tokens", 9, enc_array(GgufType::kString, 1ull << 58, "")),
       Code::kDataLoss, "key 'tokenizer.ggml.tokens'"},
      {"unknown_value_type", with_kv("x.key", 13, enc<uint32_t>(0)), Code::kInvalidArgument,
       "key 'x.key': unknown value type id 13"},
      {"unknown_array_type", with_kv("x.arr", 9, enc<uint32_t>(99) + enc<uint64_t>(1)),
       Code::kInvalidArgument, "key 'x.arr': unknown array element type id 99"},
      {"nesting_too_deep", with_kv("x.deep", 9, nested), Code::kInvalidArgument, "nested deeper"},
      {"bool_not_0_or_1", with_kv("x.flag", 7, enc<uint8_t>(2)), Code::kInvalidArgument,
       "key 'x.flag'"},
      {"duplicate_key",
       GgufBuilder()
           .kv("a", GgufType::kUint8, enc<uint8_t>(1))
           .kv("a", GgufType::kUint8, enc<uint8_t>(2))
           .build(),
       Code::kInvalidArgument, "duplicate key 'a'"},
      {"alignment_wrong_type", with_kv("general.alignment", 10, enc<uint64_t>(32)),
       Code::kInvalidArgument, "'general.alignment' is uint64"},
      {"alignment_not_pow2", aligned48.build(), Code::kInvalidArgument, "'general.alignment'"},
      {"alignment_zero", aligned0.build(), Code::kInvalidArgument, "'general.alignment'"},
      {"too_many_dims", one_tensor({1, 1, 1, 1, 4}, 0, f32_bytes({1, 2, 3, 4})),
       Code::kInvalidArgument, "tensor 't': 5 dims"},
      {"dims_overflow", one_tensor({1ull << 32, 1ull << 32, 4}, 0, ""), Code::kInvalidArgument,
       "tensor 't': dims overflow"},
      {"dim_negative", one_tensor({1ull << 63}, 0, ""), Code::kInvalidArgument,
       "tensor 't': dims overflow"},
      {"unknown_type_removed", one_tensor({32}, 4, std::string(18, '\0')), Code::kInvalidArgument,
       "tensor 't': unknown ggml type id 4"},
      {"unknown_type_large", one_tensor({4}, 1000, f32_bytes({1, 2, 3, 4})), Code::kInvalidArgument,
       "tensor 't': unknown ggml type id 1000"},
      // Ids ggml assigned after the types qbc reads (ggml.h enum ggml_type: GGML_TYPE_NVFP4 = 40,
      // GGML_TYPE_Q1_0 = 41) are named and unsupported; the next id is no ggml type.
      {"newer_type_nvfp4", one_tensor({64}, 40, std::string(36, '\0')), Code::kUnimplemented,
       "tensor 't': ggml type NVFP4 (id 40) is not supported"},
      {"newer_type_q1_0", one_tensor({128}, 41, std::string(18, '\0')), Code::kUnimplemented,
       "tensor 't': ggml type Q1_0 (id 41) is not supported"},
      {"unknown_type_42", one_tensor({32}, 42, std::string(32, '\0')), Code::kInvalidArgument,
       "tensor 't': unknown ggml type id 42"},
      {"row_not_block_multiple", one_tensor({16}, 8, std::string(34, '\0')), Code::kInvalidArgument,
       "tensor 't': row length 16"},
      {"misaligned_offset", one_tensor({4}, 0, f32_bytes({1, 2, 3, 4}), 8), Code::kInvalidArgument,
       "tensor 't': offset 8 is not a multiple"},
      {"offset_out_of_range", one_tensor({4}, 0, f32_bytes({1, 2, 3, 4}), 1ull << 40),
       Code::kDataLoss, "tensor 't'"},
      {"offset_overflow", one_tensor({4}, 0, "", ~0ull - 31), Code::kDataLoss, "tensor 't'"},
      {"data_truncated", valid.substr(0, valid.size() - 4), Code::kDataLoss,
       "tensor 't': data [0, +16)"},
      {"truncated_tensor_info", valid.substr(0, valid.size() - 40), Code::kDataLoss, "tensor 't'"},
      {"tensor_name_past_end", header(3, 1, 0) + enc<uint64_t>(1ull << 40) + std::string(30, 'x'),
       Code::kDataLoss, "tensor #0"},
      {"overlap",
       GgufBuilder()
           .tensor({"t", {16}, 0, f32_bytes(std::vector<float>(16, 1)), std::nullopt})
           .tensor({"u", {8}, 0, "", 32})
           .build(),
       Code::kInvalidArgument, "tensor 'u': data at offset 32 overlaps tensor 't'"},
      {"duplicate_tensor",
       GgufBuilder()
           .tensor({"t", {4}, 0, f32_bytes({1, 2, 3, 4}), std::nullopt})
           .tensor({"t", {4}, 0, f32_bytes({1, 2, 3, 4}), std::nullopt})
           .build(),
       Code::kInvalidArgument, "duplicate tensor 't'"},
  };
}

TEST(GgufTest, RejectsHostileFiles) {
  for (const HostileCase& c : hostile_cases()) {
    SCOPED_TRACE(c.name);
    const fs::path path = write_temp(std::string(c.name) + ".gguf", c.bytes);
    StatusOr<GgufFile> f = GgufFile::open(path);
    ASSERT_FALSE(f.ok());
    const Status status = f.status();
    EXPECT_EQ(status.code(), c.code) << status.to_string();
    EXPECT_TRUE(contains(status.message(), path.string())) << status.message();
    EXPECT_TRUE(contains(status.message(), c.detail)) << status.message();
  }
}

TEST(GgufTest, SurvivesSeededMutations) {
  std::string q8 = fp16_bytes(0.5f);
  for (int j = 0; j < 32; ++j) q8 += static_cast<char>(j - 16);
  const std::string valid =
      GgufBuilder()
          .kv("general.architecture", GgufType::kString, enc_str("llama"))
          .kv("llama.block_count", GgufType::kUint32, enc<uint32_t>(1))
          .kv("tokenizer.ggml.tokens", GgufType::kArray,
              enc_array(GgufType::kString, 3, enc_str("<s>") + enc_str("a") + enc_str("b")))
          .kv("tokenizer.ggml.scores", GgufType::kArray,
              enc_array(GgufType::kFloat32, 2, enc<float>(1) + enc<float>(2)))
          .tensor({"f32", {4, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}), std::nullopt})
          .tensor({"f16", {2}, 1, fp16_bytes(1) + fp16_bytes(2), std::nullopt})
          .tensor({"q8", {32}, 8, q8, std::nullopt})
          .tensor({"q4", {32}, 2, fp16_bytes(1) + nibbles(), std::nullopt})
          .tensor({"q5", {32}, 6, fp16_bytes(1) + enc<uint32_t>(7) + nibbles(), std::nullopt})
          .build();
  const fs::path dir = temp_dir();
  std::mt19937 rng(4321);
  int accepted = 0;
  int rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes = valid;
    if (rng() % 4 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) {
        // Favour the metadata and tensor infos, and the high bytes of counts.
        const size_t at = rng() % (rng() % 3 == 0 ? bytes.size() : 400);
        bytes[at] = static_cast<char>(rng() % 2 ? rng() : (rng() % 2 ? 0xFF : 0x00));
      }
    }
    // A fresh name per case: rewriting one file in place makes ext4 flush each time.
    const fs::path path = dir / ("m" + std::to_string(iter) + ".gguf");
    write_file(path, bytes);
    StatusOr<GgufFile> f = GgufFile::open(path);
    std::error_code ignored;
    fs::remove(path, ignored);
    if (!f.ok()) {
      ++rejected;
      EXPECT_NE(f.status().code(), Code::kInternal);
      EXPECT_TRUE(contains(f.status().message(), path.string()));
      continue;
    }
    ++accepted;
    for (const GgufTensor& t : f->tensors()) {
      ASSERT_LE(f->data_offset() + t.offset + t.byte_size, bytes.size()) << t.name;
      std::vector<float> out;
      const Status s = f->read_f32(t, &out);
      EXPECT_TRUE(s.ok() || s.code() == Code::kUnimplemented) << s.to_string();
    }
  }
  EXPECT_GT(rejected, 500);
  EXPECT_GT(accepted, 10);
}

}  // namespace
}  // namespace qbc::frontend
