// Tests for the safetensors reader and writer: real checkpoints, sharding,
// hostile headers and a seeded mini-fuzz.
#include "qbc/frontend/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "qbc/tensorfile/safetensors_writer.h"
#include "support/test_support.h"

namespace qbc::frontend {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;
using tensorfile::DType;
using tensorfile::make_tensor;
using tensorfile::SafetensorsStreamWriter;
using tensorfile::TensorSpec;
using tensorfile::TensorToWrite;
using tensorfile::write_safetensors;

// A raw safetensors file: u64 header length, `header`, then `data_bytes` bytes.
std::string raw_file(const std::string& header, size_t data_bytes) {
  const uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  out += header;
  out.append(data_bytes, '\x01');
  return out;
}

int64_t config_int(const nlohmann::json& config, const char* key) {
  return config.at(key).get<int64_t>();
}

TEST(SafetensorsTest, ReadsStories260kAndMatchesConfig) {
  QBC_REQUIRE_SHARED(path, "models/stories260k/hf/model.safetensors");
  QBC_REQUIRE_SHARED(config_path, "models/stories260k/hf/config.json");
  const nlohmann::json config = nlohmann::json::parse(qbc::testing::read_file(config_path));
  const int64_t hidden = config_int(config, "hidden_size");
  const int64_t vocab = config_int(config, "vocab_size");
  const int64_t layers = config_int(config, "num_hidden_layers");
  const int64_t head_dim = config_int(config, "head_dim");
  const int64_t kv_heads = config_int(config, "num_key_value_heads");

  StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
  QBC_ASSERT_OK(file);
  EXPECT_EQ(file->tensors().size(), static_cast<size_t>(9 * layers + 3));
  const SafetensorsTensor* embed = file->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::kF32);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{vocab, hidden}));
  const SafetensorsTensor* k_proj = file->find("model.layers.2.self_attn.k_proj.weight");
  ASSERT_NE(k_proj, nullptr);
  EXPECT_EQ(k_proj->shape, (std::vector<int64_t>{kv_heads * head_dim, hidden}));
  const SafetensorsTensor* down = file->find("model.layers.4.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{hidden, config_int(config, "intermediate_size")}));
  EXPECT_EQ(file->find("model.layers.5.mlp.down_proj.weight"), nullptr);
  EXPECT_EQ(embed->data.size, static_cast<size_t>(vocab * hidden * 4));

  // Zero-copy view and converted copy agree.
  std::vector<float> values;
  QBC_ASSERT_OK(read_f32(*embed, &values));
  ASSERT_EQ(values.size(), static_cast<size_t>(vocab * hidden));
  StatusOr<const float*> direct = f32_data(*embed);
  QBC_ASSERT_OK(direct);
  EXPECT_EQ(std::memcmp(*direct, values.data(), values.size() * 4), 0);
  double sum_sq = 0;
  for (float v : values) sum_sq += double{v} * v;
  EXPECT_GT(sum_sq, 0.0);  // A trained embedding is not all zeros.
}

TEST(SafetensorsTest, ReadsBf16CheckpointFolder) {
  QBC_REQUIRE_SHARED(dir, "models/tiny/qwen2-bf16/hf");
  QBC_REQUIRE_SHARED(file_path, "models/tiny/qwen2-bf16/hf/model.safetensors");
  StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir);
  QBC_ASSERT_OK(ckpt);
  ASSERT_FALSE(ckpt->tensors().empty());
  for (const SafetensorsTensor& t : ckpt->tensors()) {
    EXPECT_EQ(t.dtype, DType::kBF16) << t.name;
    EXPECT_EQ(t.file, file_path);
  }
  ASSERT_EQ(ckpt->shards().size(), 1u);
  EXPECT_EQ(ckpt->shards()[0].metadata().at("format"), "pt");

  StatusOr<const SafetensorsTensor*> bias = ckpt->get("model.layers.0.self_attn.k_proj.bias");
  QBC_ASSERT_OK(bias);
  std::vector<float> values;
  QBC_ASSERT_OK(ckpt->read_f32((*bias)->name, &values));
  ASSERT_EQ(values.size(), static_cast<size_t>((*bias)->num_elements()));
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, (*bias)->data.data + 2 * i, 2);
    EXPECT_EQ(values[i], tensorfile::bf16_to_f32(bits));
    EXPECT_TRUE(std::isfinite(values[i]));
  }
  EXPECT_EQ(f32_data(**bias).status().code(), Code::kInvalidArgument);  // Not F32.
  const Status missing = ckpt->read_f32("nope.weight", &values);
  EXPECT_EQ(missing.code(), Code::kNotFound);
  EXPECT_TRUE(contains(missing.message(), "nope.weight"));
}

TEST(SafetensorsTest, WriterRoundTripsF32F16Bf16AndMetadata) {
  const fs::path path = temp_dir() / "rt.safetensors";
  const std::vector<float> a = {1.0f, -2.5f, 0.1f, 3e-5f, 100.0f, -0.0f};
  QBC_ASSERT_OK(write_safetensors(
      path,
      {make_tensor("a.f32", DType::kF32, {2, 3}, a), make_tensor("b.f16", DType::kF16, {6}, a),
       make_tensor("c.bf16", DType::kBF16, {3, 2}, a),
       make_tensor("d.empty", DType::kF32, {0, 4}, {})},
      {{"format", "pt"}, {"producer", "qbc-test"}}));
  EXPECT_FALSE(fs::exists(path.string() + ".tmp." + std::to_string(::getpid())));
  StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
  QBC_ASSERT_OK(file);
  EXPECT_EQ(file->metadata().at("producer"), "qbc-test");
  EXPECT_EQ(file->header_size() % 8, 0u);
  ASSERT_EQ(file->tensors().size(), 4u);
  std::vector<float> out;
  QBC_ASSERT_OK(read_f32(*file->find("a.f32"), &out));
  EXPECT_EQ(out, a);
  QBC_ASSERT_OK(read_f32(*file->find("b.f16"), &out));
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(out[i], tensorfile::fp16_to_f32(tensorfile::f32_to_fp16(a[i])));
  QBC_ASSERT_OK(read_f32(*file->find("c.bf16"), &out));
  EXPECT_EQ(file->find("c.bf16")->shape, (std::vector<int64_t>{3, 2}));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(out[i], a[i], std::fabs(a[i]) / 128);
  QBC_ASSERT_OK(read_f32(*file->find("d.empty"), &out));
  EXPECT_TRUE(out.empty());
}

TEST(SafetensorsTest, WriterRejectsBadTensors) {
  const fs::path path = temp_dir() / "bad.safetensors";
  Status s = write_safetensors(path, {make_tensor("w", DType::kF32, {2, 2}, {1, 2, 3})});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "'w'")) << s.message();
  s = write_safetensors(
      path, {make_tensor("w", DType::kF32, {1}, {1}), make_tensor("w", DType::kF32, {1}, {2})});
  EXPECT_TRUE(contains(s.message(), "duplicate tensor 'w'")) << s.message();
  s = write_safetensors(path, {make_tensor("w", DType::kF32, {-1}, {})});
  EXPECT_TRUE(contains(s.message(), "negative")) << s.message();
  s = write_safetensors(path, {make_tensor("__metadata__", DType::kF32, {1}, {1})});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_FALSE(fs::exists(path));
}

// Bytes of `n` floats 0, 1, 2, ... scaled by `scale`.
std::vector<uint8_t> f32_bytes(size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale;
  std::vector<uint8_t> out(n * 4);
  if (n > 0) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

bool folder_is_empty(const fs::path& dir) {
  return fs::directory_iterator(dir) == fs::directory_iterator();
}

TEST(SafetensorsStreamWriterTest, OrdersByElementSizeThenName) {
  const fs::path path = temp_dir() / "order.safetensors";
  StatusOr<SafetensorsStreamWriter> w =
      SafetensorsStreamWriter::create(path, {{"z.f16", DType::kF16, {3}},
                                             {"b.f32", DType::kF32, {2}},
                                             {"a.f32", DType::kF32, {1}},
                                             {"m.f64", DType::kF64, {1}}});
  QBC_ASSERT_OK(w);
  std::vector<std::string> names;
  for (const TensorSpec& t : w->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"m.f64", "a.f32", "b.f32", "z.f16"}));
  EXPECT_EQ(w->byte_size(0), 8u);
  EXPECT_EQ(w->byte_size(3), 6u);
  EXPECT_TRUE(fs::exists(path.string() + ".tmp"));
  EXPECT_FALSE(fs::exists(path));
}

TEST(SafetensorsStreamWriterTest, RejectsWrongOrderAndUnknownNames) {
  const fs::path dir = temp_dir();
  const fs::path path = dir / "order.safetensors";
  const std::vector<uint8_t> eight = f32_bytes(2);
  {
    auto w =
        SafetensorsStreamWriter::create(path, {{"b", DType::kF32, {2}}, {"a", DType::kF32, {2}}});
    QBC_ASSERT_OK(w);
    const Status s = w->append("b", eight.data(), eight.size());
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(s.message(), path.string())) << s.message();
    EXPECT_TRUE(contains(s.message(), "'b' written out of order: expected tensor 'a'"))
        << s.message();
    // The first error is sticky, and the temporary file is gone at once.
    EXPECT_EQ(w->append("a", eight.data(), eight.size()).message(), s.message());
    EXPECT_EQ(w->finish().message(), s.message());
    EXPECT_TRUE(folder_is_empty(dir));
  }
  {
    auto w = SafetensorsStreamWriter::create(path, {{"a", DType::kF32, {2}}});
    QBC_ASSERT_OK(w);
    const Status s = w->write("nope", eight.data(), eight.size());
    EXPECT_TRUE(contains(s.message(), "tensor 'nope' is not in the header")) << s.message();
  }
  {
    auto w = SafetensorsStreamWriter::create(path, {{"a", DType::kF32, {2}}});
    QBC_ASSERT_OK(w);
    QBC_ASSERT_OK(w->append("a", eight.data(), eight.size()));
    const Status s = w->append("a", eight.data(), eight.size());
    EXPECT_TRUE(contains(s.message(), "tensor 'a' is written twice")) << s.message();
  }
  EXPECT_TRUE(folder_is_empty(dir));
}

TEST(SafetensorsStreamWriterTest, RejectsWrongSizes) {
  const fs::path dir = temp_dir();
  const fs::path path = dir / "size.safetensors";
  const std::vector<uint8_t> bytes = f32_bytes(4);
  const std::vector<TensorSpec> specs = {{"a", DType::kF32, {2}}, {"b", DType::kF32, {2}}};
  {  // append() takes exactly the whole tensor.
    auto w = SafetensorsStreamWriter::create(path, specs);
    QBC_ASSERT_OK(w);
    const Status s = w->append("a", bytes.data(), 7);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(s.message(), "tensor 'a': shape and F32 need 8 bytes, got 7"))
        << s.message();
  }
  {  // Chunks may not run past the tensor.
    auto w = SafetensorsStreamWriter::create(path, specs);
    QBC_ASSERT_OK(w);
    QBC_ASSERT_OK(w->write("a", bytes.data(), 4));
    const Status s = w->write("a", bytes.data(), 8);
    EXPECT_TRUE(contains(s.message(), "tensor 'a': 12 bytes written exceed its size of 8"))
        << s.message();
  }
  {  // A short tensor is caught when the next one starts...
    auto w = SafetensorsStreamWriter::create(path, specs);
    QBC_ASSERT_OK(w);
    QBC_ASSERT_OK(w->write("a", bytes.data(), 4));
    const Status s = w->write("b", bytes.data(), 4);
    EXPECT_TRUE(contains(s.message(), "tensor 'a' got 4 of 8 bytes before tensor 'b'"))
        << s.message();
  }
  {  // ... or at finish().
    auto w = SafetensorsStreamWriter::create(path, specs);
    QBC_ASSERT_OK(w);
    QBC_ASSERT_OK(w->append("a", bytes.data(), 8));
    QBC_ASSERT_OK(w->write("b", bytes.data(), 4));
    const Status s = w->finish();
    EXPECT_TRUE(contains(s.message(), "tensor 'b' got 4 of 8 bytes at finish()")) << s.message();
  }
  {
    auto w = SafetensorsStreamWriter::create(path, specs);
    QBC_ASSERT_OK(w);
    const Status s = w->finish();
    EXPECT_TRUE(contains(s.message(), "tensor 'a' got 0 of 8 bytes")) << s.message();
  }
  EXPECT_TRUE(folder_is_empty(dir));
  // Spec errors name the path and the tensor.
  auto bad = SafetensorsStreamWriter::create(path, {{"w", DType::kF32, {3, -1}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), path.string() + ": tensor 'w': negative dim"))
      << bad.status().message();
  bad = SafetensorsStreamWriter::create(path, {{"w", DType::kF32, {1LL << 40, 1LL << 40}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "overflows")) << bad.status().message();
  bad = SafetensorsStreamWriter::create(dir / "no-such-folder" / "x.safetensors", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "cannot create")) << bad.status().message();
  EXPECT_TRUE(folder_is_empty(dir));
}

TEST(SafetensorsStreamWriterTest, UnfinishedWriterLeavesNoFile) {
  const fs::path dir = temp_dir();
  const fs::path path = dir / "model.safetensors";
  const std::vector<uint8_t> bytes = f32_bytes(2);
  {
    auto w =
        SafetensorsStreamWriter::create(path, {{"a", DType::kF32, {2}}, {"b", DType::kF32, {2}}});
    QBC_ASSERT_OK(w);
    QBC_ASSERT_OK(w->append("a", bytes.data(), bytes.size()));
    EXPECT_TRUE(fs::exists(path.string() + ".tmp"));
  }
  EXPECT_TRUE(folder_is_empty(dir));
  // An existing file at the target survives an abandoned rewrite, also through moves.
  write_file(path, "old contents");
  {
    auto w = SafetensorsStreamWriter::create(path, {{"a", DType::kF32, {2}}});
    QBC_ASSERT_OK(w);
    SafetensorsStreamWriter moved = std::move(*w);
    SafetensorsStreamWriter other = std::move(moved);
    QBC_ASSERT_OK(other.write("a", bytes.data(), 4));
    EXPECT_EQ(w->finish().code(), Code::kFailedPrecondition);  // Moved from.
  }
  EXPECT_EQ(qbc::testing::read_file(path), "old contents");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  // A finished writer replaces it, and cannot be used again.
  auto w = SafetensorsStreamWriter::create(path, {{"a", DType::kF32, {2}}});
  QBC_ASSERT_OK(w);
  QBC_ASSERT_OK(w->append("a", bytes.data(), bytes.size()));
  QBC_ASSERT_OK(w->finish());
  EXPECT_EQ(w->finish().code(), Code::kFailedPrecondition);
  EXPECT_EQ(fs::file_size(path), w->file_size());
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  QBC_ASSERT_OK(SafetensorsFile::open(path));
}

TEST(SafetensorsStreamWriterTest, MultiChunkRoundTrip) {
  const fs::path path = temp_dir() / "big.safetensors";
  // 3 MiB of F32 (more than the writer's 1 MiB buffer), written in odd-sized chunks that split
  // elements, between small tensors of other dtypes and an empty tensor that is never written.
  const size_t big_n = 3 * 256 * 1024;
  const std::vector<uint8_t> big = f32_bytes(big_n, 0.5f);
  const TensorToWrite half = make_tensor("h.f16", DType::kF16, {3}, {1, 2, 3});
  const TensorToWrite brain = make_tensor("a.bf16", DType::kBF16, {1, 5}, {1, 2, 3, 4, 5});
  auto w = SafetensorsStreamWriter::create(path,
                                           {{"h.f16", DType::kF16, {3}},
                                            {"big", DType::kF32, {768, 1024}},
                                            {"a.bf16", DType::kBF16, {1, 5}},
                                            {"empty", DType::kF32, {0, 7}}},
                                           {{"format", "pt"}});
  QBC_ASSERT_OK(w);
  for (const TensorSpec& t : w->tensors()) {
    if (t.name == "empty") continue;  // Tensors without bytes may be skipped.
    const std::vector<uint8_t>& data = t.name == "big"     ? big
                                       : t.name == "h.f16" ? half.data
                                                           : brain.data;
    const size_t chunk = t.name == "big" ? 100003 : 3;
    for (size_t done = 0; done < data.size(); done += chunk) {
      QBC_ASSERT_OK(w->write(t.name, data.data() + done, std::min(chunk, data.size() - done)));
    }
  }
  QBC_ASSERT_OK(w->finish());
  EXPECT_EQ(fs::file_size(path), w->file_size());

  StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
  QBC_ASSERT_OK(file);
  EXPECT_EQ(file->header_size() % 8, 0u);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  ASSERT_EQ(file->tensors().size(), 4u);
  const SafetensorsTensor* t = file->find("big");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->begin, 0u);  // Widest dtype first.
  EXPECT_EQ(t->shape, (std::vector<int64_t>{768, 1024}));
  ASSERT_EQ(t->data.size, big.size());
  EXPECT_EQ(std::memcmp(t->data.data, big.data(), big.size()), 0);
  StatusOr<const float*> zero_copy = f32_data(*t);
  QBC_ASSERT_OK(zero_copy);  // 4-byte aligned in the mapping.
  EXPECT_EQ((*zero_copy)[big_n - 1], static_cast<float>(big_n - 1) * 0.5f);
  std::vector<float> out;
  QBC_ASSERT_OK(read_f32(*file->find("h.f16"), &out));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3}));
  QBC_ASSERT_OK(read_f32(*file->find("a.bf16"), &out));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(file->find("empty")->data.size, 0u);
}

TEST(SafetensorsStreamWriterTest, WriteSafetensorsMatchesStreaming) {
  const fs::path dir = temp_dir();
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  QBC_ASSERT_OK(write_safetensors(
      dir / "mem.safetensors",
      {make_tensor("y", DType::kBF16, {3}, {1, 2, 3}), make_tensor("x", DType::kF32, {2, 3}, v)}));
  const TensorToWrite x = make_tensor("x", DType::kF32, {2, 3}, v);
  const TensorToWrite y = make_tensor("y", DType::kBF16, {3}, {1, 2, 3});
  auto w = SafetensorsStreamWriter::create(dir / "stream.safetensors",
                                           {{"x", DType::kF32, {2, 3}}, {"y", DType::kBF16, {3}}});
  QBC_ASSERT_OK(w);
  QBC_ASSERT_OK(w->append("x", x.data.data(), x.data.size()));
  QBC_ASSERT_OK(w->append("y", y.data.data(), y.data.size()));
  QBC_ASSERT_OK(w->finish());
  EXPECT_EQ(qbc::testing::read_file(dir / "mem.safetensors"),
            qbc::testing::read_file(dir / "stream.safetensors"));
  // An empty tensor list is a valid file too.
  QBC_ASSERT_OK(write_safetensors(dir / "none.safetensors", {}));
  StatusOr<SafetensorsFile> none = SafetensorsFile::open(dir / "none.safetensors");
  QBC_ASSERT_OK(none);
  EXPECT_TRUE(none->tensors().empty());
}

// Writes a 2-shard checkpoint into a fresh folder and returns the folder.
fs::path write_sharded(const std::string& index_json) {
  const fs::path dir = temp_dir();
  EXPECT_TRUE(
      write_safetensors(dir / "model-00001-of-00002.safetensors",
                        {make_tensor("embed.weight", DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}),
                         make_tensor("norm.weight", DType::kBF16, {3}, {0.5f, 1, 2})})
          .ok());
  EXPECT_TRUE(write_safetensors(dir / "model-00002-of-00002.safetensors",
                                {make_tensor("lm_head.weight", DType::kF16, {1, 3}, {-1, 0, 1}),
                                 make_tensor("unlisted.weight", DType::kF32, {1}, {9})})
                  .ok());
  write_file(dir / "model.safetensors.index.json", index_json);
  return dir;
}

const char* kGoodIndex = R"({
  "metadata": {"total_size": 42},
  "weight_map": {
    "embed.weight": "model-00001-of-00002.safetensors",
    "norm.weight": "model-00001-of-00002.safetensors",
    "lm_head.weight": "model-00002-of-00002.safetensors"
  }
})";

TEST(SafetensorsTest, ReadsShardedCheckpoint) {
  const fs::path dir = write_sharded(kGoodIndex);
  for (const fs::path& open_path : {dir, dir / "model.safetensors.index.json"}) {
    StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(open_path);
    QBC_ASSERT_OK(ckpt);
    ASSERT_EQ(ckpt->tensors().size(), 3u);  // "unlisted.weight" is not in the weight map.
    EXPECT_EQ(ckpt->shards().size(), 2u);
    EXPECT_EQ(ckpt->find("unlisted.weight"), nullptr);
    EXPECT_EQ(ckpt->find("embed.weight")->file, dir / "model-00001-of-00002.safetensors");
    EXPECT_EQ(ckpt->find("lm_head.weight")->file, dir / "model-00002-of-00002.safetensors");
    std::vector<float> out;
    QBC_ASSERT_OK(ckpt->read_f32("lm_head.weight", &out));
    EXPECT_EQ(out, (std::vector<float>{-1, 0, 1}));
    QBC_ASSERT_OK(ckpt->read_f32("norm.weight", &out));
    EXPECT_EQ(out, (std::vector<float>{0.5f, 1, 2}));
    QBC_ASSERT_OK(ckpt->read_f32("embed.weight", &out));
    EXPECT_EQ(out[5], 6.0f);
  }
}

struct IndexCase {
  const char* name;
  std::string index;
  Code code;
  std::vector<std::string> needles;
};

TEST(SafetensorsTest, RejectsHostileIndexFiles) {
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::vector<IndexCase> cases = {
      {"missing_shard",
       R"({"weight_map": {"embed.weight": "model-00003.safetensors"}})",
       Code::kDataLoss,
       {"embed.weight", "model-00003.safetensors", "does not exist"}},
      {"tensor_absent",
       R"({"weight_map": {"ghost.weight": ")" + shard1 + R"("}})",
       Code::kDataLoss,
       {"ghost.weight", shard1, "does not contain"}},
      {"no_weight_map", R"({"metadata": {}})", Code::kInvalidArgument, {"weight_map"}},
      {"not_object", R"([1, 2])", Code::kInvalidArgument, {"expected an object"}},
      {"invalid_json", R"({"weight_map": )", Code::kInvalidArgument, {"invalid JSON"}},
      {"shard_not_string",
       R"({"weight_map": {"embed.weight": 7}})",
       Code::kInvalidArgument,
       {"embed.weight", "expected a file name"}},
      {"path_escape",
       R"({"weight_map": {"embed.weight": "../x.safetensors"}})",
       Code::kInvalidArgument,
       {"embed.weight", "../x.safetensors"}},
      {"absolute_path",
       R"({"weight_map": {"embed.weight": "/etc/passwd"}})",
       Code::kInvalidArgument,
       {"embed.weight"}},
      {"duplicate_tensor",
       R"({"weight_map": {"embed.weight": ")" + shard1 + R"(", "embed.weight": ")" + shard1 +
           R"("}})",
       Code::kInvalidArgument,
       {"duplicate key 'embed.weight'"}},
  };
  for (const IndexCase& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path dir = write_sharded(c.index);
    StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir);
    ASSERT_FALSE(ckpt.ok());
    EXPECT_EQ(ckpt.status().code(), c.code) << ckpt.status().to_string();
    EXPECT_TRUE(contains(ckpt.status().message(), "model.safetensors.index.json"))
        << ckpt.status().message();
    for (const std::string& needle : c.needles) {
      EXPECT_TRUE(contains(ckpt.status().message(), needle))
          << "missing '" << needle << "' in: " << ckpt.status().message();
    }
  }
}

TEST(SafetensorsTest, ReportsCorruptShardThroughIndex) {
  const fs::path dir = write_sharded(kGoodIndex);
  write_file(dir / "model-00002-of-00002.safetensors", "tiny");
  StatusOr<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), Code::kDataLoss);
  EXPECT_TRUE(contains(ckpt.status().message(), "model-00002-of-00002.safetensors"));
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  const fs::path path = temp_dir() / "absent.safetensors";
  StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
  EXPECT_EQ(file.status().code(), Code::kNotFound);
  EXPECT_TRUE(contains(file.status().message(), path.string()));
  EXPECT_EQ(SafetensorsCheckpoint::open(temp_dir()).status().code(), Code::kNotFound);
}

TEST(SafetensorsTest, UnconvertibleDtypeNamesTensor) {
  const fs::path path = temp_dir() / "i32.safetensors";
  write_file(path, raw_file(R"({"ids":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", 8));
  StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
  QBC_ASSERT_OK(file);
  std::vector<float> out;
  const Status s = read_f32(*file->find("ids"), &out);
  EXPECT_EQ(s.code(), Code::kUnimplemented);
  EXPECT_TRUE(contains(s.message(), "'ids'") && contains(s.message(), "I32")) << s.message();
}

struct HostileCase {
  const char* name;
  std::string contents;
  Code code;
  const char* tensor;  // Expected in the message, or nullptr.
  const char* detail;  // Expected in the message.
};

std::string entry(const std::string& name, const std::string& body) {
  return "\"" + name + "\":{" + body + "}";
}

std::vector<HostileCase> hostile_cases() {
  const std::string ok_w = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  auto one = [](const std::string& body, size_t data = 16) {
    return raw_file("{" + entry("w", body) + "}", data);
  };
  std::string huge_len(8, '\0');
  const uint64_t huge = 1ull << 62;
  std::memcpy(huge_len.data(), &huge, 8);
  const std::string past_end = raw_file("{}", 0).substr(0, 8).replace(0, 2, "\xE8\x03");
  return {
      {"empty_file", "", Code::kDataLoss, nullptr, "shorter than the 8-byte"},
      {"short_file", "abcde", Code::kDataLoss, nullptr, "shorter than the 8-byte"},
      {"header_past_end", past_end + "{}", Code::kDataLoss, nullptr, "runs past the end"},
      {"header_absurd", huge_len + "{}", Code::kInvalidArgument, nullptr, "exceeds the limit"},
      {"invalid_json", raw_file(R"({"w": )", 0), Code::kInvalidArgument, nullptr, "invalid JSON"},
      {"header_not_object", raw_file("[1,2]", 0), Code::kInvalidArgument, nullptr,
       "expected an object"},
      {"entry_not_object", raw_file(R"({"w": 3})", 0), Code::kInvalidArgument, "w",
       "expected an object"},
      {"missing_dtype", one(R"("shape":[2],"data_offsets":[0,8])"), Code::kInvalidArgument, "w",
       "missing 'dtype'"},
      {"dtype_not_string", one(R"("dtype":5,"shape":[2],"data_offsets":[0,8])"),
       Code::kInvalidArgument, "w", "'dtype' is a JSON number"},
      {"unknown_dtype", one(R"("dtype":"F33","shape":[2],"data_offsets":[0,8])"),
       Code::kInvalidArgument, "w", "unknown dtype 'F33'"},
      {"missing_shape", one(R"("dtype":"F32","data_offsets":[0,8])"), Code::kInvalidArgument, "w",
       "missing 'shape'"},
      {"shape_not_array", one(R"("dtype":"F32","shape":2,"data_offsets":[0,8])"),
       Code::kInvalidArgument, "w", "'shape' is a JSON number"},
      {"negative_dim", one(R"("dtype":"F32","shape":[-1,2],"data_offsets":[0,8])"),
       Code::kInvalidArgument, "w", "negative integer"},
      {"float_dim", one(R"("dtype":"F32","shape":[1.5],"data_offsets":[0,8])"),
       Code::kInvalidArgument, "w", "shape[0]"},
      {"shape_overflow",
       one(R"("dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8])"),
       Code::kInvalidArgument, "w", "overflows"},
      {"missing_offsets", one(R"("dtype":"F32","shape":[2])"), Code::kInvalidArgument, "w",
       "missing 'data_offsets'"},
      {"offsets_arity", one(R"("dtype":"F32","shape":[2],"data_offsets":[0])"),
       Code::kInvalidArgument, "w", "data_offsets"},
      {"offsets_negative", one(R"("dtype":"F32","shape":[2],"data_offsets":[-8,0])"),
       Code::kInvalidArgument, "w", "data_offsets"},
      {"begin_after_end", one(R"("dtype":"F32","shape":[0],"data_offsets":[8,4])"),
       Code::kInvalidArgument, "w", "begin > end"},
      {"offsets_past_data", one(R"("dtype":"F32","shape":[100],"data_offsets":[0,400])"),
       Code::kDataLoss, "w", "exceed the data area of 16 bytes"},
      {"size_mismatch", one(R"("dtype":"F32","shape":[3],"data_offsets":[0,16])"),
       Code::kInvalidArgument, "w", "needs 3 x 4 bytes"},
      {"overlap",
       raw_file("{" + entry("a", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])") + "," +
                    entry("b", R"("dtype":"F32","shape":[2],"data_offsets":[4,12])") + "}",
                16),
       Code::kInvalidArgument, "b", "overlap tensor 'a'"},
      {"duplicate_tensor", raw_file("{" + entry("w", ok_w) + "," + entry("w", ok_w) + "}", 16),
       Code::kInvalidArgument, "w", "duplicate key 'w'"},
      {"duplicate_field", one(R"("dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8])"),
       Code::kInvalidArgument, "w", "duplicate key 'dtype' in entry 'w'"},
      {"metadata_not_object", raw_file(R"({"__metadata__": 3})", 0), Code::kInvalidArgument,
       nullptr, "'__metadata__'"},
      {"metadata_value_not_string", raw_file(R"({"__metadata__": {"k": 1}})", 0),
       Code::kInvalidArgument, nullptr, "key 'k'"},
  };
}

TEST(SafetensorsTest, RejectsHostileFiles) {
  const fs::path dir = temp_dir();
  for (const HostileCase& c : hostile_cases()) {
    SCOPED_TRACE(c.name);
    const fs::path path = dir / (std::string(c.name) + ".safetensors");
    write_file(path, c.contents);
    StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
    ASSERT_FALSE(file.ok());
    const Status status = file.status();
    const std::string& msg = status.message();
    EXPECT_EQ(file.status().code(), c.code) << file.status().to_string();
    EXPECT_TRUE(contains(msg, path.string())) << msg;
    if (c.tensor != nullptr) {
      EXPECT_TRUE(contains(msg, std::string("'") + c.tensor + "'")) << msg;
    }
    EXPECT_TRUE(contains(msg, c.detail)) << msg;
  }
}

TEST(SafetensorsTest, SurvivesSeededMutations) {
  const fs::path dir = temp_dir();
  const fs::path valid = dir / "valid.safetensors";
  QBC_ASSERT_OK(write_safetensors(valid,
                                  {make_tensor("a", DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}),
                                   make_tensor("b", DType::kF16, {4}, {1, 2, 3, 4}),
                                   make_tensor("c", DType::kBF16, {2}, {7, 8})},
                                  {{"format", "pt"}}));
  const std::string original = qbc::testing::read_file(valid);
  uint64_t header_len = 0;
  std::memcpy(&header_len, original.data(), 8);
  std::mt19937 rng(1234);
  int accepted = 0;
  int rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes = original;
    const int kind = static_cast<int>(rng() % 4);
    if (kind == 0) {  // Truncate.
      bytes.resize(rng() % bytes.size());
    } else if (kind == 1) {  // Corrupt the length prefix.
      bytes[rng() % 8] = static_cast<char>(rng());
    } else {  // Flip 1..4 bytes, mostly inside the JSON header.
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        const size_t span = (rng() % 5 != 0) ? 8 + header_len : bytes.size();
        bytes[rng() % span] = static_cast<char>(rng());
      }
    }
    // A fresh name per case: rewriting one file in place makes ext4 flush each time.
    const fs::path mutated = dir / ("mutated-" + std::to_string(iter) + ".safetensors");
    write_file(mutated, bytes);
    StatusOr<SafetensorsFile> file = SafetensorsFile::open(mutated);
    std::error_code ignored;
    fs::remove(mutated, ignored);  // The mapping (if any) stays valid until `file` dies.
    if (!file.ok()) {
      ++rejected;
      EXPECT_TRUE(file.status().code() == Code::kInvalidArgument ||
                  file.status().code() == Code::kDataLoss)
          << file.status().to_string();
      EXPECT_TRUE(contains(file.status().message(), mutated.string()));
      continue;
    }
    ++accepted;
    for (const SafetensorsTensor& t : file->tensors()) {
      ASSERT_LE(t.end, bytes.size() - 8 - file->header_size()) << t.name;
      std::vector<float> out;
      const Status s = read_f32(t, &out);
      EXPECT_TRUE(s.ok() || s.code() == Code::kUnimplemented) << s.to_string();
    }
  }
  EXPECT_GT(rejected, 500);
  EXPECT_GT(accepted, 10);  // Flips in tensor data or insignificant header bytes.
}

}  // namespace
}  // namespace qbc::frontend
