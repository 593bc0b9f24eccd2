// The untyped view of the instruction table and the names of its vocabulary (see
// qbc/isa/ops.h and qbc/isa/field.h).
#include "qbc/isa/ops.h"

#include <utility>

namespace qbc::isa {
namespace {

template <class T>
OpInfo info_of() {
  OpInfo info{OpRow<T>::kName, OpRow<T>::kQueue, {}};
  std::apply([&](const auto&... f) { (info.fields.push_back(f.spec), ...); }, OpRow<T>::kFields);
  return info;
}

}  // namespace

const char* field_kind_name(FieldKind k) {
  static constexpr const char* kNames[] = {"ref",  "expr",    "int",  "enum", "bool",
                                           "real", "loopvar", "attn", "rope", "kv_head"};
  return kNames[static_cast<int>(k)];
}

const char* queue_class_name(QueueClass c) {
  static constexpr const char* kNames[] = {"none", "dma", "compute"};
  return kNames[static_cast<int>(c)];
}

const char* role_name(Role r) {
  static constexpr const char* kNames[] = {"-", "in", "out", "inout"};
  return kNames[static_cast<int>(r)];
}

const char* max_mode_name(MaxMode m) {
  switch (m) {
    case MaxMode::kNone:
      return "none";
    case MaxMode::kInit:
      return "init";
    case MaxMode::kUpdate:
      return "update";
  }
  return "?";
}

const char* merge_op_name(MergeOp op) { return op == MergeOp::kMax ? "max" : "sum"; }

const std::vector<OpInfo>& op_table() {
#define QBC_ISA_OP_INFO(T) info_of<T>(),
  static const std::vector<OpInfo> kTable = {QBC_ISA_OPS(QBC_ISA_OP_INFO)};
#undef QBC_ISA_OP_INFO
  return kTable;
}

int find_op(const std::string& name) {
  const std::vector<OpInfo>& t = op_table();
  for (size_t i = 0; i < t.size(); ++i) {
    if (name == t[i].name) return static_cast<int>(i);
  }
  return -1;
}

namespace {
template <size_t... K>
Op op_at(size_t index, std::index_sequence<K...>) {
  Op out;
  ((index == K ? (out = std::variant_alternative_t<K, Op>{}, true) : false) || ...);
  return out;
}
}  // namespace

Op default_op(size_t index) {
  return op_at(index, std::make_index_sequence<std::variant_size_v<Op>>());
}

const char* op_name(const Op& op) {
  return std::visit([](const auto& o) { return OpRow<std::decay_t<decltype(o)>>::kName; }, op);
}

QueueClass op_queue(const Op& op) {
  return std::visit([](const auto& o) { return OpRow<std::decay_t<decltype(o)>>::kQueue; }, op);
}

}  // namespace qbc::isa
