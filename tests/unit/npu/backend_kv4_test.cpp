// The KV4 rules through the backend (docs/numerics.md "The KV4 rules", docs/npu.md "KV
// records"): per-token key multipliers per key group, their int16 zero points, the online Q·K
// Hadamard and per-token V multipliers, stored as records after each key's and value's codes,
// packed densely in the DRAM caches (appended through aligned blocks) instead of one aligned
// row each. The executor's logits equal the fake-quant evaluator's bit for bit for every
// recipe (and static KV4), family, scheme, target and chunk, prefill and decode; the caches
// take the records' bytes; the MXQ carries the records under required feature bit 8, and a
// reader refuses a file whose bit and records disagree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "qbc/driver/backend.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/mxq_output.h"
#include "qbc/isa/text.h"
#include "qbc/isa/text_parser.h"
#include "qbc/mxq/container.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/npu_session.h"
#include "test_support.h"
#include "unit/mxq/mutate.h"
#include "unit/npu/deployment_options.h"
#include "unit/npu/executor_logits.h"
#include "unit/npu/quantized_case.h"
#include "unit/quant/transform_cases.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;

using testing::bitwise_equal;
using testing::first_difference;

/// A KV recipe on llm_fast and the fields its attentions must carry.
struct Recipe {
  const char* name;
  std::vector<std::string> files, sets;
  int k_bits, v_bits;
  bool k_token_scale, qk_hadamard, k_asym, v_token_scale;
  int64_t k_group;
};

const Recipe kRecipes[] = {
    // The shipped recipe: groups of 4 four-bit keys with multiplier and zero point, the
    // per-group Hadamard, 4-bit values with their multiplier.
    {"kv4_yaml", {"configs/examples/kv4.yaml"}, {}, 4, 4, true, true, true, true, 4},
    // One multiplier per stored key row, the Hadamard over the whole head, no zero points.
    {"kv4_rows_hadamard",
     {},
     {"bit.kvCache.key=4", "bit.kvCache.value=4", "bit.kvCache.keyTokenScale=true",
      "bit.kvCache.keyHadamard=true"},
     4,
     4,
     true,
     true,
     false,
     false,
     0},
    // Static 4-bit keys and values (no per-token fields): packed codes only.
    {"kv4_static",
     {},
     {"bit.kvCache.key=4", "bit.kvCache.value=4"},
     4,
     4,
     false,
     false,
     false,
     false,
     0},
    // 8-bit keys, 4-bit values with their multipliers (the context recipe, k8v4.yaml).
    {"k8v4_vtoken", {"configs/examples/k8v4.yaml"}, {}, 8, 4, false, false, false, true, 0},
    // 8-bit keys with a multiplier per key row and 8-bit values with theirs (no rotation).
    {"kv8_token_scales",
     {},
     {"bit.kvCache.keyTokenScale=true", "bit.kvCache.valueTokenScale=true"},
     8,
     8,
     true,
     false,
     false,
     true,
     0},
};

struct Kv4Case {
  testing::TransformCase family;
  const Recipe* recipe;
};

void PrintTo(const Kv4Case& k, std::ostream* os) { *os << k.family.name << " " << k.recipe->name; }

std::vector<Kv4Case> kv4_cases() {
  std::vector<Kv4Case> out;
  std::vector<testing::TransformCase> families;
  for (const char* f : {"stories260k", "llama32_gqa_tied", "phi3_fused_partial_rotary"})
    families.push_back(testing::find_transform_case(f));
  // Gemma 2 with an 8-position window: its local layers' caches are rings the test wraps.
  testing::TransformCase ring = testing::find_transform_case("gemma2_post_norm_softcap");
  ring.name = "gemma2_window8";
  ring.merge_patch = R"({"attn_logit_softcapping": 5.0, "final_logit_softcapping": 8.0,
                         "sliding_window": 8})";
  families.push_back(ring);
  for (const testing::TransformCase& f : families) {
    for (const Recipe& r : kRecipes) out.push_back({f, &r});
  }
  return out;
}

std::vector<int32_t> test_ids(int64_t vocab, size_t n) { return testing::lcg_ids(vocab, n, 4242); }

StatusOr<testing::QuantizedCase> quantize(const Kv4Case& k) {
  const Recipe& r = *k.recipe;
  // A cache of 512 positions: several chunks, so packed caches are whole chunks of it.
  std::vector<std::string> sets = r.sets;
  sets.push_back("llm.attributes.maxCacheLength=512");
  return testing::quantize_transform_case_with(k.family, "llm_fast", r.files, sets, r.name,
                                               "npu_kv4");
}

class BackendKv4 : public ::testing::TestWithParam<Kv4Case> {};

TEST_P(BackendKv4, ExecutorEqualsFakeQuantBitForBit) {
  const Kv4Case& k = GetParam();
  const testing::TransformCase& c = k.family;
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto q = quantize(k);
  QBC_ASSERT_OK(q);
  auto fq = driver::make_runner(q->model, ref::SessionOptions{});
  QBC_ASSERT_OK(fq);
  // The ring family past its rings in every deployment (window + chunk + 2 blocks in whole
  // chunks: up to 384 positions here); the others over several chunks of the append.
  const bool ring = c.name == "gemma2_window8";
  const std::vector<int32_t> ids = test_ids((*fq)->vocab_size(), ring ? 420 : 100);
  std::vector<float> want;
  QBC_ASSERT_OK((*fq)->forward(ids, &want));
  struct Deployment {
    const char* target;
    int cores;
    int64_t chunk;
  };
  const Deployment deployments[] = {
      {"aries-rb", 1, 128}, {"aries-rb", 8, 1}, {"aries-rb", 4, 7}, {"test-2core", 2, 128}};
  const Recipe& r = *k.recipe;
  for (const Deployment& d : deployments) {
    auto o = testing::deployment_options(q->model.graph, d.target, d.cores, d.chunk);
    QBC_ASSERT_OK(o);
    auto b = driver::compile_backend(q->model, *o);
    QBC_ASSERT_OK(b);
    // The recipe reached the programs: every attention stores its records.
    ASSERT_FALSE(b->attentions.empty());
    for (const isa::AttnDesc& a : b->attentions) {
      EXPECT_EQ(a.k_bits, r.k_bits);
      EXPECT_EQ(a.v_bits, r.v_bits);
      EXPECT_EQ(a.k_token_scale, r.k_token_scale);
      EXPECT_EQ(a.qk_hadamard, r.qk_hadamard);
      EXPECT_EQ(a.k_asym, r.k_asym);
      EXPECT_EQ(a.v_token_scale, r.v_token_scale);
      EXPECT_EQ(a.k_group, r.k_group);
      EXPECT_EQ(a.key_record() > isa::dtype_bytes(isa::code_type(a.k_bits), a.head_dim),
                r.k_token_scale);
      // On aries-rb (64-byte DMA alignment) every family's records are packed: the caches hold
      // the records' bytes, whole chunks of them, not a 64-byte row per position.
      if (std::string(d.target) == "aries-rb") {
        EXPECT_TRUE(a.packed) << d.target;
        for (const isa::Buffer& buf : b->buffers) {  // the caches of this attention's layers
          if (buf.purpose != isa::Purpose::kKv || buf.shape.size() != 3 ||
              buf.shape[1] != a.capacity)
            continue;
          const bool k = buf.name.size() > 7 && buf.name.substr(buf.name.size() - 7) == ".kcache";
          const int64_t record = k ? a.key_record() : a.value_record();
          const int64_t row = (record + 63) / 64 * 64;  // an aligned row per position
          EXPECT_GE(buf.bytes, a.kv_heads * a.capacity * record) << buf.name;
          EXPECT_LE(buf.bytes, a.kv_heads * (a.capacity + 64) * record) << buf.name;
          if (record != row) {
            EXPECT_LT(buf.bytes, a.kv_heads * a.capacity * row) << buf.name;
          }
        }
      }
    }
    auto bundle = std::make_shared<const isa::Bundle>(std::move(*b));
    for (bool stepwise : {false, true}) {
      if (stepwise && d.chunk != 7) continue;  // decode programs: once
      auto got = testing::executor_logits(bundle, ids, stepwise);
      QBC_ASSERT_OK(got);
      EXPECT_TRUE(bitwise_equal(*got, want))
          << c.name << " " << r.name << " on " << d.target << ", " << d.cores << " cores, chunk "
          << d.chunk << (stepwise ? ", decode" : ", prefill") << ": first difference at "
          << first_difference(*got, want) << " of " << want.size();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, BackendKv4, ::testing::ValuesIn(kv4_cases()),
                         [](const ::testing::TestParamInfo<Kv4Case>& i) {
                           return i.param.family.name + "_" + i.param.recipe->name;
                         });

// The MXQ: the records' fields in the layout (and the program text, which parses back to
// them), required feature bit 8, KV bytes per sequence counted with the fields; run from the
// file, the logits are the evaluator's. Bit 8 cleared on a file with records, or set on one
// without, is refused naming the bit.
TEST(BackendKv4Mxq, TheFileCarriesTheRecordsUnderBit8) {
  const Kv4Case k{testing::find_transform_case("llama32_gqa_tied"), &kRecipes[0]};
  QBC_REQUIRE_TRANSFORM_CASE(shared, k.family);
  auto q = quantize(k);
  QBC_ASSERT_OK(q);
  auto o = testing::deployment_options(q->model.graph, "aries-rb", 8, 16);
  QBC_ASSERT_OK(o);
  auto b = driver::compile_backend(q->model, *o);
  QBC_ASSERT_OK(b);
  // A packed append on an attention that does not declare it (so a file could carry it
  // without bit 8) is refused by the runtime's bundle check, and so is a group that does not
  // divide the head.
  for (int edit = 0; edit < 2; ++edit) {
    auto bad = std::make_shared<isa::Bundle>(*b);
    for (isa::AttnDesc& a : bad->attentions) (edit == 0 ? a.packed = false : a.k_group = 3);
    runtime::DeviceOptions dopt;
    dopt.scheme = bad->modes.front().scheme;
    auto dev = runtime::Device::create(bad, dopt);
    ASSERT_FALSE(dev.ok()) << edit;
    EXPECT_EQ(dev.status().code(), Code::kInvalidArgument) << dev.status().to_string();
    EXPECT_NE(dev.status().message().find(edit == 0 ? "which is not packed" : "k_group 3"),
              std::string::npos)
        << dev.status().to_string();
  }
  const fs::path dir = testing::temp_dir() / "backend_kv4_mxq";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "kv4.mxq";
  QBC_ASSERT_OK(driver::write_mxq(q->model, *b, q->cfg, file.string()));
  auto m = runtime::load_model(file.string());
  QBC_ASSERT_OK(m);
  const isa::Bundle& back = *m->file.bundle;
  ASSERT_EQ(back.attentions.size(), b->attentions.size());
  for (size_t i = 0; i < back.attentions.size(); ++i) {
    const isa::AttnDesc& a = back.attentions[i];
    EXPECT_TRUE(a.k_token_scale && a.qk_hadamard && a.k_asym && a.v_token_scale) << i;
    EXPECT_EQ(a.k_group, 4) << i;
    EXPECT_TRUE(a.packed) << i;
    EXPECT_EQ(a.key_record(), b->attentions[i].key_record());
  }
  ASSERT_GT(m->file.meta.kv_size(), 0);
  const isa::AttnDesc& a0 = back.attentions[0];
  EXPECT_EQ(m->file.meta.kv(0).bytes_per_sequence(),
            a0.capacity * a0.kv_heads * (a0.key_record() + a0.value_record()));
  // The program text names the rules and parses back to them.
  const std::string text = isa::print_bundle(back);
  EXPECT_NE(text.find("k_token_scale=true qk_hadamard=true k_group=4 k_asym=true "
                      "v_token_scale=true packed=true"),
            std::string::npos);
  auto parsed = isa::parse_bundle(text);
  QBC_ASSERT_OK(parsed);
  EXPECT_EQ(parsed->attentions[0].key_record(), a0.key_record());
  EXPECT_TRUE(parsed->attentions[0].packed);
  // Run from the file: the evaluator's logits, prefill then decode.
  auto fq = driver::make_runner(q->model, ref::SessionOptions{});
  QBC_ASSERT_OK(fq);
  auto s = runtime::NpuSession::create(m->device, 0);
  QBC_ASSERT_OK(s);
  const std::vector<int32_t> prompt = test_ids((*fq)->vocab_size(), 21);
  std::vector<float> want, got;
  QBC_ASSERT_OK((*fq)->forward(prompt, &want));
  QBC_ASSERT_OK((*s)->forward(prompt, &got));
  EXPECT_TRUE(bitwise_equal(got, want)) << "first difference at " << first_difference(got, want);
  for (int32_t t : {5, 77, 200}) {
    QBC_ASSERT_OK((*fq)->forward({t}, &want));
    QBC_ASSERT_OK((*s)->forward({t}, &got));
    EXPECT_TRUE(bitwise_equal(got, want)) << "decode of " << t;
  }
  // Bit 8 cleared: refused, naming it.
  const std::string bytes = testing::read_file(file);
  ASSERT_GE(bytes.size(), 32u);
  uint64_t required = 0;
  std::memcpy(&required, bytes.data() + 24, sizeof required);
  EXPECT_NE(required & mxq::kFeatureKvRecords, 0u);
  std::string bad = bytes;
  const uint64_t cleared = required & ~mxq::kFeatureKvRecords;
  std::memcpy(bad.data() + 24, &cleared, sizeof cleared);
  testing::reseal(bad, false);
  testing::write_file(dir / "no_bit8.mxq", bad);
  auto refused = runtime::load_model((dir / "no_bit8.mxq").string());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kDataLoss);
  EXPECT_NE(refused.status().message().find("required feature bit 8 is not set"), std::string::npos)
      << refused.status().to_string();
}

// A cache shorter than a cache chunk (128 positions against chunks of 256) compiles (the tiles
// do not follow the cache length, so check-context's compile at twice the cache agrees) and
// runs as the evaluator.
TEST(BackendKv4Small, ACacheShorterThanAChunkCompilesAndRuns) {
  const Kv4Case k{testing::find_transform_case("stories260k"), &kRecipes[0]};
  QBC_REQUIRE_TRANSFORM_CASE(shared, k.family);
  auto q = testing::quantize_transform_case_with(k.family, "llm_fast", k.recipe->files,
                                                 {"llm.attributes.maxCacheLength=128"},
                                                 "kv4_cache128", "npu_kv4");
  QBC_ASSERT_OK(q);
  auto fq = driver::make_runner(q->model, ref::SessionOptions{});
  QBC_ASSERT_OK(fq);
  const std::vector<int32_t> ids = test_ids((*fq)->vocab_size(), 100);
  std::vector<float> want;
  QBC_ASSERT_OK((*fq)->forward(ids, &want));
  for (int64_t chunk : {int64_t{16}, int64_t{128}}) {
    auto o = testing::deployment_options(q->model.graph, "aries-rb", 1, chunk);
    QBC_ASSERT_OK(o);
    EXPECT_EQ(o->max_cache, 128);
    auto b = driver::compile_backend(q->model, *o);
    QBC_ASSERT_OK(b);
    for (const isa::AttnDesc& a : b->attentions) EXPECT_TRUE(a.packed);
    auto got =
        testing::executor_logits(std::make_shared<const isa::Bundle>(std::move(*b)), ids, false);
    QBC_ASSERT_OK(got);
    EXPECT_TRUE(bitwise_equal(*got, want))
        << "chunk " << chunk << ": first difference at " << first_difference(*got, want);
  }
}

// A KV8 model's file has no bit 8; setting it is refused (the bit promises records the layout
// does not have).
TEST(BackendKv4Mxq, Bit8WithoutRecordsIsRefused) {
  const testing::TransformCase& c = testing::find_transform_case("stories260k");
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto q = testing::quantize_transform_case(c, false, "npu_kv4");
  QBC_ASSERT_OK(q);
  auto o = testing::deployment_options(q->model.graph, "aries-rb", 1, 16);
  QBC_ASSERT_OK(o);
  auto b = driver::compile_backend(q->model, *o);
  QBC_ASSERT_OK(b);
  for (const isa::AttnDesc& a : b->attentions) EXPECT_FALSE(a.token_fields());
  const fs::path dir = testing::temp_dir() / "backend_kv4_kv8";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "kv8.mxq";
  QBC_ASSERT_OK(driver::write_mxq(q->model, *b, q->cfg, file.string()));
  std::string bytes = testing::read_file(file);
  ASSERT_GE(bytes.size(), 32u);
  uint64_t required = 0;
  std::memcpy(&required, bytes.data() + 24, sizeof required);
  EXPECT_EQ(required & mxq::kFeatureKvRecords, 0u);
  QBC_ASSERT_OK(runtime::load_model(file.string()).status());
  required |= mxq::kFeatureKvRecords;
  std::memcpy(bytes.data() + 24, &required, sizeof required);
  testing::reseal(bytes, false);
  testing::write_file(dir / "bit8.mxq", bytes);
  auto refused = runtime::load_model((dir / "bit8.mxq").string());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kDataLoss);
  EXPECT_NE(refused.status().message().find("bit 8 is set but no attention"), std::string::npos)
      << refused.status().to_string();
}

}  // namespace
}  // namespace qbc
