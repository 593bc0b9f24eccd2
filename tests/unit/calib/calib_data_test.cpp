// Calibration datasets: folders, .txt lists, JSON maps and their mix, each rejected case naming
// the file at fault, on-demand loading, and seeded random samples.
#include "qbc/calib/calib_data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qbc/calib/npy.h"
#include "qbc/ir/builder.h"
#include "test_support.h"

namespace qbc::calib {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

constexpr int64_t kHidden = 8;
const std::vector<CalibInputSpec> kOneInput = {{"inputs_embeds", kHidden}};

/// Writes a float32 sample whose values encode `tag`, so tests can tell samples apart.
void write_sample(const fs::path& p, const std::vector<int64_t>& shape, float tag) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = tag + 0.001f * static_cast<float>(i);
  fs::create_directories(p.parent_path());
  ASSERT_TRUE(write_npy(p, shape, v.data()).ok()) << p;
}

void expect_error(const StatusOr<CalibDataset>& d, Code code,
                  const std::vector<std::string>& parts) {
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), code) << d.status().to_string();
  for (const std::string& p : parts) {
    EXPECT_TRUE(contains(d.status().message(), p)) << d.status().message();
  }
}

float first_value(const CalibDataset& d, size_t i, int64_t* seq) {
  std::vector<float> v;
  const Status s = d.load(i, &v, seq);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return v.empty() ? -1.0f : v[0];
}

// Samples feed the float inputs the host does not compute: an M-RoPE graph's rope tables and
// the integer positions come from the positions on every call, so calibration data is its
// embeddings alone.
TEST(CalibData, InputSpecsLeaveOutPositionsAndRopeTables) {
  ir::Graph g;
  ir::Builder b(g);
  QBC_ASSERT_OK(b.input("inputs_embeds", {ir::DType::kF32, {1, ir::kDynamic, 64}}));
  QBC_ASSERT_OK(b.input("positions", {ir::DType::kI64, {1, ir::kDynamic}}));
  QBC_ASSERT_OK(b.input("rope_cos", {ir::DType::kF32, {1, ir::kDynamic, 8}}));
  QBC_ASSERT_OK(b.input("rope_sin", {ir::DType::kF32, {1, ir::kDynamic, 8}}));
  QBC_ASSERT_OK(b.input("extra", {ir::DType::kF32, {1, ir::kDynamic, 16}}));
  const std::vector<CalibInputSpec> specs = calib_input_specs(g);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "inputs_embeds");
  EXPECT_EQ(specs[0].hidden, 64);
  EXPECT_EQ(specs[1].name, "extra");
  EXPECT_EQ(specs[1].hidden, 16);
}

// Qwen3-VL's DeepStack inputs are optional: a plain folder feeds the embeddings alone (zero
// DeepStack rows); a folder with an inputs.json (what `calib prepare --images` writes) gives
// them, each sample's of the embeddings' length.
TEST(CalibData, DeepStackInputsAreOptionalAndAFoldersInputsJsonGivesThem) {
  ir::Graph g;
  ir::Builder b(g);
  QBC_ASSERT_OK(b.input("inputs_embeds", {ir::DType::kF32, {1, ir::kDynamic, kHidden}}));
  QBC_ASSERT_OK(b.input("deepstack.0", {ir::DType::kF32, {1, ir::kDynamic, kHidden}}));
  const std::vector<CalibInputSpec> specs = calib_input_specs(g);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_FALSE(specs[0].optional);
  EXPECT_TRUE(specs[1].optional);
  EXPECT_EQ(specs[1].name, "deepstack.0");

  const fs::path dir = temp_dir() / "calib";
  write_sample(dir / "s0.npy", {1, 3, kHidden}, 1);
  write_sample(dir / "s1.npy", {1, 3, kHidden}, 2);
  write_file(dir / "npy_files.txt", "s0.npy\ns1.npy\n");
  StatusOr<CalibDataset> plain = open_calib_inputs({dir.string()}, specs);
  QBC_ASSERT_OK(plain);
  ASSERT_EQ(plain->size(), 2u);
  EXPECT_FALSE(plain->has_input(0, "deepstack.0"));
  std::vector<float> v;
  int64_t seq = 0;
  EXPECT_EQ(plain->load_input(0, "deepstack.0", &v, &seq).code(), Code::kNotFound);
  EXPECT_FLOAT_EQ(first_value(*plain, 1, &seq), 2.0f);

  write_sample(dir / "deepstack.0" / "s0.npy", {1, 3, kHidden}, 7);
  write_sample(dir / "deepstack.0" / "s1.npy", {1, 3, kHidden}, 8);
  write_file(dir / "deepstack.0" / "npy_files.txt", "s0.npy\ns1.npy\n");
  write_file(dir / "inputs.json",
             R"({"inputs_embeds": "npy_files.txt", "deepstack.0": "deepstack.0/npy_files.txt"})");
  StatusOr<CalibDataset> mapped = open_calib_inputs({dir.string()}, specs);
  QBC_ASSERT_OK(mapped);
  ASSERT_EQ(mapped->size(), 2u);
  EXPECT_TRUE(mapped->has_input(1, "deepstack.0"));
  QBC_ASSERT_OK(mapped->load_input(1, "deepstack.0", &v, &seq));
  EXPECT_FLOAT_EQ(v[0], 8.0f);
  EXPECT_FLOAT_EQ(first_value(*mapped, 0, &seq), 1.0f);  // load(): the embeddings

  // A DeepStack sample of another length than its embeddings is refused, naming both.
  write_sample(dir / "deepstack.0" / "s1.npy", {1, 4, kHidden}, 8);
  expect_error(open_calib_inputs({dir.string()}, specs), Code::kInvalidArgument,
               {"s1.npy", "4 tokens", "sample 1 of 'inputs_embeds' has 3"});
  // A map that gives some of the optional inputs but not all is refused when opened.
  const std::vector<CalibInputSpec> levels = {
      specs[0], specs[1], {"deepstack.1", kHidden, /*optional=*/true}};
  write_sample(dir / "deepstack.0" / "s1.npy", {1, 3, kHidden}, 8);
  expect_error(open_calib_inputs({dir.string()}, levels), Code::kInvalidArgument,
               {"inputs.json", "1 of the model's 2 optional inputs", "'deepstack.1'"});
  // Without an optional input's map, a second required input still needs one.
  const std::vector<CalibInputSpec> two = {{"inputs_embeds", kHidden}, {"extra", kHidden}};
  fs::remove(dir / "inputs.json");
  expect_error(open_calib_inputs({dir.string()}, two), Code::kInvalidArgument,
               {"2 required float inputs", "give a .json map"});
}

TEST(CalibData, FolderInSortedNameOrder) {
  const fs::path dir = temp_dir() / "calib";
  write_sample(dir / "b.npy", {1, 5, kHidden}, 2);
  write_sample(dir / "a.npy", {1, 3, kHidden}, 1);
  write_sample(dir / "c.npy", {4, kHidden}, 3);  // [seq, hidden] is accepted too
  write_file(dir / "provenance.json", "{}");     // other files are ignored
  StatusOr<CalibDataset> d = open_calib_inputs({dir.string()}, kOneInput);
  QBC_ASSERT_OK(d);
  ASSERT_EQ(d->size(), 3u);
  EXPECT_EQ(d->samples()[0].inputs.at("inputs_embeds").path.filename(), "a.npy");
  EXPECT_EQ(d->samples()[2].inputs.at("inputs_embeds").seq, 4);
  int64_t seq = 0;
  EXPECT_FLOAT_EQ(first_value(*d, 0, &seq), 1.0f);
  EXPECT_EQ(seq, 3);
  EXPECT_FLOAT_EQ(first_value(*d, 1, &seq), 2.0f);
  EXPECT_EQ(seq, 5);
  std::vector<float> v;
  QBC_ASSERT_OK(d->load(2, &v, &seq));
  EXPECT_EQ(v.size(), static_cast<size_t>(4 * kHidden));
  EXPECT_FALSE(d->load(3, &v, &seq).ok());
}

TEST(CalibData, FolderWithNpyFilesTxtUsesItsOrder) {
  const fs::path dir = temp_dir() / "calib";
  write_sample(dir / "a.npy", {1, 2, kHidden}, 1);
  write_sample(dir / "b.npy", {1, 2, kHidden}, 2);
  write_sample(dir / "unlisted.npy", {1, 2, kHidden}, 9);
  write_file(dir / "npy_files.txt", "b.npy\n# a comment\n\n  a.npy  \r\n");
  StatusOr<CalibDataset> d = open_calib_inputs({dir.string()}, kOneInput);
  QBC_ASSERT_OK(d);
  ASSERT_EQ(d->size(), 2u);
  int64_t seq = 0;
  EXPECT_FLOAT_EQ(first_value(*d, 0, &seq), 2.0f);
  EXPECT_FLOAT_EQ(first_value(*d, 1, &seq), 1.0f);
}

TEST(CalibData, TxtListResolvesRelativeToItsFolder) {
  const fs::path root = temp_dir();
  write_sample(root / "data" / "x.npy", {1, 2, kHidden}, 1);
  write_sample(root / "abs.npy", {1, 3, kHidden}, 2);
  write_file(root / "lists" / "calib.txt",
             "# samples\n../data/x.npy\n\n" + (root / "abs.npy").string() + "\n");
  StatusOr<CalibDataset> d =
      open_calib_inputs({(root / "lists" / "calib.txt").string()}, kOneInput);
  QBC_ASSERT_OK(d);
  ASSERT_EQ(d->size(), 2u);
  int64_t seq = 0;
  EXPECT_FLOAT_EQ(first_value(*d, 1, &seq), 2.0f);
  EXPECT_EQ(seq, 3);
}

TEST(CalibData, JsonMapMatchesInputsByName) {
  const fs::path root = temp_dir();
  const std::vector<CalibInputSpec> two = {{"inputs_embeds", kHidden}, {"vision_embeds", 4}};
  write_sample(root / "t0.npy", {1, 3, kHidden}, 1);
  write_sample(root / "t1.npy", {1, 3, kHidden}, 2);
  write_sample(root / "v0.npy", {1, 2, 4}, 5);
  write_sample(root / "v1.npy", {1, 2, 4}, 6);
  // Keys in the other order than the model's inputs: matched by name, not position.
  write_file(root / "map.json",
             R"({"vision_embeds": ["v0.npy", "v1.npy"], "inputs_embeds": ["t0.npy", "t1.npy"]})");
  StatusOr<CalibDataset> d = open_calib_inputs({(root / "map.json").string()}, two);
  QBC_ASSERT_OK(d);
  ASSERT_EQ(d->size(), 2u);
  std::vector<float> v;
  int64_t seq = 0;
  QBC_ASSERT_OK(d->load_input(1, "vision_embeds", &v, &seq));
  EXPECT_FLOAT_EQ(v[0], 6.0f);
  EXPECT_EQ(seq, 2);
  QBC_ASSERT_OK(d->load_input(1, "inputs_embeds", &v, &seq));
  EXPECT_FLOAT_EQ(v[0], 2.0f);
  EXPECT_EQ(d->load_input(0, "nope", &v, &seq).code(), Code::kNotFound);
}

TEST(CalibData, MixedPathsAreConcatenated) {
  const fs::path root = temp_dir();
  write_sample(root / "dir" / "s0.npy", {1, 2, kHidden}, 1);
  write_sample(root / "dir" / "s1.npy", {1, 2, kHidden}, 2);
  write_sample(root / "l.npy", {1, 2, kHidden}, 3);
  write_file(root / "list.txt", "l.npy\n");
  write_sample(root / "m.npy", {1, 2, kHidden}, 4);
  write_file(root / "map.json", R"({"inputs_embeds": ["m.npy"]})");
  write_sample(root / "single.npy", {1, 2, kHidden}, 5);
  StatusOr<CalibDataset> d =
      open_calib_inputs({(root / "dir").string(), (root / "list.txt").string(),
                         (root / "map.json").string(), (root / "single.npy").string()},
                        kOneInput);
  QBC_ASSERT_OK(d);
  ASSERT_EQ(d->size(), 5u);
  int64_t seq = 0;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_FLOAT_EQ(first_value(*d, i, &seq), static_cast<float>(i + 1));
  }
}

TEST(CalibData, ReadsF16AndF64Samples) {
  const fs::path root = temp_dir();
  const std::vector<uint16_t> h(2 * kHidden, 0x3c00);  // 1.0
  write_file(root / "h.npy",
             npy_header_bytes("<f2", false, {1, 2, kHidden}) +
                 std::string(reinterpret_cast<const char*>(h.data()), h.size() * 2));
  const std::vector<double> f(kHidden, -0.5);
  write_file(root / "d.npy",
             npy_header_bytes("<f8", false, {1, kHidden}) +
                 std::string(reinterpret_cast<const char*>(f.data()), f.size() * 8));
  StatusOr<CalibDataset> d = open_calib_inputs({root.string()}, kOneInput);
  QBC_ASSERT_OK(d);
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ(d->samples()[0].inputs.at("inputs_embeds").dtype, NpyDtype::kF64);
  int64_t seq = 0;
  EXPECT_FLOAT_EQ(first_value(*d, 0, &seq), -0.5f);
  EXPECT_EQ(seq, 1);
  EXPECT_FLOAT_EQ(first_value(*d, 1, &seq), 1.0f);
}

TEST(CalibData, WrongHiddenNamesFileAndExpectedShape) {
  const fs::path dir = temp_dir() / "calib";
  write_sample(dir / "sample_0.npy", {1, 16, kHidden}, 0);
  write_sample(dir / "sample_3.npy", {1, 16, 12}, 0);
  expect_error(open_calib_inputs({dir.string()}, kOneInput), Code::kInvalidArgument,
               {(dir / "sample_3.npy").string() +
                ": shape [1, 16, 12] does not match the model's inputs_embeds [1, seq, 8]"});
}

TEST(CalibData, WrongRankBatchAndEmptySeq) {
  const fs::path root = temp_dir();
  write_sample(root / "r4.npy", {1, 1, 2, kHidden}, 0);
  expect_error(open_calib_inputs({(root / "r4.npy").string()}, kOneInput), Code::kInvalidArgument,
               {"r4.npy: shape [1, 1, 2, 8] does not match"});
  write_sample(root / "b2.npy", {2, 3, kHidden}, 0);
  expect_error(open_calib_inputs({(root / "b2.npy").string()}, kOneInput), Code::kInvalidArgument,
               {"b2.npy: shape [2, 3, 8]"});
  write_sample(root / "s0.npy", {1, 0, kHidden}, 0);
  expect_error(open_calib_inputs({(root / "s0.npy").string()}, kOneInput), Code::kInvalidArgument,
               {"s0.npy", "seq >= 1"});
}

TEST(CalibData, WrongDtypeNamesFile) {
  const fs::path dir = temp_dir() / "calib";
  write_file(dir / "ids.npy",
             npy_header_bytes("<i4", false, {1, 2, kHidden}) + std::string(64, '\0'));
  expect_error(open_calib_inputs({dir.string()}, kOneInput), Code::kInvalidArgument,
               {(dir / "ids.npy").string(), "dtype '<i4'"});
}

TEST(CalibData, TruncatedSampleIsDataLoss) {
  const fs::path dir = temp_dir() / "calib";
  write_file(dir / "t.npy",
             npy_header_bytes("<f4", false, {1, 2, kHidden}) + std::string(10, '\0'));
  expect_error(open_calib_inputs({dir.string()}, kOneInput), Code::kDataLoss,
               {"t.npy", "truncated"});
}

TEST(CalibData, EmptyFolderAndEmptyList) {
  const fs::path dir = temp_dir() / "empty";
  fs::create_directories(dir);
  write_file(dir / "readme.md", "no samples here");
  expect_error(open_calib_inputs({dir.string()}, kOneInput), Code::kInvalidArgument,
               {dir.string(), "no .npy files"});
  const fs::path list = temp_dir() / "empty.txt";
  write_file(list, "# nothing\n\n");
  expect_error(open_calib_inputs({list.string()}, kOneInput), Code::kInvalidArgument,
               {list.string(), "lists no .npy files"});
  expect_error(open_calib_inputs({}, kOneInput), Code::kInvalidArgument, {"calibDataPaths"});
}

TEST(CalibData, MissingFileInListNamesListLineAndFile) {
  const fs::path root = temp_dir();
  write_sample(root / "ok.npy", {1, 2, kHidden}, 0);
  write_file(root / "list.txt", "ok.npy\n\nmissing.npy\n");
  expect_error(
      open_calib_inputs({(root / "list.txt").string()}, kOneInput), Code::kNotFound,
      {(root / "list.txt").string() + ":3: " + (root / "missing.npy").string() + ": no such file"});
  expect_error(open_calib_inputs({(root / "nowhere").string()}, kOneInput), Code::kNotFound,
               {"nowhere: no such file or folder"});
  write_file(root / "data.csv", "1,2");
  expect_error(open_calib_inputs({(root / "data.csv").string()}, kOneInput), Code::kInvalidArgument,
               {"data.csv: not calibration data"});
}

TEST(CalibData, JsonMapErrorsNameTheInputs) {
  const fs::path root = temp_dir();
  const std::vector<CalibInputSpec> two = {{"inputs_embeds", kHidden}, {"vision_embeds", 4}};
  write_sample(root / "t.npy", {1, 2, kHidden}, 0);
  write_sample(root / "v.npy", {1, 2, 4}, 0);
  write_file(root / "unknown.json", R"({"inputs_embeds": ["t.npy"], "pixel_values": ["v.npy"]})");
  expect_error(open_calib_inputs({(root / "unknown.json").string()}, two), Code::kInvalidArgument,
               {"unknown.json", "unknown input 'pixel_values'", "inputs_embeds, vision_embeds"});
  write_file(root / "missing.json", R"({"inputs_embeds": ["t.npy"]})");
  expect_error(open_calib_inputs({(root / "missing.json").string()}, two), Code::kInvalidArgument,
               {"missing.json", "no samples for the model's input 'vision_embeds'"});
  write_file(root / "count.json",
             R"({"inputs_embeds": ["t.npy", "t.npy"], "vision_embeds": ["v.npy"]})");
  expect_error(open_calib_inputs({(root / "count.json").string()}, two), Code::kInvalidArgument,
               {"count.json", "'vision_embeds' has 1 samples but 'inputs_embeds' has 2"});
  write_file(root / "swapped.json", R"({"inputs_embeds": ["v.npy"], "vision_embeds": ["t.npy"]})");
  expect_error(open_calib_inputs({(root / "swapped.json").string()}, two), Code::kInvalidArgument,
               {"v.npy: shape [1, 2, 4] does not match the model's inputs_embeds [1, seq, 8]"});
  write_file(root / "bad.json", R"({"inputs_embeds": [)");
  expect_error(open_calib_inputs({(root / "bad.json").string()}, two), Code::kInvalidArgument,
               {"bad.json:1:20: malformed JSON at key 'inputs_embeds[0]'"});
  write_file(root / "num.json", R"({"inputs_embeds": [3], "vision_embeds": ["v.npy"]})");
  expect_error(open_calib_inputs({(root / "num.json").string()}, two), Code::kInvalidArgument,
               {"num.json", "expected file paths"});
  // A folder for a multi-input model is ambiguous.
  expect_error(open_calib_inputs({root.string()}, two), Code::kInvalidArgument,
               {"2 required float inputs", ".json map"});
}

TEST(CalibData, NonFiniteValuesAreRejectedOnLoad) {
  const fs::path p = temp_dir() / "nan.npy";
  std::vector<float> v(kHidden, 1.0f);
  v[3] = std::numeric_limits<float>::quiet_NaN();
  QBC_ASSERT_OK(write_npy(p, {1, 1, kHidden}, v.data()));
  StatusOr<CalibDataset> d = open_calib_inputs({p.string()}, kOneInput);
  QBC_ASSERT_OK(d);
  int64_t seq = 0;
  const Status s = d->load(0, &v, &seq);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), p.string() + ": non-finite value")) << s.message();
}

TEST(CalibData, RandomCalibIsSeededAndUsesTheTable) {
  auto table = std::make_shared<EmbeddingTable>();
  table->vocab = 10;
  table->hidden = 3;
  for (int64_t r = 0; r < 10; ++r) {
    for (int64_t c = 0; c < 3; ++c) table->data.push_back(static_cast<float>(r * 100 + c));
  }
  StatusOr<CalibDataset> a = make_random_calib(table, "inputs_embeds", 4, 6, 42, 1);
  StatusOr<CalibDataset> b = make_random_calib(table, "inputs_embeds", 4, 6, 42, 1);
  StatusOr<CalibDataset> c = make_random_calib(table, "inputs_embeds", 4, 6, 43, 1);
  QBC_ASSERT_OK(a);
  QBC_ASSERT_OK(b);
  QBC_ASSERT_OK(c);
  EXPECT_TRUE(a->is_random());
  EXPECT_EQ(a->size(), 4u);
  std::vector<float> x, y, z;
  int64_t seq = 0;
  bool any_diff = false;
  for (size_t i = 0; i < 4; ++i) {
    QBC_ASSERT_OK(a->load(i, &x, &seq));
    QBC_ASSERT_OK(b->load(i, &y, &seq));
    QBC_ASSERT_OK(c->load(i, &z, &seq));
    EXPECT_EQ(seq, 6);
    ASSERT_EQ(x.size(), 18u);
    EXPECT_EQ(x, y);
    any_diff |= x != z;
    EXPECT_EQ(x[0], 100.0f);  // BOS row first
    for (size_t t = 0; t < 6; ++t) {
      const float row = x[t * 3] / 100.0f;
      EXPECT_EQ(row, static_cast<float>(static_cast<int>(row))) << "not a table row";
      EXPECT_EQ(x[t * 3 + 2], x[t * 3] + 2.0f);
    }
  }
  EXPECT_TRUE(any_diff);
  EXPECT_FALSE(make_random_calib(table, "inputs_embeds", 0, 6, 1).ok());
  EXPECT_FALSE(make_random_calib(table, "inputs_embeds", 1, 0, 1).ok());
  EXPECT_FALSE(make_random_calib(nullptr, "inputs_embeds", 1, 1, 1).ok());
  // Known splitmix64 outputs for seed 0 (reference implementation by Vigna).
  uint64_t st = 0;
  EXPECT_EQ(splitmix64(st), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(st), 0x6e789e6aa1b965f4ULL);
}

TEST(CalibData, EmbeddingTableRejectsOutOfRangeIds) {
  EmbeddingTable t;
  t.vocab = 2;
  t.hidden = 1;
  t.data = {0.5f, 1.5f};
  std::vector<float> out;
  QBC_ASSERT_OK(t.embed({1, 0, 1}, &out));
  EXPECT_EQ(out, (std::vector<float>{1.5f, 0.5f, 1.5f}));
  const Status s = t.embed({0, 2}, &out);
  EXPECT_TRUE(contains(s.message(), "token id 2 at position 1")) << s.message();
}

}  // namespace
}  // namespace qbc::calib
