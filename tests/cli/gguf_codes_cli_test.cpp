// GGUF codes kept (issue 25): a random Llama written by the tests' converter with Q8_0
// attention, Q5_1 value, Q4_0 gate/up, Q5_0 down projections and a Q4_1 output (blocks packed by
// the tests' reference quantizer from ggml-common.h's layouts, tests/unit/frontend/
// ggml_ref_quantizer.h) compiles to MXQ, and the quantized MBLT's integer weights are the
// file's codes and fp16 block scales: Q8_0 and Q5_0 as W8, Q4_0 as W4, groups of 32. A block
// with a negative scale d (ggml's Q4_0 and Q5_0 divide by the signed value of largest
// magnitude) is held as scale -d, code -q - 1 and zero point -1 (src/frontend/gguf_codes.h):
// the test checks that convention and, independently of it, that (code - zero) * scale is
// ggml's value of every weight bit for bit. The Q4_1 output and the Q5_1 values keep their
// codes too, as W4 (W8) codes u - 8 (u - 16) with zero point -8 (-16) and the block's fp16
// minimum as a float offset (docs/numerics.md "Float offsets"): (code - zero) * scale + offset
// is ggml's value. The MXQ's weight image is
// read back too (tests/support/mxq_weight_image.h): it holds the same codes, scales, zero
// points and offsets, and its header sets required feature bit 9.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "mxq_weight_image.h"
#include "prequant_packer.h"
#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/mxq/model_file.h"
#include "qbc/quant/fakequant.h"
#include "test_support.h"
#include "unit/frontend/gguf_convert.h"
#include "unit/mxq/mutate.h"
#include "unit/npu/executor_logits.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using frontend::GgmlType;
using ::qbc::testing::Block32;
using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;

GgmlType type_plan(const std::string& gguf_name) {
  auto has = [&](const char* s) { return gguf_name.find(s) != std::string::npos; };
  if (has("norm")) return GgmlType::kF32;
  if (gguf_name == "output.weight") return GgmlType::kQ4_1;
  if (has("ffn_gate") || has("ffn_up")) return GgmlType::kQ4_0;
  if (has("ffn_down")) return GgmlType::kQ5_0;
  if (has("attn_v")) return GgmlType::kQ5_1;
  return GgmlType::kQ8_0;  // attention and the token embedding
}

std::vector<int32_t> ints_of(const frontend::SafetensorsTensor* t) {
  std::vector<int32_t> out;
  if (t == nullptr) return out;
  for (size_t i = 0; i < t->data.size; ++i) out.push_back(static_cast<int8_t>(t->data.data[i]));
  return out;
}

// The MXQ in `dir` on the executor against the fake-quant evaluator of its quantized MBLT, bit
// for bit, all at once and token by token: both apply the offsets' term as docs/numerics.md
// "Float offsets" writes it.
void expect_executor_equals_evaluator(const fs::path& dir, const mxq::LoadedModel& mxq_file) {
  config::LoadRequest req;
  req.preset = "llm_fast";
  auto cfg = config::resolve(req);
  QBC_ASSERT_OK(cfg);
  auto qm = driver::open_model((dir / "q.mblt").string(), *cfg);
  QBC_ASSERT_OK(qm);
  const driver::LoadedModel* lm = &*qm;
  const ir::WeightReader reader = [lm](const ir::Weight& w, std::vector<float>* v) {
    return driver::read_weight(*lm, w, v);
  };
  auto fq = quant::FakeQuantSession::create(lm->graph, reader);
  QBC_ASSERT_OK(fq);
  const std::vector<int32_t> ids = testing::lcg_ids(512, 40, 17);
  std::vector<float> want;
  QBC_ASSERT_OK((*fq)->forward(ids, &want));
  for (bool stepwise : {false, true}) {
    auto got = testing::executor_logits(mxq_file.bundle, ids, stepwise);
    QBC_ASSERT_OK(got);
    EXPECT_TRUE(testing::bitwise_equal(*got, want))
        << (stepwise ? "token by token" : "all at once") << ": first difference at "
        << testing::first_difference(*got, want) << " of " << want.size();
  }
}

struct Truth {
  GgmlType type;
  int64_t out = 0, in = 0;      // the HF weight's shape
  std::vector<Block32> blocks;  // row-major blocks of the HF weight [out, in]
  std::vector<float> values;    // ggml's dequantized values
};

TEST(GgufCodesCli, Q8Q5Q4AndQ41LinearsKeepTheirCodes) {
  QBC_REQUIRE_SHARED(stories, "models/stories260k/stories260K.gguf");
  QBC_REQUIRE_SHARED(eval_text, "data/tinystories/eval.clean.txt");
  const fs::path dir = temp_dir() / "gguf_codes";
  frontend::RandomModelOptions o = testing::small_llama_options(dir / "hf", 31, 96);
  o.init_std = 0.05;
  o.overrides.vocab_size = 512;  // stories260K's vocabulary, for the eval text
  QBC_ASSERT_OK(frontend::write_random_model(o));
  auto hf = frontend::ModelSource::open(o.output_dir);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  testing::GgufConvertOptions co;
  co.type_of = type_plan;
  co.tokenizer = testing::stories_tokenizer;
  const fs::path gguf = testing::convert_to_gguf(*hf, "llama", dir / "model.gguf", co);

  // The truth: the same quantizer on the HF weights (blocks lie within rows, so quantizing
  // before the converter's q/k row permutation gives the same blocks in HF row order).
  std::map<std::string, Truth> truth;
  for (const frontend::TensorInfo& t : hf->tensors()) {
    if ((t.name.rfind("model.layers.", 0) != 0 && t.name != "lm_head.weight") ||
        t.shape.size() != 2)
      continue;
    std::vector<float> v;
    QBC_ASSERT_OK(hf->read_f32(t.name, &v));
    Truth& tr = truth[t.name.substr(0, t.name.size() - 7)];
    tr.type = type_plan(testing::gguf_name(t.name, "llama"));
    tr.out = t.shape[0];
    tr.in = t.shape[1];
    tr.values = testing::ref_quantize_block32(tr.type, v, &tr.blocks).values;
  }
  ASSERT_EQ(truth.size(), 15u);  // 14 layer linears and the head

  const auto r = testing::run_small_compile(gguf, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json summary = testing::last_json_event(r.err, "summary");
  ASSERT_TRUE(summary.contains("result")) << r.err;
  std::printf("%s\n", summary.value("message", "").c_str());
  const nlohmann::json& iw = summary["result"]["imported_weights"];
  EXPECT_EQ(iw["imported"].get<int>(), 15) << iw.dump();
  EXPECT_EQ(iw["kept"].get<int>(), 15) << iw.dump();
  const std::string text = summary.dump();
  EXPECT_TRUE(contains(text, "Q8_0: 7 tensors: 6 with codes kept as W8")) << text;
  EXPECT_TRUE(contains(text, "Q5_1: 2 tensors with codes kept as W8")) << text;
  EXPECT_TRUE(contains(text, "Q4_0: 4 tensors with codes kept as W4")) << text;
  EXPECT_TRUE(contains(text, "Q5_0: 2 tensors with codes kept as W8")) << text;
  EXPECT_TRUE(contains(text, "Q4_1: 1 tensor with codes kept as W4")) << text;

  auto side = frontend::SafetensorsFile::open(dir / "q.weights.safetensors");
  ASSERT_TRUE(side.ok()) << side.status().message();
  auto mxq_file = mxq::load_model((dir / "q.mxq").string());
  ASSERT_TRUE(mxq_file.ok()) << mxq_file.status().message();
  int negative_blocks = 0;
  for (const auto& [module, t] : truth) {
    SCOPED_TRACE(module);
    const std::string node = module == "lm_head" ? "logits" : testing::linear_node_of(module);
    const std::vector<int32_t> codes = ints_of(side->find(node + ".wq"));
    std::vector<float> scales;
    ASSERT_NE(side->find(node + ".wscale"), nullptr);
    QBC_ASSERT_OK(frontend::read_f32(*side->find(node + ".wscale"), &scales));
    std::vector<int32_t> zeros = ints_of(side->find(node + ".wzero"));
    if (zeros.empty()) zeros.assign(scales.size(), 0);
    const bool q4_1 = t.type == GgmlType::kQ4_1, with_min = q4_1 || t.type == GgmlType::kQ5_1;
    std::vector<float> mins;
    ASSERT_EQ(side->find(node + ".wmin") != nullptr, with_min);
    if (with_min) QBC_ASSERT_OK(frontend::read_f32(*side->find(node + ".wmin"), &mins));
    ASSERT_EQ(codes.size(), t.values.size());
    ASSERT_EQ(scales.size(), t.blocks.size());
    ASSERT_EQ(zeros.size(), t.blocks.size());
    const int offset = t.type == GgmlType::kQ4_0 || q4_1 ? 8 : t.type == GgmlType::kQ8_0 ? 0 : 16;
    for (size_t b = 0; b < t.blocks.size(); ++b) {
      const float d = testing::half_value(t.blocks[b].d);
      negative_blocks += d < 0;
      ASSERT_NE(d, 0.0f);
      EXPECT_EQ(scales[b], std::fabs(d)) << "block " << b;
      if (with_min) {  // unsigned codes u: code u - 8 (16), zero point -8 (-16), offset m
        ASSERT_GT(d, 0.0f);
        EXPECT_EQ(zeros[b], -offset) << "block " << b;
        EXPECT_EQ(mins[b], testing::half_value(t.blocks[b].m)) << "block " << b;
      } else {
        EXPECT_EQ(zeros[b], d < 0 ? -1 : 0) << "block " << b;
      }
      for (int j = 0; j < 32; ++j) {
        const size_t k = b * 32 + static_cast<size_t>(j);
        const int32_t q = t.blocks[b].q[j] - offset;
        ASSERT_EQ(codes[k], d < 0 ? -q - 1 : q) << "weight " << k;
        const float w = static_cast<float>(codes[k] - zeros[b]) * scales[b];
        ASSERT_EQ(with_min ? w + mins[b] : w, t.values[k]) << k;
      }
    }
    // The MXQ's weight image holds the same codes, block scales and zero points: Q4_0 as W4,
    // Q8_0 and Q5_0 as W8, groups of 32.
    const bool has_zero = side->find(node + ".wzero") != nullptr;
    const testing::ImageLinear img =
        testing::read_linear(*mxq_file->bundle, node, t.out, t.in,
                             t.type == GgmlType::kQ4_0 || q4_1 ? 4 : 8, 32, has_zero, with_min);
    EXPECT_EQ(img.codes, codes);
    EXPECT_EQ(img.scales, scales);
    if (has_zero) {
      EXPECT_EQ(img.zeros, zeros);
    }
    if (with_min) {
      EXPECT_EQ(img.mins, mins);
    }
  }
  EXPECT_GT(negative_blocks, 0);  // the zero-point convention was exercised
  EXPECT_NE(mxq_file->containers.at(0).header().required_features & mxq::kFeatureWeightOffsets, 0u);
  {  // a file whose requants add offsets without bit 9 is refused, naming the bit (exit 2)
    std::ifstream in(dir / "q.mxq", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t required = 0;
    std::memcpy(&required, bytes.data() + 24, sizeof required);
    required &= ~mxq::kFeatureWeightOffsets;
    std::memcpy(bytes.data() + 24, &required, sizeof required);
    testing::reseal(bytes, false);
    auto cleared = mxq::load_model_bytes(bytes, "cleared.mxq");
    ASSERT_FALSE(cleared.ok());
    EXPECT_EQ(cleared.status().code(), Code::kDataLoss);
    EXPECT_TRUE(contains(cleared.status().message(), "bit 9 is not set"))
        << cleared.status().to_string();
  }

  expect_executor_equals_evaluator(dir, *mxq_file);

  // The MXQ against the GGUF's own float model (ggml's dequantized values): the weights are
  // those values exactly, so what is left is activation and KV quantization.
  const auto ev =
      run_qbc("eval " + shell_quote(dir / "q.mxq") + " --reference " + shell_quote(gguf) +
              " --text " + shell_quote(eval_text) + " --ctx 64 --chunks 8 --json");
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  const nlohmann::json acc = nlohmann::json::parse(ev.out);
  std::printf("MXQ vs the GGUF's float model: kld_mean %.6f, top1 %.4f\n",
              acc["kld_mean"].get<double>(), acc["top1"].get<double>());
  // Measured: kld_mean 0.0038, top-1 0.67 (8 chunks of 64 tokens, 2 calibration samples). The
  // random 64-wide model's distributions are nearly flat, so top-1 flips on near-ties; the
  // KLD is the figure that says the weights are right (a wrong block would move it by orders).
  EXPECT_LT(acc["kld_mean"].get<double>(), 0.02);
  EXPECT_GT(acc["top1"].get<double>(), 0.5);

  const auto mxq = run_qbc("inspect --json " + shell_quote(dir / "q.mxq"));
  ASSERT_EQ(mxq.exit_code, 0) << mxq.err;
  const nlohmann::json j = nlohmann::json::parse(mxq.out);
  EXPECT_EQ(j["provenance"]["weights"]["kept"].get<int>(), 15) << mxq.out;
  EXPECT_TRUE(contains(j["provenance"]["weights"]["config"].get<std::string>(), "gguf"));
}

// A Qwen2 GGUF whose linears are all Q4_1: the q/k/v projections carry a bias after the zero
// points and offsets (six operands), which must quantize, verify, compile and run bit-exactly.
TEST(GgufCodesCli, BiasedQ41LinearsCompileAndRunBitExact) {
  QBC_REQUIRE_SHARED(config, "model-configs/Qwen2.5-0.5B-Instruct/config.json");
  QBC_REQUIRE_SHARED(stories, "models/stories260k/stories260K.gguf");
  const fs::path dir = temp_dir() / "gguf_q41_bias";
  frontend::RandomModelOptions o = testing::small_llama_options(dir / "hf", 37, 96);
  o.config_path = config;
  o.init_std = 0.05;
  o.overrides.vocab_size = 512;  // stories260K's vocabulary, for the tokenizer
  QBC_ASSERT_OK(frontend::write_random_model(o));
  auto hf = frontend::ModelSource::open(o.output_dir);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  ASSERT_NE(hf->find("model.layers.0.self_attn.q_proj.bias"), nullptr);  // Qwen2: q/k/v biases
  testing::GgufConvertOptions co;
  co.type_of = [](const std::string& name) {
    return name.find("norm") != std::string::npos || name.find(".bias") != std::string::npos
               ? GgmlType::kF32
               : GgmlType::kQ4_1;
  };
  co.tokenizer = testing::stories_tokenizer;
  const fs::path gguf = testing::convert_to_gguf(*hf, "qwen2", dir / "model.gguf", co);
  const auto r = testing::run_small_compile(gguf, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json summary = testing::last_json_event(r.err, "summary");
  ASSERT_TRUE(summary.contains("result")) << r.err;
  const nlohmann::json& iw = summary["result"]["imported_weights"];
  EXPECT_EQ(iw["imported"].get<int>(), 14) << iw.dump();  // 2 layers x 7 (the head is tied)
  EXPECT_EQ(iw["kept"].get<int>(), 14) << iw.dump();
  auto side = frontend::SafetensorsFile::open(dir / "q.weights.safetensors");
  ASSERT_TRUE(side.ok()) << side.status().message();
  EXPECT_NE(side->find("blk.0.attn.q_proj.wmin"), nullptr);
  auto mxq_file = mxq::load_model((dir / "q.mxq").string());
  ASSERT_TRUE(mxq_file.ok()) << mxq_file.status().message();
  expect_executor_equals_evaluator(dir, *mxq_file);
}

}  // namespace
}  // namespace qbc
