// The typed attribute readers (qbc/ir/op_params.h): a missing required attribute and an
// attribute of the wrong kind are Status errors naming the node and the key; optional ones
// take the default their caller states; each op family decodes into numerics' struct.
#include "qbc/ir/op_params.h"

#include <gtest/gtest.h>

#include "qbc/ir/builder.h"

namespace qbc::ir {
namespace {

// A qlinear node as quantize_rtn writes it (attributes only: the readers do not look at
// operands).
Node qlinear_node() {
  Node n;
  n.op = Op::kQLinear;
  n.name = "blk.0.attn.q_proj";
  n.attrs.set("in_scale", 0.5);
  n.attrs.set("in_bits", int64_t{8});
  n.attrs.set("w_bits", int64_t{4});
  n.attrs.set("out_fp16", int64_t{1});
  return n;
}

Node attention_node() {
  Node n;
  n.op = Op::kAttention;
  n.name = "blk.0.attn";
  n.attrs.set("num_heads", int64_t{4});
  n.attrs.set("num_kv_heads", int64_t{2});
  n.attrs.set("head_dim", int64_t{2});
  n.attrs.set("scale", 0.25);
  n.attrs.set("softcap", 0.0);
  n.attrs.set("window", int64_t{0});
  n.attrs.set("max_cache", int64_t{16});
  return n;
}

Node rope_node() {
  Node n;
  n.op = Op::kRope;
  n.name = "blk.0.attn.q_rope";
  n.attrs.set("num_heads", int64_t{2});
  n.attrs.set("head_dim", int64_t{4});
  n.attrs.set("rotary_dim", int64_t{4});
  n.attrs.set("inv_freq", std::vector<double>{1.0, 0.01});
  n.attrs.set("attention_factor", 1.0);
  n.attrs.set("theta", 10000.0);
  return n;
}

// `s` is kInvalidArgument and its message holds every one of `parts`.
void expect_error(const Status& s, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.message();
  for (const char* p : parts)
    EXPECT_NE(s.message().find(p), std::string::npos) << "lacks '" << p << "': " << s.message();
}

TEST(OpParams, DescribeNamesNodeAndOp) {
  EXPECT_EQ(describe(qlinear_node()), "node 'blk.0.attn.q_proj' (qlinear)");
}

TEST(OpParams, MissingRequiredAttributeNamesNodeAndKey) {
  Node n = qlinear_node();
  Attrs a;
  for (const auto& [k, v] : n.attrs.all())
    if (k != "w_bits") a.set(k, v);
  n.attrs = a;
  expect_error(qlinear_params(n).status(),
               {"node 'blk.0.attn.q_proj' (qlinear)", "'w_bits'", "missing"});
  expect_error(required_int(n, "w_bits").status(), {"blk.0.attn.q_proj", "'w_bits'"});
  expect_error(check_attr_kinds(n), {"blk.0.attn.q_proj", "'w_bits'"});
}

TEST(OpParams, WrongKindNamesNodeAndKey) {
  Node n = attention_node();
  n.attrs.set("max_cache", 16.0);  // a float where the schema says int
  expect_error(attention_params(n).status(),
               {"node 'blk.0.attn' (attention)", "'max_cache'", "must be int", "is float"});
  expect_error(check_attr_kinds(n), {"'max_cache'", "must be int"});
  Node q = qlinear_node();
  q.attrs.set("w_group", std::string("32"));  // optional, but of the wrong kind
  expect_error(qlinear_params(q).status(), {"blk.0.attn.q_proj", "'w_group'", "is string"});
  expect_error(optional_int(q, "w_group", 0).status(), {"'w_group'"});
}

TEST(OpParams, OptionalAttributesTakeTheStatedDefault) {
  const Node n = qlinear_node();
  EXPECT_EQ(*optional_int(n, "w_group", 7), 7);
  EXPECT_EQ(*optional_float(n, "absent", 2.5), 2.5);
  EXPECT_TRUE(optional_floats(n, "absent", {}).value().empty());
}

TEST(OpParams, QLinearDecodesIntoTheKernelStruct) {
  Node n = qlinear_node();
  n.attrs.set("in_asym", int64_t{1});
  n.attrs.set("in_zero", int64_t{-3});
  n.attrs.set("w_group", int64_t{32});
  n.attrs.set("w_zero", int64_t{1});
  StatusOr<QLinearParams> p = qlinear_params(n);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->w_bits, 4);
  EXPECT_TRUE(p->w_zero);
  EXPECT_FLOAT_EQ(p->linear.in_scale, 0.5f);
  EXPECT_EQ(p->linear.in_bits, 8);
  EXPECT_TRUE(p->linear.in_asym);
  EXPECT_FALSE(p->linear.in_dynamic);
  EXPECT_EQ(p->linear.in_zero, -3);
  EXPECT_EQ(p->linear.group, 32);
  EXPECT_TRUE(p->linear.out_fp16);
  // A static asymmetric input without its zero point is an error naming in_zero.
  Attrs a;
  for (const auto& [k, v] : n.attrs.all())
    if (k != "in_zero") a.set(k, v);
  n.attrs = a;
  expect_error(qlinear_params(n).status(), {"blk.0.attn.q_proj", "'in_zero'"});
}

TEST(OpParams, QLinearRejectsANonPositiveInputScale) {
  Node n = qlinear_node();
  n.attrs.set("in_scale", 0.0);
  expect_error(qlinear_params(n).status(), {"blk.0.attn.q_proj", "in_scale"});
}

TEST(OpParams, AttentionDecodesTheQuantizedCache) {
  Node n = attention_node();
  StatusOr<numerics::Attention> f = attention_params(n);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_FALSE(f->quantized);
  EXPECT_EQ(f->heads, 4);
  EXPECT_EQ(f->kv_heads, 2);
  EXPECT_EQ(f->max_cache, 16);
  n.attrs.set("k_bits", int64_t{4});
  n.attrs.set("v_bits", int64_t{8});
  n.attrs.set("p_bits", int64_t{16});
  n.attrs.set("q_dynamic", int64_t{1});
  n.attrs.set("q_scale", std::vector<double>(4, 0.5));
  n.attrs.set("k_scale", std::vector<double>(4, 0.25));
  n.attrs.set("v_scale", std::vector<double>(4, 0.125));
  n.attrs.set("v_offset", std::vector<double>{1, 2, 3, 4});
  StatusOr<numerics::Attention> q = attention_params(n);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_TRUE(q->quantized);
  EXPECT_EQ(q->k_bits, 4);
  EXPECT_EQ(q->v_bits, 8);
  EXPECT_EQ(q->p_bits, 16);
  EXPECT_TRUE(q->q_dynamic);
  EXPECT_EQ(q->k_scale, std::vector<float>(4, 0.25f));
  EXPECT_EQ(q->k_offset, std::vector<float>(4, 0.0f));  // absent: zeros
  EXPECT_EQ(q->v_offset, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(q->k_rot_offset.empty());
  // Part of the quantized set missing: an error naming the key.
  Attrs a;
  for (const auto& [k, v] : n.attrs.all())
    if (k != "p_bits") a.set(k, v);
  n.attrs = a;
  expect_error(attention_params(n).status(), {"blk.0.attn", "'p_bits'"});
}

TEST(OpParams, AttentionRejectsANonPositiveScaleAndBadHeads) {
  Node n = attention_node();
  n.attrs.set("num_kv_heads", int64_t{3});
  expect_error(attention_params(n).status(), {"blk.0.attn", "num_kv_heads 3"});
  n = attention_node();
  n.attrs.set("k_bits", int64_t{8});
  n.attrs.set("v_bits", int64_t{8});
  n.attrs.set("p_bits", int64_t{8});
  n.attrs.set("q_scale", std::vector<double>(4, 1.0));
  n.attrs.set("k_scale", std::vector<double>{1.0, -1.0, 1.0, 1.0});
  n.attrs.set("v_scale", std::vector<double>(4, 1.0));
  expect_error(attention_params(n).status(), {"blk.0.attn", "k_scale", "positive"});
}

TEST(OpParams, RopeDecodesAndChecksTheRotaryDim) {
  Node n = rope_node();
  StatusOr<numerics::Rope> r = rope_params(n);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->heads, 2);
  EXPECT_EQ(r->rotary_dim, 4);
  EXPECT_EQ(r->inv_freq, (std::vector<double>{1.0, 0.01}));
  EXPECT_EQ(r->dynamic_factor, 0.0);  // optional, default stated by the reader
  n.attrs.set("rotary_dim", int64_t{3});
  expect_error(rope_params(n).status(), {"blk.0.attn.q_rope", "rotary_dim 3"});
  n = rope_node();
  Attrs a;
  for (const auto& [k, v] : n.attrs.all())
    if (k != "theta") a.set(k, v);
  n.attrs = a;
  expect_error(rope_params(n).status(), {"blk.0.attn.q_rope", "'theta'"});
}

// Builder::rope writes numerics::Rope; rope_params reads the same struct back.
TEST(OpParams, RopeRoundTripsThroughTheBuilder) {
  Graph g("rope");
  Builder b(g);
  const ValueId x = *b.input("x", TensorType{DType::kF32, {1, kDynamic, 8}});
  const ValueId pos = *b.input("positions", TensorType{DType::kI64, {1, kDynamic}});
  numerics::Rope p;
  p.heads = 2;
  p.head_dim = 4;
  p.rotary_dim = 4;
  p.inv_freq = {1.0, 0.5};
  p.long_inv_freq = {0.5, 0.25};
  p.attention_factor = 1.25;
  p.dynamic_factor = 2.0;
  p.original_max_positions = 64;
  p.theta = 500000.0;
  StatusOr<ValueId> y = b.rope("rope", x, pos, p, "");
  ASSERT_TRUE(y.ok()) << y.status().message();
  StatusOr<numerics::Rope> r = rope_params(g.node(*y));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->heads, p.heads);
  EXPECT_EQ(r->inv_freq, p.inv_freq);
  EXPECT_EQ(r->long_inv_freq, p.long_inv_freq);
  EXPECT_EQ(r->attention_factor, p.attention_factor);
  EXPECT_EQ(r->dynamic_factor, p.dynamic_factor);
  EXPECT_EQ(r->original_max_positions, p.original_max_positions);
  EXPECT_EQ(r->theta, p.theta);
}

// Builder::make checks the schema before reading attributes: a node missing a required
// attribute is refused with its name and the key.
TEST(OpParams, BuilderRefusesAMissingRequiredAttribute) {
  Graph g("norm");
  Builder b(g);
  b.weight("w", TensorType{DType::kF32, {8}}, "w");
  const ValueId x = *b.input("x", TensorType{DType::kF32, {1, kDynamic, 8}});
  Attrs a;
  a.set("eps", 1e-5);
  a.set("unit_offset", int64_t{0});  // no "group"
  StatusOr<ValueId> y =
      b.make(Op::kRmsNorm, "norm", {Operand::of(x), Operand::of_weight("w")}, a, "");
  expect_error(y.status(), {"node 'norm' (rms_norm)", "'group'"});
}

}  // namespace
}  // namespace qbc::ir
