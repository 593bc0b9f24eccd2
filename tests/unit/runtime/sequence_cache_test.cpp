// Sequence cache files (runtime/sequence_cache.h, docs/runtime.md): written here by a small
// writer that follows the documented layout, read back by decode_sequence_cache, which refuses
// each damaged form naming what is wrong; and on stories260K compiled to MXQ, a cache saved
// after the prompt and loaded into another generator continues with exactly the tokens of an
// uninterrupted run (greedy and seeded sampling), while a cache of another model's KV layout,
// or one whose token list is not its KV positions, is refused and changes nothing.
#include "qbc/runtime/sequence_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qbc/mxq/container.h"
#include "qbc/runtime/generator.h"
#include "test_support.h"
#include "unit/mxq/compile_fixture.h"

namespace qbc {
namespace {

using ::qbc::testing::contains;

// The documented layout: magic, u64 n + n x u32 ids, u64 m + m blob bytes, XXH3-128 of the rest.
std::string u64le(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>(v >> (8 * i) & 0xff);
  return s;
}

std::string spec_file(const std::vector<uint32_t>& ids, const std::string& blob) {
  std::string s("QBCSEQ\0\1", 8);
  s += u64le(ids.size());
  for (uint32_t t : ids)
    for (int i = 0; i < 4; ++i) s += static_cast<char>(t >> (8 * i) & 0xff);
  s += u64le(blob.size()) + blob;
  const mxq::Digest d = mxq::digest_of(s.data(), s.size());
  return s + std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

void expect_refused(const std::string& bytes, const std::string& what) {
  auto c = runtime::decode_sequence_cache(bytes, "c.seq");
  ASSERT_FALSE(c.ok()) << what;
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(c.status().message(), "c.seq: " + what)) << c.status().to_string();
}

TEST(SequenceCache, TheDocumentedLayoutReadsBackAndEncodesTheSame) {
  const std::string file = spec_file({1, 400, 7}, "blob-bytes");
  auto c = runtime::decode_sequence_cache(file, "c.seq");
  QBC_ASSERT_OK(c);
  EXPECT_EQ(c->tokens, (std::vector<int32_t>{1, 400, 7}));
  EXPECT_EQ(c->kv, "blob-bytes");
  EXPECT_TRUE(runtime::encode_sequence_cache(*c) == file);
}

TEST(SequenceCache, DamagedFilesAreRefusedNamingWhatIsWrong) {
  const std::string file = spec_file({1, 400, 7}, "blob-bytes");
  expect_refused("junk", "not a qbc sequence cache");
  expect_refused("QBCKV\0\0\1" + file.substr(8), "not a qbc sequence cache");
  for (size_t cut = 8; cut < file.size(); ++cut) {
    auto c = runtime::decode_sequence_cache(file.substr(0, cut), "c.seq");
    ASSERT_FALSE(c.ok()) << cut;
    EXPECT_TRUE(contains(c.status().message(), "truncated") ||
                contains(c.status().message(), "corrupt"))
        << cut << ": " << c.status().message();
  }
  expect_refused(file + "x", "trailing bytes");
  for (size_t at = 8; at < file.size(); ++at) {
    std::string bad = file;
    bad[at] ^= 0x10;
    auto c = runtime::decode_sequence_cache(bad, "c.seq");
    EXPECT_FALSE(c.ok()) << "flipped byte " << at;
  }
  std::string flipped = file;
  flipped[36] ^= 1;  // inside the blob: only the digest can tell
  expect_refused(flipped, "corrupt: the digest it stores is ");
  expect_refused(spec_file({1, 0x80000000u}, "b"), "token 1 has the id 2147483648");
  // A token count that cannot fit.
  std::string huge = file;
  huge.replace(8, 8, u64le(uint64_t{1} << 61));
  expect_refused(huge, "truncated: its header lists 2305843009213693952 tokens");
}

// Version 2 (a sequence that saw images): after the ids, u64 k and k image spans (u64 first,
// u64 count, 16 digest bytes), then the blob as in version 1.
std::string spec_file_v2(const std::vector<uint32_t>& ids,
                         const std::vector<std::pair<uint64_t, uint64_t>>& spans,
                         const std::string& blob) {
  std::string s("QBCSEQ\0\2", 8);
  s += u64le(ids.size());
  for (uint32_t t : ids)
    for (int i = 0; i < 4; ++i) s += static_cast<char>(t >> (8 * i) & 0xff);
  s += u64le(spans.size());
  for (const auto& [first, count] : spans)
    s += u64le(first) + u64le(count) + std::string(16, static_cast<char>('a' + first));
  s += u64le(blob.size()) + blob;
  const mxq::Digest d = mxq::digest_of(s.data(), s.size());
  return s + std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

TEST(SequenceCache, VersionTwoRecordsImageSpans) {
  const std::string file = spec_file_v2({1, 9, 9, 9, 5, 9, 9}, {{1, 3}, {5, 2}}, "kv");
  auto c = runtime::decode_sequence_cache(file, "c.seq");
  QBC_ASSERT_OK(c);
  ASSERT_EQ(c->images.size(), 2u);
  EXPECT_EQ(c->images[1].first, 5);
  EXPECT_EQ(c->images[1].count, 2);
  EXPECT_EQ(c->images[1].digest, std::string(16, 'f'));
  EXPECT_TRUE(runtime::encode_sequence_cache(*c) == file);
  // Without images the writer keeps version 1's bytes.
  c->images.clear();
  EXPECT_EQ(runtime::encode_sequence_cache(*c)[7], 1);
  // Spans out of order, overlapping, empty or past the ids.
  for (const auto& spans : std::vector<std::vector<std::pair<uint64_t, uint64_t>>>{
           {{5, 2}, {1, 3}}, {{1, 3}, {3, 2}}, {{1, 0}}, {{5, 3}}, {{uint64_t{1} << 62, 2}}}) {
    expect_refused(spec_file_v2({1, 9, 9, 9, 5, 9, 9}, spans, "kv"), "image span");
  }
  // The spans of a prompt: each run of the image token, with the digest of its rows.
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};  // three rows of width 2
  const auto spans = runtime::image_spans({7, 9, 9, 4, 9}, 9, rows, 2);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].first, 1);
  EXPECT_EQ(spans[0].count, 2);
  EXPECT_EQ(spans[1].first, 4);
  const mxq::Digest last = mxq::digest_of(rows.data() + 4, 2 * sizeof(float));
  EXPECT_EQ(spans[1].digest, std::string(reinterpret_cast<const char*>(last.data()), 16));
}

const testing::CompiledMxq& compiled() {
  static const testing::CompiledMxq c = testing::compile_stories260k("sequence_cache", {});
  return c;
}

std::unique_ptr<runtime::Generator> generator() {
  auto g = runtime::Generator::create(compiled().path.string());
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(*g) : nullptr;
}

runner::SamplingOptions seeded() {
  runner::SamplingOptions s;
  s.greedy = false;
  s.temperature = 0.9;
  s.top_k = 40;
  s.seed = 11;
  return s;
}

TEST(SequenceCache, SavedAfterThePromptLoadedAndContinuedEqualsAnUninterruptedRun) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(compiled().error.empty()) << compiled().error;
  for (const runner::SamplingOptions& s : {runner::SamplingOptions{}, seeded()}) {
    SCOPED_TRACE(s.greedy ? "greedy" : "seeded");
    auto whole = generator();
    const std::vector<int32_t> prompt = whole->encode("Once upon a time, there was a girl");
    auto want = whole->generate(prompt, 20, s);
    QBC_ASSERT_OK(want);
    // Process 1: the prompt only, saved.
    auto first = generator();
    QBC_ASSERT_OK(first->generate_reusing_cache(prompt, 0, s));
    EXPECT_EQ(first->cached_tokens(), prompt);
    auto bytes = first->save_cache();
    QBC_ASSERT_OK(bytes);
    // Process 2: loaded, the same prompt continues without running the cached part again.
    auto second = generator();
    QBC_ASSERT_OK(second->load_cache(*bytes, "c.seq"));
    EXPECT_EQ(second->session().position(), static_cast<int64_t>(prompt.size()));
    auto got = second->generate_reusing_cache(prompt, 20, s);
    QBC_ASSERT_OK(got);
    EXPECT_EQ(second->reused_tokens(), static_cast<int64_t>(prompt.size()) - 1);
    EXPECT_EQ(got->tokens, want->tokens);
    // Saved after generating, continued with a longer prompt: the cache covers its start.
    auto third_bytes = second->save_cache();
    QBC_ASSERT_OK(third_bytes);
    std::vector<int32_t> longer = prompt;
    longer.insert(longer.end(), got->tokens.begin(), got->tokens.begin() + 10);
    auto fresh = generator();
    auto want_longer = fresh->generate(longer, 8, s);
    QBC_ASSERT_OK(want_longer);
    auto third = generator();
    QBC_ASSERT_OK(third->load_cache(*third_bytes, "c2.seq"));
    auto got_longer = third->generate_reusing_cache(longer, 8, s);
    QBC_ASSERT_OK(got_longer);
    EXPECT_EQ(third->reused_tokens(), static_cast<int64_t>(longer.size()) - 1);
    EXPECT_EQ(got_longer->tokens, want_longer->tokens);
  }
}

TEST(SequenceCache, AnotherModelsCacheAndInconsistentTokensAreRefusedAndChangeNothing) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(compiled().error.empty()) << compiled().error;
  static const testing::CompiledMxq other = testing::compile_stories260k(
      "sequence_cache_other",
      {"llm.attributes.maxSequenceLength=32", "llm.attributes.maxCacheLength=32"});
  ASSERT_TRUE(other.error.empty()) << other.error;
  auto o = runtime::Generator::create(other.path.string());
  QBC_ASSERT_OK(o);
  const std::vector<int32_t> prompt = (*o)->encode("Once upon a time");
  QBC_ASSERT_OK((*o)->generate_reusing_cache(prompt, 0));
  auto foreign = (*o)->save_cache();
  QBC_ASSERT_OK(foreign);

  auto g = generator();
  QBC_ASSERT_OK(g->generate_reusing_cache(prompt, 2));
  const int64_t position = g->session().position();
  const std::vector<int32_t> cached = g->cached_tokens();
  Status s = g->load_cache(*foreign, "other.seq");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "other.seq: the KV cache blob is of another model's KV layout"))
      << s.to_string();
  // The right model's blob with one token fewer than its positions.
  auto own = g->save_cache();
  QBC_ASSERT_OK(own);
  auto c = runtime::decode_sequence_cache(*own, "own.seq");
  QBC_ASSERT_OK(c);
  c->tokens.pop_back();
  s = g->load_cache(runtime::encode_sequence_cache(*c), "short.seq");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "short.seq: lists ")) << s.to_string();
  // A token id the tokenizer does not have.
  c->tokens.push_back(100000);
  s = g->load_cache(runtime::encode_sequence_cache(*c), "id.seq");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "has the id 100000")) << s.to_string();
  EXPECT_EQ(g->session().position(), position);
  EXPECT_EQ(g->cached_tokens(), cached);
}

}  // namespace
}  // namespace qbc
