// End-to-end tests of `qbc calib prepare` on stories260K: the written samples, BOS at each
// window start, byte-identical reruns, and bad input exiting 2 without partial output.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/frontend/model_source.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

/// A parsed version-1.0 float32 .npy file (the only kind `calib prepare` writes).
struct Npy {
  std::string header;
  std::vector<float> data;
};

Npy parse_npy(const std::string& bytes) {
  Npy out;
  EXPECT_GE(bytes.size(), 10u);
  if (bytes.size() < 10) return out;
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9])
                                                                << 8;
  out.header = bytes.substr(10, len);
  const size_t n = (bytes.size() - 10 - len) / 4;
  out.data.resize(n);
  std::memcpy(out.data.data(), bytes.data() + 10 + len, n * 4);
  return out;
}

std::string prepare_args(const fs::path& model, const fs::path& text, const fs::path& out) {
  return "calib prepare " + shell_quote(model) + " --text " + shell_quote(text) +
         " --num-samples 8 --seq-len 64 -o " + shell_quote(out);
}

TEST(CalibCli, HelpListsOptions) {
  auto r = run_qbc("calib prepare --help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* opt :
       {"--text", "--num-samples", "--seq-len", "--seed", "--output", "--force"}) {
    EXPECT_TRUE(contains(r.out, opt)) << opt;
  }
  EXPECT_TRUE(contains(run_qbc("--help").out, "calib"));
}

TEST(CalibCli, PreparesStoriesSamples) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/calib.clean.txt");
  const fs::path out = temp_dir() / "calib";
  auto r = run_qbc(prepare_args(model, text, out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "wrote 8 samples [1, 64, 64]")) << r.out;

  StatusOr<frontend::ModelSource> src = frontend::ModelSource::open(model);
  QBC_ASSERT_OK(src);
  std::vector<float> table;
  QBC_ASSERT_OK(src->read_f32("model.embed_tokens.weight", &table));
  ASSERT_EQ(table.size(), 512u * 64u);
  const std::vector<float> bos_row(table.begin() + 64, table.begin() + 128);  // token 1

  std::string list;
  for (int i = 0; i < 8; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "sample_%04d.npy", i);
    list += std::string(name) + "\n";
    const Npy n = parse_npy(read_file(out / name));
    EXPECT_TRUE(
        contains(n.header, "'descr': '<f4', 'fortran_order': False, 'shape': (1, 64, 64), }"))
        << n.header;
    ASSERT_EQ(n.data.size(), 64u * 64u) << name;
    EXPECT_EQ(std::vector<float>(n.data.begin(), n.data.begin() + 64), bos_row) << name;
    // Every row is some row of the embedding table (pure lookup, no scaling).
    for (int t = 1; t < 64; t += 21) {
      bool found = false;
      for (size_t v = 0; v < 512 && !found; ++v) {
        found = std::equal(n.data.begin() + t * 64, n.data.begin() + (t + 1) * 64,
                           table.begin() + v * 64);
      }
      EXPECT_TRUE(found) << name << " row " << t;
    }
  }
  EXPECT_EQ(read_file(out / "npy_files.txt"), list);
  const nlohmann::json p = nlohmann::json::parse(read_file(out / "provenance.json"));
  EXPECT_EQ(p["num_samples"], 8);
  EXPECT_EQ(p["seq_len"], 64);
  EXPECT_EQ(p["offsets"].size(), 8u);
  EXPECT_EQ(p["text"]["path"], text.string());
  EXPECT_EQ(p["text"]["xxh3_128"].get<std::string>().size(), 32u);
  EXPECT_FALSE(p["model"]["files"].empty());
  EXPECT_EQ(p["model"]["files"][0]["xxh3_128"].get<std::string>().size(), 32u);
  EXPECT_TRUE(contains(p["tokenizer"]["path"].get<std::string>(), "tokenizer.json"));
  EXPECT_TRUE(contains(p["producer"].get<std::string>(), "qbc "));
  EXPECT_FALSE(p.contains("time"));
}

TEST(CalibCli, SameArgumentsSameBytes) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/calib.clean.txt");
  const fs::path root = temp_dir();
  ASSERT_EQ(run_qbc(prepare_args(model, text, root / "a")).exit_code, 0);
  ASSERT_EQ(run_qbc(prepare_args(model, text, root / "b")).exit_code, 0);
  ASSERT_EQ(run_qbc(prepare_args(model, text, root / "c") + " --seed 5").exit_code, 0);
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(root / "a")) {
    const std::string f = e.path().filename().string();
    EXPECT_EQ(read_file(root / "a" / f), read_file(root / "b" / f)) << f;
    ++n;
  }
  EXPECT_EQ(n, 10u);  // 8 samples, npy_files.txt, provenance.json
  EXPECT_NE(read_file(root / "a" / "provenance.json"), read_file(root / "c" / "provenance.json"));
}

TEST(CalibCli, BadInputExits2WithoutPartialOutput) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/calib.clean.txt");
  const fs::path root = temp_dir();

  auto r = run_qbc(prepare_args(model, root / "missing.txt", root / "o1"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "missing.txt")) << r.err;
  EXPECT_FALSE(fs::exists(root / "o1"));

  write_file(root / "short.txt", "Once upon a time, there was a cat.");
  r = run_qbc(prepare_args(model, root / "short.txt", root / "o2"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, (root / "short.txt").string() + ": ")) << r.err;
  EXPECT_TRUE(contains(r.err, "tokens, fewer than one window of --seq-len 64")) << r.err;
  EXPECT_FALSE(fs::exists(root / "o2"));

  write_file(root / "o3" / "keep.txt", "mine");
  r = run_qbc(prepare_args(model, text, root / "o3"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--force")) << r.err;
  EXPECT_EQ(read_file(root / "o3" / "keep.txt"), "mine");
  r = run_qbc(prepare_args(model, text, root / "o3") + " --force");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(root / "o3" / "keep.txt"));
  EXPECT_TRUE(fs::exists(root / "o3" / "sample_0007.npy"));

  r = run_qbc(prepare_args(root / "no-model", text, root / "o4"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(root / "o4"));

  // Nothing but the outputs we asked for: no temporary folders beside them.
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string f = e.path().filename().string();
    EXPECT_TRUE(f == "short.txt" || f == "o3") << f;
  }
}

}  // namespace
}  // namespace qbc
