// A seeded mutation round over every reader: safetensors, GGUF, config.json, pre-quantized
// checkpoints (quantization_config and packed tensors), tokenizer.json,
// compile configs (JSON and YAML), MBLT and .npy. Each case is a valid seed with a few random
// edits (bit flips, interesting bytes, huge and overflowing numbers, cuts, repeats); every result
// must be OK or a user-facing Status error: never kInternal (exit 70), an exception, a crash, or a
// message echoing a large part of the input. Deterministic (fixed seeds), a few seconds in all;
// tools/fuzz.sh is the coverage-guided version of the same contract.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "prequant_packer.h"
#include "qbc/calib/npy.h"
#include "qbc/config/config.h"
#include "qbc/frontend/gguf.h"
#include "qbc/frontend/gguf_tokenizer.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/prequant.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/ir/serialize.h"
#include "qbc/tokenizer/chat_template.h"
#include "qbc/tokenizer/tokenizer.h"
#include "test_support.h"
#include "unit/frontend/gguf_writer.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::temp_dir;
using testing::write_file;

constexpr int kCasesPerSeed = 400;

// Replaces, inserts or removes bytes of `s` at random, a few edits per case.
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  // `focus`: the edits land in the first `focus` bytes (a header), when non-zero.
  std::string mutate(std::string s, size_t focus = 0) {
    const int edits = 1 + static_cast<int>(rng_() % 4);
    for (int e = 0; e < edits; ++e) edit(s, focus);
    return s;
  }

 private:
  size_t pos(const std::string& s, size_t focus) {
    const size_t n = focus != 0 && focus < s.size() ? focus : s.size();
    return n == 0 ? 0 : rng_() % n;
  }
  void edit(std::string& s, size_t focus) {
    static const char* const kTokens[] = {"1e999999",
                                          "-1e999999",
                                          "123456789012345678901234567890",
                                          "18446744073709551615",
                                          "2147483648",
                                          "4294967295",
                                          "-1",
                                          "0",
                                          "null",
                                          "[]",
                                          "{}",
                                          "\"\"",
                                          "[[[[[[[[",
                                          "\xff\xfe",
                                          "\"a\":1,\"a\":2",
                                          "&a [*a, *a]",
                                          ": ",
                                          "- ",
                                          "\n  ",
                                          "'",
                                          "\\u0000"};
    const size_t p = pos(s, focus);
    switch (rng_() % 8) {
      case 0:  // flip a bit
        if (!s.empty()) s[p] = static_cast<char>(s[p] ^ (1 << (rng_() % 8)));
        break;
      case 1: {  // an interesting byte
        static const unsigned char kBytes[] = {0, 0xff, 0x7f, 0x80, '9', '"', '{', '[', ',', '\n'};
        if (!s.empty()) s[p] = static_cast<char>(kBytes[rng_() % sizeof(kBytes)]);
        break;
      }
      case 2: {  // an interesting 32- or 64-bit little-endian word (binary counts)
        static const uint64_t kWords[] = {0xFFFFFFFFull, 0x7FFFFFFFull,         0x80000000ull,
                                          1000000,       0xFFFFFFFFFFFFFFFFull, 0,
                                          1ull << 40};
        const uint64_t w = kWords[rng_() % (sizeof(kWords) / sizeof(kWords[0]))];
        const size_t width = rng_() % 2 ? 4 : 8;
        if (p + width <= s.size()) std::memcpy(s.data() + p, &w, width);
        break;
      }
      case 3:  // a textual token
        s.insert(p, kTokens[rng_() % (sizeof(kTokens) / sizeof(kTokens[0]))]);
        break;
      case 4: {  // replace a run of digits with a huge or overflowing number
        size_t d = s.find_first_of("0123456789", p);
        if (d == std::string::npos) break;
        size_t end = s.find_first_not_of("0123456789.e-", d);
        if (end == std::string::npos) end = s.size();
        s.replace(d, end - d, kTokens[rng_() % 6]);
        break;
      }
      case 5:  // cut the tail
        s.resize(p);
        break;
      case 6: {  // remove a range
        const size_t n = std::min<size_t>(s.size() - std::min(p, s.size()), 1 + rng_() % 16);
        s.erase(p, n);
        break;
      }
      case 7: {  // repeat a range
        const size_t n = std::min<size_t>(s.size() - std::min(p, s.size()), 1 + rng_() % 64);
        s.insert(p, s.substr(p, n));
        break;
      }
    }
  }

  std::mt19937_64 rng_;
};

// Runs `reader` on `cases` mutations of `seed`; fails on an internal error, an exception or an
// oversized message. Returns how many cases were refused (for a sanity check that the mutations
// do something).
int run_cases(const std::string& name, const std::string& seed, size_t focus, uint64_t rng_seed,
              const std::function<Status(const std::string&)>& reader) {
  {
    const Status s = reader(seed);
    EXPECT_TRUE(s.ok()) << name << ": the unmutated seed fails: " << s.to_string();
  }
  Mutator m(rng_seed);
  int refused = 0;
  for (int i = 0; i < kCasesPerSeed; ++i) {
    const std::string input = m.mutate(seed, focus);
    Status s;
    try {
      s = reader(input);
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << " case " << i << ": exception " << e.what();
      continue;
    }
    if (!s.ok()) ++refused;
    EXPECT_NE(s.code(), Code::kInternal) << name << " case " << i << ": " << s.message();
    EXPECT_LT(s.message().size(), 4096u)
        << name << " case " << i << ": " << s.message().substr(0, 300);
  }
  return refused;
}

const char* const kTinyConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64,
  "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
  "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64,
  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
  "bos_token_id": 1, "eos_token_id": [2, 3], "torch_dtype": "float32"})";

TEST(ReaderMutationTest, ConfigJson) {
  EXPECT_GT(run_cases("config.json", kTinyConfig, 0, 1,
                      [](const std::string& text) {
                        return frontend::parse_hparams(text, "config.json").status();
                      }),
            kCasesPerSeed / 4);
}

// The families with their own config keys: SmolLM3 (no_rope_layers), EXAONE 3.5 (num_layers,
// layer_norm_epsilon, activation_function), EXAONE 4.0 (sliding_window_pattern, layer_types),
// Cohere2 (layer_norm_eps, logit_scale, sliding_window_pattern, attention_bias) and HyperCLOVAX
// (the four μP multipliers, use_post_norm, mlp_bias).
TEST(ReaderMutationTest, ConfigJsonNewFamilies) {
  const char* const seeds[] = {
      R"({"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "vocab_size": 64,
          "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 4,
          "num_attention_heads": 2, "num_key_value_heads": 1, "no_rope_layers": [1, 1, 1, 0],
          "no_rope_layer_interval": 4, "use_sliding_window": true, "sliding_window": 8,
          "layer_types": ["full_attention", "full_attention", "full_attention",
                          "sliding_attention"]})",
      R"({"architectures": ["ExaoneForCausalLM"], "model_type": "exaone", "vocab_size": 64,
          "hidden_size": 16, "num_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 1, "layer_norm_epsilon": 1e-5,
          "activation_function": "silu", "rope_scaling": {"rope_type": "llama3",
          "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}})",
      R"({"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "vocab_size": 64,
          "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 4,
          "num_attention_heads": 2, "num_key_value_heads": 1, "sliding_window": 8,
          "sliding_window_pattern": "LLLG"})",
      R"({"architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "vocab_size": 64,
          "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 4,
          "num_attention_heads": 2, "num_key_value_heads": 1, "layer_norm_eps": 1e-5,
          "logit_scale": 0.25, "sliding_window": 8, "sliding_window_pattern": 4,
          "attention_bias": true, "tie_word_embeddings": true})",
      R"({"architectures": ["HyperCLOVAXForCausalLM"], "model_type": "hyperclovax",
          "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "embedding_multiplier": 12.0,
          "attention_multiplier": 0.0625, "residual_multiplier": 0.22, "logits_scaling": 0.125,
          "use_post_norm": true, "mlp_bias": true})",
  };
  uint64_t rng = 21;
  for (const char* seed : seeds) {
    EXPECT_GT(run_cases("config.json", seed, 0, rng++,
                        [](const std::string& text) {
                          return frontend::parse_hparams(text, "config.json").status();
                        }),
              kCasesPerSeed / 4);
  }
}

TEST(ReaderMutationTest, PrequantConfig) {
  const std::string seed = R"({"architectures": ["LlamaForCausalLM"], "quantization_config": {
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4,
      "type": "int", "symmetric": false, "strategy": "group", "group_size": 128,
      "actorder": "group"}}},
    "ignore": ["lm_head", "re:.*vision.*"], "kv_cache_scheme": {"num_bits": 8, "type": "int"}}})";
  EXPECT_GT(run_cases("quantization_config", seed, 0, 11,
                      [](const std::string& text) {
                        return frontend::parse_prequant_config(text, "config.json").status();
                      }),
            kCasesPerSeed / 4);
  // GPTQModel `dynamic` rules (regex keys with -: / +: prefixes; ModelCloud's published
  // TinyLlama-1.1B-Chat-v1.0-GPTQ-4bits-dynamic-cfg quantize_config.json).
  const std::string dynamic = R"({"architectures": ["LlamaForCausalLM"], "quantization_config": {
    "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true, "sym": true,
    "checkpoint_format": "gptq", "dynamic": {
      "-:model\\.layers\\.([2-9]\\d*|[1-9]\\d+)\\..*": {},
      ".*\\.1\\..*": {"bits": 8, "group_size": 32, "desc_act": false}}}})";
  EXPECT_GT(run_cases("quantization_config.dynamic", dynamic, 0, 13,
                      [](const std::string& text) {
                        return frontend::parse_prequant_config(text, "config.json").status();
                      }),
            kCasesPerSeed / 4);
}

TEST(ReaderMutationTest, PrequantTensors) {
  // A 1-layer GPTQ v1 model with act order, packed by the test packer; the mutations hit its
  // safetensors file (header and packed words).
  frontend::RandomModelOptions o;
  o.output_dir = temp_dir() / "prequant";
  o.overrides.num_hidden_layers = 1;
  o.overrides.hidden_size = 32;
  o.overrides.intermediate_size = 64;
  o.overrides.vocab_size = 64;
  o.overrides.num_attention_heads = 2;
  o.overrides.num_key_value_heads = 1;
  o.overrides.head_dim = 16;
  QBC_ASSERT_OK(frontend::write_random_model(o));
  const testing::TestPackScheme scheme{testing::TestPackFormat::kGptqV1, 4, 16, false, true};
  testing::test_pack_model(o.output_dir, scheme, testing::test_quantization_config(scheme));
  const fs::path file = o.output_dir / "model.safetensors";
  const std::string bytes = read_file(file);
  run_cases("pre-quantized safetensors", bytes, 0, 12, [&](const std::string& b) {
    write_file(file, b);
    auto src = frontend::ModelSource::open(o.output_dir);
    if (!src.ok()) return src.status();
    for (const frontend::PackedTensorRef& ref : src->packed_linears()) {
      auto p = src->read_packed(ref.module + ".weight");
      if (!p.ok()) return p.status();
      (void)frontend::dequantize(*p);
    }
    return ok_status();
  });
}

TEST(ReaderMutationTest, Safetensors) {
  // Two F32 tensors and metadata, written by hand (the format is the contract).
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[16,24]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header + std::string(24, '\x3f');
  const fs::path path = temp_dir() / "m.safetensors";
  run_cases("safetensors", file, header.size() + 8, 2, [&](const std::string& bytes) {
    write_file(path, bytes);
    auto f = frontend::SafetensorsFile::open(path);
    if (!f.ok()) return f.status();
    for (const auto& t : f->tensors()) {
      std::vector<float> v;
      QBC_RETURN_IF_ERROR(frontend::read_f32(t, &v));
    }
    return ok_status();
  });
}

TEST(ReaderMutationTest, Gguf) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  const std::string bytes = read_file(gguf);
  auto parsed = frontend::GgufFile::open(gguf);
  QBC_ASSERT_OK(parsed);
  const fs::path path = temp_dir() / "m.gguf";
  // Edits in the metadata and tensor table, where the counts and sizes are.
  run_cases("gguf", bytes, parsed->data_offset(), 3, [&](const std::string& b) {
    write_file(path, b);
    auto f = frontend::GgufFile::open(path);
    if (!f.ok()) return f.status();
    QBC_RETURN_IF_ERROR(frontend::tokenizer_from_gguf(*f).status());
    return frontend::ModelSource::open(path).status();
  });
}

// One tensor of every quantized ggml type qbc decodes (random block bytes), mutated anywhere:
// the tensor table's types, dims and offsets and the block bytes. Every tensor that opens must
// decode or be refused, never read past its bytes (the ASan run checks that).
TEST(ReaderMutationTest, GgufQuantizedTensors) {
  testing::GgufWriter w;
  w.str("general.architecture", "llama");
  std::mt19937 rng(5);
  for (uint32_t id = 0; id < 64; ++id) {
    const frontend::GgmlTypeTraits* t = frontend::ggml_type_traits(id);
    if (t == nullptr || !t->decodable) continue;
    std::string bytes(2 * t->type_size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    w.tensor(std::string(t->name) + ".weight", {2, t->block_size}, t->type, bytes);
  }
  const fs::path path = temp_dir() / "types.gguf";
  EXPECT_GT(run_cases("gguf types", w.build(), 0, 6,
                      [&](const std::string& b) {
                        write_file(path, b);
                        auto f = frontend::GgufFile::open(path);
                        if (!f.ok()) return f.status();
                        std::vector<float> v;
                        for (const frontend::GgufTensor& t : f->tensors()) {
                          QBC_RETURN_IF_ERROR(f->read_f32(t, &v));
                        }
                        return ok_status();
                      }),
            0);
}

TEST(ReaderMutationTest, TokenizerJson) {
  QBC_REQUIRE_SHARED(tok, "models/stories260k/hf/tokenizer.json");
  const std::string text = read_file(tok);
  const fs::path path = temp_dir() / "tokenizer.json";
  run_cases("tokenizer.json", text, 0, 4, [&](const std::string& t) {
    write_file(path, t);
    auto k = tokenizer::Tokenizer::from_hf_json(path);
    if (!k.ok()) return k.status();
    (void)k->decode(k->encode("Once upon a time", true));
    return ok_status();
  });
}

TEST(ReaderMutationTest, VocabJson) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  auto g = frontend::tokenizer_from_gguf(gguf);
  QBC_ASSERT_OK(g);
  // The asset a GGUF-compiled MXQ carries, read from memory as the runtime does.
  EXPECT_GT(run_cases("qbc_vocab.json", g->to_vocab_json(), 0, 4,
                      [&](const std::string& t) {
                        auto k = tokenizer::Tokenizer::from_vocab_json(t, "qbc_vocab.json");
                        if (!k.ok()) return k.status();
                        (void)k->decode(k->encode("Once upon a time", true));
                        return ok_status();
                      }),
            0);
}

TEST(ReaderMutationTest, ChatTemplate) {
  const std::string chatml =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
      "{{ (messages | length) * 2 // 3 }}{{ messages[1:][-1].content.strip() | tojson }}";
  tokenizer::ChatContext ctx;
  ctx.messages = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
  EXPECT_GT(run_cases("chat_template", chatml, 0, 3,
                      [&](const std::string& t) {
                        auto c = tokenizer::ChatTemplate::parse(t, "chat_template.jinja");
                        if (!c.ok()) return c.status();
                        return c->render(ctx).status();
                      }),
            0);
}

Status resolve_file(const fs::path& path) {
  config::LoadRequest r;
  r.files.push_back(path.string());
  return config::resolve(r).status();
}

TEST(ReaderMutationTest, CompileConfigYaml) {
  const std::string text = read_file(testing::source_dir() / "configs/examples/w4v8.yaml");
  const fs::path path = temp_dir() / "c.yaml";
  run_cases("compile config (YAML)", text, 0, 5, [&](const std::string& t) {
    write_file(path, t);
    return resolve_file(path);
  });
}

TEST(ReaderMutationTest, CompileConfigJson) {
  const std::string text = config::to_json(config::defaults());
  const fs::path path = temp_dir() / "c.json";
  run_cases("compile config (JSON)", text, 0, 6, [&](const std::string& t) {
    write_file(path, t);
    return resolve_file(path);
  });
}

TEST(ReaderMutationTest, Mblt) {
  auto hp = frontend::parse_hparams(kTinyConfig, "config.json");
  QBC_ASSERT_OK(hp);
  frontend::ImportOptions options;
  options.max_cache_length = 64;
  auto g = frontend::build_decoder_graph(*hp, options);
  QBC_ASSERT_OK(g);
  const std::string bytes = ir::to_proto_bytes(*g);
  run_cases("mblt", bytes, 0, 7,
            [](const std::string& b) { return ir::from_proto_bytes(b, "m.mblt").status(); });
}

TEST(ReaderMutationTest, Npy) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  std::string file = calib::npy_header_bytes("<f4", false, {2, 3}, 1);
  file.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  const fs::path path = temp_dir() / "s.npy";
  run_cases("npy", file, 128, 8, [&](const std::string& b) {
    write_file(path, b);
    std::vector<float> v;
    std::vector<int64_t> shape;
    return calib::read_npy(path, &v, &shape);
  });
}

}  // namespace
}  // namespace qbc
