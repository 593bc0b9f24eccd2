// MBLT: builder shape checks, verifier invariants, text and protobuf round trips.
#include <gtest/gtest.h>

#include "qbc/ir/builder.h"
#include "qbc/ir/serialize.h"
#include "qbc/ir/text.h"
#include "qbc/ir/verifier.h"
#include "test_support.h"

namespace qbc::ir {
namespace {

TensorType f32(std::vector<int64_t> d) { return TensorType{DType::kF32, std::move(d)}; }

// A two-linear graph with a norm and a residual.
Graph small_graph() {
  Graph g("small");
  Builder b(g);
  b.weight("norm.weight", f32({8}), "model.norm.weight");
  b.weight("fc.weight", f32({8, 8}), "fc.weight");
  b.weight("fc.bias", f32({8}), "fc.bias");
  b.weight("emb.weight", f32({16, 8}), "model.embed_tokens.weight", WeightRole::kHostEmbedding);
  ValueId x = *b.input("x", f32({kDynamic, kDynamic, 8}));
  b.set_block(0);
  ValueId n = *b.rms_norm("blk.0.norm", x, "norm.weight", 1e-5, false, 0, "model.layers.0.norm");
  ValueId y = *b.linear("blk.0.fc", n, "fc.weight", "fc.bias", "model.layers.0.fc");
  ValueId r = *b.add("blk.0.residual", x, y, "model.layers.0");
  b.set_block(-1);
  b.set_part(Part::kHead);
  ValueId s = *b.softcap("logits", r, 30.0, "final");
  g.add_output(s);
  g.source_path = "/models/x";
  g.source_format = "hf-safetensors";
  g.files.push_back(SourceFile{"/models/x/model.safetensors", 1234, "00ff"});
  g.metadata["config"] = "{\"a\": \"line\\nbreak\"}\n";
  return g;
}

TEST(IrBuilder, InfersTypesAndRejectsMismatches) {
  Graph g = small_graph();
  EXPECT_TRUE(verify(g).ok()) << verify(g).message();
  EXPECT_EQ(g.node(g.find("blk.0.fc")).type.to_string(), "f32[?,?,8]");
  Builder b(g);
  b.weight("bad.weight", f32({4, 5}), "bad");
  auto bad = b.linear("bad", g.find("x"), "bad.weight", "", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("node 'bad' (linear): contraction mismatch"), std::string::npos)
      << bad.status().message();
  auto dup = b.add("blk.0.fc", g.find("x"), g.find("x"), "");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("used twice"), std::string::npos);
}

TEST(IrText, RoundTrip) {
  Graph g = small_graph();
  const std::string text = print_text(g);
  auto back = parse_text(text, "small.mblt.txt");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  EXPECT_TRUE(*back == g);
  EXPECT_EQ(print_text(*back), text);
  EXPECT_NE(text.find("%blk.0.fc = linear(%blk.0.norm, @fc.weight, @fc.bias) : f32[?,?,8] block 0 from "
                      "\"model.layers.0.fc\""),
            std::string::npos)
      << text;
}

TEST(IrText, ErrorsHaveLineAndColumn) {
  const std::string text = print_text(small_graph());
  std::string broken = text;
  broken.replace(broken.find("linear("), 6, "lineer");
  auto r = parse_text(broken, "t.mblt.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("t.mblt.txt:"), std::string::npos);
  EXPECT_NE(r.status().message().find("unknown op 'lineer'"), std::string::npos) << r.status().message();
  std::string undefined = text;
  undefined.replace(undefined.find("linear(%blk.0.norm"), 18, "linear(%nosuch.val");
  auto u = parse_text(undefined, "t");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("not defined before this use"), std::string::npos) << u.status().message();
}

TEST(IrText, HostileShapesAndNamesAreShortErrors) {
  const std::string text = print_text(small_graph());
  // A shape whose element count overflows int64 is refused where it is written.
  std::string big = text;
  const size_t at = big.find("f32[8,");
  ASSERT_NE(at, std::string::npos) << text;
  big.replace(at, 6, "f32[4611686018427387904,4,");
  auto r = parse_text(big, "t.mblt.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("overflow the element count"), std::string::npos)
      << r.status().message();
  // An unknown op of a megabyte is quoted by a prefix.
  std::string op = text;
  op.replace(op.find("linear("), 6, std::string(1 << 20, 'q'));
  auto o = parse_text(op, "t.mblt.txt");
  ASSERT_FALSE(o.ok());
  EXPECT_LT(o.status().message().size(), 300u);
  EXPECT_NE(o.status().message().find("(1048576 bytes)"), std::string::npos) << o.status().message();
}

TEST(IrProto, HostileBytesAreErrors) {
  EXPECT_EQ(from_proto_bytes(std::string("\x08\x01\x1a\x04\xff\xfe\xfd\xfc", 8), "j").status().code(),
            Code::kDataLoss);
  EXPECT_FALSE(from_proto_bytes("garbage", "g").ok());
}

TEST(IrProto, RoundTripIsExactAndDeterministic) {
  Graph g = small_graph();
  const std::string bytes = to_proto_bytes(g);
  EXPECT_EQ(bytes, to_proto_bytes(g));
  auto back = from_proto_bytes(bytes, "mem");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(*back == g);
  auto garbage = from_proto_bytes("not a protobuf at all \xff\xff", "junk.mblt");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("junk.mblt"), std::string::npos);
}

TEST(IrProto, SaveAndLoad) {
  const auto path = (::qbc::testing::temp_dir() / "g.mblt").string();
  Graph g = small_graph();
  ASSERT_TRUE(save(g, path).ok());
  auto back = load(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(*back == g);
}

// Each invariant has a test that breaks exactly it.
TEST(IrVerifier, EachInvariant) {
  auto expect = [](Graph g, const char* tag, const char* part) {
    Status s = verify(g);
    ASSERT_FALSE(s.ok()) << tag;
    EXPECT_NE(s.message().find(tag), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  };
  {
    Graph g = small_graph();
    g.mutable_node(g.find("blk.0.fc")).name = "blk.0.norm";
    expect(g, "[I1]", "blk.0.norm");
  }
  {
    Graph g = small_graph();
    g.mutable_node(g.find("blk.0.norm")).operands[0].value = g.find("logits");
    expect(g, "[I2]", "blk.0.norm");
  }
  {
    Graph g = small_graph();
    g.mutable_node(g.find("blk.0.fc")).operands[1].weight = "emb.weight";
    expect(g, "[I3]", "host-side");
  }
  {
    Graph g = small_graph();
    g.mutable_node(g.find("logits")).attrs.set("cap", int64_t{3});
    expect(g, "[I4]", "'cap' must be float");
  }
  {
    Graph g = small_graph();
    g.mutable_node(g.find("blk.0.fc")).type.dims.back() = 9;
    expect(g, "[I5]", "blk.0.fc");
  }
  {
    Graph g = small_graph();
    g.clear_outputs();
    expect(g, "[I6]", "no outputs");
  }
  {
    Graph g = small_graph();
    g.mutable_node(g.find("logits")).block = 2;
    expect(g, "[I7]", "head node");
  }
  {
    Graph g = small_graph();
    g.add_weight(Weight{"unused.weight", f32({2}), WeightSource::kModel, "x", WeightRole::kParameter});
    expect(g, "[I8]", "unused.weight");
  }
  {
    Graph g = small_graph();
    g.add_weight(Weight{"dyn.weight", f32({kDynamic}), WeightSource::kModel, "x", WeightRole::kHostEmbedding});
    expect(g, "[I9]", "dyn.weight");
  }
}

}  // namespace
}  // namespace qbc::ir

namespace qbc::ir {
namespace {

TEST(IrQuant, QLinearTypesAndChecks) {
  Graph g("q");
  Builder b(g);
  b.weight("w.q", TensorType{DType::kI8, {4, 8}}, "w.q", WeightRole::kParameter, WeightSource::kSidecar);
  b.weight("w.scale", TensorType{DType::kF32, {4}}, "w.scale", WeightRole::kParameter, WeightSource::kSidecar);
  ValueId x = *b.input("x", TensorType{DType::kF32, {kDynamic, kDynamic, 8}});
  Attrs a;
  a.set("in_scale", 0.05);
  a.set("in_bits", int64_t{8});
  a.set("w_bits", int64_t{4});
  a.set("out_fp16", int64_t{1});
  auto y = b.make(Op::kQLinear, "fc", {Operand::of(x), Operand::of_weight("w.q"), Operand::of_weight("w.scale")}, a, "");
  ASSERT_TRUE(y.ok()) << y.status().message();
  g.add_output(*y);
  EXPECT_TRUE(verify(g).ok());
  EXPECT_EQ(g.node(*y).type.to_string(), "f32[?,?,4]");
  auto back = parse_text(print_text(g), "q");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(*back == g);
  Attrs bad = a;
  bad.set("in_dynamic", int64_t{2});
  auto d = b.make(Op::kQLinear, "fc1d", {Operand::of(x), Operand::of_weight("w.q"), Operand::of_weight("w.scale")}, bad, "");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("in_dynamic must be 0 or 1"), std::string::npos) << d.status().message();
  bad = a;
  bad.set("w_bits", int64_t{3});
  auto r = b.make(Op::kQLinear, "fc2", {Operand::of(x), Operand::of_weight("w.q"), Operand::of_weight("w.scale")}, bad, "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("w_bits 3"), std::string::npos) << r.status().message();
  // A float weight is refused.
  b.weight("wf", TensorType{DType::kF32, {4, 8}}, "wf");
  auto f = b.make(Op::kQLinear, "fc3", {Operand::of(x), Operand::of_weight("wf"), Operand::of_weight("w.scale")}, a, "");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("must be i8 or i4"), std::string::npos);
}

TEST(IrQuant, AttentionKvAttributesAllOrNone) {
  Graph g("a");
  Builder b(g);
  ValueId q = *b.input("q", TensorType{DType::kF32, {kDynamic, kDynamic, 8}});
  ValueId k = *b.input("k", TensorType{DType::kF32, {kDynamic, kDynamic, 4}});
  AttentionParams p{2, 1, 4, 0.5, 0.0, 0, 16};
  auto plain = b.attention("att", q, k, k, p, "");
  ASSERT_TRUE(plain.ok());
  Node n = g.node(*plain);
  n.name = "att2";
  n.attrs.set("k_bits", int64_t{8});
  auto partial = infer_type(g, n);
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("all be present or none"), std::string::npos);
  n.attrs.set("v_bits", int64_t{8});
  n.attrs.set("p_bits", int64_t{8});
  n.attrs.set("q_scale", std::vector<double>{0.1, 0.1});
  n.attrs.set("k_scale", std::vector<double>(4, 0.1));
  n.attrs.set("v_scale", std::vector<double>(4, 0.1));
  EXPECT_TRUE(infer_type(g, n).ok());
  // Offsets: one per KV channel; a nonzero K offset is refused under soft-capping
  // (it is only softmax-invariant without it); q_dynamic is 0 or 1.
  Node o = n;
  o.attrs.set("k_offset", std::vector<double>(4, 0.5));
  o.attrs.set("v_offset", std::vector<double>(4, -0.5));
  o.attrs.set("q_dynamic", int64_t{1});
  EXPECT_TRUE(infer_type(g, o).ok());
  Node short_offset = o;
  short_offset.attrs.set("v_offset", std::vector<double>(3, 0.0));
  auto so = infer_type(g, short_offset);
  ASSERT_FALSE(so.ok());
  EXPECT_NE(so.status().message().find("v_offset needs 4 entries"), std::string::npos) << so.status().message();
  Node capped = o;
  capped.attrs.set("softcap", 50.0);
  auto sc = infer_type(g, capped);
  ASSERT_FALSE(sc.ok());
  EXPECT_NE(sc.status().message().find("k_offset must be zero with softcap"), std::string::npos);
  capped.attrs.set("k_offset", std::vector<double>(4, 0.0));
  EXPECT_TRUE(infer_type(g, capped).ok());
  Node dyn = o;
  dyn.attrs.set("q_dynamic", int64_t{2});
  EXPECT_FALSE(infer_type(g, dyn).ok());
  Node float_offsets = g.node(*plain);
  float_offsets.name = "att3";
  float_offsets.attrs.set("k_offset", std::vector<double>(4, 0.0));
  auto fo = infer_type(g, float_offsets);
  ASSERT_FALSE(fo.ok());
  EXPECT_NE(fo.status().message().find("need a quantized KV cache"), std::string::npos);
  n.attrs.set("k_scale", std::vector<double>(3, 0.1));
  EXPECT_FALSE(infer_type(g, n).ok());
}

}  // namespace
}  // namespace qbc::ir
