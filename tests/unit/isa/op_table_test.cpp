// Every row of the instruction table (qbc/isa/ops.h) drives the printer and the verifier's
// field checks: for each op a sample instance built from its row alone (so a new row is
// covered without touching this file) prints every field its row shows, in row order, and
// passes check_op_fields; breaking any field the row constrains makes check_op_fields name
// that field; its accesses read and write only references whose role says so. The MXQ side of the
// same walk is tests/unit/mxq/instr_codec_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "qbc/isa/ops.h"
#include "qbc/isa/program.h"
#include "qbc/isa/text.h"
#include "qbc/isa/verify.h"
#include "unit/isa/table_sample.h"

namespace qbc::isa {
namespace {

template <class T>
void expect_printed_in_row_order(const Bundle& b, const T& op) {
  Instr in;
  in.op = op;
  const std::string text = print_instr(b, in);
  EXPECT_EQ(text.rfind(OpRow<T>::kName, 0), 0u) << text;
  size_t at = 0;
  for_each_field(op, [&](const auto& f, const auto&) {
    const std::string key = std::string(" ") + f.spec.name + "=";
    const size_t pos = text.find(key, at);
    bool shown = true;
    if constexpr (std::is_same_v<typename std::decay_t<decltype(f)>::Member, Ref>) {
      shown = true;  // the sample sets every reference
    } else {
      shown = f.shown(op);
    }
    if (shown) {
      EXPECT_NE(pos, std::string::npos) << OpRow<T>::kName << ": " << key << " in " << text;
      if (pos != std::string::npos) at = pos + key.size();
    } else {
      EXPECT_EQ(text.find(key), std::string::npos) << OpRow<T>::kName << ": " << key;
    }
  });
}

/// Each field the row constrains, set to a value the row refuses: check_op_fields names it.
template <class T>
void expect_each_constraint_checked(const Bundle& b, const T& sample) {
  const std::string name = OpRow<T>::kName;
  size_t k = 0;
  for_each_field(sample, [&](const auto& f, const auto&) {
    using F = std::decay_t<decltype(f)>;
    using M = typename F::Member;
    const size_t field = k++;
    T broken = sample;
    bool constrained = true;
    size_t j = 0;
    for_each_field_mut(broken, [&](const auto&, auto& v) {
      if (j++ != field) return;
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, M>) {
        constrained = break_field(f, broken, v);
      }
    });
    if (!constrained) return;
    const std::string e = check_op_fields(b, Op(broken));
    EXPECT_EQ(e.rfind(f.spec.kind == FieldKind::kAttn   ? "attention "
                      : f.spec.kind == FieldKind::kRope ? "rope table "
                      : f.spec.kind == FieldKind::kEnum && f.spec.allowed_n == 0
                          ? std::string("unknown ") + f.spec.name
                          : std::string(f.spec.name),
                      0),
              0u)
        << name << "." << f.spec.name << ": " << e;
  });
}

/// Every access accesses() reports is one of the row's references, in a direction its role
/// allows (the sample's references have distinct offsets, 16 bytes per field position).
template <class T>
void expect_accesses_follow_roles(const Bundle& b, const T& op) {
  Instr in;
  in.op = op;
  for (const Access& a : accesses(in, b)) {
    bool found = false;
    for_each_field(op, [&](const auto& f, const auto& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Ref>) {
        if (v.buffer != a.ref.buffer || v.offset.constant() != a.ref.offset.constant()) return;
        found = true;
        const Role want = a.write ? Role::kOut : Role::kIn;
        EXPECT_TRUE(f.spec.role == want || f.spec.role == Role::kInOut)
            << f.spec.name << (a.write ? " written" : " read") << ", role "
            << role_name(f.spec.role);
      }
    });
    EXPECT_TRUE(found) << "an access at +" << a.ref.offset.to_string() << " is not a field";
  }
}

template <class T>
void check_row() {
  SCOPED_TRACE(OpRow<T>::kName);
  const Bundle b = sample_bundle();
  const T op = sample_op<T>();
  EXPECT_EQ(check_op_fields(b, Op(op)), "");
  expect_printed_in_row_order(b, op);
  expect_each_constraint_checked(b, op);
  expect_accesses_follow_roles(b, op);
}

template <size_t... K>
void check_all_rows(std::index_sequence<K...>) {
  (check_row<std::variant_alternative_t<K, Op>>(), ...);
}

TEST(IsaOpTable, EveryRowPrintsAndChecksItsFields) {
  check_all_rows(std::make_index_sequence<std::variant_size_v<Op>>());
}

TEST(IsaOpTable, NamesAreUniqueAndFound) {
  std::set<std::string> ops;
  const std::vector<OpInfo>& table = op_table();
  ASSERT_EQ(table.size(), std::variant_size_v<Op>);
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_TRUE(ops.insert(table[i].name).second) << table[i].name;
    EXPECT_EQ(find_op(table[i].name), static_cast<int>(i));
    std::set<std::string> fields;
    for (const FieldSpec& f : table[i].fields) {
      EXPECT_TRUE(fields.insert(f.name).second) << table[i].name << "." << f.name;
      if (f.kind == FieldKind::kRef) {
        EXPECT_NE(f.role, Role::kNone) << f.name;
      }
      if (f.kind == FieldKind::kEnum) {
        EXPECT_GT(f.count, 0u) << f.name;
      }
    }
  }
  EXPECT_EQ(find_op("no_such_op"), -1);
  EXPECT_EQ(default_op(static_cast<size_t>(find_op("rope"))).index(), op_index<Rope>());
  EXPECT_STREQ(op_name(Op(MatMul{})), "matmul");
  EXPECT_EQ(op_queue(Op(Dma{})), QueueClass::kDma);
  // Append only: Fill is the last op with an MXQ message of its own (field 16); layer_norm, the
  // first appended after it, is coded as a TableOp.
  EXPECT_EQ(op_index<Fill>(), 15u);
  EXPECT_EQ(op_index<LayerNorm>(), 16u);
}

/// The table's own examples of its vocabulary, as the verifier reports them.
TEST(IsaOpTable, MessagesNameTheRowsBounds) {
  const Bundle b = sample_bundle();
  MatMul m = sample_op<MatMul>();
  m.ldx = m.kt - 1;
  EXPECT_EQ(check_op_fields(b, Op(m)),
            "ldx " + std::to_string(m.kt - 1) + " outside [" + std::to_string(m.kt) + ", 2^40]");
  Quantize q = sample_op<Quantize>();
  q.bits = 6;
  EXPECT_EQ(check_op_fields(b, Op(q)), "bits 6 is not 4, 8 or 16");
  Fill f = sample_op<Fill>();
  f.type = DType::kF16;
  EXPECT_EQ(check_op_fields(b, Op(f)), "type f16 is not f32 or i64");
  f = sample_op<Fill>();
  f.value = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(check_op_fields(b, Op(f)), "value is NaN");
  QueryPrep p = sample_op<QueryPrep>();
  p.kv_head = b.attentions[0].kv_heads;
  EXPECT_EQ(check_op_fields(b, Op(p)), "kv_head 2 out of range");
}

}  // namespace
}  // namespace qbc::isa
