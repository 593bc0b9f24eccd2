// The language model of a Qwen2.5-VL and of a Qwen3-VL through the whole compile (M-RoPE:
// rope_table over the host's per-token rope tables, docs/multimodal.md; Qwen3-VL's tables take
// the streams interleaved): random checkpoints written from the real Qwen2.5-VL-3B and
// Qwen3-VL-4B configs, `llm_fast` with random calibration, written to an MXQ and run from the
// file alone. Their logits equal the fake-quant evaluator's bit for bit, on a text prompt
// (three equal position streams) and on a prompt with an image span (3-stream positions from
// runner::mrope_positions), prefill and decode; and so do other core counts and chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/compile.h"
#include "qbc/driver/model_loader.h"
#include "qbc/frontend/random_model.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/isa/text.h"
#include "qbc/isa/text_parser.h"
#include "qbc/mxq/bundle_codec.h"
#include "qbc/mxq/container.h"
#include "qbc/quant/fakequant.h"
#include "qbc/runner/mrope.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/npu_session.h"
#include "test_support.h"
#include "unit/mxq/mutate.h"
#include "unit/npu/deployment_options.h"
#include "unit/npu/executor_logits.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::temp_dir;

using testing::bitwise_equal;
using testing::first_difference;

/// A family under test: its real config and how the random one is shrunk.
struct Family {
  const char* name;
  const char* config;              ///< under the shared assets
  double theta;                    ///< the config's rope_theta
  std::array<int64_t, 3> section;  ///< mrope_section after the shrink to head_dim 16
  bool interleaved;
};

const Family kFamilies[] = {
    {"qwen2_5_vl", "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json", 1e6, {2, 3, 3}, false},
    {"qwen3_vl", "model-configs-new/Qwen3-VL-4B-Instruct/config.json", 5e6, {3, 2, 3}, true},
};

/// One compile of a random VLM's language model, shared by a family's tests.
struct Compiled {
  fs::path dir, mxq, mblt;
  config::ResolvedConfig cfg;
  driver::LoadedModel model;  // the quantized MBLT
  int32_t image_token = -1, vision_start = -1, vision_end = -1;
};

StatusOr<Compiled> compile_once(const Family& f) {
  Compiled c;
  c.dir = temp_dir() / (std::string("backend_mrope_") + f.name);
  fs::remove_all(c.dir);
  frontend::RandomModelOptions o;
  o.config_path = testing::shared_dir() / f.config;
  o.output_dir = c.dir / "model";
  o.seed = 5;
  o.init_std = 0.15;  // attention, and so the positions, matter
  o.overrides.num_hidden_layers = 2;
  o.overrides.hidden_size = 64;
  o.overrides.intermediate_size = 96;
  o.overrides.num_attention_heads = 4;
  o.overrides.head_dim = 16;  // [16,24,24] -> [2,3,3]; Qwen3-VL's [24,20,20] -> [3,2,3]
  o.overrides.num_key_value_heads = 2;
  o.overrides.vocab_size = 256;
  o.overrides.vision.depth = 1;
  o.overrides.vision.hidden_size = 16;
  o.overrides.vision.num_heads = 1;
  o.overrides.vision.intermediate_size = 16;
  o.overrides.vision.out_hidden_size = 64;
  if (!f.interleaved) o.overrides.vision.fullatt_block_indexes = std::vector<int64_t>{0};
  QBC_RETURN_IF_ERROR(frontend::write_random_model(o));
  const auto js = nlohmann::json::parse(testing::read_file(o.output_dir / "config.json"));
  c.image_token = js.at("image_token_id").get<int32_t>();
  c.vision_start = js.at("vision_start_token_id").get<int32_t>();
  c.vision_end = js.at("vision_end_token_id").get<int32_t>();

  config::LoadRequest req;
  req.preset = "llm_fast";
  req.sets = {"useRandomCalib=true", "llm.attributes.maxSequenceLength=64",
              "llm.attributes.maxCacheLength=64", "calibration.numSamples=2",
              "calibration.seqLength=32"};
  QBC_ASSIGN_OR_RETURN(c.cfg, config::resolve(req));
  driver::CompileRequest r;
  r.model = o.output_dir.string();
  c.mxq = c.dir / "m.mxq";
  r.output = c.mxq.string();
  r.keep_intermediate = (c.dir / "kept").string();
  QBC_ASSIGN_OR_RETURN(const driver::CompileResult res, driver::run_compile(r, c.cfg));
  if (!res.mblt_kept) return internal_error("the quantized MBLT was not kept");
  for (const auto& e : fs::directory_iterator(c.dir / "kept")) {
    if (e.path().extension() == ".mblt") c.mblt = e.path();
  }
  if (c.mblt.empty()) return internal_error("no MBLT in ", (c.dir / "kept").string());
  QBC_ASSIGN_OR_RETURN(c.model, driver::open_model(c.mblt.string(), c.cfg));
  return c;
}

class BackendMrope : public ::testing::TestWithParam<Family> {
 protected:
  static void TearDownTestSuite() {
    for (auto& [name, c] : compiled_) delete c;
    compiled_.clear();
    for (auto& [name, e] : errors_) delete e;
    errors_.clear();
  }
  void SetUp() override {
    const Family& f = GetParam();
    QBC_REQUIRE_SHARED(config, f.config);
    if (compiled_.count(f.name) == 0 && errors_.count(f.name) == 0) {
      auto c = compile_once(f);
      if (c.ok())
        compiled_[f.name] = new Compiled(std::move(*c));
      else
        errors_[f.name] = new std::string(c.status().to_string());
    }
    ASSERT_EQ(errors_.count(f.name), 0u) << *errors_[f.name];
    ASSERT_EQ(compiled_.count(f.name), 1u);
    compiled = compiled_[f.name];
  }

  Compiled* compiled = nullptr;
  const Compiled& c() const { return *compiled; }

  std::unique_ptr<quant::FakeQuantSession> fake_quant() const {
    const driver::LoadedModel* m = &c().model;
    const ir::WeightReader reader = [m](const ir::Weight& w, std::vector<float>* out) {
      return driver::read_weight(*m, w, out);
    };
    auto s = quant::FakeQuantSession::create(m->graph, reader);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(*s) : nullptr;
  }

  /// text(3) <vision_start> image 3 x 4 <vision_end> text(3): 20 tokens, and their 3-stream
  /// positions (runner::mrope_positions, HF's get_rope_index).
  std::vector<int32_t> image_prompt(runner::MRopePositions* pos) const {
    std::vector<int32_t> t = {17, 42, 99, c().vision_start};
    for (int i = 0; i < 12; ++i) t.push_back(c().image_token);
    t.insert(t.end(), {c().vision_end, 7, 120, 31});
    auto p = runner::mrope_positions(t, c().image_token, {runner::LlmGrid{1, 3, 4}});
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (p.ok()) *pos = *p;
    return t;
  }

  /// The embeddings of `tokens` with deterministic pseudo-features at the image placeholders
  /// (the host splice).
  std::vector<float> embeds(runner::Runner& r, const std::vector<int32_t>& tokens) const {
    std::vector<float> x;
    EXPECT_TRUE(r.embed(tokens, &x).ok());
    const int64_t h = r.hidden_size();
    uint32_t s = 777;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] != c().image_token) continue;
      for (int64_t j = 0; j < h; ++j) {
        s = s * 1664525u + 1013904223u;
        x[i * h + j] = static_cast<float>(static_cast<int32_t>(s >> 9) % 2001 - 1000) / 1000.0f;
      }
    }
    return x;
  }

  static std::map<std::string, Compiled*> compiled_;
  static std::map<std::string, std::string*> errors_;
};

std::map<std::string, Compiled*> BackendMrope::compiled_;
std::map<std::string, std::string*> BackendMrope::errors_;

// The file records that its programs take rope tables and how to compute them: the graph's
// mrope.* metadata, required feature bit 3, two io buffers of one chunk of head_dim/2 fp16.
TEST_P(BackendMrope, TheMxqRecordsTheRopeTableInputs) {
  auto m = runtime::load_model(c().mxq.string());
  QBC_ASSERT_OK(m);
  const isa::Bundle& b = *m->file.bundle;
  const isa::RopeInputs& ri = b.rope_inputs;
  ASSERT_TRUE(ri.present());
  const Family& f = GetParam();
  EXPECT_EQ(ri.head_dim, 16);
  EXPECT_EQ(ri.theta, f.theta);
  EXPECT_EQ(ri.section[0], f.section[0]);
  EXPECT_EQ(ri.section[1], f.section[1]);
  EXPECT_EQ(ri.section[2], f.section[2]);
  EXPECT_EQ(ri.interleaved, f.interleaved);
  for (int32_t id : {ri.cos, ri.sin}) {
    const isa::Buffer& buf = b.buffers[static_cast<size_t>(id)];
    EXPECT_EQ(buf.purpose, isa::Purpose::kIo) << buf.name;
    EXPECT_EQ(buf.dtype, isa::DType::kF16) << buf.name;
    EXPECT_EQ(buf.shape, (std::vector<int64_t>{b.chunk, 8})) << buf.name;
  }
  EXPECT_EQ(b.buffers[static_cast<size_t>(ri.cos)].name, "io.rope_cos");
  EXPECT_EQ(b.buffers[static_cast<size_t>(ri.sin)].name, "io.rope_sin");
  const std::string head = testing::read_file(c().mxq);
  ASSERT_GE(head.size(), 32u);
  uint64_t required = 0;
  std::memcpy(&required, head.data() + 24, sizeof(required));
  EXPECT_NE(required & mxq::kFeatureRopeInputs, 0u);
  EXPECT_EQ((required & mxq::kFeatureInterleavedMRope) != 0, f.interleaved);
  if (f.interleaved) {  // interleaved inputs without bit 7: refused, naming the bit
    std::string bytes = head;
    const uint64_t cleared = required & ~mxq::kFeatureInterleavedMRope;
    std::memcpy(bytes.data() + 24, &cleared, sizeof cleared);
    testing::reseal(bytes, false);
    const fs::path bad = c().dir / "no_bit7.mxq";
    testing::write_file(bad, bytes);
    auto refused = runtime::load_model(bad.string());
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), Code::kDataLoss);
    EXPECT_NE(refused.status().message().find("interleaved but required feature bit 7 is not set"),
              std::string::npos)
        << refused.status().to_string();
  }
  // The program text shows the interleaving and parses back to it.
  const std::string text = isa::print_bundle(b);
  EXPECT_EQ(text.find("] interleaved\n") != std::string::npos, f.interleaved);
  auto parsed = isa::parse_bundle(text);
  QBC_ASSERT_OK(parsed);
  EXPECT_EQ(parsed->rope_inputs.interleaved, f.interleaved);
  // Every program rotates q and k with rope_table and nothing with the position-table rope.
  int tables = 0, ropes = 0;
  for (const isa::CoreProgram& cp : b.modes.front().prefill.cores) {
    for (const isa::Instr& in : cp.code) {
      tables += std::holds_alternative<isa::RopeTable>(in.op);
      ropes += std::holds_alternative<isa::Rope>(in.op);
    }
  }
  EXPECT_EQ(tables, 4);  // q and k of two layers
  EXPECT_EQ(ropes, 0);
}

// Qwen3-VL's DeepStack inputs (one tower block here: the taps [5, 11, 17] of 24 scale to [0],
// one level, added after decoder layer 0): the file records their io buffers, fp16 [chunk,
// hidden], requires feature bit 10 (a file without it is refused, naming the bit), the program
// text shows and parses them back, the layout codec refuses a DeepStack buffer that is not an
// io buffer, and the programs read them. Qwen2.5-VL has none.
TEST_P(BackendMrope, TheMxqRecordsTheDeepStackInputs) {
  auto m = runtime::load_model(c().mxq.string());
  QBC_ASSERT_OK(m);
  const isa::Bundle& b = *m->file.bundle;
  const Family& f = GetParam();
  const std::string head = testing::read_file(c().mxq);
  uint64_t required = 0;
  std::memcpy(&required, head.data() + 24, sizeof(required));
  if (!f.interleaved) {
    EXPECT_TRUE(b.deepstack.empty());
    EXPECT_EQ(required & mxq::kFeatureDeepStack, 0u);
    return;
  }
  ASSERT_EQ(b.deepstack.size(), 1u);
  const isa::Buffer& buf = b.buffers[static_cast<size_t>(b.deepstack[0])];
  EXPECT_EQ(buf.name, "io.deepstack.0");
  EXPECT_EQ(buf.purpose, isa::Purpose::kIo);
  EXPECT_EQ(buf.dtype, isa::DType::kF16);
  EXPECT_EQ(buf.shape, (std::vector<int64_t>{b.chunk, 64}));
  EXPECT_NE(required & mxq::kFeatureDeepStack, 0u);
  std::string bytes = head;
  const uint64_t cleared = required & ~mxq::kFeatureDeepStack;
  std::memcpy(bytes.data() + 24, &cleared, sizeof cleared);
  testing::reseal(bytes, false);
  const fs::path bad = c().dir / "no_bit10.mxq";
  testing::write_file(bad, bytes);
  auto refused = runtime::load_model(bad.string());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kDataLoss);
  EXPECT_NE(refused.status().message().find("DeepStack inputs but required feature bit 10"),
            std::string::npos)
      << refused.status().to_string();
  const std::string text = isa::print_bundle(b);
  EXPECT_NE(text.find("\ndeepstack %io.deepstack.0\n"), std::string::npos);
  auto parsed = isa::parse_bundle(text);
  QBC_ASSERT_OK(parsed);
  EXPECT_EQ(parsed->deepstack, b.deepstack);
  mxq::pb::Layout layout = mxq::encode_layout(b);
  ASSERT_EQ(layout.deepstack_size(), 1);
  layout.set_deepstack(0, 0);  // buffer 0: weights, not io
  isa::Bundle back;
  const Status s = mxq::decode_layout(layout, "layout", &back);
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find("deepstack buffer 0"), std::string::npos) << s.to_string();
  // Every program reads the buffer (the add after decoder layer 0).
  for (const isa::Mode& mode : b.modes) {
    for (const isa::Program* p : mode.programs()) {
      bool reads = false;
      for (const isa::CoreProgram& cp : p->cores)
        for (const isa::Instr& in : cp.code)
          for (const isa::Access& a : isa::accesses(in, b))
            reads = reads || (!a.write && a.ref.buffer == b.deepstack[0]);
      EXPECT_TRUE(reads) << isa::scheme_name(mode.scheme) << " " << isa::phase_name(p->phase);
    }
  }
}

// The reader checks the layout's rope inputs: a field set wrong is data loss naming
// rope_inputs; the unchanged layout decodes to the same spec.
TEST_P(BackendMrope, BadRopeInputsInTheLayoutAreRefused) {
  auto m = runtime::load_model(c().mxq.string());
  QBC_ASSERT_OK(m);
  const mxq::pb::Layout good = mxq::encode_layout(*m->file.bundle);
  ASSERT_TRUE(good.has_rope_inputs());
  isa::Bundle back;
  QBC_ASSERT_OK(mxq::decode_layout(good, "layout", &back));
  EXPECT_EQ(back.rope_inputs.cos, m->file.bundle->rope_inputs.cos);
  EXPECT_EQ(back.rope_inputs.section[2], GetParam().section[2]);
  EXPECT_EQ(back.rope_inputs.interleaved, GetParam().interleaved);
  const auto edits = std::vector<std::function<void(mxq::pb::RopeInputs*)>>{
      [](mxq::pb::RopeInputs* r) { r->set_cos(0); },  // buffer 0: weights, not io
      [](mxq::pb::RopeInputs* r) { r->set_sin(r->cos()); },
      [](mxq::pb::RopeInputs* r) { r->set_head_dim(15); },
      [](mxq::pb::RopeInputs* r) { r->set_theta(-1.0); },
      [](mxq::pb::RopeInputs* r) { r->set_section(2, 4); },  // sums to 9, not 8
      [](mxq::pb::RopeInputs* r) { r->mutable_section()->RemoveLast(); },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    mxq::pb::Layout bad = good;
    edits[i](bad.mutable_rope_inputs());
    isa::Bundle b;
    const Status s = mxq::decode_layout(bad, "layout", &b);
    EXPECT_EQ(s.code(), Code::kDataLoss) << "edit " << i << ": " << s.to_string();
    EXPECT_NE(s.message().find("rope_inputs"), std::string::npos) << s.to_string();
  }
}

// The MXQ run from the file: a text prompt (three equal streams), prefill then decode steps,
// bit for bit the fake-quant evaluator's logits.
TEST_P(BackendMrope, TextPromptEqualsFakeQuantBitForBit) {
  auto m = runtime::load_model(c().mxq.string());
  QBC_ASSERT_OK(m);
  auto npu = runtime::NpuSession::create(m->device, 0);
  QBC_ASSERT_OK(npu);
  auto fq = fake_quant();
  ASSERT_NE(fq, nullptr);
  const std::vector<int32_t> prompt = {3, 200, 45, 61, 7, 7, 250, 18, 90, 33, 12};
  std::vector<float> want, got;
  QBC_ASSERT_OK(fq->forward(prompt, &want));
  QBC_ASSERT_OK((*npu)->forward(prompt, &got));
  EXPECT_TRUE(bitwise_equal(got, want)) << "first difference at " << first_difference(got, want);
  for (int32_t t : {5, 140, 77}) {
    QBC_ASSERT_OK(fq->forward({t}, &want));
    QBC_ASSERT_OK((*npu)->forward({t}, &got));
    EXPECT_TRUE(bitwise_equal(got, want)) << "decode of " << t;
  }
}

// A prompt with an image span: 3-stream positions given to both, then decode steps that
// continue after the largest position (HF's rope_deltas). The same embeddings at text positions
// give other logits, so the positions reach the programs.
TEST_P(BackendMrope, ImagePositionsEqualFakeQuantBitForBit) {
  auto m = runtime::load_model(c().mxq.string());
  QBC_ASSERT_OK(m);
  auto npu = runtime::NpuSession::create(m->device, 0);
  QBC_ASSERT_OK(npu);
  auto fq = fake_quant();
  ASSERT_NE(fq, nullptr);
  runner::MRopePositions pos;
  const std::vector<int32_t> prompt = image_prompt(&pos);
  ASSERT_EQ(pos.positions.size(), 3 * prompt.size());
  EXPECT_EQ(pos.delta, -8);  // 12 image tokens take max(3, 4) = 4 positions
  const std::vector<float> x = embeds(*fq, prompt);
  const auto n = static_cast<int64_t>(prompt.size());
  std::vector<float> want, got;
  QBC_ASSERT_OK(fq->forward_embeds_mrope(x, n, pos.positions, &want));
  QBC_ASSERT_OK((*npu)->forward_embeds_mrope(x, n, pos.positions, &got));
  EXPECT_TRUE(bitwise_equal(got, want)) << "first difference at " << first_difference(got, want);
  for (int32_t t : {9, 201}) {
    QBC_ASSERT_OK(fq->forward({t}, &want));
    QBC_ASSERT_OK((*npu)->forward({t}, &got));
    EXPECT_TRUE(bitwise_equal(got, want)) << "decode of " << t;
  }
  std::vector<float> mrope_logits, text_logits;
  (*npu)->reset();
  QBC_ASSERT_OK((*npu)->forward_embeds_mrope(x, n, pos.positions, &mrope_logits));
  (*npu)->reset();
  QBC_ASSERT_OK((*npu)->forward_embeds(x, n, &text_logits));
  EXPECT_FALSE(bitwise_equal(mrope_logits, text_logits));
  // Wrong shapes are refused, naming what is wrong.
  const Status bad = (*npu)->forward_embeds_mrope(x, n, {1, 2, 3}, &got);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("M-RoPE positions"), std::string::npos) << bad.to_string();
}

// Tile invariance: other core counts, schemes, targets and chunks give the same logits for
// the image prompt, prefill and token by token (the tables are per token of each chunk).
TEST_P(BackendMrope, CoresAndChunksGiveTheSameLogits) {
  auto fq = fake_quant();
  ASSERT_NE(fq, nullptr);
  runner::MRopePositions pos;
  const std::vector<int32_t> prompt = image_prompt(&pos);
  const std::vector<float> x = embeds(*fq, prompt);
  const auto n = static_cast<int64_t>(prompt.size());
  std::vector<float> want;
  QBC_ASSERT_OK(fq->forward_embeds_mrope(x, n, pos.positions, &want));
  struct Deployment {
    const char* target;
    int cores;
    int64_t chunk;
  };
  for (const Deployment& d : {Deployment{"aries-rb", 1, 128}, Deployment{"aries-rb", 8, 7},
                              Deployment{"aries-rb", 4, 1}, Deployment{"test-2core", 2, 5}}) {
    auto o = testing::deployment_options(c().model.graph, d.target, d.cores, d.chunk);
    QBC_ASSERT_OK(o);
    auto b = driver::compile_backend(c().model, *o);
    QBC_ASSERT_OK(b);
    auto bundle = std::make_shared<const isa::Bundle>(std::move(*b));
    runtime::DeviceOptions dopt;
    dopt.scheme = bundle->modes.front().scheme;
    auto dev = runtime::Device::create(bundle, dopt);
    QBC_ASSERT_OK(dev);
    auto s = runtime::NpuSession::create(*dev, 0);
    QBC_ASSERT_OK(s);
    std::vector<float> got;
    QBC_ASSERT_OK((*s)->forward_embeds_mrope(x, n, pos.positions, &got));
    EXPECT_TRUE(bitwise_equal(got, want))
        << d.target << ", " << d.cores << " cores, chunk " << d.chunk << ": first difference at "
        << first_difference(got, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, BackendMrope, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<Family>& i) { return i.param.name; });

}  // namespace
}  // namespace qbc
