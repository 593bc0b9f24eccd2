// runtime::Generator, the runtime's host side, on stories260K compiled to MXQ from the HF
// folder and from the GGUF file: the tokenizer read from the assets encodes as the source's
// own tokenizer, embed() returns the file's rows, greedy and seeded generation give the tokens
// runner::generate gives on the quantized MBLT (the fake-quant evaluator, which the NPU
// programs match bit for bit), and the GGUF-compiled file, whose vocabulary travels as
// qbc_vocab.json, generates the same text as the HF-compiled one.
#include "qbc/runtime/generator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/calib/prepare.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/frontend/gguf.h"
#include "qbc/frontend/gguf_tokenizer.h"
#include "qbc/runner/generate.h"
#include "stories_golden.h"
#include "test_support.h"
#include "unit/frontend/gguf_bytes.h"
#include "unit/mxq/compile_fixture.h"

namespace qbc {
namespace {

using ::qbc::testing::contains;

const testing::CompiledMxq& from_hf() {
  static const testing::CompiledMxq c = testing::compile_stories260k("generator_hf", {});
  return c;
}

const testing::CompiledMxq& from_gguf() {
  static const testing::CompiledMxq c =
      testing::compile_stories260k("generator_gguf", {}, "stories260K.gguf");
  return c;
}

/// stories260K (`source`: "hf" or "stories260K.gguf") compiled after calibrating on 8 windows
/// of 64 tokens of TinyStories text, as `qbc calib prepare` cuts them: the W8 model then
/// follows llama.cpp's greedy path for the 35 tokens of the golden text (the random-token
/// calibration of the fixtures above leaves it after 24).
testing::CompiledMxq compile_calibrated(const std::string& source) {
  const std::filesystem::path calib_dir = testing::temp_dir() / ("calib_" + source);
  auto prepare = [&]() -> Status {
    QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(config::LoadRequest{}));
    const std::filesystem::path model = testing::shared_dir() / "models/stories260k" / source;
    QBC_ASSIGN_OR_RETURN(driver::LoadedModel m, driver::open_model(model.string(), cfg));
    QBC_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, driver::load_tokenizer(m));
    QBC_ASSIGN_OR_RETURN(const ir::Weight* emb, calib::find_host_embedding(m.graph));
    calib::EmbeddingTable table;
    table.vocab = emb->type.dims[0];
    table.hidden = emb->type.dims[1];
    QBC_RETURN_IF_ERROR(driver::read_weight(m, *emb, &table.data));
    calib::PrepareOptions po;
    po.text_path = testing::shared_dir() / "data/tinystories/calib.clean.txt";
    po.out_dir = calib_dir;
    po.num_samples = 8;
    po.seq_len = 64;
    return calib::prepare_calib_dir(po, tok, table, {}).status();
  };
  if (Status s = prepare(); !s.ok()) {
    testing::CompiledMxq failed;
    failed.error = s.to_string();
    return failed;
  }
  return testing::compile_stories260k(
      "generator_golden_" + source,
      {"useRandomCalib=false", "calibDataPaths=[" + calib_dir.string() + "]",
       "calibration.numSamples=8", "calibration.seqLength=64"},
      source);
}

runner::SamplingOptions seeded(uint64_t seed) {
  runner::SamplingOptions s;
  s.greedy = false;
  s.temperature = 0.8;
  s.top_k = 40;
  s.top_p = 0.95;
  s.seed = seed;
  return s;
}

TEST(Generator, TokenizerFromAssetsEmbeddingAndGenerationMatchTheMblt) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(from_hf().error.empty()) << from_hf().error;
  auto gen = runtime::Generator::create(from_hf().path.string());
  QBC_ASSERT_OK(gen);
  auto hf_tok = tokenizer::Tokenizer::from_hf_dir(hf);
  QBC_ASSERT_OK(hf_tok);
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  EXPECT_EQ((*gen)->encode(text), hf_tok->encode(text, hf_tok->add_bos_default()));
  EXPECT_EQ((*gen)->tokenizer().eos_id(), hf_tok->eos_id());
  EXPECT_FALSE((*gen)->has_chat_template());  // stories260K ships none
  EXPECT_EQ((*gen)->apply_chat_template({{"user", "hi"}}).status().code(), Code::kNotFound);

  const std::vector<int32_t> prompt = (*gen)->encode("Once upon a time");
  auto rows = (*gen)->embed(prompt);
  QBC_ASSERT_OK(rows);
  const isa::Bundle& b = *from_hf().bundle;
  ASSERT_EQ(rows->size(), prompt.size() * static_cast<size_t>(b.hidden));
  for (size_t i = 0; i < prompt.size(); ++i)
    for (int64_t k = 0; k < b.hidden; ++k)
      ASSERT_EQ((*rows)[i * b.hidden + k], b.embedding[prompt[i] * b.hidden + k]);
  EXPECT_FALSE((*gen)->embed({-1}).ok());

  // The same loop and sampler on the MBLT the MXQ was compiled from.
  config::LoadRequest req;
  auto cfg = config::resolve(req);
  QBC_ASSERT_OK(cfg);
  auto mblt = driver::open_model((from_hf().path.parent_path() / "q.mblt").string(), *cfg);
  QBC_ASSERT_OK(mblt);
  for (const runner::SamplingOptions& s : {runner::SamplingOptions{}, seeded(7), seeded(8)}) {
    auto fq = driver::make_runner(*mblt);
    QBC_ASSERT_OK(fq);
    auto want = runner::generate(**fq, prompt, 24, s, hf_tok->eos_id(), false,
                                 driver::cache_capacity(mblt->graph));
    QBC_ASSERT_OK(want);
    auto got = (*gen)->generate(prompt, 24, s);
    QBC_ASSERT_OK(got);
    EXPECT_EQ(got->tokens, want->tokens) << "seed " << s.seed << " greedy " << s.greedy;
    EXPECT_FALSE(got->tokens.empty());
  }
  // Two seeds give two texts (the sampler is not greedy in disguise).
  auto a = (*gen)->generate_text("Once upon a time", 24, seeded(7));
  auto c = (*gen)->generate_text("Once upon a time", 24, seeded(8));
  QBC_ASSERT_OK(a);
  QBC_ASSERT_OK(c);
  EXPECT_NE(*a, *c);
  // Past the cache: refused before any work, naming the capacity.
  auto big = (*gen)->generate(prompt, 1000);
  EXPECT_EQ(big.status().code(), Code::kResourceExhausted);
  EXPECT_TRUE(contains(big.status().message(), "KV cache holds 64")) << big.status().message();
}

TEST(Generator, GgufCompiledModelCarriesItsVocabularyAndGeneratesTheSameText) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(from_gguf().error.empty()) << from_gguf().error;
  ASSERT_TRUE(from_hf().error.empty()) << from_hf().error;
  auto m = mxq::load_model(from_gguf().path.string());
  QBC_ASSERT_OK(m);
  EXPECT_EQ(m->asset("tokenizer.json"), nullptr);
  ASSERT_NE(m->asset("qbc_vocab.json"), nullptr);
  auto tok = runtime::load_tokenizer(*m);
  QBC_ASSERT_OK(tok);
  auto gguf_tok = frontend::tokenizer_from_gguf(gguf);
  QBC_ASSERT_OK(gguf_tok);
  for (const std::string text :
       {"Once upon a time", "  spaces\tand\nnewlines ", "Émile ünïcode 日本"}) {
    EXPECT_EQ(tok->encode(text, true), gguf_tok->encode(text, true)) << text;
    const std::vector<int32_t> ids = gguf_tok->encode(text, true);
    EXPECT_EQ(tok->decode(ids), gguf_tok->decode(ids)) << text;
  }
  auto g = runtime::Generator::create(from_gguf().path.string());
  auto h = runtime::Generator::create(from_hf().path.string());
  QBC_ASSERT_OK(g);
  QBC_ASSERT_OK(h);
  auto gt = (*g)->generate_text("Once upon a time", 32);
  auto ht = (*h)->generate_text("Once upon a time", 32);
  QBC_ASSERT_OK(gt);
  QBC_ASSERT_OK(ht);
  EXPECT_FALSE(gt->empty());
  EXPECT_EQ(*gt, *ht);
}

// The text, in the prompt's context: llama.cpp's golden greedy text, from the golden prompt and
// from "Once" (whose first generated word, " upon", keeps its space), for both compiled files;
// decode() of the new ids alone is a text of its own and drops that space.
TEST(Generator, GreedyTextIsLlamaCppsGoldenTextAfterAnyPrompt) {
  QBC_REQUIRE_SHARED(stories, "models/stories260k");
  const std::string golden = testing::stories260k_greedy_text(stories);
  const int after_once = testing::stories260k_tokens_after_once(stories);
  QBC_REQUIRE_SHARED(text, "data/tinystories/calib.clean.txt");
  for (const char* source : {"hf", "stories260K.gguf"}) {
    const testing::CompiledMxq compiled = compile_calibrated(source);
    const testing::CompiledMxq* c = &compiled;
    ASSERT_TRUE(c->error.empty()) << c->error;
    auto gen = runtime::Generator::create(c->path.string());
    QBC_ASSERT_OK(gen);
    auto text = (*gen)->generate_text("Once upon a time", 32);
    QBC_ASSERT_OK(text);
    EXPECT_EQ("Once upon a time" + *text, golden) << c->path;
    text = (*gen)->generate_text("Once", after_once);
    QBC_ASSERT_OK(text);
    EXPECT_EQ("Once" + *text, golden) << c->path;
    const std::vector<int32_t> prompt = (*gen)->encode("Once");
    auto r = (*gen)->generate(prompt, 3);
    QBC_ASSERT_OK(r);
    EXPECT_EQ((*gen)->decode_continuation(prompt, r->tokens), " upon a time");
    EXPECT_EQ((*gen)->decode(r->tokens), "upon a time");
  }
}

TEST(Generator, ChatTemplateFromTheAssets) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(from_hf().error.empty()) << from_hf().error;
  const std::string chatml =
      "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content + eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";
  // The list form of tokenizer_config.json: the "default" entry.
  nlohmann::json config = nlohmann::json::parse(
      testing::read_file(std::filesystem::path(hf) / "tokenizer_config.json"));
  config["chat_template"] = {{{"name", "tool_use"}, {"template", "unused"}},
                             {{"name", "default"}, {"template", chatml}}};
  auto m = runtime::load_model(from_hf().path.string());
  QBC_ASSERT_OK(m);
  for (mxq::HostAsset& a : m->file.assets)
    if (a.name == "tokenizer_config.json") a.bytes = config.dump();
  auto gen = runtime::Generator::create(std::move(*m));
  QBC_ASSERT_OK(gen);
  ASSERT_TRUE((*gen)->has_chat_template());
  auto text = (*gen)->apply_chat_template({{"user", "Hi"}, {"assistant", "Hello"}});
  QBC_ASSERT_OK(text);
  EXPECT_EQ(*text, "<|user|>Hi</s><|assistant|>Hello</s><|assistant|>");
  // chat_template.jinja wins over tokenizer_config.json; a bad one does not stop generation,
  // but applying it is refused naming the asset, line and column.
  m = runtime::load_model(from_hf().path.string());
  QBC_ASSERT_OK(m);
  m->file.assets.push_back({"chat_template.jinja", "line one\n{% include 'x' %}"});
  auto bad = runtime::Generator::create(std::move(*m));
  QBC_ASSERT_OK(bad);
  EXPECT_FALSE((*bad)->has_chat_template());
  auto refused = (*bad)->apply_chat_template({{"user", "Hi"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.status().message(), "asset chat_template.jinja:2:4"))
      << refused.status().message();
  auto still = (*bad)->generate_text("Once upon a time", 4);
  QBC_ASSERT_OK(still);
  EXPECT_FALSE(still->empty());
}

// stories260K.gguf with a tokenizer.chat_template key added first in its metadata. The key is
// padded (inside a Jinja comment) to a multiple of the file's alignment, so the tensor data
// that follows stays aligned at the same relative offsets.
std::filesystem::path gguf_with_chat_template(const std::string& tmpl, std::string* stored) {
  const std::filesystem::path src = testing::shared_dir() / "models/stories260k/stories260K.gguf";
  auto g = frontend::GgufFile::open(src);
  if (!g.ok()) return {};
  const uint64_t align = g->alignment();
  std::string text = tmpl + "{#";
  auto key = [&] {
    return testing::enc_str("tokenizer.chat_template") +
           testing::enc<uint32_t>(static_cast<uint32_t>(frontend::GgufType::kString)) +
           testing::enc_str(text + "#}");
  };
  while (key().size() % align != 0) text += ' ';
  *stored = text + "#}";
  std::string bytes = testing::read_file(src);
  uint64_t n_kv = 0;
  std::memcpy(&n_kv, bytes.data() + 16, 8);  // magic, version, tensor count, kv count
  ++n_kv;
  std::memcpy(bytes.data() + 16, &n_kv, 8);
  bytes.insert(24, key());
  const std::filesystem::path out = testing::temp_dir() / "generator_gguf_chat" / "chat.gguf";
  std::filesystem::create_directories(out.parent_path());
  testing::write_file(out, bytes);
  return out;
}

TEST(Generator, GgufChatTemplateTravelsAsAnAsset) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  const std::string chatml =
      "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content + eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";
  std::string stored;
  const std::filesystem::path path = gguf_with_chat_template(chatml, &stored);
  ASSERT_FALSE(path.empty());
  auto src = frontend::ModelSource::open(path);
  QBC_ASSERT_OK(src);
  EXPECT_EQ(src->chat_template(), stored);
  const testing::CompiledMxq c =
      testing::compile_stories260k("generator_gguf_chat_mxq", {}, path.string());
  ASSERT_TRUE(c.error.empty()) << c.error;
  auto m = runtime::load_model(c.path.string());
  QBC_ASSERT_OK(m);
  const mxq::HostAsset* a = m->file.asset("chat_template.jinja");
  ASSERT_NE(a, nullptr) << "no chat_template.jinja asset";
  EXPECT_EQ(a->bytes, stored);
  auto gen = runtime::Generator::create(std::move(*m));
  QBC_ASSERT_OK(gen);
  ASSERT_TRUE((*gen)->has_chat_template());
  auto text = (*gen)->apply_chat_template({{"user", "Hi"}});
  QBC_ASSERT_OK(text);
  EXPECT_EQ(*text, "<|user|>Hi</s><|assistant|>");
  // The plain GGUF has no template, and its MXQ carries none.
  ASSERT_TRUE(from_gguf().error.empty()) << from_gguf().error;
  auto plain = runtime::Generator::create(from_gguf().path.string());
  QBC_ASSERT_OK(plain);
  EXPECT_FALSE((*plain)->has_chat_template());
}

TEST(Generator, FileWithoutATokenizerIsRefusedNamingIt) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(from_hf().error.empty()) << from_hf().error;
  auto m = runtime::load_model(from_hf().path.string());
  QBC_ASSERT_OK(m);
  m->file.assets.clear();
  auto gen = runtime::Generator::create(std::move(*m));
  ASSERT_FALSE(gen.ok());
  EXPECT_EQ(gen.status().code(), Code::kNotFound);
  EXPECT_TRUE(contains(gen.status().message(), "carries no tokenizer")) << gen.status().message();
}

}  // namespace
}  // namespace qbc
