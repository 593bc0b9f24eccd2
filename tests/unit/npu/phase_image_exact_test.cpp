// Precision per phase (bit.prefill / bit.decode, docs/quantization.md "Precision per phase"):
// the decoder-block linears get a second weight image that one phase's programs read. The
// executor runs a prompt (prefill programs, in chunks) and then token by token (decode
// programs) bit for bit as the fake-quant evaluator runs the same calls, for every scheme and
// chunk; the two images really differ (the run differs from one of a single image), and the
// plan stores each second image once, in its own weight buffer.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "qbc/driver/backend.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/ir/phase_image.h"
#include "qbc/ir/verifier.h"
#include "qbc/isa/program.h"
#include "test_support.h"
#include "unit/npu/deployment_options.h"
#include "unit/npu/executor_logits.h"
#include "unit/npu/quantized_case.h"
#include "unit/quant/transform_cases.h"

namespace qbc {
namespace {

using testing::bitwise_equal;
using testing::first_difference;

constexpr size_t kPrompt = 17;  // tokens of the prompt; the rest are decoded one by one

/// The logits of `ids` run as a prompt of kPrompt tokens, then one token per call.
StatusOr<std::vector<float>> prompt_then_tokens(runner::Runner& r,
                                                const std::vector<int32_t>& ids) {
  std::vector<float> out, part;
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + kPrompt);
  QBC_RETURN_IF_ERROR(r.forward(prompt, &out));
  for (size_t i = kPrompt; i < ids.size(); ++i) {
    QBC_RETURN_IF_ERROR(r.forward({ids[i]}, &part));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

/// The executor's logits of the same calls on `bundle`.
StatusOr<std::vector<float>> executor_prompt_then_tokens(std::shared_ptr<const isa::Bundle> bundle,
                                                         const std::vector<int32_t>& ids) {
  runtime::DeviceOptions dopt;
  dopt.scheme = bundle->modes.front().scheme;
  QBC_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Device> dev, runtime::Device::create(bundle, dopt));
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::NpuSession> s, runtime::NpuSession::create(dev, 0));
  return prompt_then_tokens(*s, ids);
}

struct PhaseCase {
  std::string label;
  std::vector<std::string> files;  // configuration files (relative to the source tree)
  std::string preset;
  std::vector<std::string> sets;
  ir::ImagePhase phase;  // the phase whose programs read the second image
  int bits;              // its width
};

std::vector<PhaseCase> phase_cases() {
  return {
      // W4V8 (groups of 32 with zero points) for decode, an 8-bit per-channel prefill image.
      {"w4v8_prefill8",
       {"configs/examples/w4v8.yaml"},
       "",
       {"bit.prefill.weight=8", "bit.prefill.weightGroupSize=0"},
       ir::ImagePhase::kPrefill,
       8},
      // W8 for prefill, a 4-bit grouped decode image.
      {"w8_decode4",
       {},
       "llm_fast",
       {"bit.decode.weight=4", "bit.decode.weightGroupSize=32"},
       ir::ImagePhase::kDecode,
       4},
  };
}

class PhaseImageExact : public ::testing::TestWithParam<PhaseCase> {};

TEST_P(PhaseImageExact, PromptThenTokensEqualsTheFakeQuantEvaluatorBitForBit) {
  const PhaseCase& pc = GetParam();
  for (const char* name : {"llama32_gqa_tied", "qwen25_bias_tied"}) {
    const testing::TransformCase& c = testing::find_transform_case(name);
    QBC_REQUIRE_TRANSFORM_CASE(shared, c);
    auto q = testing::quantize_transform_case_with(c, pc.preset, pc.files, pc.sets, pc.label,
                                                   "phase_image");
    QBC_ASSERT_OK(q);
    QBC_ASSERT_OK(ir::verify(q->model.graph));
    // Every decoder-block linear whose own image has another width has the second image, of
    // the phase and width asked for; the others (W4V8's 8-bit V) and the head have one image.
    int second = 0, block_linears = 0;
    for (const ir::Node& n : q->model.graph.nodes()) {
      if (n.op != ir::Op::kQLinear) continue;
      auto phase = ir::second_image_phase(n);
      QBC_ASSERT_OK(phase);
      if (n.block < 0) {
        EXPECT_FALSE(phase->has_value()) << n.name;
        continue;
      }
      if (n.attrs.get_int("w_bits") == pc.bits) {
        EXPECT_FALSE(phase->has_value()) << name << " " << n.name << " is already " << pc.bits;
        continue;
      }
      ++block_linears;
      ASSERT_TRUE(phase->has_value()) << name << " " << n.name;
      EXPECT_EQ(**phase, pc.phase) << n.name;
      auto view = ir::node_for_phase(n, pc.phase);
      QBC_ASSERT_OK(view);
      EXPECT_EQ(view->attrs.get_int("w_bits"), pc.bits) << n.name;
      EXPECT_NE(view->operands[1].weight, n.operands[1].weight) << n.name;
      ++second;
    }
    EXPECT_GT(block_linears, 0);
    EXPECT_EQ(second, block_linears);

    auto fq = driver::make_runner(q->model, ref::SessionOptions{});
    QBC_ASSERT_OK(fq);
    const std::vector<int32_t> ids = testing::lcg_ids((*fq)->vocab_size(), 30, 777);
    auto want = prompt_then_tokens(**fq, ids);
    QBC_ASSERT_OK(want);
    // The decoded tokens' logits come from the other image: a run of one image (every token
    // in one prompt) gives other values there, and the same values for the prompt when the
    // prompt's image is the main one.
    (*fq)->reset();
    std::vector<float> one_call;
    QBC_ASSERT_OK((*fq)->forward(ids, &one_call));
    ASSERT_EQ(one_call.size(), want->size());
    const size_t vocab = static_cast<size_t>((*fq)->vocab_size());
    const std::vector<float> decoded(want->begin() + kPrompt * vocab, want->end());
    const std::vector<float> decoded_one(one_call.begin() + kPrompt * vocab, one_call.end());
    EXPECT_FALSE(bitwise_equal(decoded, decoded_one)) << name << ": the images do not differ";
    const std::vector<float> prompt(want->begin(), want->begin() + kPrompt * vocab);
    const std::vector<float> prompt_one(one_call.begin(), one_call.begin() + kPrompt * vocab);
    EXPECT_TRUE(bitwise_equal(prompt, prompt_one)) << name << ": the prompt's logits";

    struct Deployment {
      std::string target;
      int cores;
      int64_t chunk;
    };
    const Deployment deployments[] = {
        {"aries-rb", 1, 128}, {"aries-rb", 4, 7}, {"aries-rb", 8, 1}, {"test-2core", 2, 16}};
    for (const Deployment& d : deployments) {
      auto o = testing::deployment_options(q->model.graph, d.target, d.cores, d.chunk);
      QBC_ASSERT_OK(o);
      auto b = driver::compile_backend(q->model, *o);
      QBC_ASSERT_OK(b);
      // One buffer per second image, named after its phase, in the weight region.
      int buffers = 0;
      const std::string tail = std::string(".w.") + ir::image_phase_name(pc.phase);
      for (const isa::Buffer& buf : b->buffers) {
        if (buf.name.size() > tail.size() &&
            buf.name.compare(buf.name.size() - tail.size(), tail.size(), tail) == 0) {
          ++buffers;
          EXPECT_EQ(buf.purpose, isa::Purpose::kWeights) << buf.name;
        }
      }
      EXPECT_EQ(buffers, second) << d.target;
      auto got =
          executor_prompt_then_tokens(std::make_shared<const isa::Bundle>(std::move(*b)), ids);
      QBC_ASSERT_OK(got);
      EXPECT_TRUE(bitwise_equal(*got, *want))
          << name << " " << pc.label << " on " << d.target << ", " << d.cores << " cores, chunk "
          << d.chunk << ": first difference at " << first_difference(*got, *want) << " of "
          << want->size();
    }
  }
}

// The second image is rounded from the float weights before GPTQ replaces them by its
// dequantized integers (the phaseImages pass): the 8-bit prefill image of the W4V8 recipe is
// the same whether hessianQuant runs or not, and differs from the 4-bit image by the 4-bit
// error. (Rounded after GPTQ, it was a re-quantization of the 4-bit weights.)
TEST(PhaseImageQuant, TheSecondImageIsRoundedFromTheFloatWeightsBeforeGptq) {
  const testing::TransformCase& c = testing::find_transform_case("llama32_gqa_tied");
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  const std::vector<std::string> files = {"configs/examples/w4v8.yaml"};
  const std::vector<std::string> pre8 = {"bit.prefill.weight=8", "bit.prefill.weightGroupSize=0"};
  std::vector<std::string> no_gptq = pre8;
  no_gptq.push_back("hessianQuant.apply=false");
  auto with = testing::quantize_transform_case_with(c, "", files, pre8, "gptq", "phase_quant");
  auto without = testing::quantize_transform_case_with(c, "", files, no_gptq, "rtn", "phase_quant");
  QBC_ASSERT_OK(with);
  QBC_ASSERT_OK(without);
  int compared = 0;
  for (const ir::Node& n : with->model.graph.nodes()) {
    if (n.op != ir::Op::kQLinear || !n.attrs.has("phase_image")) continue;
    const ir::Weight* pw = with->model.graph.find_weight(n.attrs.get_string("phase_wq"));
    const ir::Weight* rw = without->model.graph.find_weight(n.attrs.get_string("phase_wq"));
    ASSERT_NE(pw, nullptr);
    ASSERT_NE(rw, nullptr) << n.name;
    std::vector<float> a, b, main;
    QBC_ASSERT_OK(driver::read_weight(with->model, *pw, &a));
    QBC_ASSERT_OK(driver::read_weight(without->model, *rw, &b));
    EXPECT_EQ(a, b) << n.name << ": the prefill image depends on GPTQ";
    // The main 4-bit codes do differ between the two (GPTQ against round to nearest).
    QBC_ASSERT_OK(driver::read_weight(with->model,
                                      *with->model.graph.find_weight(n.operands[1].weight), &main));
    std::vector<float> rtn_main;
    const ir::Node& rn = without->model.graph.node(without->model.graph.find(n.name));
    QBC_ASSERT_OK(driver::read_weight(
        without->model, *without->model.graph.find_weight(rn.operands[1].weight), &rtn_main));
    compared += main != rtn_main;
  }
  EXPECT_GT(compared, 0) << "GPTQ changed no 4-bit codes: the test would not see the order";
}

INSTANTIATE_TEST_SUITE_P(Phases, PhaseImageExact, ::testing::ValuesIn(phase_cases()),
                         [](const ::testing::TestParamInfo<PhaseCase>& i) {
                           return i.param.label;
                         });

}  // namespace
}  // namespace qbc
