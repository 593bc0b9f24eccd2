// `qbc verify` checks what `qbc run` relies on (runtime::verify_model): hostile MXQ files,
// written by mxq::write_model so every digest is right, each lying in one class of value run
// uses: the KV layers of the metadata (count, capacity, kv_heads, bits, bytes), the token ids of
// the metadata, the tokenizer asset (broken, more ids than the embedding has rows, other BOS/EOS
// than the metadata), the chat template asset. Each is refused by verify AND by the runtime's
// own loading (runtime::load_model or Generator::create), with exit 2 and the file named; the
// compiled file passes both.
#include "qbc/runtime/verify_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "qbc/mxq/model_file.h"
#include "qbc/runtime/generator.h"
#include "qbc/support/exit_codes.h"
#include "test_support.h"
#include "unit/mxq/compile_fixture.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;

const testing::CompiledMxq& compiled() {
  static const testing::CompiledMxq c = testing::compile_stories260k("verify_model", {});
  return c;
}

#define REQUIRE_COMPILED()                             \
  QBC_REQUIRE_SHARED(hf_dir, "models/stories260k/hf"); \
  ASSERT_TRUE(compiled().error.empty()) << compiled().error;

/// The compiled file read back, edited by `edit` and written again by the writer (digests,
/// model hash and header right).
std::string rewrite(const std::string& name,
                    const std::function<void(mxq::WriteRequest&, isa::Bundle&)>& edit) {
  auto m = mxq::load_model(compiled().path.string());
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return "";
  isa::Bundle b = *m->bundle;
  mxq::WriteRequest req;
  req.meta = m->meta;
  req.assets = m->assets;
  req.blocks = m->meta.blocks();
  edit(req, b);
  req.bundle = &b;
  const fs::path p = testing::temp_dir() / (name + ".mxq");
  auto w = mxq::write_model(p.string(), req);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return p.string();
}

/// What verify says about `path` (load + verify_model), as `qbc verify` runs it.
Status verify(const std::string& path) {
  auto m = mxq::load_model(path);
  if (!m.ok()) return m.status();
  return runtime::verify_model(*m, path).status();
}

/// What run says (the loading of `qbc run model.mxq`: runtime::Generator::create).
Status run_loads(const std::string& path) { return runtime::Generator::create(path).status(); }

void expect_refused(const Status& s, const std::string& path, const std::string& what) {
  ASSERT_FALSE(s.ok()) << path;
  EXPECT_EQ(exit_code_for(s), kExitBadInput) << s.to_string();
  EXPECT_TRUE(contains(s.message(), path)) << s.to_string();
  EXPECT_TRUE(contains(s.message(), what)) << s.to_string();
}

std::string asset(const mxq::WriteRequest& req, const std::string& name) {
  for (const mxq::HostAsset& a : req.assets)
    if (a.name == name) return a.bytes;
  return "";
}

void set_asset(mxq::WriteRequest& req, const std::string& name, const std::string& bytes) {
  for (mxq::HostAsset& a : req.assets) {
    if (a.name == name) {
      a.bytes = bytes;
      return;
    }
  }
  req.assets.push_back({name, bytes});
}

TEST(VerifyModel, TheCompiledFilePassesVerifyAndRun) {
  REQUIRE_COMPILED();
  const std::string p = rewrite("same", [](mxq::WriteRequest&, isa::Bundle&) {});
  QBC_ASSERT_OK(verify(p));
  QBC_ASSERT_OK(run_loads(p));
}

TEST(VerifyModel, LyingKvLayersInTheMetadataAreRefused) {
  REQUIRE_COMPILED();
  struct Case {
    const char* name;
    std::function<void(mxq::pb::Meta&)> lie;
    const char* what;
  };
  const Case cases[] = {
      {"kv-capacity", [](mxq::pb::Meta& m) { m.mutable_kv(0)->set_capacity(4096); }, "capacity"},
      {"kv-heads", [](mxq::pb::Meta& m) { m.mutable_kv(1)->set_kv_heads(64); }, "kv_heads"},
      {"kv-bits", [](mxq::pb::Meta& m) { m.mutable_kv(0)->set_k_bits(4); }, "k_bits"},
      {"kv-bytes", [](mxq::pb::Meta& m) { m.mutable_kv(0)->set_bytes_per_sequence(1); },
       "bytes_per_sequence"},
      {"kv-batch", [](mxq::pb::Meta& m) { m.mutable_kv(0)->set_batch(8); }, "batch"},
      {"kv-kind", [](mxq::pb::Meta& m) { m.mutable_kv(0)->set_kind("ring"); }, "kind"},
      {"kv-count", [](mxq::pb::Meta& m) { m.mutable_kv()->RemoveLast(); }, "KV layers"},
      {"kv-scale", [](mxq::pb::Meta& m) { m.mutable_kv(0)->add_k_scale(1.f); }, "k_scale"},
      {"io-shape", [](mxq::pb::Meta& m) { m.mutable_output()->set_shape(1, 7); }, "output"},
      {"bos-id", [](mxq::pb::Meta& m) { m.set_bos_id(100000); }, "bos_id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string p =
        rewrite(c.name, [&](mxq::WriteRequest& req, isa::Bundle&) { c.lie(req.meta); });
    expect_refused(verify(p), p, c.what);
    expect_refused(run_loads(p), p, c.what);
  }
}

/// The metadata's KV layer `i` restated after a consistent lie in the layout's attention
/// table: the two agree, so only the programs' KV buffers can tell.
void restate_kv(mxq::pb::Meta& m, const isa::Bundle& b, int i) {
  const isa::AttnDesc& a = b.attentions[static_cast<size_t>(i)];
  mxq::pb::KvLayer& k = *m.mutable_kv(i);
  k.set_capacity(a.capacity);
  k.set_kv_heads(static_cast<int32_t>(a.kv_heads));
  k.set_head_dim(static_cast<int32_t>(a.head_dim));
  k.set_bytes_per_sequence(a.capacity * a.kv_heads * a.head_dim * (a.k_bits + a.v_bits) / 8);
  k.clear_k_scale();
  k.clear_v_scale();
}

TEST(VerifyModel, KvLayersThatDisagreeWithTheProgramsKvBuffersAreRefused) {
  REQUIRE_COMPILED();
  struct Case {
    const char* name;
    std::function<void(isa::Bundle&)> lie;  // on the layout; the metadata is restated
    const char* what;
  };
  const Case cases[] = {
      {"buf-capacity", [](isa::Bundle& b) { b.attentions[2].capacity = 128; },
       "capacity is 128, the KV buffer 'blk.2.attn.sdpa.kcache' holds 64"},
      {"buf-kv-heads", [](isa::Bundle& b) { b.attentions[1].kv_heads = 2; },
       "kv_heads is 2, the KV buffer 'blk.1.attn.sdpa.kcache' holds 4"},
      {"buf-head-dim",
       [](isa::Bundle& b) {
         b.attentions[0].head_dim = 16;
         b.attentions[0].rotating = false;  // no rope table to disagree first
       },
       "head_dim is 16, the KV buffer 'blk.0.attn.sdpa.kcache' holds 8"},
      {"buf-count",
       [](isa::Bundle& b) {
         for (isa::Buffer& x : b.buffers)
           if (x.name == "blk.4.attn.sdpa.vcache") x.purpose = isa::Purpose::kActivations;
       },
       "metadata lists 5 KV layers, the programs have 9 KV buffers"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string p = rewrite(c.name, [&](mxq::WriteRequest& req, isa::Bundle& b) {
      c.lie(b);
      for (int i = 0; i < req.meta.kv_size(); ++i) restate_kv(req.meta, b, i);
    });
    const Status v = verify(p), r = run_loads(p);
    expect_refused(v, p, c.what);
    expect_refused(r, p, c.what);
    EXPECT_EQ(v.message(), r.message());
  }
}

TEST(VerifyModel, BrokenOrInconsistentTokenizerAssetsAreRefused) {
  REQUIRE_COMPILED();
  // Not JSON.
  std::string p = rewrite("tok-junk", [](mxq::WriteRequest& req, isa::Bundle&) {
    set_asset(req, "tokenizer.json", "{\"model\": ");
  });
  expect_refused(verify(p), p, "asset tokenizer.json");
  expect_refused(run_loads(p), p, "asset tokenizer.json");
  // More ids than the embedding has rows: the same tokenizer on a table cut to 256 rows.
  p = rewrite("tok-rows", [](mxq::WriteRequest&, isa::Bundle& b) {
    std::vector<float> rows(static_cast<size_t>(256 * b.hidden));
    for (int64_t r = 0; r < 256; ++r) b.embedding_row(r, rows.data() + r * b.hidden);
    b.embedding_view = {};
    b.embedding_bf16_view = {};
    b.embedding = std::move(rows);
    b.embed_rows = 256;
  });
  expect_refused(verify(p), p, "512 ids");
  expect_refused(run_loads(p), p, "512 ids");
  // An EOS other than the metadata's (tokenizer_config.json names another token).
  p = rewrite("tok-eos", [](mxq::WriteRequest& req, isa::Bundle&) {
    nlohmann::json cfg = nlohmann::json::parse(asset(req, "tokenizer_config.json"));
    cfg["eos_token"] = "<unk>";
    set_asset(req, "tokenizer_config.json", cfg.dump());
  });
  expect_refused(verify(p), p, "metadata");
  expect_refused(run_loads(p), p, "metadata");
}

TEST(VerifyModel, AChatTemplateOutsideTheSubsetIsRefusedByVerify) {
  REQUIRE_COMPILED();
  const std::string p = rewrite("chat", [](mxq::WriteRequest& req, isa::Bundle&) {
    set_asset(req, "chat_template.jinja", "line one\n{% include 'x' %}");
  });
  expect_refused(verify(p), p, "asset chat_template.jinja:2:4");
  // run generates without it (apply_chat_template reports it), so it still loads.
  QBC_ASSERT_OK(run_loads(p));
}

}  // namespace
}  // namespace qbc
