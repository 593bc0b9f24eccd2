// Golden tests of the float reference runtime: logits of stories260K (HF folder, tied-HF
// copy and the GGUF) and of the tiny random Qwen2 / Qwen2-BF16 / Qwen3 checkpoints against
// llama.cpp's exact-F32 logits, whole-sequence and token by token, plus greedy generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/model_weight_reader.h"
#include "qbc/ref/session.h"
#include "qbc/tokenizer/tokenizer.h"
#include "test_support.h"

namespace qbc::ref {
namespace {

namespace fs = std::filesystem;

/// A model opened from a HF folder or GGUF file, its graph and a session on it.
struct Loaded {
  std::unique_ptr<frontend::ModelSource> source;
  ir::Graph graph;
  std::unique_ptr<Session> session;
};

/// HF folders: hparams from config.json through load_hparams; GGUF: from the ModelSource.
StatusOr<Loaded> load_model(const fs::path& path) {
  Loaded m;
  QBC_ASSIGN_OR_RETURN(frontend::ModelSource src, frontend::ModelSource::open(path));
  m.source = std::make_unique<frontend::ModelSource>(std::move(src));
  frontend::HParams hp = m.source->hparams();
  if (fs::is_directory(path)) {
    QBC_ASSIGN_OR_RETURN(hp, frontend::load_hparams(path / "config.json"));
  }
  frontend::ImportOptions opts;
  opts.max_cache_length = 512;
  QBC_ASSIGN_OR_RETURN(m.graph, frontend::build_decoder_graph(hp, opts));
  QBC_ASSIGN_OR_RETURN(m.session,
                       Session::create(m.graph, frontend::model_weight_reader(*m.source)));
  return m;
}

struct Sequence {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [ids.size()][vocab]
};

std::vector<Sequence> load_golden(const fs::path& golden_dir) {
  const auto j =
      nlohmann::json::parse(::qbc::testing::read_file(golden_dir / "logits_golden.json"));
  std::vector<Sequence> out;
  for (const auto& s : j.at("sequences")) {
    Sequence q;
    q.name = s.at("name").get<std::string>();
    q.ids = s.at("ids").get<std::vector<int32_t>>();
    const std::string bin = ::qbc::testing::read_file(golden_dir / (q.name + ".f32.logits.bin"));
    q.logits.resize(bin.size() / sizeof(float));
    std::memcpy(q.logits.data(), bin.data(), q.logits.size() * sizeof(float));
    out.push_back(std::move(q));
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return m;
}

/// Checks every golden sequence whole (one forward) and, when `decode`, token by token.
void check_golden(const fs::path& model, const fs::path& golden_dir, double tol, bool decode) {
  auto loaded = load_model(model);
  QBC_ASSERT_OK(loaded);
  Session& s = *loaded->session;
  const std::string label = model.filename() == "hf" ? model.parent_path().filename().string()
                                                     : model.filename().string();
  for (const Sequence& seq : load_golden(golden_dir)) {
    const int64_t vocab = s.vocab_size();
    ASSERT_EQ(seq.logits.size(), seq.ids.size() * static_cast<size_t>(vocab)) << seq.name;
    s.reset();
    std::vector<float> logits;
    const auto t0 = std::chrono::steady_clock::now();
    QBC_ASSERT_OK(s.forward(seq.ids, &logits));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(logits.size(), seq.logits.size());
    const double d = max_abs_diff(logits, seq.logits);
    std::printf("[golden] %s %-9s prefill max|d| = %.3g (%zu tokens, %.0f tok/s)\n", label.c_str(),
                seq.name.c_str(), d, seq.ids.size(), static_cast<double>(seq.ids.size()) / secs);
    EXPECT_LE(d, tol) << model << " " << seq.name;
    if (!decode) continue;
    s.reset();
    std::vector<float> stepwise;
    std::vector<float> one;
    const auto t1 = std::chrono::steady_clock::now();
    for (int32_t id : seq.ids) {
      QBC_ASSERT_OK(s.forward({id}, &one));
      stepwise.insert(stepwise.end(), one.begin(), one.end());
    }
    const double secs1 =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    EXPECT_EQ(s.position(), static_cast<int64_t>(seq.ids.size()));
    const double d_gold = max_abs_diff(stepwise, seq.logits);
    const double d_self = max_abs_diff(stepwise, logits);
    std::printf("[golden] %s %-9s decode  max|d| = %.3g vs golden, %.3g vs prefill (%.0f tok/s)\n",
                label.c_str(), seq.name.c_str(), d_gold, d_self,
                static_cast<double>(seq.ids.size()) / secs1);
    EXPECT_LE(d_gold, tol) << model << " " << seq.name << " (token by token)";
    EXPECT_LE(d_self, tol) << model << " " << seq.name << " (token by token vs prefill)";
  }
}

TEST(GoldenTest, Stories260kHf) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  check_golden(dir / "hf", dir / "golden", 1e-4, true);
}

TEST(GoldenTest, Stories260kHfTied) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  check_golden(dir / "hf-tied", dir / "golden", 1e-4, true);
}

TEST(GoldenTest, Stories260kGguf) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k/stories260K.gguf");
  check_golden(dir, dir.parent_path() / "golden", 1e-4, true);
}

TEST(GoldenTest, TinyQwen2) {
  QBC_REQUIRE_SHARED(dir, "models/tiny/qwen2");
  check_golden(dir / "hf", dir / "golden", 1e-3, true);
}

TEST(GoldenTest, TinyQwen2Bf16) {
  QBC_REQUIRE_SHARED(dir, "models/tiny/qwen2-bf16");
  check_golden(dir / "hf", dir / "golden", 1e-3, true);
}

TEST(GoldenTest, TinyQwen3) {
  QBC_REQUIRE_SHARED(dir, "models/tiny/qwen3");
  check_golden(dir / "hf", dir / "golden", 1e-3, true);
}

TEST(GoldenTest, Stories260kGreedy) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  const auto j = nlohmann::json::parse(::qbc::testing::read_file(dir / "golden/greedy.json"));
  const auto& run = j.at("runs").at("F32");
  const auto want_prompt = run.at("prompt_ids").get<std::vector<int32_t>>();
  const auto want = run.at("generated_ids").get<std::vector<int32_t>>();
  const int n = j.at("n_generate").get<int>();

  auto tok = tokenizer::Tokenizer::from_hf_dir(dir / "hf");
  QBC_ASSERT_OK(tok);
  // llama.cpp adds BOS for this model; the golden prompt starts with it.
  const std::vector<int32_t> prompt =
      tok->encode(j.at("prompt").get<std::string>(), /*add_bos=*/true);
  ASSERT_EQ(prompt, want_prompt);

  auto loaded = load_model(dir / "hf");
  QBC_ASSERT_OK(loaded);
  Session& s = *loaded->session;
  std::vector<float> logits;
  QBC_ASSERT_OK(s.forward(prompt, &logits));
  const int64_t vocab = s.vocab_size();
  std::vector<int32_t> got;
  for (int i = 0; i < n; ++i) {
    const float* last = logits.data() + logits.size() - static_cast<size_t>(vocab);
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    got.push_back(next);
    QBC_ASSERT_OK(s.forward({next}, &logits));
  }
  EXPECT_EQ(got, want);
  std::printf("[golden] greedy: %s|%s\n", tok->decode(prompt).c_str(), tok->decode(got).c_str());
}

}  // namespace
}  // namespace qbc::ref
