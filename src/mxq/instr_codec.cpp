// Instructions <-> MXQ messages through the instruction table (see instr_codec.h). Fields
// are set and read by number through protobuf reflection; the messages' layout is fixed
// by the rows, and tests/unit/mxq/instr_codec_test.cpp checks every row against its message.
#include "instr_codec.h"

#include <array>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace qbc::mxq {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

bool Reader::fail(const std::string& field, const std::string& what) {
  if (status.ok()) status = data_loss(where, ": ", field, ": ", what);
  return false;
}

bool Reader::expr(const pb::Expr& e, const std::string& field, isa::Expr* out) {
  if (e.nodes_size() == 0) return fail(field, "empty expression");
  if (static_cast<size_t>(e.nodes_size()) > isa::Expr::kMaxNodes)
    return fail(field, "expression of " + std::to_string(e.nodes_size()) + " nodes");
  std::vector<isa::Expr::Node> nodes;
  nodes.reserve(static_cast<size_t>(e.nodes_size()));
  for (const pb::ExprNode& n : e.nodes()) {
    if (n.op() > static_cast<uint32_t>(isa::Expr::Op::kMax))
      return fail(field, "expression op " + std::to_string(n.op()) + " is not defined");
    nodes.push_back(isa::Expr::Node{static_cast<isa::Expr::Op>(n.op()), n.value(), n.a(), n.b()});
  }
  if (!isa::Expr::from_nodes(std::move(nodes), out))
    return fail(field,
                "malformed expression (unknown symbol, negative loop variable or an "
                "operand that is not an earlier node)");
  return true;
}

bool Reader::ref(const pb::Ref& r, const std::string& field, isa::Ref* out) {
  out->buffer = r.buffer() < 0 ? -1 : r.buffer();
  if (out->buffer < 0) {
    out->offset = isa::Expr(0);
    return true;
  }
  return expr(r.offset(), field, &out->offset);
}

namespace {

constexpr size_t kOps = std::variant_size_v<isa::Op>;

void put(const isa::Expr& e, pb::Expr* out) {
  for (const isa::Expr::Node& n : e.nodes()) {
    pb::ExprNode* p = out->add_nodes();
    p->set_op(static_cast<uint32_t>(n.op));
    p->set_value(n.value);
    p->set_a(n.a);
    p->set_b(n.b);
  }
}

void put(const isa::Ref& r, pb::Ref* out) {
  out->set_buffer(r.buffer);
  if (r.buffer >= 0) put(r.offset, out->mutable_offset());
}

/// The oneof member of op `k` (field number k + 1), or null when the op has none (TableOp).
const FieldDescriptor* own_message(size_t k) {
  const FieldDescriptor* fd = pb::Instr::descriptor()->FindFieldByNumber(static_cast<int>(k) + 1);
  if (fd == nullptr || fd->containing_oneof() == nullptr) return nullptr;
  if (fd->message_type() == pb::TableOp::descriptor()) return nullptr;
  return fd;
}

/// The fields of T's message in row order (field i + 1).
template <class T>
const std::vector<const FieldDescriptor*>& message_fields() {
  static const std::vector<const FieldDescriptor*> fields = [] {
    constexpr size_t k = isa::op_index<T>();
    std::vector<const FieldDescriptor*> v;
    const Descriptor* d = own_message(k)->message_type();
    for (size_t i = 0; i < isa::field_count<T>(); ++i) {
      v.push_back(d->FindFieldByNumber(static_cast<int>(i) + 1));
    }
    return v;
  }();
  return fields;
}

// ---------------------------------------------------------------------------------------
// Encoding

template <class M>
void set_scalar(const Reflection* r, Message* m, const FieldDescriptor* fd, const M& v) {
  if constexpr (std::is_same_v<M, bool>) {
    r->SetBool(m, fd, v);
  } else if constexpr (std::is_same_v<M, float>) {
    r->SetFloat(m, fd, v);
  } else if constexpr (std::is_same_v<M, double>) {
    r->SetDouble(m, fd, v);
  } else if constexpr (std::is_enum_v<M>) {
    r->SetUInt32(m, fd, static_cast<uint32_t>(v));
  } else if (fd->cpp_type() == FieldDescriptor::CPPTYPE_INT32) {
    r->SetInt32(m, fd, static_cast<int32_t>(v));
  } else {
    r->SetInt64(m, fd, static_cast<int64_t>(v));
  }
}

template <class T>
void encode_own(const T& op, Message* m) {
  const Reflection* r = m->GetReflection();
  const std::vector<const FieldDescriptor*>& fds = message_fields<T>();
  size_t i = 0;
  isa::for_each_field(op, [&](const auto& f, const auto& v) {
    using M = std::decay_t<decltype(v)>;
    const FieldDescriptor* fd = fds[i++];
    if constexpr (std::is_same_v<M, isa::Ref>) {
      // An unset reference the row shows only when set is left out (decode_own: unset).
      if (f.spec.show == isa::Show::kUnlessDefault && !v.valid()) return;
      put(v, static_cast<pb::Ref*>(r->MutableMessage(m, fd)));
    } else if constexpr (std::is_same_v<M, isa::Expr>) {
      // An expression the text form leaves out at its default is left out of the message too
      // (decode_own keeps the default): files without the field, older ones, read the same.
      if (f.spec.show == isa::Show::kUnlessDefault && !f.shown(op)) return;
      put(v, static_cast<pb::Expr*>(r->MutableMessage(m, fd)));
    } else {
      set_scalar(r, m, fd, v);
    }
  });
}

template <class T>
void encode_table(const T& op, size_t k, pb::TableOp* m) {
  m->set_index(static_cast<uint32_t>(k));
  isa::for_each_field(op, [&](const auto&, const auto& v) {
    using M = std::decay_t<decltype(v)>;
    pb::TableField* f = m->add_fields();
    if constexpr (std::is_same_v<M, isa::Ref>) {
      put(v, f->mutable_ref());
    } else if constexpr (std::is_same_v<M, isa::Expr>) {
      put(v, f->mutable_expr());
    } else if constexpr (std::is_floating_point_v<M>) {
      f->set_real(v);
    } else {
      f->set_i(static_cast<int64_t>(v));
    }
  });
}

// ---------------------------------------------------------------------------------------
// Decoding

template <class M>
M get_scalar(const Reflection* r, const Message& m, const FieldDescriptor* fd) {
  if constexpr (std::is_same_v<M, bool>) {
    return r->GetBool(m, fd);
  } else if constexpr (std::is_same_v<M, float>) {
    return r->GetFloat(m, fd);
  } else if constexpr (std::is_same_v<M, double>) {
    return r->GetDouble(m, fd);
  } else if (fd->cpp_type() == FieldDescriptor::CPPTYPE_INT32) {
    return static_cast<M>(r->GetInt32(m, fd));
  } else {
    return static_cast<M>(r->GetInt64(m, fd));
  }
}

template <class T>
std::string label(const char* field) {
  return std::string(isa::OpRow<T>::kName) + "." + field;
}

template <class T>
bool decode_own(const Message& m, Reader& rd, isa::Op* out) {
  const Reflection* r = m.GetReflection();
  const std::vector<const FieldDescriptor*>& fds = message_fields<T>();
  T op;
  size_t i = 0;
  bool ok = true;
  isa::for_each_field_mut(op, [&](const auto& f, auto& v) {
    using M = std::decay_t<decltype(v)>;
    const FieldDescriptor* fd = fds[i++];
    if (!ok) return;
    if constexpr (std::is_same_v<M, isa::Ref>) {
      if (f.spec.show == isa::Show::kUnlessDefault && !r->HasField(m, fd)) return;  // unset
      ok = rd.ref(static_cast<const pb::Ref&>(r->GetMessage(m, fd)), label<T>(f.spec.proto_name()),
                  &v);
    } else if constexpr (std::is_same_v<M, isa::Expr>) {
      if (f.spec.show == isa::Show::kUnlessDefault && !r->HasField(m, fd)) return;  // default
      ok = rd.expr(static_cast<const pb::Expr&>(r->GetMessage(m, fd)),
                   label<T>(f.spec.proto_name()), &v);
    } else if constexpr (std::is_enum_v<M>) {
      ok = rd.en(r->GetUInt32(m, fd), f.spec.count, label<T>(f.spec.proto_name()).c_str(), &v);
    } else {
      v = get_scalar<M>(r, m, fd);
    }
  });
  if (ok) *out = std::move(op);
  return ok;
}

template <class T>
bool decode_table(const pb::TableOp& m, Reader& rd, isa::Op* out) {
  if (static_cast<size_t>(m.fields_size()) != isa::field_count<T>()) {
    return rd.fail(isa::OpRow<T>::kName, std::to_string(m.fields_size()) + " fields, its row has " +
                                             std::to_string(isa::field_count<T>()));
  }
  T op;
  int i = 0;
  bool ok = true;
  isa::for_each_field_mut(op, [&](const auto& f, auto& v) {
    using M = std::decay_t<decltype(v)>;
    const pb::TableField& tf = m.fields(i++);
    if (!ok) return;
    if constexpr (std::is_same_v<M, isa::Ref>) {
      ok = rd.ref(tf.ref(), label<T>(f.spec.name), &v);
    } else if constexpr (std::is_same_v<M, isa::Expr>) {
      ok = rd.expr(tf.expr(), label<T>(f.spec.name), &v);
    } else if constexpr (std::is_floating_point_v<M>) {
      v = static_cast<M>(tf.real());
    } else if constexpr (std::is_enum_v<M>) {
      const bool in = tf.i() >= 0 && tf.i() <= UINT32_MAX;
      ok = rd.en(in ? static_cast<uint32_t>(tf.i()) : UINT32_MAX, f.spec.count,
                 label<T>(f.spec.name).c_str(), &v);
    } else {
      v = static_cast<M>(tf.i());
    }
  });
  if (ok) *out = std::move(op);
  return ok;
}

using OwnDecoder = bool (*)(const Message&, Reader&, isa::Op*);
using TableDecoder = bool (*)(const pb::TableOp&, Reader&, isa::Op*);

template <size_t... K>
constexpr std::array<OwnDecoder, kOps> own_decoders(std::index_sequence<K...>) {
  return {&decode_own<std::variant_alternative_t<K, isa::Op>>...};
}
template <size_t... K>
constexpr std::array<TableDecoder, kOps> table_decoders(std::index_sequence<K...>) {
  return {&decode_table<std::variant_alternative_t<K, isa::Op>>...};
}

}  // namespace

int ops_with_own_message() {
  static const int n = [] {
    int c = 0;
    while (static_cast<size_t>(c) < kOps && own_message(static_cast<size_t>(c)) != nullptr) ++c;
    return c;
  }();
  return n;
}

void encode_instr(const isa::Instr& in, pb::Instr* out, bool as_table_op) {
  const size_t k = in.op.index();
  if (!as_table_op && static_cast<int>(k) < ops_with_own_message()) {
    Message* m = out->GetReflection()->MutableMessage(out, own_message(k));
    std::visit([&](const auto& op) { encode_own(op, m); }, in.op);
  } else {
    std::visit([&](const auto& op) { encode_table(op, k, out->mutable_table_op()); }, in.op);
  }
  out->set_queue(static_cast<uint32_t>(in.queue));
  out->set_wait(in.wait);
  out->set_signal(in.signal);
  out->set_node(in.node);
  out->set_pass(in.pass);
}

bool decode_instr(const pb::Instr& p, Reader& r, isa::Instr* out) {
  if (!r.en(p.queue(), isa::kNumQueues, "queue", &out->queue)) return false;
  if (p.wait() >= (1u << isa::kNumChannels) || p.signal() >= (1u << isa::kNumChannels))
    return r.fail("wait/signal",
                  "token channel bits past channel " + std::to_string(isa::kNumChannels - 1));
  out->wait = static_cast<uint8_t>(p.wait());
  out->signal = static_cast<uint8_t>(p.signal());
  out->node = p.node();
  out->pass = p.pass();
  static constexpr std::array<OwnDecoder, kOps> kOwn =
      own_decoders(std::make_index_sequence<kOps>());
  static constexpr std::array<TableDecoder, kOps> kTable =
      table_decoders(std::make_index_sequence<kOps>());
  if (p.op_case() == pb::Instr::kTableOp) {
    const uint32_t k = p.table_op().index();
    if (k >= kOps)
      return r.fail("table_op", "op " + std::to_string(k) + " is not one this reader knows");
    return kTable[k](p.table_op(), r, &out->op);
  }
  const int k = static_cast<int>(p.op_case()) - 1;
  if (k < 0 || k >= ops_with_own_message())
    return r.fail("op", "no op (or an op this reader does not know)");
  const Message& m = p.GetReflection()->GetMessage(p, own_message(static_cast<size_t>(k)));
  return kOwn[static_cast<size_t>(k)](m, r, &out->op);
}

}  // namespace qbc::mxq
