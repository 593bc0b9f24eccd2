// Tests of ref::perplexity: llama-perplexity's figure for stories260K on the clean
// TinyStories head at ctx 256, the log-probability file format, and argument errors.
#include "qbc/ref/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/model_weight_reader.h"
#include "qbc/ref/session.h"
#include "qbc/tokenizer/tokenizer.h"
#include "test_support.h"

namespace qbc::ref {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::unique_ptr<frontend::ModelSource> source;
  std::unique_ptr<Session> session;
  std::vector<int32_t> tokens;
  int32_t bos = -1;
};

/// stories260K (HF folder) plus the clean TinyStories text tokenized as llama-perplexity
/// does: the file minus one trailing newline, with the BOS the model adds.
StatusOr<Fixture> open_stories(const fs::path& model_dir, const fs::path& text_file,
                               int64_t max_cache) {
  Fixture f;
  QBC_ASSIGN_OR_RETURN(frontend::ModelSource src, frontend::ModelSource::open(model_dir));
  f.source = std::make_unique<frontend::ModelSource>(std::move(src));
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp, frontend::load_hparams(model_dir / "config.json"));
  frontend::ImportOptions opts;
  opts.max_cache_length = max_cache;
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_decoder_graph(hp, opts));
  QBC_ASSIGN_OR_RETURN(f.session, Session::create(g, frontend::model_weight_reader(*f.source)));
  QBC_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_hf_dir(model_dir));
  std::string text = ::qbc::testing::read_file(text_file);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  f.tokens = tok.encode(text, tok.add_bos_default());
  f.bos = tok.add_bos_default() ? tok.bos_id() : -1;
  return f;
}

TEST(PerplexityTest, Stories260kTinyStoriesCtx256MatchesLlamaCpp) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/tinystories_valid_head.clean.txt");
  auto f = open_stories(model, text, 256);
  QBC_ASSERT_OK(f);
  ASSERT_EQ(f->bos, 1);
  // golden/tokenization.json has 14,967 ids for the whole file; llama-perplexity drops the final
  // newline first (one token). Either way there are 58 chunks of 256 and the same scored text.
  ASSERT_EQ(f->tokens.size(), 14966u);
  ASSERT_EQ(f->tokens[0], 1);

  int64_t calls = 0;
  PerplexityOptions opts;
  opts.progress = [&](int64_t chunk, int64_t n, double running) {
    ++calls;
    EXPECT_EQ(chunk, calls);
    EXPECT_EQ(n, 58);
    EXPECT_GT(running, 1.0);
  };
  auto r = perplexity(*f->session, f->tokens, 256, f->bos, opts);
  QBC_ASSERT_OK(r);
  std::printf(
      "[perplexity] stories260K ctx 256: PPL = %.6f +/- %.5f, %lld chunks, %lld tokens scored, "
      "%.2f s, %.0f tok/s\n",
      r->ppl, r->ppl_err, static_cast<long long>(r->chunks),
      static_cast<long long>(r->tokens_scored), r->seconds, r->tokens_per_second);
  EXPECT_EQ(calls, 58);
  EXPECT_EQ(r->chunks, 58);
  EXPECT_EQ(r->tokens_scored, 58 * 127);
  EXPECT_EQ(r->token_logprobs.size(), static_cast<size_t>(58 * 127));
  EXPECT_NEAR(r->ppl, 3.5857, 0.001);   // llama.cpp, exact-F32 settings
  EXPECT_NEAR(r->ppl, 3.585688, 1e-4);  // numpy HF reference
  EXPECT_NEAR(r->ppl_err, 0.06869, 5e-4);
  EXPECT_NEAR(std::exp(r->nll_mean), r->ppl, 1e-12);
  EXPECT_GT(r->tokens_per_second, 0.0);  // speed is measured by bench/eval.sh, not here
  EXPECT_EQ(f->session->position(), 0);
}

TEST(PerplexityTest, Stories260kCtx512) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/tinystories_valid_head.clean.txt");
  auto f = open_stories(model, text, 512);
  QBC_ASSERT_OK(f);
  auto r = perplexity(*f->session, f->tokens, 512, f->bos);
  QBC_ASSERT_OK(r);
  std::printf("[perplexity] stories260K ctx 512: PPL = %.6f +/- %.5f (%.0f tok/s)\n", r->ppl,
              r->ppl_err, r->tokens_per_second);
  EXPECT_EQ(r->chunks, 29);
  EXPECT_NEAR(r->ppl, 3.5681, 0.001);
}

template <typename T>
T get(std::ifstream& in) {
  T v{};
  in.read(reinterpret_cast<char*>(&v), sizeof(T));
  return v;
}

TEST(PerplexityTest, WritesLogprobFile) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/tinystories_valid_head.clean.txt");
  auto f = open_stories(model, text, 64);
  QBC_ASSERT_OK(f);
  PerplexityOptions opts;
  opts.max_chunks = 3;
  opts.write_logits = true;
  opts.logprobs_path = ::qbc::testing::temp_dir() / "lp.bin";
  auto r = perplexity(*f->session, f->tokens, 64, f->bos, opts);
  QBC_ASSERT_OK(r);
  ASSERT_EQ(r->chunks, 3);
  const int64_t n_scored = 64 - 1 - 32;
  std::ifstream in(opts.logprobs_path, std::ios::binary);
  char magic[8];
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic, 8), "QBCPPL01");
  EXPECT_EQ(get<uint32_t>(in), 1u);
  EXPECT_EQ(get<uint32_t>(in), 1u);
  const int64_t vocab = get<int64_t>(in);
  EXPECT_EQ(vocab, 512);
  EXPECT_EQ(get<int64_t>(in), 64);
  EXPECT_EQ(get<int64_t>(in), 3);
  EXPECT_EQ(get<int64_t>(in), n_scored);
  EXPECT_EQ(get<int64_t>(in), 32);
  EXPECT_EQ(get<int64_t>(in), 0);
  for (int64_t c = 0; c < 3; ++c) {
    std::vector<int32_t> targets(static_cast<size_t>(n_scored));
    std::vector<float> lps(static_cast<size_t>(n_scored));
    std::vector<float> logits(static_cast<size_t>(n_scored * vocab));
    in.read(reinterpret_cast<char*>(targets.data()), n_scored * 4);
    in.read(reinterpret_cast<char*>(lps.data()), n_scored * 4);
    in.read(reinterpret_cast<char*>(logits.data()), n_scored * vocab * 4);
    ASSERT_TRUE(in.good());
    for (int64_t i = 0; i < n_scored; ++i) {
      EXPECT_EQ(targets[static_cast<size_t>(i)],
                f->tokens[static_cast<size_t>(c * 64 + 32 + i + 1)]);
      EXPECT_EQ(lps[static_cast<size_t>(i)],
                r->token_logprobs[static_cast<size_t>(c * n_scored + i)]);
      // The log-probability follows from the stored logits row.
      const float* row = logits.data() + i * vocab;
      double mx = row[0], sum = 0.0;
      for (int64_t k = 0; k < vocab; ++k) mx = std::max(mx, static_cast<double>(row[k]));
      for (int64_t k = 0; k < vocab; ++k) sum += std::exp(row[k] - mx);
      EXPECT_NEAR(row[targets[static_cast<size_t>(i)]] - mx - std::log(sum),
                  lps[static_cast<size_t>(i)], 1e-5);
    }
  }
  in.get();
  EXPECT_TRUE(in.eof());
}

TEST(PerplexityTest, RejectsTooFewTokensAndSmallContext) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/tinystories_valid_head.clean.txt");
  auto f = open_stories(model, text, 64);
  QBC_ASSERT_OK(f);
  const std::vector<int32_t> few(f->tokens.begin(), f->tokens.begin() + 100);
  auto r = perplexity(*f->session, few, 64, f->bos);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("2*ctx"), std::string::npos) << r.status().message();
  EXPECT_EQ(perplexity(*f->session, few, 1, f->bos).status().code(), Code::kInvalidArgument);
  // A context beyond the KV cache capacity surfaces the session's error, naming the chunk.
  auto big = perplexity(*f->session, f->tokens, 128, f->bos);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kResourceExhausted);
  EXPECT_NE(big.status().message().find("chunk 1/"), std::string::npos) << big.status().message();
}

}  // namespace
}  // namespace qbc::ref
