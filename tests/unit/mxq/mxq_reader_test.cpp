// The MXQ reader against real and hostile files (docs/mxq.md "Reader rules"): a compiled
// stories260K round-trips to the same bundle and the same logits; a file truncated at every
// section boundary, a flipped byte in every section, a lying section table, a wrong target
// word, an unknown required feature or major version are each refused with exit 2 (or 3 for
// the feature), naming the file and the section; and a seeded mutation fuzz of 20,000 cases
// never crashes (half of the mutations re-seal the digests so the decoders and the program
// verifier see the damage).
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/mxq_output.h"
#include "qbc/driver/quantize.h"
#include "qbc/frontend/random_model.h"
#include "qbc/isa/text.h"
#include "qbc/isa/verify.h"
#include "qbc/mxq/container.h"
#include "qbc/mxq/model_file.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/npu_session.h"
#include "qbc/support/cancel.h"
#include "qbc/support/exit_codes.h"
#include "test_support.h"
#include "unit/mxq/compile_fixture.h"
#include "unit/mxq/mutate.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;

/// stories260K, W8 llm_fast, random calibration, 64 positions: compiled once in-process.
const testing::CompiledMxq& compiled() {
  static const testing::CompiledMxq c = testing::compile_stories260k("mxq_reader", {});
  return c;
}

#define REQUIRE_COMPILED()                                   \
  QBC_REQUIRE_SHARED(hf_dir, "models/stories260k/hf");       \
  ASSERT_TRUE(compiled().error.empty()) << compiled().error; \
  ASSERT_GT(compiled().bytes.size(), size_t{mxq::kHeaderBytes})

StatusOr<mxq::LoadedModel> load(std::string bytes, bool verify = true) {
  mxq::ReadOptions o;
  o.verify_digests = verify;
  return mxq::load_model_bytes(std::move(bytes), "q.mxq", o);
}

/// The section table of the unmodified file.
std::vector<mxq::SectionEntry> sections() {
  auto c = mxq::Container::from_bytes(compiled().bytes, "q.mxq");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c->sections() : std::vector<mxq::SectionEntry>();
}

// Header layout (docs/mxq.md): the fields the tests rewrite.
constexpr size_t kTargetWord = 40, kCount = 64, kRequired = 24, kMajor = 8;

uint64_t get_u64(const std::string& s, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
void put_u64(std::string& s, size_t at, uint64_t v) { std::memcpy(s.data() + at, &v, 8); }
void put_u32(std::string& s, size_t at, uint32_t v) { std::memcpy(s.data() + at, &v, 4); }

using testing::reseal;

/// Runs `ids` through a device of each bundle (one host thread) and expects the same logits
/// bit for bit.
void expect_same_logits(const std::shared_ptr<const isa::Bundle>& a,
                        const std::shared_ptr<const isa::Bundle>& b,
                        const std::vector<int32_t>& ids) {
  std::vector<std::vector<float>> logits;
  for (const auto& bundle : {a, b}) {
    runtime::DeviceOptions d;
    d.host_threads = 1;
    auto dev = runtime::Device::create(bundle, d);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    auto s = runtime::NpuSession::create(*dev, 0);
    ASSERT_TRUE(s.ok());
    std::vector<float> out;
    ASSERT_TRUE((*s)->forward(ids, &out).ok());
    logits.push_back(out);
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
}

TEST(MxqReader, RoundTripsTheBundleAndItsLogits) {
  REQUIRE_COMPILED();
  auto m = load(compiled().bytes);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const isa::Bundle& a = *compiled().bundle;
  const isa::Bundle& b = *m->bundle;
  EXPECT_EQ(isa::print_bundle(a), isa::print_bundle(b));
  // The reader uses both in place in the file (Bundle::mapped_*): the same bytes.
  ASSERT_EQ(a.image_size(), b.image_size());
  EXPECT_FALSE(b.image_view.empty());
  EXPECT_EQ(std::memcmp(a.image_data(), b.image_data(), static_cast<size_t>(a.image_size())), 0);
  ASSERT_EQ(a.embedding_size(), b.embedding_size());
  EXPECT_FALSE(b.embedding_view.empty());
  EXPECT_EQ(std::memcmp(a.embedding_data(), b.embedding_data(),
                        static_cast<size_t>(a.embedding_size()) * 4),
            0);
  EXPECT_EQ(a.nodes, b.nodes);
  EXPECT_EQ(a.passes, b.passes);
  EXPECT_TRUE(isa::verify(b).ok());
  EXPECT_NE(m->asset("tokenizer.json"), nullptr);
  EXPECT_EQ(m->meta.producer(), "qbc");
  EXPECT_EQ(m->meta.schemes_size(), 1);
  EXPECT_EQ(m->meta.kv_size(), 5);
  EXPECT_FALSE(m->meta.config_json().empty());
  // The same logits from the bundle in memory and the one read back.
  expect_same_logits(compiled().bundle, m->bundle, {1, 403, 407, 261, 378});
}

// A bf16 source's embedding table is stored as bf16 (required feature bit 0): half the
// bytes, the same fp32 rows when looked up and the same logits as the bundle in memory. An
// fp32 table (stories260K) stays fp32 without the bit. A file whose bit does not match its
// embedding section is refused naming the section.
TEST(MxqReader, Bf16EmbeddingIsStoredAsBf16AndReadsBackExactly) {
  REQUIRE_COMPILED();
  EXPECT_EQ(get_u64(compiled().bytes, kRequired) & mxq::kFeatureEmbeddingBf16, 0u);
  const fs::path src = testing::temp_dir() / "mxq_bf16_src";
  frontend::RandomModelOptions ro;
  ro.output_dir = src;
  ro.dtype = tensorfile::DType::kBF16;
  ro.seed = 7;
  ASSERT_TRUE(frontend::write_random_model(ro).ok());
  const testing::CompiledMxq c = testing::compile_stories260k("mxq_bf16", {}, src.string());
  ASSERT_TRUE(c.error.empty()) << c.error;
  const isa::Bundle& a = *c.bundle;
  EXPECT_NE(get_u64(c.bytes, kRequired) & mxq::kFeatureEmbeddingBf16, 0u);
  auto m = load(c.bytes);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const isa::Bundle& b = *m->bundle;
  ASSERT_FALSE(b.embedding_bf16_view.empty());
  EXPECT_EQ(b.embedding_data(), nullptr);
  ASSERT_EQ(b.embedding_size(), a.embedding_size());
  auto sec = mxq::Container::from_bytes(c.bytes, "q.mxq");
  ASSERT_TRUE(sec.ok());
  for (const mxq::SectionEntry& e : sec->sections()) {
    if (e.kind == static_cast<uint32_t>(mxq::SectionKind::kEmbedding))
      EXPECT_EQ(e.size, static_cast<uint64_t>(a.embedding_size()) * 2);
  }
  std::vector<float> row(static_cast<size_t>(b.hidden));
  for (int64_t r = 0; r < b.embed_rows; ++r) {
    b.embedding_row(r, row.data());
    ASSERT_EQ(std::memcmp(row.data(), a.embedding_data() + r * a.hidden, row.size() * 4), 0)
        << "row " << r;
  }
  expect_same_logits(c.bundle, m->bundle, {1, 100, 7, 255, 42});
  // The bit cleared on the bf16 file, and set on the fp32 one: each is refused.
  for (const std::string* file : {&c.bytes, &compiled().bytes}) {
    std::string s = *file;
    put_u64(s, kRequired, get_u64(s, kRequired) ^ mxq::kFeatureEmbeddingBf16);
    reseal(s, false);
    auto bad = load(s);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(exit_code_for(bad.status()), kExitBadInput);
    EXPECT_TRUE(contains(bad.status().message(), "embedding")) << bad.status().to_string();
  }
}

TEST(MxqReader, WritingIsDeterministic) {
  REQUIRE_COMPILED();
  auto m = load(compiled().bytes);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // Written again from what was read: the same bytes.
  mxq::WriteRequest req;
  req.bundle = m->bundle.get();
  req.meta = m->meta;
  req.assets = m->assets;
  req.blocks = m->meta.blocks();
  const fs::path p = testing::temp_dir() / "again.mxq";
  const auto w = mxq::write_model(p.string(), req);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE(testing::read_file(p) == compiled().bytes);
}

// Ctrl-C while the file is written: the writer stops at its next section, removes its
// temporary file and never renames anything into place.
TEST(MxqReader, ACancelledWriteLeavesNothingBehind) {
  REQUIRE_COMPILED();
  auto m = load(compiled().bytes);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  mxq::WriteRequest req;
  req.bundle = m->bundle.get();
  req.meta = m->meta;
  req.assets = m->assets;
  req.blocks = m->meta.blocks();
  const fs::path dir = testing::temp_dir();
  cancel::request(SIGINT);
  const auto w = mxq::write_model((dir / "q.mxq").string(), req);
  cancel::reset();
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(contains(w.status().message(), "interrupted at writing ")) << w.status().message();
  EXPECT_TRUE(contains(w.status().message(), "q.mxq")) << w.status().message();
  EXPECT_TRUE(fs::is_empty(dir)) << fs::directory_iterator(dir)->path();
}

TEST(MxqReader, TruncatedAtEverySectionBoundaryNamesTheSection) {
  REQUIRE_COMPILED();
  const std::vector<mxq::SectionEntry> secs = sections();
  ASSERT_GE(secs.size(), 8u);
  for (size_t cut : {size_t{0}, size_t{7}, size_t{64}, size_t{127}, size_t{160}}) {
    auto m = load(compiled().bytes.substr(0, cut));
    ASSERT_FALSE(m.ok()) << cut;
    EXPECT_EQ(exit_code_for(m.status()), kExitBadInput) << m.status().to_string();
    EXPECT_TRUE(contains(m.status().message(), "q.mxq")) << m.status().to_string();
  }
  for (size_t i = 0; i < secs.size(); ++i) {
    const mxq::SectionEntry& e = secs[i];
    for (uint64_t cut : {e.offset, e.offset + e.size / 2, e.offset + e.size - (e.size > 0)}) {
      if (cut >= compiled().bytes.size()) continue;
      auto m = load(compiled().bytes.substr(0, cut));
      ASSERT_FALSE(m.ok()) << "cut at " << cut;
      EXPECT_EQ(m.status().code(), Code::kDataLoss) << m.status().to_string();
      EXPECT_TRUE(contains(m.status().message(), "q.mxq: section " + std::to_string(i) + " ("))
          << "cut at " << cut << ": " << m.status().to_string();
    }
  }
}

// From a file, load_model hashes the large sections on a background thread while it decodes
// the rest; with every section counted as large, a flipped byte anywhere is still the digest
// mismatch of that section, and the clean file loads with the weights and the embedding
// used in place.
TEST(MxqReader, DeferredDigestsFromAFileStillNameTheCorruptSection) {
  REQUIRE_COMPILED();
  const std::vector<mxq::SectionEntry> secs = sections();
  const fs::path p = testing::temp_dir() / "deferred.mxq";
  mxq::ReadOptions o;
  o.large_section_bytes = 1;
  testing::write_file(p, compiled().bytes);
  auto clean = mxq::load_model(p.string(), o);
  ASSERT_TRUE(clean.ok()) << clean.status().to_string();
  EXPECT_FALSE(clean->bundle->image_view.empty());
  EXPECT_FALSE(clean->bundle->embedding_view.empty());
  for (size_t i = 0; i < secs.size(); ++i) {
    if (secs[i].size == 0) continue;
    std::string s = compiled().bytes;
    s[secs[i].offset + secs[i].size / 2] ^= 0x40;
    testing::write_file(p, s);
    auto m = mxq::load_model(p.string(), o);
    ASSERT_FALSE(m.ok()) << "section " << i;
    EXPECT_EQ(m.status().code(), Code::kDataLoss);
    EXPECT_TRUE(contains(m.status().message(), "section " + std::to_string(i) + " (" +
                                                   mxq::section_kind_name(secs[i].kind)))
        << m.status().to_string();
    EXPECT_TRUE(contains(m.status().message(), "digest mismatch")) << m.status().to_string();
  }
}

TEST(MxqReader, AFlippedByteInEverySectionIsADigestMismatchNamingIt) {
  REQUIRE_COMPILED();
  const std::vector<mxq::SectionEntry> secs = sections();
  std::set<uint32_t> kinds;
  for (size_t i = 0; i < secs.size(); ++i) {
    if (secs[i].size == 0) continue;
    std::string s = compiled().bytes;
    s[secs[i].offset + secs[i].size / 2] ^= 0x40;
    auto m = load(s);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), Code::kDataLoss);
    EXPECT_TRUE(contains(m.status().message(), "section " + std::to_string(i) + " (" +
                                                   mxq::section_kind_name(secs[i].kind)))
        << m.status().to_string();
    EXPECT_TRUE(contains(m.status().message(), "digest mismatch")) << m.status().to_string();
    kinds.insert(secs[i].kind);
  }
  EXPECT_EQ(kinds.size(), 7u);  // every section kind was hit
  // The header and the table are covered by their own checks.
  std::string s = compiled().bytes;
  s[50] ^= 1;
  EXPECT_TRUE(contains(load(s).status().message(), "header checksum"))
      << load(s).status().to_string();
  s = compiled().bytes;
  s[mxq::kHeaderBytes + 20] ^= 1;
  EXPECT_TRUE(contains(load(s).status().message(), "section table digest"));
}

TEST(MxqReader, ALyingSectionTableIsRefused) {
  REQUIRE_COMPILED();
  const std::vector<mxq::SectionEntry> secs = sections();
  auto entry = [](size_t i, size_t field) {
    return mxq::kHeaderBytes + i * mxq::kEntryBytes + field;
  };
  struct Lie {
    const char* what;
    std::function<void(std::string&)> edit;
    const char* expect;
  };
  const std::vector<Lie> lies = {
      {"overlap", [&](std::string& s) { put_u64(s, entry(2, 16), secs[1].offset); },
       "overlaps the previous one"},
      {"out of range",
       [&](std::string& s) { put_u64(s, entry(secs.size() - 1, 24), uint64_t{1} << 60); },
       "run past the end of the file"},
      {"wrapping size", [&](std::string& s) { put_u64(s, entry(3, 24), ~uint64_t{0} - 100); },
       "run past the end of the file"},
      {"huge count", [&](std::string& s) { put_u32(s, kCount, 1u << 30); }, "at most 65536"},
      {"count past the file", [&](std::string& s) { put_u32(s, kCount, 60000); },
       "past the end of the file"},
      {"unknown kind", [&](std::string& s) { put_u32(s, entry(1, 0), 99); },
       "unknown section kind 99"},
      {"a hole", [&](std::string& s) { put_u64(s, entry(4, 16), secs[4].offset + 4096); },
       "each at the next 4096-byte boundary"},
      {"code of a mode the layout lacks", [&](std::string& s) { put_u32(s, entry(2, 4), 7); },
       "no such mode or core"},
  };
  for (const Lie& l : lies) {
    std::string s = compiled().bytes;
    l.edit(s);
    reseal(s, false);
    auto m = load(s);
    ASSERT_FALSE(m.ok()) << l.what;
    EXPECT_EQ(exit_code_for(m.status()), kExitBadInput) << l.what << ": " << m.status().to_string();
    EXPECT_TRUE(contains(m.status().message(), l.expect))
        << l.what << ": " << m.status().to_string();
  }
}

TEST(MxqReader, WrongTargetWordFeatureBitsAndVersionAreRefused) {
  REQUIRE_COMPILED();
  std::string s = compiled().bytes;
  put_u64(s, kTargetWord, get_u64(s, kTargetWord) ^ 1);
  reseal(s, false);
  auto m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(exit_code_for(m.status()), kExitBadInput);
  EXPECT_TRUE(contains(m.status().message(), "target word")) << m.status().to_string();
  s = compiled().bytes;
  put_u64(s, kRequired, 1u << 11);  // the first bit no reader knows
  reseal(s, false);
  m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(contains(m.status().message(), "required feature")) << m.status().to_string();
  // Bit 5 (a vision part) on a text model's file: known, but the file does not have one.
  s = compiled().bytes;
  put_u64(s, kRequired, get_u64(s, kRequired) | (1u << 5));
  reseal(s, false);
  m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(exit_code_for(m.status()), kExitBadInput);
  EXPECT_TRUE(contains(m.status().message(), "no vision part")) << m.status().to_string();
  // Bit 6 (span programs) on a file without them: known, refused, naming the bit.
  s = compiled().bytes;
  put_u64(s, kRequired, get_u64(s, kRequired) | (1u << 6));
  reseal(s, false);
  m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(exit_code_for(m.status()), kExitBadInput);
  EXPECT_TRUE(contains(m.status().message(),
                       "required feature bit 6 is set but the layout has no "
                       "span programs"))
      << m.status().to_string();
  // Bit 7 (interleaved M-RoPE tables) on a file without rope-table inputs.
  s = compiled().bytes;
  put_u64(s, kRequired, get_u64(s, kRequired) | (1u << 7));
  reseal(s, false);
  m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(exit_code_for(m.status()), kExitBadInput);
  EXPECT_TRUE(contains(m.status().message(),
                       "required feature bit 7 is set but the layout has no "
                       "interleaved rope-table inputs"))
      << m.status().to_string();
  // Bit 8 (KV records) on a file whose attentions store rows of codes only.
  s = compiled().bytes;
  put_u64(s, kRequired, get_u64(s, kRequired) | (1u << 8));
  reseal(s, false);
  m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(exit_code_for(m.status()), kExitBadInput);
  EXPECT_TRUE(contains(m.status().message(),
                       "required feature bit 8 is set but no attention of the layout stores KV "
                       "records"))
      << m.status().to_string();
  // Bit 10 (DeepStack inputs) on a file without them.
  s = compiled().bytes;
  put_u64(s, kRequired, get_u64(s, kRequired) | (1u << 10));
  reseal(s, false);
  m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(exit_code_for(m.status()), kExitBadInput);
  EXPECT_TRUE(contains(m.status().message(),
                       "required feature bit 10 is set but the layout has no DeepStack inputs"))
      << m.status().to_string();
  // Bit 9 (float weight offsets) on a file whose requants add none.
  s = compiled().bytes;
  put_u64(s, kRequired, get_u64(s, kRequired) | (1u << 9));
  reseal(s, false);
  m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(exit_code_for(m.status()), kExitBadInput);
  EXPECT_TRUE(contains(m.status().message(),
                       "required feature bit 9 is set but no instruction adds float weight "
                       "offsets"))
      << m.status().to_string();
  s = compiled().bytes;
  s[kMajor] = 2;
  reseal(s, false);
  m = load(s);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), "format version 2.")) << m.status().to_string();
}

TEST(MxqReader, SeededMutationFuzzNeverCrashes) {
  REQUIRE_COMPILED();
  const std::string& base = compiled().bytes;
  const std::vector<mxq::SectionEntry> secs = sections();
  std::mt19937_64 rng(20261202);
  int refused = 0, loaded = 0, verified = 0;
  constexpr int kCases = 20000;
  for (int i = 0; i < kCases; ++i) {
    std::string s = base;
    testing::mutate(s, rng, i % 2 == 1, secs, 4, 16);
    auto m = load(std::move(s));
    if (!m.ok()) {
      ++refused;
      EXPECT_NE(m.status().code(), Code::kInternal)
          << "case " << i << ": " << m.status().to_string();
      continue;
    }
    ++loaded;
    if (verified < 40 && isa::verify(*m->bundle).ok()) {
      ++verified;
      runtime::DeviceOptions d;
      d.host_threads = 1;
      (void)runtime::Device::create(m->bundle, d);
    }
  }
  EXPECT_EQ(refused + loaded, kCases);
  EXPECT_GT(refused, kCases / 2);  // most mutations must be caught
  RecordProperty("refused", refused);
  RecordProperty("loaded", loaded);
  std::printf("fuzz: %d cases, %d refused, %d loaded, %d verified\n", kCases, refused, loaded,
              verified);
}

// The compact grouped weight image (required feature bits 1 and 2, docs/mxq.md): a W4
// compile with groups of 32 and zero points (value and head at 8 bits) sets both bits, its
// 4-bit matmuls read zero points from i4 SRAM buffers, its 8-bit ones from i8 buffers and
// its requants scales from f16 ones, and it reads back to the same bundle, image and logits;
// the per-channel W8 file has neither bit. Either bit cleared on the W4 file is refused
// (exit 2) naming it.
TEST(MxqReader, CompactW4ImageSetsFeatureBit1AndReadsBack) {
  REQUIRE_COMPILED();
  EXPECT_EQ(get_u64(compiled().bytes, kRequired) & mxq::kFeatureCompactWeights, 0u);
  EXPECT_EQ(get_u64(compiled().bytes, kRequired) & mxq::kFeatureZeroPointsI8, 0u);
  const testing::CompiledMxq c = testing::compile_stories260k(
      "mxq_w4", {"bit.weightGroupSize=32", "bit.weightZeroPoint=true",
                 "bit.transformer.weight.query=4", "bit.transformer.weight.key=4",
                 "bit.transformer.weight.output=4", "bit.transformer.weight.ffn=4"});
  ASSERT_TRUE(c.error.empty()) << c.error;
  EXPECT_NE(get_u64(c.bytes, kRequired) & mxq::kFeatureCompactWeights, 0u);
  EXPECT_NE(get_u64(c.bytes, kRequired) & mxq::kFeatureZeroPointsI8, 0u);
  int compact_matmuls = 0, compact8_matmuls = 0, compact_requants = 0;
  auto dtype = [&c](const isa::Ref& r) {
    return r.valid() ? c.bundle->buffers[static_cast<size_t>(r.buffer)].dtype : isa::DType::kI8;
  };
  for (const isa::Mode& mode : c.bundle->modes) {
    for (const isa::CoreProgram& core : mode.decode.cores) {
      for (const isa::Instr& in : core.code) {
        if (const auto* mm = std::get_if<isa::MatMul>(&in.op)) {
          compact_matmuls += dtype(mm->wzero) == isa::DType::kI4 ? 1 : 0;
          compact8_matmuls +=
              dtype(mm->wzero) == isa::DType::kI8 && mm->wtype == isa::DType::kI8 ? 1 : 0;
        }
        if (const auto* r = std::get_if<isa::Requant>(&in.op))
          compact_requants += dtype(r->wscale) == isa::DType::kF16 ? 1 : 0;
      }
    }
  }
  EXPECT_GT(compact_matmuls, 0);
  EXPECT_GT(compact8_matmuls, 0);
  EXPECT_GT(compact_requants, 0);
  EXPECT_LT(c.bytes.size(), compiled().bytes.size());
  auto m = load(c.bytes);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(isa::print_bundle(*c.bundle), isa::print_bundle(*m->bundle));
  ASSERT_EQ(c.bundle->image_size(), m->bundle->image_size());
  EXPECT_EQ(std::memcmp(c.bundle->image_data(), m->bundle->image_data(),
                        static_cast<size_t>(c.bundle->image_size())),
            0);
  expect_same_logits(c.bundle, m->bundle, {1, 403, 407, 261, 378});
  std::string s = c.bytes;
  put_u64(s, kRequired, get_u64(s, kRequired) & ~mxq::kFeatureCompactWeights);
  reseal(s, false);
  auto bad = load(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(exit_code_for(bad.status()), kExitBadInput);
  EXPECT_TRUE(contains(bad.status().message(), "feature bit 1")) << bad.status().to_string();
  s = c.bytes;
  put_u64(s, kRequired, get_u64(s, kRequired) & ~mxq::kFeatureZeroPointsI8);
  reseal(s, false);
  bad = load(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(exit_code_for(bad.status()), kExitBadInput);
  EXPECT_TRUE(contains(bad.status().message(), "feature bit 2")) << bad.status().to_string();
}

}  // namespace
}  // namespace qbc
