// The backend's contract: the NPU executor's logits equal the fake-quant evaluator's bit for
// bit, for every family, quantization, scheme (cooperating cores), target and prefill chunk,
// prefill and token-by-token decode (docs/numerics.md, tile invariance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/mxq_output.h"
#include "qbc/driver/quantize.h"
#include "qbc/ir/verifier.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/isa/text.h"
#include "qbc/isa/text_parser.h"
#include "qbc/isa/verify.h"
#include "qbc/mxq/container.h"
#include "qbc/quant/fakequant.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/npu_session.h"
#include "test_support.h"
#include "unit/npu/deployment_options.h"
#include "unit/npu/executor_logits.h"
#include "unit/npu/quantized_case.h"
#include "unit/quant/transform_cases.h"

namespace qbc {
namespace {

using testing::temp_dir;

using testing::bitwise_equal;
using testing::first_difference;

/// The families of the bit-exact suite: the transform cases plus the sliding-window
/// variants (Gemma 2/3, Mistral, Qwen2 with use_sliding_window) with windows short enough
/// that the test sequences cross them (SmolLM3 and EXAONE 4.0 bring their own, in the transform
/// cases).
std::vector<testing::TransformCase> backend_cases() {
  std::vector<testing::TransformCase> out;
  for (testing::TransformCase c : testing::transform_cases()) {
    if (c.name == "stories260k_tied") continue;
    if (c.name == "gemma2_post_norm_softcap") {
      c.merge_patch = R"({"attn_logit_softcapping": 5.0, "final_logit_softcapping": 8.0,
                          "sliding_window": 8})";
    } else if (c.name == "mistral") {
      c.merge_patch = R"({"sliding_window": 8})";
    } else if (c.name == "qwen25_bias_tied") {
      c.merge_patch =
          R"({"use_sliding_window": true, "sliding_window": 8, "max_window_layers": 1})";
    }
    out.push_back(c);
  }
  out.push_back({"gemma3_local_global", "", "", R"({
      "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
      "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
      "rope_local_base_freq": 10000.0, "sliding_window": 8, "sliding_window_pattern": 2,
      "query_pre_attn_scalar": 16, "hidden_activation": "gelu_pytorch_tanh",
      "tie_word_embeddings": true, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
      "torch_dtype": "float32"})",
                 "", ""});
  return out;
}

/// One quantized model of a case: its loaded form and configuration.
using Quantized = testing::QuantizedCase;

StatusOr<Quantized> quantize_case(const testing::TransformCase& c, bool w4) {
  return testing::quantize_transform_case(c, w4, "npu");
}

std::vector<int32_t> test_ids(int64_t vocab, size_t n) { return testing::lcg_ids(vocab, n, 12345); }

struct Deployment {
  std::string target;
  int cores;
  int64_t chunk;
};

/// Compiles `q` for `d` and returns the executor's logits for `ids`: all at once (split into
/// chunks by the session) or token by token.
StatusOr<std::vector<float>> npu_logits(const Quantized& q, const Deployment& d,
                                        const std::vector<int32_t>& ids, bool stepwise) {
  QBC_ASSIGN_OR_RETURN(npu::Options o,
                       testing::deployment_options(q.model.graph, d.target, d.cores, d.chunk));
  QBC_ASSIGN_OR_RETURN(isa::Bundle b, driver::compile_backend(q.model, o));
  return testing::executor_logits(std::make_shared<const isa::Bundle>(std::move(b)), ids, stepwise);
}

class BackendExact : public ::testing::TestWithParam<testing::TransformCase> {};

TEST_P(BackendExact, ExecutorEqualsFakeQuantBitForBit) {
  const testing::TransformCase& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  for (bool w4 : {false, true}) {
    auto q = quantize_case(c, w4);
    QBC_ASSERT_OK(q);
    auto fq = driver::make_runner(q->model, ref::SessionOptions{});
    QBC_ASSERT_OK(fq);
    const std::vector<int32_t> ids = test_ids((*fq)->vocab_size(), 40);
    std::vector<float> want;
    QBC_ASSERT_OK((*fq)->forward(ids, &want));
    const Deployment deployments[] = {{"aries-rb", 1, 128},   {"aries-rb", 4, 7},
                                      {"aries-rb", 8, 1},     {"test-2core", 1, 7},
                                      {"test-2core", 2, 128}, {"test-2core", 2, 1}};
    for (const Deployment& d : deployments) {
      for (bool stepwise : {false, true}) {
        if (stepwise && d.chunk != 7) continue;  // decode programs: once per target and cores
        auto got = npu_logits(*q, d, ids, stepwise);
        QBC_ASSERT_OK(got);
        EXPECT_TRUE(bitwise_equal(*got, want))
            << c.name << (w4 ? " W4V8" : " W8") << " on " << d.target << ", " << d.cores
            << " cores, chunk " << d.chunk << (stepwise ? ", decode" : ", prefill")
            << ": first difference at " << first_difference(*got, want) << " of " << want.size();
      }
    }
  }
}

/// Turns every whole-row rms_norm of `g` into a layer_norm over the same weight; the norms of
/// even blocks (and the head's) take the next whole-row norm's weight as their bias, so both
/// the bias row and the zero row of the parameter block are exercised. Returns how many.
int rms_to_layer_norm(ir::Graph& g) {
  std::vector<ir::ValueId> norms;
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(g.nodes().size()); ++id) {
    const ir::Node& n = g.node(id);
    if (n.op == ir::Op::kRmsNorm && n.attrs.get_int("group") == 0) norms.push_back(id);
  }
  for (size_t i = 0; i < norms.size(); ++i) {
    ir::Node& n = g.mutable_node(norms[i]);
    ir::Attrs a;
    a.set("eps", n.attrs.get_float("eps"));
    n.op = ir::Op::kLayerNorm;
    n.attrs = a;
    const bool with_bias = n.block < 0 || n.block % 2 == 0;
    const ir::ValueId other = norms[(i + 1) % norms.size()];
    if (with_bias && other != norms[i]) n.operands.push_back(g.node(other).operands[1]);
  }
  return static_cast<int>(norms.size());
}

// layer_norm through the whole backend (plan, parameter image, lowering, executor): the norms of
// a quantized Llama made LayerNorms, with and without bias, run bit for bit as the fake-quant
// evaluator runs them, W8 and W4V8, prefill and decode, one core and four.
TEST(BackendExactLayerNorm, ExecutorEqualsFakeQuantBitForBit) {
  const testing::TransformCase& c = testing::find_transform_case("llama32_gqa_tied");
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  for (bool w4 : {false, true}) {
    auto q = quantize_case(c, w4);
    QBC_ASSERT_OK(q);
    const int norms = rms_to_layer_norm(q->model.graph);
    EXPECT_GE(norms, 3);
    QBC_ASSERT_OK(ir::verify(q->model.graph));
    auto fq = driver::make_runner(q->model, ref::SessionOptions{});
    QBC_ASSERT_OK(fq);
    const std::vector<int32_t> ids = test_ids((*fq)->vocab_size(), 24);
    std::vector<float> want;
    QBC_ASSERT_OK((*fq)->forward(ids, &want));
    const Deployment deployments[] = {
        {"aries-rb", 1, 128}, {"aries-rb", 4, 7}, {"test-2core", 2, 7}};
    for (const Deployment& d : deployments) {
      for (bool stepwise : {false, true}) {
        auto got = npu_logits(*q, d, ids, stepwise);
        QBC_ASSERT_OK(got);
        EXPECT_TRUE(bitwise_equal(*got, want))
            << (w4 ? "W4V8" : "W8") << " on " << d.target << ", " << d.cores << " cores, chunk "
            << d.chunk << (stepwise ? ", decode" : ", prefill") << ": first difference at "
            << first_difference(*got, want) << " of " << want.size();
      }
    }
  }
}

// The backend copies int8-stored codes as they are (driver::int8_codes) instead of reading
// them as floats: both give the same bundle, the view serves every quantized linear's codes,
// and a 4-bit code out of range is refused through the view too, naming the node.
TEST(BackendWeights, Int8CodesGiveTheFloatReadersImage) {
  const std::vector<testing::TransformCase> cases = backend_cases();
  ASSERT_FALSE(cases.empty());
  const testing::TransformCase& c = cases.front();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  for (bool w4 : {false, true}) {
    auto q = quantize_case(c, w4);
    QBC_ASSERT_OK(q);
    auto o = driver::backend_options(q->model.graph, q->cfg);
    QBC_ASSERT_OK(o);
    const driver::LoadedModel* m = &q->model;
    const ir::WeightReader floats = [m](const ir::Weight& w, std::vector<float>* out) {
      return driver::read_weight(*m, w, out);
    };
    const ir::Int8View view = driver::int8_codes(q->model);
    int viewed = 0, linears = 0;
    const ir::Int8View counted = [&](const ir::Weight& w) {
      const int8_t* p = view(w);
      viewed += p != nullptr;
      return p;
    };
    // Each view is released once its codes are in the image (driver::release_codes drops the
    // sidecar's pages), and the released pages still read the same codes: a second compile
    // through the views gives the same image.
    std::set<std::string> done;
    int released = 0;
    const ir::ViewDone release = driver::release_codes(q->model);
    const ir::ViewDone count_done = [&](const ir::Weight& w) {
      done.insert(w.name);
      ++released;
      release(w);
    };
    for (const ir::Node& n : q->model.graph.nodes()) linears += n.op == ir::Op::kQLinear;
    auto through_view =
        npu::compile(q->model.graph, floats, *o, ir::WeightViews(counted, nullptr, count_done));
    auto through_floats = npu::compile(q->model.graph, floats, *o);
    auto after_release = driver::compile_backend(q->model, *o);
    QBC_ASSERT_OK(through_view);
    QBC_ASSERT_OK(through_floats);
    QBC_ASSERT_OK(after_release);
    EXPECT_GT(linears, 0);
    EXPECT_EQ(viewed, linears) << (w4 ? "W4V8" : "W8");
    EXPECT_EQ(released, linears) << (w4 ? "W4V8" : "W8");
    EXPECT_EQ(static_cast<int>(done.size()), linears) << "a view released twice";
    EXPECT_TRUE(through_view->image == through_floats->image) << (w4 ? "W4V8" : "W8");
    EXPECT_TRUE(after_release->image == through_floats->image) << (w4 ? "W4V8" : "W8");
    EXPECT_TRUE(through_view->embedding == through_floats->embedding);
    if (!w4) continue;
    // A 4-bit weight whose stored code is 8 (out of [-8, 7]).
    std::vector<int8_t> bad;
    std::string bad_weight;
    const ir::Int8View corrupt = [&](const ir::Weight& w) -> const int8_t* {
      const int8_t* p = view(w);
      if (p == nullptr || w.type.dtype != ir::DType::kI4 || !bad_weight.empty()) return p;
      bad.assign(p, p + w.type.num_elements());
      bad[0] = 8;
      bad_weight = w.name;
      return bad.data();
    };
    auto refused = npu::compile(q->model.graph, floats, *o, corrupt);
    ASSERT_FALSE(bad_weight.empty()) << "no 4-bit weight in the W4V8 model";
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("weight code 8 at [0, 0] is not a 4-bit integer"),
              std::string::npos)
        << refused.status().message();
  }
}

// The compile job views a bf16 source's host embedding in place (driver::
// compile_backend_in_place) instead of widening it to fp32: the same weight image, the same
// fp32 row for every token, and the same MXQ bytes; an fp32 source keeps its fp32 copy.
TEST(BackendWeights, Bf16EmbeddingViewedInPlaceWritesTheSameMxq) {
  const testing::TransformCase c{"qwen2_bf16", "models/tiny/qwen2-bf16/hf", "", "", "", ""};
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto q = quantize_case(c, false);
  QBC_ASSERT_OK(q);
  auto o = driver::backend_options(q->model.graph, q->cfg);
  QBC_ASSERT_OK(o);
  auto copied = driver::compile_backend(q->model, *o);
  auto viewed = driver::compile_backend_in_place(q->model, *o);
  QBC_ASSERT_OK(copied);
  QBC_ASSERT_OK(viewed);
  ASSERT_TRUE(copied->embedding_bf16_view.empty());
  ASSERT_FALSE(viewed->embedding_bf16_view.empty());
  EXPECT_TRUE(viewed->embedding.empty());
  EXPECT_EQ(viewed->embedding_size(), copied->embedding_size());
  EXPECT_TRUE(viewed->image == copied->image);
  std::vector<float> a(static_cast<size_t>(copied->hidden)), b(a.size());
  int64_t differ = 0;
  for (int64_t r = 0; r < copied->embed_rows; ++r) {
    copied->embedding_row(r, a.data());
    viewed->embedding_row(r, b.data());
    differ += std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0);
  const std::filesystem::path dir = testing::temp_dir() / "bf16_in_place";
  std::filesystem::create_directories(dir);
  QBC_ASSERT_OK(driver::write_mxq(q->model, *copied, q->cfg, (dir / "copied.mxq").string()));
  QBC_ASSERT_OK(driver::write_mxq(q->model, *viewed, q->cfg, (dir / "viewed.mxq").string()));
  const std::string x = testing::read_file(dir / "copied.mxq");
  EXPECT_GT(x.size(), 0u);
  EXPECT_TRUE(x == testing::read_file(dir / "viewed.mxq"));
}

TEST(BackendWeights, Fp32EmbeddingIsCopiedInPlaceToo) {
  const std::vector<testing::TransformCase> cases = backend_cases();
  ASSERT_FALSE(cases.empty());
  const testing::TransformCase& c = cases.front();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto q = quantize_case(c, false);
  QBC_ASSERT_OK(q);
  auto o = driver::backend_options(q->model.graph, q->cfg);
  QBC_ASSERT_OK(o);
  auto viewed = driver::compile_backend_in_place(q->model, *o);
  QBC_ASSERT_OK(viewed);
  EXPECT_TRUE(viewed->embedding_bf16_view.empty());
  EXPECT_EQ(static_cast<int64_t>(viewed->embedding.size()), viewed->embed_rows * viewed->hidden);
}

INSTANTIATE_TEST_SUITE_P(Families, BackendExact, ::testing::ValuesIn(backend_cases()),
                         [](const ::testing::TestParamInfo<testing::TransformCase>& i) {
                           return i.param.name;
                         });

}  // namespace
}  // namespace qbc

namespace qbc {
namespace {

/// Compiles `q` for `target` with `batch` sequence slots (single scheme) and cache `ctx`.
StatusOr<std::shared_ptr<runtime::Device>> device_for(const Quantized& q, const std::string& target,
                                                      int64_t batch, int64_t ctx, int64_t chunk) {
  config::LoadRequest req;
  req.sets = {"targetProfile=" + target};
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
  QBC_ASSIGN_OR_RETURN(npu::Options o, driver::backend_options(q.model.graph, cfg));
  o.modes = {npu::ModeRequest{isa::Scheme::kSingle, 1, static_cast<int32_t>(batch)}};
  o.batch = batch;
  o.max_cache = ctx;
  o.chunk = std::min(chunk, ctx);
  QBC_ASSIGN_OR_RETURN(isa::Bundle b, driver::compile_backend(q.model, o));
  auto bundle = std::make_shared<const isa::Bundle>(std::move(b));
  return runtime::Device::create(bundle, runtime::DeviceOptions{});
}

// Span programs (a Gemma 3 VLM's image: isa::Phase::kSpan, QkScores::span): text, a span of 20
// tokens as one call, text, then decode, on Gemma 3's local/global layers with a window of 8
// (shorter than the span, so the window's base and the span's reach both bind), equal the
// fake-quant evaluator's forward_embeds_span bit for bit over schemes, targets and chunks; the
// span makes a difference (the causal evaluator differs); the text around it runs the ordinary
// programs; a span longer than the chunk is refused.
TEST(BackendSpan, SpanCallsEqualTheEvaluatorsSpanBitForBit) {
  testing::TransformCase c;
  for (const testing::TransformCase& k : backend_cases())
    if (k.name == "gemma3_local_global") c = k;
  ASSERT_EQ(c.name, "gemma3_local_global");
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto q = quantize_case(c, false);
  QBC_ASSERT_OK(q);
  const driver::LoadedModel* lm = &q->model;
  const ir::WeightReader reader = [lm](const ir::Weight& w, std::vector<float>* out) {
    return driver::read_weight(*lm, w, out);
  };
  const std::vector<int32_t> ids = test_ids(256, 31);
  const int64_t a = 5, b = 25, n = 31;  // text [0, a), the span [a, b), text [b, n)
  auto fq = quant::FakeQuantSession::create(q->model.graph, reader);
  QBC_ASSERT_OK(fq);
  std::vector<float> x;
  QBC_ASSERT_OK((*fq)->embed(ids, &x));
  const int64_t h = (*fq)->hidden_size();
  const auto rows = [&](int64_t lo, int64_t hi) {
    return std::vector<float>(x.begin() + lo * h, x.begin() + hi * h);
  };
  std::vector<float> want, part;
  QBC_ASSERT_OK((*fq)->forward_embeds(rows(0, a), a, &part));
  want = part;
  QBC_ASSERT_OK((*fq)->forward_embeds_span(rows(a, b), b - a, &part));
  want.insert(want.end(), part.begin(), part.end());
  QBC_ASSERT_OK((*fq)->forward_embeds(rows(b, n), n - b, &part));
  want.insert(want.end(), part.begin(), part.end());
  std::vector<float> want_next;
  QBC_ASSERT_OK((*fq)->forward({7}, &want_next));
  {
    auto causal = quant::FakeQuantSession::create(q->model.graph, reader);
    QBC_ASSERT_OK(causal);
    std::vector<float> c_logits;
    QBC_ASSERT_OK((*causal)->forward_embeds(x, n, &c_logits));
    ASSERT_EQ(c_logits.size(), want.size());
    EXPECT_EQ(first_difference(c_logits, want), static_cast<size_t>(a * (*fq)->vocab_size()))
        << "the text before the span is causal; the span's first row differs";
  }
  const Deployment deployments[] = {
      {"aries-rb", 1, 20}, {"aries-rb", 8, 32}, {"test-2core", 2, 24}, {"aries-rb", 4, 64}};
  for (const Deployment& d : deployments) {
    auto o = testing::deployment_options(q->model.graph, d.target, d.cores, d.chunk);
    QBC_ASSERT_OK(o);
    o->span_programs = true;
    auto bundle = driver::compile_backend(q->model, *o);
    QBC_ASSERT_OK(bundle);
    ASSERT_TRUE(bundle->modes.front().has_span());
    QBC_ASSERT_OK(isa::verify(*bundle));
    // V10: the span flag belongs to the span program's qk_scores, and only to them.
    for (const bool in_span : {false, true}) {
      isa::Bundle broken = *bundle;
      isa::Program& p = in_span ? broken.modes[0].span : broken.modes[0].prefill;
      bool flipped = false;
      for (isa::Instr& in : p.cores[0].code) {
        auto* qk = std::get_if<isa::QkScores>(&in.op);
        if (qk == nullptr || flipped) continue;
        qk->span = !qk->span;
        flipped = true;
      }
      ASSERT_TRUE(flipped);
      const Status st = isa::verify(broken);
      EXPECT_EQ(st.message().rfind("V10 ", 0), 0u) << st.to_string();
      EXPECT_NE(st.message().find(in_span ? "without span in a span program"
                                          : "with span outside a span program"),
                std::string::npos)
          << st.to_string();
    }
    // The text form prints the span program and reads it back.
    const std::string text = isa::print_bundle(*bundle, isa::PrintOptions{});
    EXPECT_NE(text.find("  span max_seq="), std::string::npos);
    EXPECT_NE(text.find("span=true"), std::string::npos);
    auto parsed = isa::parse_bundle(text);
    QBC_ASSERT_OK(parsed);
    EXPECT_TRUE(parsed->modes.front().has_span());
    EXPECT_EQ(isa::print_bundle(*parsed, isa::PrintOptions{}), text);
    std::shared_ptr<runtime::Device> dev;
    if (&d == &deployments[0]) {  // through an MXQ: the span program and feature bit 6 kept
      const std::filesystem::path file = temp_dir() / "span_programs.mxq";
      QBC_ASSERT_OK(driver::write_mxq(q->model, *bundle, q->cfg, file.string()));
      const std::string head = testing::read_file(file);
      ASSERT_GE(head.size(), 32u);
      uint64_t required = 0;
      std::memcpy(&required, head.data() + 24, sizeof(required));
      EXPECT_NE(required & mxq::kFeatureSpanPrograms, 0u);
      auto m = runtime::load_model(file.string());
      QBC_ASSERT_OK(m);
      EXPECT_TRUE(m->device->mode().has_span());
      dev = m->device;
    } else {
      auto shared = std::make_shared<const isa::Bundle>(std::move(*bundle));
      runtime::DeviceOptions dopt;
      dopt.scheme = shared->modes.front().scheme;
      auto made = runtime::Device::create(shared, dopt);
      QBC_ASSERT_OK(made);
      dev = *made;
    }
    auto s = runtime::NpuSession::create(dev, 0);
    QBC_ASSERT_OK(s);
    std::vector<float> got;
    for (const auto& [lo, hi] : {std::pair{int64_t{0}, a}, std::pair{a, b}, std::pair{b, n}}) {
      if (lo == a) {
        QBC_ASSERT_OK((*s)->forward_embeds_span(rows(lo, hi), hi - lo, &part));
      } else {
        QBC_ASSERT_OK((*s)->forward_embeds(rows(lo, hi), hi - lo, &part));
      }
      got.insert(got.end(), part.begin(), part.end());
    }
    const std::string at =
        d.target + ", " + std::to_string(d.cores) + " cores, chunk " + std::to_string(d.chunk);
    EXPECT_TRUE(bitwise_equal(got, want))
        << at << ": first difference at " << first_difference(got, want) << " of " << want.size();
    std::vector<float> next;
    QBC_ASSERT_OK((*s)->forward({7}, &next));
    EXPECT_TRUE(bitwise_equal(next, want_next)) << at << ", decode after the span";
    (*s)->reset();
    const Status too_long = (*s)->forward_embeds_span(rows(0, d.chunk + 1), d.chunk + 1, nullptr);
    EXPECT_EQ(too_long.code(), Code::kInvalidArgument) << at << ": " << too_long.to_string();
  }
}

// batchSize 4: every sequence has its own KV region; four sequences of different lengths,
// run interleaved on one device, give the logits each gives alone.
TEST(BackendBatch, FourSequencesInterleavedEqualEachAlone) {
  const testing::TransformCase& c = testing::find_transform_case("stories260k");
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto q = quantize_case(c, false);
  QBC_ASSERT_OK(q);
  auto dev = device_for(*q, "aries-rb", 4, 64, 16);
  QBC_ASSERT_OK(dev);
  const std::vector<size_t> lengths = {5, 23, 40, 12};
  std::vector<std::unique_ptr<runtime::NpuSession>> s;
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> got(4);
  for (int b = 0; b < 4; ++b) {
    auto x = runtime::NpuSession::create(*dev, b);
    QBC_ASSERT_OK(x);
    s.push_back(std::move(*x));
    std::vector<int32_t> all = test_ids(512, 40 + static_cast<size_t>(b));
    ids.emplace_back(all.begin() + b, all.begin() + b + static_cast<int64_t>(lengths[b]));
  }
  // Interleave: a prefill of up to 7 tokens per sequence per round, then token by token.
  std::vector<size_t> at(4, 0);
  for (bool left = true; left;) {
    left = false;
    for (int b = 0; b < 4; ++b) {
      if (at[b] >= ids[b].size()) continue;
      const size_t n = at[b] < 7 ? std::min<size_t>(7, ids[b].size() - at[b]) : 1;
      std::vector<float> part;
      QBC_ASSERT_OK(s[b]->forward({ids[b].begin() + static_cast<int64_t>(at[b]),
                                   ids[b].begin() + static_cast<int64_t>(at[b] + n)},
                                  &part));
      got[b].insert(got[b].end(), part.begin(), part.end());
      at[b] += n;
      left = left || at[b] < ids[b].size();
    }
  }
  for (int b = 0; b < 4; ++b) {
    auto alone = device_for(*q, "aries-rb", 1, 64, 16);
    QBC_ASSERT_OK(alone);
    auto one = runtime::NpuSession::create(*alone, 0);
    QBC_ASSERT_OK(one);
    std::vector<float> want;
    QBC_ASSERT_OK((*one)->forward(ids[b], &want));
    EXPECT_TRUE(bitwise_equal(got[b], want)) << "sequence " << b << " of " << lengths[b];
  }
}

// A cache compiled for 16384 positions on the 64 KiB-SRAM target: decode past position
// 12000 equals the fake-quant evaluator bit for bit (the chunk loops run 750+ trips; SRAM
// holds one chunk).
TEST(BackendLongContext, DecodePast12000EqualsFakeQuantOnTest2Core) {
  testing::TransformCase c{"tiny_long", "", "", R"({
      "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2,
      "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 128,
      "max_position_embeddings": 16384, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
      "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
      "torch_dtype": "float32"})", "", ""};
  const std::filesystem::path shared = testing::shared_dir();
  auto lc = testing::load_transform_case(c, shared);
  QBC_ASSERT_OK(lc);
  config::LoadRequest req;
  req.preset = "llm_fast";
  req.sets = {"useRandomCalib=true",
              "llm.attributes.maxSequenceLength=16384",
              "llm.attributes.maxCacheLength=16384",
              "calibration.numSamples=2",
              "calibration.seqLength=32",
              "targetProfile=test-2core"};
  auto cfg = config::resolve(req);
  QBC_ASSERT_OK(cfg);
  auto src = driver::open_model(lc->source->path().string(), *cfg);
  QBC_ASSERT_OK(src);
  const std::filesystem::path out = temp_dir() / "npu_tiny_long.mblt";
  QBC_ASSERT_OK(driver::quantize_to(*src, *cfg, out.string(), driver::QuantizeRun{}));
  Quantized qz;
  auto m = driver::open_model(out.string(), *cfg);
  QBC_ASSERT_OK(m);
  qz.model = std::move(*m);
  auto fq = driver::make_runner(qz.model, ref::SessionOptions{});
  QBC_ASSERT_OK(fq);
  auto dev = device_for(qz, "test-2core", 1, 16384, 128);
  QBC_ASSERT_OK(dev);
  auto npu = runtime::NpuSession::create(*dev, 0);
  QBC_ASSERT_OK(npu);
  const std::vector<int32_t> ids = test_ids(128, 12008);
  std::vector<float> a, b;
  for (size_t t0 = 0; t0 < 12000; t0 += 128) {  // prefill in chunks; logits not compared here
    const size_t n = std::min<size_t>(128, 12000 - t0);
    const std::vector<int32_t> chunk(ids.begin() + static_cast<int64_t>(t0),
                                     ids.begin() + static_cast<int64_t>(t0 + n));
    QBC_ASSERT_OK((*fq)->forward(chunk, &a));
    QBC_ASSERT_OK((*npu)->forward(chunk, &b));
  }
  EXPECT_TRUE(bitwise_equal(a, b)) << "the last prefill chunk";
  for (size_t t = 12000; t < ids.size(); ++t) {
    QBC_ASSERT_OK((*fq)->forward({ids[t]}, &a));
    QBC_ASSERT_OK((*npu)->forward({ids[t]}, &b));
    EXPECT_TRUE(bitwise_equal(a, b)) << "decode at position " << t;
  }
  EXPECT_EQ((*npu)->position(), 12008);
}

}  // namespace
}  // namespace qbc
