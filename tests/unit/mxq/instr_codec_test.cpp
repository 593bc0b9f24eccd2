// The MXQ codec of instructions reads the instruction table (qbc/isa/ops.h): every row
// matches its message in proto/mxq_meta.proto (field i of the row is field number i + 1,
// same name, a wire type that holds the member), a sample of every op built from its row
// survives encode and decode unchanged, and the bytes equal those a writer following the
// schema by hand produces (the generated setters, as the format's spec names the fields).
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "mxq_meta.pb.h"
#include "qbc/isa/text.h"
#include "qbc/isa/verify.h"
#include "qbc/mxq/bundle_codec.h"
#include "unit/isa/isa_bundles.h"
#include "unit/isa/table_sample.h"

namespace qbc::mxq {
namespace {

using google::protobuf::FieldDescriptor;

template <class M>
bool holds(const FieldDescriptor* fd) {
  if constexpr (std::is_same_v<M, isa::Ref>) {
    return fd->message_type() == pb::Ref::descriptor();
  } else if constexpr (std::is_same_v<M, isa::Expr>) {
    return fd->message_type() == pb::Expr::descriptor();
  } else if constexpr (std::is_same_v<M, bool>) {
    return fd->cpp_type() == FieldDescriptor::CPPTYPE_BOOL;
  } else if constexpr (std::is_same_v<M, float>) {
    return fd->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT;
  } else if constexpr (std::is_same_v<M, double>) {
    return fd->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE;
  } else if constexpr (std::is_enum_v<M>) {
    return fd->cpp_type() == FieldDescriptor::CPPTYPE_UINT32;
  } else if constexpr (sizeof(M) == 4) {
    return fd->cpp_type() == FieldDescriptor::CPPTYPE_INT32;
  } else {
    return fd->cpp_type() == FieldDescriptor::CPPTYPE_INT64;
  }
}

template <class T>
void expect_row_matches_message() {
  constexpr size_t k = isa::op_index<T>();
  const FieldDescriptor* op = pb::Instr::descriptor()->FindFieldByNumber(static_cast<int>(k) + 1);
  // Ops appended after the oneof's last field have no field number of their own: TableOps.
  if (op == nullptr && k + 1 > static_cast<size_t>(pb::Instr::kTableOpFieldNumber)) return;
  ASSERT_NE(op, nullptr) << isa::OpRow<T>::kName;
  if (op->message_type() == pb::TableOp::descriptor()) return;  // travels as a TableOp
  EXPECT_EQ(op->name(), isa::OpRow<T>::kName);
  const google::protobuf::Descriptor* d = op->message_type();
  EXPECT_EQ(static_cast<size_t>(d->field_count()), isa::field_count<T>()) << d->name();
  int i = 0;
  isa::for_each_field(T{}, [&](const auto& f, const auto& v) {
    const FieldDescriptor* fd = d->FindFieldByNumber(++i);
    ASSERT_NE(fd, nullptr) << d->name() << " field " << i;
    EXPECT_EQ(fd->name(), f.spec.proto_name()) << d->name() << " field " << i;
    EXPECT_TRUE(holds<std::decay_t<decltype(v)>>(fd)) << d->name() << "." << fd->name();
    EXPECT_FALSE(fd->is_repeated()) << d->name() << "." << fd->name();
  });
}

template <size_t... K>
void expect_all_rows_match(std::index_sequence<K...>) {
  (expect_row_matches_message<std::variant_alternative_t<K, isa::Op>>(), ...);
}

TEST(MxqInstrCodec, EveryRowMatchesItsMessage) {
  expect_all_rows_match(std::make_index_sequence<std::variant_size_v<isa::Op>>());
}

template <size_t... K>
std::vector<isa::Instr> samples(std::index_sequence<K...>) {
  std::vector<isa::Instr> out;
  (out.push_back(isa::Instr{isa::sample_op<std::variant_alternative_t<K, isa::Op>>(),
                            isa::Queue::kCompute, 0, 0, -1, -1}),
   ...);
  return out;
}

/// A bundle whose one mode runs every sample in both phases.
isa::Bundle sample_program() {
  isa::Bundle b = isa::sample_bundle();
  isa::Mode m;
  m.prefill.phase = isa::Phase::kPrefill;
  m.prefill.cores.push_back(
      isa::CoreProgram{0, samples(std::make_index_sequence<std::variant_size_v<isa::Op>>())});
  m.decode.cores.push_back(m.prefill.cores[0]);
  b.modes.push_back(m);
  return b;
}

/// Every field of an instruction, as text (expressions by their text form).
std::string all_fields(const isa::Instr& in) {
  std::string s = isa::op_name(in.op);
  isa::visit_fields(in.op, [&](const auto& f, const auto& v) {
    using M = std::decay_t<decltype(v)>;
    s += std::string(" ") + f.spec.name + "=";
    if constexpr (std::is_same_v<M, isa::Ref>) {
      s += std::to_string(v.buffer) + "+" + v.offset.to_string();
    } else if constexpr (std::is_same_v<M, isa::Expr>) {
      s += v.to_string();
    } else if constexpr (std::is_enum_v<M>) {
      s += std::to_string(static_cast<int>(v));
    } else {
      s += std::to_string(static_cast<double>(v));
    }
  });
  return s;
}

TEST(MxqInstrCodec, EverySampleRoundTrips) {
  const isa::Bundle b = sample_program();
  auto code = encode_code(b, 0, 0);
  ASSERT_TRUE(code.ok()) << code.status().to_string();
  isa::Bundle back = b;
  back.modes[0].prefill.cores[0].code.clear();
  back.modes[0].decode.cores[0].code.clear();
  const Status s = decode_code(*code, 0, 0, "test", &back);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const auto& want = b.modes[0].prefill.cores[0].code;
  const auto& got = back.modes[0].decode.cores[0].code;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].op.index(), want[i].op.index());
    EXPECT_EQ(all_fields(got[i]), all_fields(want[i]));
    EXPECT_EQ(isa::print_instr(back, got[i]), isa::print_instr(b, want[i]));
  }
}

TEST(MxqInstrCodec, BytesAreTheSchemasFields) {
  const isa::Bundle b = sample_program();
  auto code = encode_code(b, 0, 0);
  ASSERT_TRUE(code.ok());
  // The matmul sample, written field by field with the schema's own setters.
  const isa::MatMul m = isa::sample_op<isa::MatMul>();
  pb::Instr want;
  pb::MatMul* p = want.mutable_matmul();
  const auto ref = [](const isa::Ref& r, pb::Ref* out) {
    out->set_buffer(r.buffer);
    pb::ExprNode* n = out->mutable_offset()->add_nodes();
    n->set_op(0);  // kConst
    n->set_value(r.offset.constant());
    n->set_a(-1);
    n->set_b(-1);
  };
  ref(m.x, p->mutable_x());
  ref(m.xzero, p->mutable_xzero());
  ref(m.w, p->mutable_w());
  ref(m.wzero, p->mutable_wzero());
  ref(m.acc, p->mutable_acc());
  pb::ExprNode* rows = p->mutable_rows()->add_nodes();
  rows->set_value(m.rows.constant());
  rows->set_a(-1);
  rows->set_b(-1);
  p->set_n(m.n);
  p->set_kt(m.kt);
  p->set_ldx(m.ldx);
  p->set_group(m.group);
  p->set_xtype(static_cast<uint32_t>(m.xtype));
  p->set_wtype(static_cast<uint32_t>(m.wtype));
  p->set_acctype(static_cast<uint32_t>(m.acctype));
  p->set_accumulate(m.accumulate);
  ref(m.xsum, p->mutable_xsum());
  want.set_queue(static_cast<uint32_t>(isa::Queue::kCompute));
  want.set_node(-1);
  want.set_pass(-1);
  const pb::Instr& got = code->prefill(static_cast<int>(isa::op_index<isa::MatMul>()));
  EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString()) << got.DebugString();
}

// An unset reference whose row shows it only when set (matmul.xsum, requant.xsum / wmin, the
// float offsets') is left out of the message, so files without the feature keep their bytes,
// and reads back unset.
TEST(MxqInstrCodec, UnsetReferencesShownOnlyWhenSetAreLeftOut) {
  isa::Bundle b = sample_program();
  for (isa::Instr& in : b.modes[0].prefill.cores[0].code) {
    if (auto* m = std::get_if<isa::MatMul>(&in.op)) m->xsum = isa::Ref{};
    if (auto* r = std::get_if<isa::Requant>(&in.op)) r->xsum = r->wmin = isa::Ref{};
  }
  auto code = encode_code(b, 0, 0);
  ASSERT_TRUE(code.ok()) << code.status().to_string();
  const pb::Instr& mm = code->prefill(static_cast<int>(isa::op_index<isa::MatMul>()));
  const pb::Instr& rq = code->prefill(static_cast<int>(isa::op_index<isa::Requant>()));
  EXPECT_FALSE(mm.matmul().has_xsum());
  EXPECT_FALSE(rq.requant().has_xsum());
  EXPECT_FALSE(rq.requant().has_wmin());
  EXPECT_TRUE(mm.matmul().has_wzero());  // an ordinary optional reference is written
  isa::Bundle back = b;
  const Status s = decode_code(*code, 0, 0, "test", &back);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const auto& got = back.modes[0].prefill.cores[0].code;
  EXPECT_FALSE(std::get<isa::MatMul>(got[isa::op_index<isa::MatMul>()].op).xsum.valid());
  EXPECT_FALSE(std::get<isa::Requant>(got[isa::op_index<isa::Requant>()].op).wmin.valid());
}

TEST(MxqInstrCodec, EverySampleRoundTripsAsATableOp) {
  isa::Bundle b = sample_program();
  pb::CoreCode c;
  c.set_core(0);
  for (const isa::Instr& in : b.modes[0].prefill.cores[0].code) {
    *c.add_prefill() = encode_table_op(in);
    EXPECT_EQ(c.prefill(c.prefill_size() - 1).op_case(), pb::Instr::kTableOp);
  }
  isa::Bundle back = b;
  const Status s = decode_code(c, 0, 0, "test", &back);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const auto& want = b.modes[0].prefill.cores[0].code;
  const auto& got = back.modes[0].prefill.cores[0].code;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(all_fields(got[i]), all_fields(want[i]));
}

TEST(MxqInstrCodec, MalformedTableOpsAreRefused) {
  isa::Bundle b = sample_program();
  const auto refused = [&](const pb::Instr& in, const std::string& want) {
    pb::CoreCode c;
    c.set_core(0);
    *c.add_prefill() = in;
    const Status s = decode_code(c, 0, 0, "test", &b);
    EXPECT_EQ(s.code(), Code::kDataLoss) << want;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  };
  pb::Instr unknown;
  unknown.mutable_table_op()->set_index(99);
  refused(unknown, "op 99 is not one this reader knows");
  const isa::Instr matmul{isa::sample_op<isa::MatMul>(), isa::Queue::kCompute, 0, 0, -1, -1};
  pb::Instr short_row = encode_table_op(matmul);
  short_row.mutable_table_op()->mutable_fields()->RemoveLast();
  refused(short_row, "matmul: 14 fields, its row has 15");
  pb::Instr bad_enum = short_row;
  *bad_enum.mutable_table_op()->add_fields() = pb::TableField();
  bad_enum.mutable_table_op()->mutable_fields(10)->set_i(42);  // xtype
  refused(bad_enum, "matmul.xtype: enum value 42 is not defined");
}

// The scheme table (include/qbc/isa/schemes.def) is the only list of schemes: the layout
// codec and the verifier accept every row of it and refuse the value one past it, so a row
// added to the table is read and verified without touching either.
TEST(MxqInstrCodec, EverySchemeOfTheTableDecodesAndVerifiesAndNoOther) {
  for (size_t i = 0; i <= isa::kSchemeCount; ++i) {
    isa::Bundle b = isa::testing::small_bundle();
    b.modes[0].scheme = static_cast<isa::Scheme>(i);
    const std::string name = i < isa::kSchemeCount ? isa::kSchemes[i].name : "one past the table";
    isa::Bundle back;
    const Status dec = decode_layout(encode_layout(b), "test", &back);
    const Status ver = isa::verify(b);
    if (i < isa::kSchemeCount) {
      ASSERT_TRUE(dec.ok()) << name << ": " << dec.message();
      ASSERT_EQ(back.modes.size(), 1u);
      EXPECT_EQ(back.modes[0].scheme, b.modes[0].scheme) << name;
      EXPECT_EQ(ver.message().find("unknown scheme"), std::string::npos) << name << ver.message();
    } else {
      EXPECT_EQ(dec.code(), Code::kDataLoss) << dec.message();
      EXPECT_NE(dec.message().find("scheme"), std::string::npos) << dec.message();
      EXPECT_NE(ver.message().find("mode 0: unknown scheme"), std::string::npos) << ver.message();
    }
  }
}

}  // namespace
}  // namespace qbc::mxq
