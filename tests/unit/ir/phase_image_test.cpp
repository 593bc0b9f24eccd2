// A qlinear's second weight image (qbc/ir/phase_image.h): the node as each phase sees it, the
// verifier's I10 (one failing case per clause) and I8 counting the image's weights as used,
// and the text and protobuf forms keeping it.
#include "qbc/ir/phase_image.h"

#include <gtest/gtest.h>

#include <string>

#include "qbc/ir/builder.h"
#include "qbc/ir/serialize.h"
#include "qbc/ir/text.h"
#include "qbc/ir/verifier.h"
#include "test_support.h"

namespace qbc::ir {
namespace {

TensorType i8(std::vector<int64_t> d) { return TensorType{DType::kI8, std::move(d)}; }
TensorType i4(std::vector<int64_t> d) { return TensorType{DType::kI4, std::move(d)}; }
TensorType f32(std::vector<int64_t> d) { return TensorType{DType::kF32, std::move(d)}; }

/// A block qlinear [4 x 64], 8-bit per channel with a bias, whose decode programs read a
/// 4-bit image in groups of 32 with zero points.
Graph phase_graph() {
  Graph g("p");
  Builder b(g);
  const auto side = WeightSource::kSidecar;
  b.weight("fc.wq", i8({4, 64}), "fc.wq", WeightRole::kParameter, side);
  b.weight("fc.wscale", f32({4}), "fc.wscale", WeightRole::kParameter, side);
  b.weight("fc.bias", f32({4}), "fc.bias", WeightRole::kParameter, side);
  b.weight("fc.decode.wq", i4({4, 64}), "fc.decode.wq", WeightRole::kParameter, side);
  b.weight("fc.decode.wscale", f32({4, 2}), "fc.decode.wscale", WeightRole::kParameter, side);
  b.weight("fc.decode.wzero", i4({4, 2}), "fc.decode.wzero", WeightRole::kParameter, side);
  const ValueId x = *b.input("x", f32({kDynamic, kDynamic, 64}));
  b.set_block(0);
  Attrs a;
  a.set("in_scale", 0.05);
  a.set("in_bits", int64_t{8});
  a.set("w_bits", int64_t{8});
  a.set("out_fp16", int64_t{1});
  a.set("phase_image", std::string("decode"));
  a.set("phase_wq", std::string("fc.decode.wq"));
  a.set("phase_wscale", std::string("fc.decode.wscale"));
  a.set("phase_wzero", std::string("fc.decode.wzero"));
  a.set("phase_w_zero", int64_t{1});
  a.set("phase_w_bits", int64_t{4});
  a.set("phase_w_group", int64_t{32});
  const StatusOr<ValueId> y =
      b.make(Op::kQLinear, "blk.0.fc",
             {Operand::of(x), Operand::of_weight("fc.wq"), Operand::of_weight("fc.wscale"),
              Operand::of_weight("fc.bias")},
             a, "");
  EXPECT_TRUE(y.ok()) << y.status().message();
  g.add_output(*y);
  return g;
}

TEST(PhaseImage, EachPhaseSeesItsOwnImageAndTheNodesBias) {
  const Graph g = phase_graph();
  QBC_ASSERT_OK(verify(g));
  const Node& n = g.node(g.find("blk.0.fc"));
  auto phase = second_image_phase(n);
  QBC_ASSERT_OK(phase);
  ASSERT_TRUE(phase->has_value());
  EXPECT_EQ(**phase, ImagePhase::kDecode);
  auto decode = node_for_phase(n, ImagePhase::kDecode);
  QBC_ASSERT_OK(decode);
  ASSERT_EQ(decode->operands.size(), 5u);
  EXPECT_EQ(decode->operands[1].weight, "fc.decode.wq");
  EXPECT_EQ(decode->operands[2].weight, "fc.decode.wscale");
  EXPECT_EQ(decode->operands[3].weight, "fc.decode.wzero");
  EXPECT_EQ(decode->operands[4].weight, "fc.bias");
  EXPECT_EQ(decode->attrs.get_int("w_bits"), 4);
  EXPECT_EQ(decode->attrs.get_int("w_group"), 32);
  EXPECT_EQ(decode->attrs.get_int("w_zero"), 1);
  EXPECT_FALSE(decode->attrs.has("phase_image"));
  EXPECT_EQ(decode->attrs.get_float("in_scale"), 0.05);
  // The prefill programs see the node's own image, without the phase attributes.
  auto prefill = node_for_phase(n, ImagePhase::kPrefill);
  QBC_ASSERT_OK(prefill);
  EXPECT_EQ(prefill->operands, n.operands);
  EXPECT_EQ(prefill->attrs.get_int("w_bits"), 8);
  EXPECT_FALSE(prefill->attrs.has("phase_wq"));
  EXPECT_FALSE(prefill->attrs.has("w_group"));
  EXPECT_EQ(second_image_weights(n),
            (std::vector<std::string>{"fc.decode.wq", "fc.decode.wscale", "fc.decode.wzero"}));
  // Both views are valid qlinears of the node's type.
  for (const Node* v : {&*decode, &*prefill}) {
    auto t = infer_type(g, *v);
    QBC_ASSERT_OK(t);
    EXPECT_EQ(*t, n.type);
  }
}

TEST(PhaseImage, TextAndProtobufFormsKeepIt) {
  const Graph g = phase_graph();
  auto text = parse_text(print_text(g), "p");
  QBC_ASSERT_OK(text);
  EXPECT_TRUE(*text == g);
  auto back = from_proto_bytes(to_proto_bytes(g), "p");
  QBC_ASSERT_OK(back);
  EXPECT_TRUE(*back == g);
}

// I10, one case per clause; I8 counts the image's weights as used (the valid graph verifies
// although no operand names them).
TEST(PhaseImage, VerifierI10) {
  auto expect = [](Graph g, const char* part) {
    const Status s = verify(g);
    ASSERT_FALSE(s.ok()) << part;
    EXPECT_NE(s.message().find("[I10]"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  };
  auto node = [](Graph& g) -> Node& { return g.mutable_node(g.find("blk.0.fc")); };
  {
    Graph g = phase_graph();
    node(g).attrs.set("phase_image", std::string("span"));
    expect(g, "neither prefill nor decode");
  }
  {
    Graph g = phase_graph();
    node(g).attrs.set("phase_wscale", std::string("fc.missing"));
    expect(g, "fc.missing");
  }
  {
    Graph g = phase_graph();
    g.add_weight(
        Weight{"emb", f32({16, 64}), WeightSource::kModel, "emb", WeightRole::kHostEmbedding});
    node(g).attrs.set("phase_wq", std::string("emb"));
    expect(g, "emb");
  }
  {
    Graph g = phase_graph();  // groups of 16 do not match the [4, 2] scales
    node(g).attrs.set("phase_w_group", int64_t{16});
    expect(g, "decode image");
  }
  {
    Graph g = phase_graph();
    Attrs a;
    for (const auto& [k, v] : node(g).attrs.all())
      if (k != "phase_w_bits") a.set(k, v);
    node(g).attrs = a;
    expect(g, "phase_w_bits");
  }
  {
    Graph g = phase_graph();  // the zero points named but not declared
    node(g).attrs.set("phase_w_zero", int64_t{0});
    const Status s = verify(g);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("[I8]"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("fc.decode.wzero"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace qbc::ir
